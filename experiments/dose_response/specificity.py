"""The specificity verdict of dose-response: the probe's cross-fitted effect against null directions
that went through the same choice.

The headline (experiments.dose_response.crossfit) steers each half of the target families at the layer x dose
the *other* half found best for the probe. Placing that effect among random directions read at the
probe's chosen settings compares a selected effect with unselected ones: the probe had the choice,
the null directions did not, so a null direction playing the probe came out "larger than random
directions" in 8 of 100 verdicts at a nominal 5%. Here every null direction gets the probe's own
procedure: on each half, among the same settings, its own best setting by the same rule
(`choose_settings`: furthest toward the goal while at most USELESS_CEILING of the group choose a useless
test; ties to the smaller |alpha|, then the lower layer), scored on the other half. Its cross-fitted
effect on the targeted group is then exchangeable with the probe's whenever the probe is one more
direction of that null, and the verdict is a rank test:

    toward = -sign x effect (the goal's direction: measuring lowers stopping, stopping raises it);
    p_goal = (1 + #{null directions with toward >= the probe's}) / (K + 1);
    specific = p_goal <= SPECIFIC_P / G, G = the goals the headline reads (2 with doses of both signs).

A page claims specificity for each goal, so the two claims share the 5% (Bonferroni): under
exchangeability P(any goal called specific) <= 0.05 whatever the effects' distribution, each goal
at most floor(0.025 (K + 1)) / (K + 1) (1 of 51 at K = 50: the probe must beat every null
direction). Counting verdicts one at a time, the old rule (random directions read at the probe's
chosen settings, two-sided p_null <= 0.05) came out "larger" in 8 of 100. Two nulls, two named
statements: `random` (isotropic
unit directions: "a push of this size in any direction does not do this") and `relabel` (directions
fitted the same way on the fit rows with the label permuted within families,
experiments.dose_response.relabel: "directions this data produces do not do this"). Only the second is a claim
about sufficiency. benchmarks/steering_null_verdicts.py measures the false-verdict rate with each
null direction in turn playing the probe. The non-targeted group's effect is placed among the same
directions' effects at their own settings, two-sided (experiments.dose_response.null.null_stats).
"""

from __future__ import annotations

from evprobe.core.decimals import fixed
from collections.abc import Sequence
from typing import Any

import numpy as np

from evprobe.experiments.dose_response.formatting import band_name
from evprobe.experiments.dose_response.null import null_stats

USELESS_CEILING = 0.10  # above this share of useless tests a setting counts as broken (as experiments.known_answer.checks)
SPECIFIC_P = 0.05
NULL_SETS = ("random", "relabel")
NULL_NAMES = {"random": "random directions of the same norm",
              "relabel": "directions fitted the same way on relabelled rows"}


