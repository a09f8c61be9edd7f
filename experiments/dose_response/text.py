"""Generated sentences of the dose-response report: what each analysis shows and what it does not.

Every paragraph is built from numbers in dose_response.json (never a bare "pass"): the units, the
cross-fitted headline, the random null and the non-targeted group, the controls and the ablation.
Rules used in the wording (chosen here, tested in tests/experiments/test_dose_stats_units.py):

- an interval "includes 0" when lo <= 0 <= hi; a change is read as present only when it does not;
- the headline's specificity: against each null (random directions; label-free directions,
  analysis.label_null), every null direction given the probe's own cross-fitted choice, one-sided rank
  p <= 0.05 / the number of goals, with the margin over the nearest null direction; "specific to this
  direction" only beyond both (analysis.specificity); with too few directions p cannot get there and
  the text says so; the non-targeted group's place is two-sided (percentile and p_null);
- ablation: "not necessary at this layer" when both the stop-rate and the log-odds intervals include 0;
  "used at this layer" when the log-odds interval excludes 0 (the model's preference moves) and
  "changes choices" when the stop-rate interval excludes 0 too. Not necessary is not "not used":
  the information may be carried redundantly (other directions, positions or layers).
"""

from __future__ import annotations

from collections.abc import Sequence

from evprobe.core.bootstrap import Estimate
from evprobe.core.decimals import fixed
from evprobe.core.estimate_text import estimate_text
from evprobe.analysis.label_null import NEAR_COSINE
from evprobe.analysis.specificity import NULL_SETS, band_name, verdict_text
from evprobe.experiments.dose_response.meta import ReportMeta
from evprobe.experiments.dose_response.results import Ablation, ControlRow, Headline, NullPlace, json_of

def _excludes_zero(e: Estimate | None) -> bool:
    if e is None or e.value is None or e.ci[0] is None:
        return False
    lo, hi = e.ci
    return lo > 0 or hi < 0  # type: ignore[operator]


def _pts(e: Estimate | None) -> str:
    """A rate change in points with its interval and n (core.estimate_text)."""
    return estimate_text(e, 1, scale=100.0, sign=True, unit="points")


def _nats(e: Estimate | None) -> str:
    """A log-odds change in nats with its interval and n."""
    return estimate_text(e, 2, sign=True, unit="nats")


def _place(null: NullPlace | None, unit: str) -> str:
    """Where the probe's effect sits among the random directions' effects."""
    if null is None or null.percentile is None:
        return "no random null"
    scale = 100.0 if unit == "points" else 1.0
    z = "z undefined (the random effects do not vary)" if null.z is None else f"z {fixed(null.z, 1, sign=True)}"
    return (f"percentile {null.percentile:.0f} among {null.n_directions} random directions "
            f"(their effects {fixed(scale * null.lo, 2, sign=True)} to {fixed(scale * null.hi, 2, sign=True)} {unit}, "
            f"{band_name(null.n_directions, 'random directions')}), {z}, p_null {null.p_null:.3f}")


def ablation_sentence(layer: int, group: str, change: Estimate, lo_change: Estimate | None) -> str:
    """One sentence on one layer x group's ablation: its stop-rate and (None: not read) log-odds
    changes (module docstring's rule)."""
    head = (f"Projecting the direction out at L{layer} changes the stop rate of {group} items by "
            f"{_pts(change)}" + (f" and their stop log-odds by {_nats(lo_change)}" if lo_change else ""))
    if _excludes_zero(lo_change) or _excludes_zero(change):
        verdict = ("used at this layer: removing it changes choices" if _excludes_zero(change)
                   else "used at this layer: removing it moves the model's preference, though not its choices")
    else:
        verdict = ("not necessary at this layer (the intervals include 0; the information may be carried "
                   "elsewhere, so this does not show it is unused)")
    return f"{head}: {verdict}."


def _specific(place: NullPlace | None) -> bool | None:
    """The one-sided verdict against one null, None where there is none."""
    return None if place is None or place.goal is None else place.goal.specific


def _headline_paragraph(h: Headline) -> str:
    t, o = h.target, h.other
    picks = "; ".join(f"half {c.chosen_on} chose L{c.layer} at alpha {c.alpha:+g} (its {t.group} "
                      f"items moved {fixed(100 * c.fit_shift_toward_goal, 1, sign=True)} points toward the goal, useless tests "
                      f"{100 * c.fit_useless_rate:.0f}%{', every setting breaks' if c.broken else ''}), scored "
                      f"on half {c.scored_on}" for c in h.choices)
    lines = [f"**{h.readout}, {h.goal}** (cross-fitted). {picks}."]
    measure, unit = ("log_odds", "nats") if t.log_odds_change else ("stop_rate", "points")
    if any(t.null(kind, measure) for kind in NULL_SETS):
        against = ("the probe is " + "; ".join(verdict_text(json_of(t.null(kind, measure)), kind, unit)
                                               for kind in NULL_SETS) + ".")
    else:  # e.g. --no-generate-sets: this readout's null directions were not read
        against = "no null directions were read with this readout."
    lines.append(f"On the scored halves the {t.group} items' stop rate moves {_pts(t.change)}"
                 + (f", stop log-odds {_nats(t.log_odds_change)}" if t.log_odds_change else "")
                 + f". In {'log-odds' if measure == 'log_odds' else 'stop rate'} {against}")
    moved = _excludes_zero(t.change) or _excludes_zero(t.log_odds_change)
    shows = ["the direction moves the targeted group at a setting chosen on other families" if moved else
             "no change of the targeted group is distinguishable from 0 at the chosen setting"]
    rel, rnd = _specific(t.null("relabel", measure)), _specific(t.null("random", measure))
    if rel is not None:
        shows.append("the move is larger than every label-free direction gives (fitted the same way once the label "
                     "carries nothing)" if rel else
                     "directions these data produce without the label move it about as far")
    if rnd is not None:
        shows.append("it is larger than a push of the same size in a random direction" if rnd else
                     "a random direction of the same size moves it about as far")
    joint = t.verdict(measure)
    if joint is not None:
        shows.append(f"so {joint.text}")
    other_null = o.null("relabel", measure) or o.null("random", measure)
    lines.append(f"The {o.group} items (not targeted) at the same settings: stop rate {_pts(o.change)}"
                 + (f", log-odds {_nats(o.log_odds_change)}" if o.log_odds_change else "")
                 + f", probe at {_place(other_null, unit)}.")
    lines.append("What this shows: " + "; ".join(shows) + ". What it does not show: that the model uses this "
                 "direction when unsteered (see the ablation), that the label it was fitted on is the variable the "
                 "model reads (a label correlated with it gives a direction along the same line, and that direction "
                 "is specific too), or that the choice of setting is optimal (it was made on half the families and "
                 "its variability is not in the intervals).")
    return " ".join(lines)


