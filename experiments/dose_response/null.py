"""The random-direction null and the specificity controls of dose-response, from the set rows.

Effect. Per item the effect of a condition on a measure is its paired change against alpha = 0
(the same item unsteered); a direction's effect on a group is the mean of those changes (for
rates: the change of the rate, in points; for `log_odds` = log p(stop letter) - max log p(other
letters), the mean change in nats: it does not saturate when the stop rate sits at 0 or 1).

Null. At each layer x dose x group x system x measure the K random directions (same raw norm,
same doses) give K effects; reported: their mean and sd, the band = their 2.5-97.5 percentiles
(drawn on the plots; a band of K values, not an interval), the probe's effect, its percentile
among them (100 x (#below + 0.5 #equal) / K), its z-score (probe - mean) / sd (sd with ddof 1;
null when the random effects do not vary), and p_null = (1 + #{|random - mean| >= |probe -
mean|}) / (K + 1), the two-sided share of random directions at least as far from the null
centre as the probe (never 0). Both groups are reported: the targeted one and the one the dose
should not move (e.g. +alpha on unresolved items, already measuring). The random effects are
point estimates on the same items (no bootstrap per direction); the probe's own interval is the
family bootstrap of its rows.

Controls. Each control direction (experiments.dose_response.controls) is aggregated like the probe (same
family-bootstrap resamples, paired change vs alpha = 0) and placed in the same random null.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from evprobe.core.json_types import JsonObject
from evprobe.analysis.dose_grid import GridEstimator
from evprobe.analysis.effects import change_families, spans_of
from evprobe.analysis.specificity import null_stats
from evprobe.bench.items import Item
from evprobe.experiments.steering_conventions import alpha_key
from evprobe.core.bootstrap import Estimate
from evprobe.experiments.dose_response.readouts import missing_test, useless_test
from evprobe.experiments.dose_response.results import ControlRow, NullBandRow, Place

Masks = dict[tuple[str, str], np.ndarray]  # (group, system) -> (items,) bool
# (condition key, group, system, measure) -> (estimate, paired change against alpha = 0): stats' cells
Stats = dict[tuple[str, str, str, str], tuple[Estimate, Estimate]]


def pseudo_rows(readout: str, item: Item, row: JsonObject) -> list[JsonObject]:
    """A set row as K single-direction rows in the `lp` / `gen` shape dose_stats reads."""
    out = []
    if readout == "logprobs":
        s = row["lp_set"]
        for choice, lo in zip(s["choice"], s["log_odds"], strict=True):
            action = item.options[choice]  # type: ignore[index]
            missing = missing_test(item)
            out.append({"lp": {"stop": action == "stop", "missing": None if missing is None else action == missing,
                               "useless": useless_test(item, action), "min_cost": action == item.reference_action,
                               "log_odds": lo}})
    else:
        s = row["gen_set"]
        for action, valid in zip(s["action"], s["valid"], strict=True):
            missing = missing_test(item)
            out.append({"gen": {"stop": action == "stop", "missing": None if missing is None else action == missing,
                                "useless": useless_test(item, action),
                                "min_cost": bool(valid) and action == item.reference_action, "valid": bool(valid)}})
    return out


def set_values(readout: str, items: list[Item], rows: list[JsonObject], measures: tuple[str, ...],
               values_of: Any) -> np.ndarray:
    """(items, K, measures) values of one set condition; NaN where undefined."""
    per = [values_of(readout, pseudo_rows(readout, it, row)) for it, row in zip(items, rows, strict=True)]  # (K, M)
    return np.stack(per)


def set_size(plan: Any, kind: str) -> int:
    """Directions in the plan's null set `kind` (random, relabel) that this readout reads (0: none). A
    label-free set holds fewer than n_relabel when its families allow fewer sign patterns
    (analysis.label_null), the same number at every layer (make_plan checks)."""
    if kind == "random":
        return plan.config.n_random
    return next(iter(plan.relabel.values())).k if plan.relabel and plan.config.n_relabel else 0


def null_band(plan: Any, readout: str, done: dict, stats: Stats, masks: Masks, grid: GridEstimator,
              values_of: Any, kind: str = "random") -> tuple[list[NullBandRow], dict[tuple, np.ndarray]]:
    """Per layer x dose x cell the null of the `kind` set (random, or relabel: experiments.dose_response.relabel)
    as rows (module docstring), and its effects (K,) by (layer, alpha, group, system, measure)
    for the controls; the effects are analysis.dose_grid's (grid.null_effects: the null directions'
    means over each cell's items minus the unsteered cell's, as steering_dose_response's).

    Each row keeps `mean` (the directions' mean *value*, as before) beside the effects."""
    config, out, effects_by = plan.config, [], {}
    n_dirs = set_size(plan, kind)
    if not n_dirs:
        return out, effects_by
    measures = grid.readout.measures
    cells = [(g, s, m) for (g, s) in masks for m in measures]
    for layer in plan.layers:
        for alpha in sorted(config.alphas):
            if alpha == 0:
                effects = None
            else:
                key = f"L{layer}.{kind}.{alpha_key(alpha)}"
                V = set_values(readout, plan.items, [done[(it.item_id, key)] for it in plan.items], measures,
                               values_of)
                effects = grid.null_effects(V)  # (K, cells)
            pkey = "base" if alpha == 0 else f"L{layer}.probe.{alpha_key(alpha)}"
            for c, (group, system, measure) in enumerate(cells):
                base = stats[("base", group, system, measure)][0].value
                probe = stats[(pkey, group, system, measure)][0]
                if base is None:
                    continue
                if effects is None:  # alpha 0: every direction is the unsteered model
                    eff = np.zeros(n_dirs)
                else:
                    eff = effects[:, c]
                effects_by[(layer, float(alpha), group, system, measure)] = eff
                pe = None if probe.value is None else probe.value - base
                s = null_stats(pe if alpha != 0 else None, eff)
                out.append(NullBandRow(
                    readout=readout, layer=layer, alpha=float(alpha), group=group, system=system, measure=measure,
                    mean=None if s["mean"] is None else base + s["mean"],
                    band_lo=None if s["lo"] is None else base + s["lo"],
                    band_hi=None if s["hi"] is None else base + s["hi"],
                    effect_mean=s["mean"], effect_sd=s["sd"], effect_lo=s["lo"], effect_hi=s["hi"],
                    probe_effect=s["probe_effect"], percentile=s["percentile"], z=s["z"], p_null=s["p_null"],
                    n_directions=s["n_directions"], n=probe.n))
    return out, effects_by


def control_rows(plan: Any, readout: str, done: dict, masks: Masks, grid: GridEstimator, values_of: Any, est: Any,
                 random_effects: dict[tuple, np.ndarray], stats: Stats,
                 relabel_effects: dict[tuple, np.ndarray] | None = None) -> list[ControlRow]:
    """Each control at each layer x nonzero dose, system `all`: value and paired change with their
    family-bootstrap intervals, the probe's change beside it, and the control's place in the random
    null and (when run) in the relabelled one (`relabel_percentile`, `relabel_p_null`)."""
    out: list[ControlRow] = []
    if not plan.config.controls:
        return out
    base_obs = grid.base.observed
    cells = [(g, s, m) for (g, s) in masks for m in grid.readout.measures]
    for layer in plan.layers:
        names = [c.name for c in plan.controls[layer]]
        cosines = [c.cosine_with_probe for c in plan.controls[layer]]
        for alpha in sorted(plan.config.alphas):
            if alpha == 0:
                continue
            key = f"L{layer}.controls.{alpha_key(alpha)}"
            per_item = [pseudo_rows(readout, it, done[(it.item_id, key)]) for it in plan.items]
            for j, name in enumerate(names):
                rows = [p[j] for p in per_item]
                cur = grid.cells(values_of(readout, rows))  # the estimator of the probe's curves
                observed, n = cur.observed, cur.n
                lo, hi, dlo, dhi = spans_of(cur, grid.base)
                fams, dfams = cur.n_families, change_families(cur, grid.base)
                for c, (group, system, measure) in enumerate(cells):
                    if system != "all":
                        continue
                    change = est(observed[c] - base_obs[c], dlo[c], dhi[c], n[c], dfams[c])
                    probe_change = stats[(f"L{layer}.probe.{alpha_key(alpha)}", group, system, measure)][1]
                    eff = random_effects.get((layer, float(alpha), group, system, measure))
                    place = Place(None, None, None)
                    if eff is not None:
                        s = null_stats(change.value, eff)
                        place = Place(s["percentile"], s["z"], s["p_null"])
                    rel = (relabel_effects or {}).get((layer, float(alpha), group, system, measure))
                    rel_place = null_stats(change.value, rel) if rel is not None else {"percentile": None, "p_null": None}
                    out.append(ControlRow(
                        readout=readout, layer=layer, alpha=float(alpha), control=name, cosine_with_probe=cosines[j],
                        group=group, system=system, measure=measure,
                        estimate=est(observed[c], lo[c], hi[c], n[c], fams[c]), change=change,
                        probe_change=probe_change, place=place, relabel_percentile=rel_place["percentile"],
                        relabel_p_null=rel_place["p_null"]))
    return out


__all__ = ["control_rows", "null_band", "pseudo_rows", "set_size", "set_values"]
