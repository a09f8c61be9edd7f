"""Benchmark: false verdicts of dose-response's specificity claims, each null direction in turn playing the probe.

On a finished dose-response folder (default: the organism quickstart's, `evprobe quickstart` first),
for each null set (isotropic `random` directions, and `relabel`: directions fitted like the probe on
its rows with the label permuted within families) and each goal (induce measuring: resolved items at
alpha > 0; induce stopping: unresolved items at alpha < 0), every direction of the set plays the probe
in turn, cross-fitted choice included (experiments.dose_response.crossfit's halves and rule), and is judged
against the set's other directions. A direction of the null is, by construction, not specific, so
every "specific" call is a false verdict. Two rules side by side:

- `printed`: what evprobe prints now (experiments.dose_response.specificity): the other directions get the
  same cross-fitted choice; specific = one-sided rank p_goal <= 0.05 (log-odds, then stop rate);
- `before`: the rule it replaced: the other directions read at the playing direction's chosen
  settings, "larger than random directions" = two-sided p_null <= 0.05 (experiments.dose_response.null).

Also printed: the probe's own verdicts (the organism's direction is specific by construction, so
these are the power on data where the truth is known) and the cosines of the relabelled directions
with the probe.

    python benchmarks/steering_null_verdicts.py [--folder out/quickstart/dose_response]

Per set x goal x measure: false verdicts / directions under each rule; per set, the share of
directions called specific for at least one goal (a page makes both claims).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from evprobe.experiments.config import load_config
from evprobe.experiments.dose_response.config import DoseResponseConfig
from evprobe.experiments.steering_conventions import alpha_key
from evprobe.experiments.dose_response.crossfit import GOALS, HALVES, item_halves
from evprobe.experiments.dose_response.null import null_stats, set_size, set_values
from evprobe.experiments.dose_response.plan import make_plan
from evprobe.experiments.dose_response import load_results
from evprobe.experiments.dose_response.specificity import (
    SPECIFIC_P,
    group_means,
    crossfit_choices,
    scored_at,
    specificity_stats,
)
from evprobe.experiments.dose_response.stats import MEASURES, _values

READOUT = "logprobs"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--folder", type=Path, default=Path("out/quickstart/dose_response"))
    args = ap.parse_args(argv)
    started = time.perf_counter()
    meta = json.loads((args.folder / "meta.json").read_text())
    plan = make_plan(load_config(DoseResponseConfig, {**meta["config"], "out": str(args.folder), "shard": None}))
    done = load_results(args.folder / "results.jsonl")
    result = json.loads((args.folder / "dose_response.json").read_text())
    items, measures = plan.items, MEASURES[READOUT]
    half, _ = item_halves(items, plan.config.split_seed)  # the headline's halves
    resolved = np.array([bool(it.resolved) for it in items])
    groups = {"resolved": resolved, "unresolved": ~resolved}
    base = _values(READOUT, [done[(it.item_id, "base")] for it in items])  # (items, M)
    print(f"{args.folder}: {len(items)} items, layers {plan.layers}, doses {sorted(plan.config.alphas)}, "
          f"{plan.config.n_random} random and {plan.config.n_relabel} relabelled directions")
    for layer, rel in plan.relabel.items():
        print(f"  L{layer} relabelled directions' cosine with the probe: |mean| {np.abs(rel.cosines).mean():.2f}, "
              f"range {rel.cosines.min():+.2f} to {rel.cosines.max():+.2f}")
    for kind in ("random", "relabel"):
        K = set_size(plan, kind)
        if not K:
            continue
        any_goal_now, any_goal_before = np.zeros(K, bool), np.zeros(K, bool)
        for goal, target, _, sign in GOALS:
            cands = [(layer, float(a)) for layer in plan.layers for a in sorted(plan.config.alphas) if a * sign > 0]
            stack = np.stack([set_values(READOUT, items, [done[(it.item_id, f"L{layer}.{kind}.{alpha_key(a)}")]
                                                          for it in items], measures, _values)
                              for layer, a in cands])  # (C, items, K, M)
            choices = crossfit_choices(cands, base, stack, half, HALVES, groups[target], sign, measures)
            own = group_means(scored_at(stack, choices, half, HALVES), groups[target]) - group_means(base[:, None, :], groups[target])
            for m in ("log_odds", "stop_rate"):
                j_m = measures.index(m)
                now = np.array([bool(specificity_stats(own[j, j_m], np.delete(own[:, j_m], j), sign)["specific"])
                                for j in range(K)])
                before = np.zeros(K, bool)
                for j in range(K):  # the others read at direction j's chosen settings (the old comparison)
                    fixed = {h: np.full(K, choices[h][j]) for h in HALVES}
                    at_j = group_means(scored_at(stack, fixed, half, HALVES), groups[target])[:, j_m]
                    at_j = at_j - group_means(base[:, None, :], groups[target])[0, j_m]
                    p = null_stats(float(own[j, j_m]), np.delete(at_j, j))["p_null"]
                    before[j] = p is not None and p <= SPECIFIC_P
                if m == "log_odds":
                    any_goal_now |= now
                    any_goal_before |= before
                probe = next(h for h in result["headline"] if h["readout"] == READOUT and h["goal"] == goal)
                pv = ((probe["target"]["null"].get(kind) or {}).get(m) or {})
                print(f"{kind:>7} | {goal:<16} | {m:<9} | false 'specific': printed {now.sum():2d} of {K} "
                      f"({now.mean():.3f}), before {before.sum():2d} of {K} ({before.mean():.3f}) | the probe: "
                      f"beyond {pv.get('beaten')} of {pv.get('n_directions')}, p {pv.get('p_goal', float('nan')):.3f}, "
                      f"{'specific' if pv.get('specific') else 'not specific'}")
        print(f"{kind:>7} | either goal (log-odds) | false 'specific' for at least one goal: printed "
              f"{any_goal_now.sum()} of {K} ({any_goal_now.mean():.3f}), before {any_goal_before.sum()} of {K} "
              f"({any_goal_before.mean():.3f})")
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