def _controls_paragraph(controls: Sequence[ControlRow], headline: Sequence[Headline]) -> list[str]:
    rows = [c for c in controls if c.measure == "log_odds" and c.system == "all"]
    if not rows:
        rows = [c for c in controls if c.measure == "stop_rate" and c.system == "all"]
    out: list[str] = []
    seen: set[tuple] = set()  # both halves may choose the same setting: one paragraph each
    for h in headline:
        for ch in h.choices:
            if (h.readout, ch.layer, ch.alpha, h.group) in seen:
                continue
            seen.add((h.readout, ch.layer, ch.alpha, h.group))
            here = [c for c in rows if c.readout == h.readout and c.layer == ch.layer
                    and c.alpha == ch.alpha and c.group == h.group]
            if not here:
                continue
            unit = "nats" if here[0].measure == "log_odds" else "points"
            fmt = _nats if unit == "nats" else _pts
            parts = [f"{c.control} (cosine with the probe {fixed(c.cosine_with_probe, 2, sign=True)}) {fmt(c.change)}"
                     for c in here]
            probe = here[0].probe_change
            # a "control" within |cos| 0.9 of the probe is nearly the probe itself (a shuffled label keeps the
            # label's direction when the label dominates the rows): named so, and no evidence either way
            near = [c.control for c in here if abs(c.cosine_with_probe) >= NEAR_COSINE]
            bigger = [c.control for c in here if c.control not in near and c.change.value is not None
                      and probe.value is not None and abs(c.change.value) >= 0.5 * abs(probe.value)]
            tried = [c for c in here if c.control not in near]
            verdict = ("no control moves it half as far as the probe: the effect is specific to this feature's "
                       "direction among those tried" if tried and not bigger else
                       f"{', '.join(bigger)} move it at least half as far as the probe: the effect is not specific "
                       "to this feature" if bigger else "no control left to compare")
            if near:
                verdict += (f" ({', '.join(near)} within |cos| {NEAR_COSINE:g} of the probe: nearly the probe itself, "
                            "so not a control)")
            out.append(f"**Controls, {h.readout} L{ch.layer} alpha {ch.alpha:+g}, {h.group} items.** "
                       f"Probe {fmt(probe)}; {'; '.join(parts)}: {verdict}. Only the controls listed were tried.")
    return out


def paragraphs(meta: ReportMeta, headline: Sequence[Headline], controls: Sequence[ControlRow],
               ablation: Sequence[Ablation]) -> list[str]:
    """The report's generated paragraphs, in order: units, headline per goal, controls, ablation."""
    out = []
    units = meta.alpha_units
    if units and next(iter(units.values())).raw:
        parts = [f"L{k}: {v.directions_mean_norm:.4g} at the {v.directions_position} position"
                 for k, v in sorted(units.items())]
        out.append(f"**Units.** alpha is raw: alpha = 1 adds the unit direction itself, a vector of norm 1, at every "
                   f"layer. For scale, directions.json's mean residual norms are {'; '.join(parts)}. Raw doses do not "
                   "compare across layers or models whose residual norms differ.")
    elif units:
        parts = [f"L{k}: {v.unit_norm:.4g} (directions.json's {v.directions_position}-position mean norm "
                 f"{v.directions_mean_norm:.4g})" for k, v in sorted(units.items())]
        out.append(f"**Units.** alpha = 1 adds one mean residual norm of what is edited: the mean per-token norm over "
                   f"the {meta.positions} input positions (the prompt's, and the answer prefix's if any), measured unsteered on "
                   f"{next(iter(units.values())).n_items} {next(iter(units.values())).items} ({'; '.join(parts)}). "
                   "Doses in these units compare across layers; they do not say how far a layer's decision boundary is.")
    if not headline:
        why = (meta.split and meta.split.skipped) or "no dose of the needed sign"
        out.append(f"**Headline.** No cross-fitted headline: {why}.")
    for h in headline:
        out.append(_headline_paragraph(h))
    for key, k, what in (("n_random", meta.n_random, "random directions"),
                         ("n_relabel", meta.n_relabel, "label-free directions")):
        if k and k < 39:  # 1 / (k + 1) > 0.05 / 2: no goal's verdict can be "specific"
            out.append(f"**Null.** Only {k} {what}: p cannot go below {1 / (k + 1):.3f}, so no effect can be called "
                       f"outside that null; use {key} >= 50.")
    out += _controls_paragraph(controls, headline)
    for a in ablation:
        if a.group != "all":
            out.append(f"**Ablation ({a.readout}).** {a.sentence}")
    return out


__all__ = ["ablation_sentence", "paragraphs"]
