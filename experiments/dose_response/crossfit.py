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

from evprobe.analysis.dose_grid import ChoiceRule, GridEstimator, cross_fit
from evprobe.analysis.effects import change_families, spans_of
from evprobe.analysis.label_null import NEAR_COSINE
from evprobe.analysis.specificity import (
    HALVES,
    NULL_SETS,
    Verdict,
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
from evprobe.experiments.steering_conventions import alpha_key

GOALS = (("induce measuring", "resolved", "unresolved", +1), ("induce stopping", "unresolved", "resolved", -1))
USELESS_CEILING = 0.10  # above this share of useless tests a setting counts as broken (known-answer checks read it too)
# The benchmark's choice rule (module docstring), one parameter of the analysis layer's cross-fit.
BENCHMARK_CHOICE = ChoiceRule("stop_rate", guard="useless_test_rate", ceiling=USELESS_CEILING)


def item_halves(items: list[Any], seed: int) -> tuple[np.ndarray, dict[str, str]]:
    """(each item's half (items,), family -> half): split_halves over the items' families by system."""
    by_system: dict[str, list[str]] = {}
    for it in items:
        fams = by_system.setdefault(it.system, [])
        if it.family_id not in fams:
            fams.append(it.family_id)
    half_of = split_halves(by_system, seed)
    return np.array([half_of[it.family_id] for it in items]), half_of


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


def crossfit(plan: Any, readout: str, done: dict, grid: GridEstimator, values_of: Any,
             est: Any) -> tuple[list[Headline], Split]:
    """The cross-fitted headline rows (one per goal) and the split: analysis.dose_grid.cross_fit with
    the benchmark's readout (grid.readout; per-item values from `values_of`) and choice rule, scored
    by the run's estimator (`grid`) over the goal's groups and halves."""
    items = plan.items
    seed, rule = plan.config.split_seed, "whole families, seeded, stratified by system"
    if len({it.family_id for it in items}) < 2:
        return [], Split(seed, rule, None, skipped="one target family: nothing to split")
    half, half_of = item_halves(items, plan.config.split_seed)
    split = Split(seed, rule, tuple((h, tuple(sorted(f for f, x in half_of.items() if x == h))) for h in HALVES))
    resolved = np.array([bool(it.resolved) for it in items])
    groups = {"resolved": resolved, "unresolved": ~resolved}
    spec = grid.readout
    measures = spec.measures
    keys = ["base"] + [f"L{layer}.probe.{alpha_key(a)}" for layer in plan.layers for a in plan.config.alphas if a != 0]
    values = {k: values_of(readout, [done[(it.item_id, k)] for it in items]) for k in keys}  # each (items, M)
    out = []
    n_goals = sum(any(a * sign > 0 for a in plan.config.alphas) for *_, sign in GOALS)  # claims sharing the 5%
    for goal, target, other, sign in GOALS:
        cands = [(layer, float(a)) for layer in plan.layers for a in sorted(plan.config.alphas) if a * sign > 0]
        if not cands or not all((groups[target] & (half == h)).any() for h in HALVES):
            continue
        nulls = {kind: np.stack([set_values(readout, items, [done[(it.item_id, f"L{layer}.{kind}.{alpha_key(a)}")]
                                                             for it in items], measures, values_of)
                                 for layer, a in cands])  # (C, items, K, M)
                 for kind in NULL_SETS if set_size(plan, kind)}
        probe = np.stack([values[f"L{layer}.probe.{alpha_key(a)}"] for layer, a in cands])  # (C, items, M)
        # sign +1 (induce measuring) lowers the stop rate: toward = -sign
        cf = cross_fit(cands, probe, nulls, values["base"], half, groups[target], spec, BENCHMARK_CHOICE, -sign)
        choices = {}
        for h in HALVES:
            c = int(cf.choices[h][0])
            choices[h] = Choice(h, cands[c][0], cands[c][1], float(cf.shift[h][c]), float(cf.guard[h][c]),
                                bool(cf.broken[h][0]), int((groups[target] & (half == h)).sum()))
        masks = {(g, scope): groups[g] & (np.ones(len(items), bool) if scope == "pooled" else half == scope)
                 for g in (target, other) for scope in ("pooled", *HALVES)}
        scoring = grid.on(masks)
        cur, base = scoring.cells(cf.probe()), scoring.base
        observed, n, base_obs = cur.observed, cur.n, base.observed
        lo, hi, dlo, dhi = spans_of(cur, base)
        fams, dfams = cur.n_families, change_families(cur, base)
        blo, bhi, _, _ = spans_of(base, base)
        bfams = base.n_families
        M = len(measures)
        cells = {(g, scope, m): c * M + j for c, (g, scope) in enumerate(masks) for j, m in enumerate(measures)}

        def cell(g: str, scope: str, m: str, change: bool) -> Estimate:
            c = cells[(g, scope, m)]
            if change:
                return est(observed[c] - base_obs[c], dlo[c], dhi[c], n[c], dfams[c])
            return est(observed[c], lo[c], hi[c], n[c], fams[c])

        null: dict[str, dict[tuple[str, str], NullPlace]] = {}
        for kind in cf.kinds:
            near = near_share(plan, kind, {int(c.layer) for c in choices.values()})
            null[kind] = {}
            for g in (target, other):
                effects = cf.null_effects(kind, values["base"], groups[g])  # (K, M)
                for m in ("stop_rate", "log_odds"):
                    if m not in measures:
                        continue
                    c = cells[(g, "pooled", m)]
                    probe_effect = None if np.isnan(observed[c]) else float(observed[c] - base_obs[c])
                    eff = effects[:, measures.index(m)]
                    if g == target:
                        stats = specificity_stats(probe_effect, eff, sign, n_goals, near)
                        null[kind][(g, m)] = NullPlace.of(stats, stats["effects"])
                    else:
                        null[kind][(g, m)] = NullPlace.of(null_stats(probe_effect, eff), eff)

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


__all__ = ["BENCHMARK_CHOICE", "GOALS", "USELESS_CEILING", "crossfit", "item_halves", "near_share"]