def choose_settings(cands: Sequence[tuple[int, float]], shift: np.ndarray, useless: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Per direction, the index into `cands` of the setting chosen (module docstring) and whether every
    setting broke. shift, useless: (C, K) per candidate and direction; NaN shift never wins."""
    order = sorted(range(len(cands)), key=lambda c: (abs(cands[c][1]), cands[c][0]))  # tie-break order
    ok = ~np.isnan(useless) & (useless <= USELESS_CEILING)  # (C, K)
    broken = ~ok.any(axis=0)  # (K,)
    pool = np.where(broken[None, :], True, ok)
    key = np.where(pool & ~np.isnan(shift), np.round(shift, 9), -np.inf)[order]  # (C, K) in tie-break order
    return np.asarray(order)[np.argmax(key, axis=0)], broken  # argmax: the first of equal maxima


def group_means(V: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Means over mask's items where defined: V (items, K, M) -> (K, M); NaN where none."""
    sub = V[mask]
    defined = ~np.isnan(sub)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(defined.any(0), np.where(defined, sub, 0.0).sum(0) / np.maximum(defined.sum(0), 1), np.nan)


def crossfit_choices(cands: list[tuple[int, float]], base: np.ndarray, stack: np.ndarray, half: np.ndarray,
                     halves: Sequence[str], fit_group: np.ndarray, sign: int, measures: tuple[str, ...]
                     ) -> dict[str, np.ndarray]:
    """Per half, each direction's chosen candidate (K,) on that half's targeted items.

    base: (items, M) unsteered values; stack: (C, items, K, M) the set's values at each candidate
    (layer, alpha); half: (items,) each item's half; fit_group: (items,) the targeted group's mask."""
    js, ju = measures.index("stop_rate"), measures.index("useless_test_rate")
    out = {}
    for h in halves:
        fit = fit_group & (half == h)
        base_mean = np.nanmean(base[fit, js]) if fit.any() else np.nan
        per = np.stack([group_means(stack[c], fit) for c in range(len(cands))])  # (C, K, M)
        out[h], _ = choose_settings(cands, -sign * (per[:, :, js] - base_mean), per[:, :, ju])
    return out


def scored_at(stack: np.ndarray, choices: dict[str, np.ndarray], half: np.ndarray, halves: Sequence[str]) -> np.ndarray:
    """(items, K, M): every item read at the setting its direction chose on the *other* half (two halves)."""
    K = stack.shape[2]
    out = np.full(stack.shape[1:], np.nan)
    for h in halves:
        other = half != h  # the half scored at this half's choices
        for k in range(K):
            out[other, k] = stack[choices[h][k], other, k]
    return out


def crossfit_effects(cands: list[tuple[int, float]], base: np.ndarray, sets: dict[tuple[int, float], np.ndarray],
                     half: np.ndarray, halves: Sequence[str], fit_group: np.ndarray, groups: dict[str, np.ndarray],
                     sign: int, measures: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Each null direction's cross-fitted effect, per group: {group: (K, M)} paired changes against
    alpha = 0, every item scored at the setting its direction chose on the other half.
    sets: per candidate (layer, alpha) the set's values (items, K, M); the rest as crossfit_choices."""
    stack = np.stack([sets[c] for c in cands])  # (C, items, K, M)
    choices = crossfit_choices(cands, base, stack, half, halves, fit_group, sign, measures)
    scored = scored_at(stack, choices, half, halves)
    return {g: group_means(scored, mask) - group_means(base[:, None, :], mask) for g, mask in groups.items()}


def specificity_stats(probe_effect: float | None, effects: np.ndarray, sign: int, goals: int = 2) -> dict[str, Any]:
    """The probe's place among K null effects (K,) on the targeted group: null_stats' percentile, band
    and two-sided p_null, plus the one-sided p_goal, the threshold SPECIFIC_P / goals and the
    verdict (module docstring)."""
    e = np.asarray(effects, dtype=np.float64)
    e = e[~np.isnan(e)]
    threshold = SPECIFIC_P / max(goals, 1)
    out = {**null_stats(probe_effect, e), "effects": [float(x) for x in e], "p_goal": None, "beaten": None,
           "threshold": threshold, "specific": None}
    if probe_effect is None or not len(e):
        return out
    toward, probe_toward = -sign * e, -sign * probe_effect
    at_least = int(np.sum(toward >= probe_toward - 1e-12))
    out.update(p_goal=(1 + at_least) / (len(e) + 1), beaten=len(e) - at_least)
    out["specific"] = bool(out["p_goal"] <= threshold)
    return out


def verdict_text(stats: dict[str, Any] | None, kind: str, unit: str) -> str:
    """One clause: where the probe's cross-fitted effect sits among a null's cross-fitted effects."""
    name = NULL_NAMES[kind]
    if not stats or stats.get("p_goal") is None:
        return f"no {name} were run"
    k = stats["n_directions"]
    scale = 100.0 if unit == "points" else 1.0
    band = f"theirs {fixed(scale * stats['lo'], 2, sign=True)} to {fixed(scale * stats['hi'], 2, sign=True)} {unit}, {band_name(k)}"
    head = (f"beyond {stats['beaten']} of {k} {name}, each given its own cross-fitted choice ({band}; "
            f"p {stats['p_goal']:.3f})")
    threshold = stats.get("threshold", SPECIFIC_P)
    if 1 / (k + 1) > threshold:
        return head + f": too few ({k}) for p <= {threshold:g}, so no verdict"
    if stats["specific"]:
        return head + (": specific to this direction" if kind == "relabel" else
                       ": larger than a push of this size in a random direction")
    return head + (": not more than directions fitted on meaningless labels do" if kind == "relabel" else
                   ": not more than a random direction of the same size does")


__all__ = ["NULL_NAMES", "NULL_SETS", "SPECIFIC_P", "USELESS_CEILING", "choose_settings", "crossfit_choices", "group_means",
           "crossfit_effects", "scored_at", "specificity_stats", "verdict_text"]
