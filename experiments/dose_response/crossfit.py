"""Cross-fitted headline of dose-response: the steering setting is never chosen on the items it is scored on.

Halves. The target families (held out from the direction's fit) are split into two halves, A and
B, whole families, seeded (`split_seed`), stratified by system (each system's families are
shuffled and dealt alternately, so both halves hold every system). With one family there is
nothing to split and no headline (the report says so).

Choice (per readout and goal). Goals: *induce measuring* = resolved items at alpha > 0, *induce
stopping* = unresolved items at alpha < 0. On the fitting half, among every steered layer x dose
of the goal's sign, the setting chosen is the one whose stop rate moves furthest toward the goal
(point estimate, paired vs alpha = 0) while at most USELESS_CEILING of the group choose a useless
test (the known-answer rule for "the model breaks"); ties go to the smaller |alpha|, then the
lower layer. When every setting breaks, the furthest-moving one is taken and flagged.

Scoring. The items of the other half are read at that setting; then the halves swap, so every
target item is scored exactly once, at a setting chosen without it. The headline is the pooled
cross-fitted effect: stop rate, its paired change vs alpha = 0 and the stop log-odds change, each
with the family bootstrap of the run (families of both halves; the two choices are held fixed, so
the interval does not include the variability of the choice), on the targeted and on the
non-targeted group (the same items' other group at the same setting), and the probe's place among
the null directions (random, relabelled), each of which went through the same choice and scoring
(analysis.specificity: the rank test per null and the joint verdict, `specific`). Each half's own scored numbers are
reported too, with which half chose what.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from evprobe.experiments.steering_conventions import alpha_key
from evprobe.analysis.label_null import NEAR_COSINE
from evprobe.analysis.specificity import (
    HALVES,
    NULL_SETS,
    Verdict,
    choose_settings,
    joint_verdict,
    null_stats,
    specificity_stats,
    split_halves,
)
from evprobe.core.bootstrap import Estimate
from evprobe.experiments.dose_response.null import set_size, set_values
from evprobe.experiments.dose_response.results import (
    Choice,
    GroupBlock,
    HalfChange,
    Headline,
    NullOf,
    NullPlace,
    Split,
)
from evprobe.experiments.dose_response.specificity import USELESS_CEILING, crossfit_effects

GOALS = (("induce measuring", "resolved", "unresolved", +1), ("induce stopping", "unresolved", "resolved", -1))


def item_halves(items: list[Any], seed: int) -> tuple[np.ndarray, dict[str, str]]:
    """(each item's half (items,), family -> half): split_halves over the items' families by system."""
    by_system: dict[str, list[str]] = {}
    for it in items:
        fams = by_system.setdefault(it.system, [])
        if it.family_id not in fams:
            fams.append(it.family_id)
    half_of = split_halves(by_system, seed)
    return np.array([half_of[it.family_id] for it in items]), half_of


def _mean(V: np.ndarray, mask: np.ndarray, j: int) -> float:
    x = V[mask, j]
    x = x[~np.isnan(x)]
    return float(x.mean()) if len(x) else float("nan")


def _choose(cands: list[tuple[int, float]], values: dict[str, np.ndarray], mask: np.ndarray, sign: int,
            measures: tuple[str, ...], chosen_on: str) -> Choice:
    """The setting chosen on `mask`'s items, half `chosen_on` (module docstring; the rule is
    analysis.specificity.choose_settings, which the null directions go through too)."""
    js, ju = measures.index("stop_rate"), measures.index("useless_test_rate")
    base = _mean(values["base"], mask, js)
    V = [values[f"L{layer}.probe.{alpha_key(alpha)}"] for layer, alpha in cands]
    shift = np.array([[-sign * (_mean(v, mask, js) - base)] for v in V])  # (C, 1); + = toward the goal
    useless = np.array([[_mean(v, mask, ju)] for v in V])  # (C, 1)
    chosen, broken = choose_settings(cands, shift, useless, USELESS_CEILING)
    c = int(chosen[0])
    return Choice(chosen_on, cands[c][0], cands[c][1], float(shift[c, 0]), float(useless[c, 0]), bool(broken[0]),
                  int(mask.sum()))


def near_share(plan: Any, kind: str, layers: set[int]) -> float | None:
    """The share of the null's directions within |cos| 0.9 of the probe at the layers the halves chose
    (pooled over those layers' sets); None when the null did not run."""
    if not set_size(plan, kind):
        return None
    if kind == "random":
        cos = np.concatenate([plan.random @ plan.directions[layer].vector for layer in sorted(layers)])
    else:
        cos = np.concatenate([plan.relabel[layer].cosines for layer in sorted(layers)])
    return float(np.mean(np.abs(cos) >= NEAR_COSINE))


def crossfit(plan: Any, readout: str, done: dict, measures: tuple[str, ...], values_of: Any, ratios: Any,
             est: Any, spans: Any) -> tuple[list[Headline], Split]:
    """The cross-fitted headline rows (one per goal) and the split."""
    items = plan.items
    seed, rule = plan.config.split_seed, "whole families, seeded, stratified by system"
    if len({it.family_id for it in items}) < 2:
        return [], Split(seed, rule, None, skipped="one target family: nothing to split")
    half, half_of = item_halves(items, plan.config.split_seed)
    split = Split(seed, rule, tuple((h, tuple(sorted(f for f, x in half_of.items() if x == h))) for h in HALVES))
    resolved = np.array([bool(it.resolved) for it in items])
    groups = {"resolved": resolved, "unresolved": ~resolved}
    keys = ["base"] + [f"L{layer}.probe.{alpha_key(a)}" for layer in plan.layers for a in plan.config.alphas if a != 0]
    values = {k: values_of(readout, [done[(it.item_id, k)] for it in items]) for k in keys}  # each (items, M)
    out = []
    n_goals = sum(any(a * sign > 0 for a in plan.config.alphas) for *_, sign in GOALS)  # claims sharing the 5%
    for goal, target, other, sign in GOALS:
        cands = [(layer, float(a)) for layer in plan.layers for a in sorted(plan.config.alphas) if a * sign > 0]
        if not cands:
            continue
        choices = {}
        for h in HALVES:
            fit_mask = groups[target] & (half == h)
            if not fit_mask.any():
                break
            choices[h] = _choose(cands, values, fit_mask, sign, measures, h)
        if len(choices) < 2:
            continue
        scored_at = {h: choices["B" if h == "A" else "A"] for h in HALVES}  # the half scored at the other's choice
        cond = [f"L{scored_at[half[i]].layer}.probe.{alpha_key(scored_at[half[i]].alpha)}"
                for i in range(len(items))]
        rows = [done[(it.item_id, cond[i])] for i, it in enumerate(items)]
        masks = {(g, scope): groups[g] & (np.ones(len(items), bool) if scope == "pooled" else half == scope)
                 for g in (target, other) for scope in ("pooled", *HALVES)}
        observed, draws, n = ratios(readout, rows, masks)
        base_rows = [done[(it.item_id, "base")] for it in items]
        base_obs, _, _ = ratios(readout, base_rows, masks)
        lo, hi, dlo, dhi, fams, dfams = spans(readout, rows, base_rows, masks)  # experiments.dose_response.stats.intervals
        blo, bhi, _, _, bfams, _ = spans(readout, base_rows, base_rows, masks)
        M = len(measures)
        cells = {(g, scope, m): c * M + j for c, (g, scope) in enumerate(masks) for j, m in enumerate(measures)}

        def cell(g: str, scope: str, m: str, change: bool) -> Estimate:
            c = cells[(g, scope, m)]
            if change:
                return est(observed[c] - base_obs[c], dlo[c], dhi[c], n[c], dfams[c])
            return est(observed[c], lo[c], hi[c], n[c], fams[c])

        null: dict[str, dict[tuple[str, str], NullPlace]] = {}
        for kind in NULL_SETS:
            if not set_size(plan, kind):
                continue
            sets = {(layer, a): set_values(readout, items, [done[(it.item_id, f"L{layer}.{kind}.{alpha_key(a)}")]
                                                            for it in items], measures, values_of)
                    for layer, a in cands}  # each (items, K, M)
            near = near_share(plan, kind, {int(c.layer) for c in choices.values()})
            effects = crossfit_effects(cands, values["base"], sets, half, HALVES, groups[target],
                                       {g: groups[g] for g in (target, other)}, sign, measures)
            null[kind] = {}
            for g in (target, other):
                for m in ("stop_rate", "log_odds"):
                    if m not in measures:
                        continue
                    c = cells[(g, "pooled", m)]
                    probe = None if np.isnan(observed[c]) else float(observed[c] - base_obs[c])
                    eff = effects[g][:, measures.index(m)]
                    if g == target:
                        stats = specificity_stats(probe, eff, sign, n_goals, near)
                        null[kind][(g, m)] = NullPlace.of(stats, stats["effects"])
                    else:
                        null[kind][(g, m)] = NullPlace.of(null_stats(probe, eff), eff)

        def group_block(g: str) -> GroupBlock:
            c0 = cells[(g, "pooled", "stop_rate")]
            log_odds = "log_odds" in measures
            specific = None
            if g == target:  # "specific to this direction": beyond every null that ran (analysis.specificity)
                specific = tuple(_verdict(m, {kind: by.get((g, m)) for kind, by in null.items()})
                                 for m in ("stop_rate", "log_odds") if m in measures)
            return GroupBlock(
                group=g, stop_rate_at_0=est(base_obs[c0], blo[c0], bhi[c0], n[c0], bfams[c0]),
                stop_rate=cell(g, "pooled", "stop_rate", False), change=cell(g, "pooled", "stop_rate", True),
                useless_rate=cell(g, "pooled", "useless_test_rate", False),
                by_half=tuple(HalfChange(h, cell(g, h, "stop_rate", True),
                                         cell(g, h, "log_odds", True) if log_odds else None) for h in HALVES),
                nulls=tuple(NullOf(kind, by.get((g, "stop_rate")), by.get((g, "log_odds"))) for kind, by in null.items()),
                specific=specific, log_odds_change=cell(g, "pooled", "log_odds", True) if log_odds else None)

        out.append(Headline(readout, goal, target, sign, tuple(choices[h] for h in HALVES), group_block(target),
                            group_block(other)))
    return out, split


def _verdict(measure: str, by_kind: dict[str, NullPlace | None]) -> tuple[str, Verdict]:
    """analysis.specificity.joint_verdict over the nulls' places on one measure, with the measure."""
    return measure, joint_verdict({kind: None if p is None else p.to_json() for kind, p in by_kind.items()})


__all__ = ["GOALS", "crossfit", "item_halves", "near_share"]
