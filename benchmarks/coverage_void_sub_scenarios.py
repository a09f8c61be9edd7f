"""Benchmark: coverage of the void block's per-sub-scenario measures (bench.void_scoring, `by_sub_scenario`;
seed 002, appendix K: the visual AR, the textual AR_ill and their paired gap per sub-scenario) on simulated
replies whose true abstention rates are known.

Data. The real void items of a generated benchmark (`--voids occluded,unstated`, F families per system,
so F/2 per sub-scenario, each with 2 voids of each type). Each sub-scenario s has its own abstention
rates at u = 0 (visual v_s, textual t_s; `RATES`, from saturating to equal); family f draws a propensity
u_f ~ N(0, sigma) on the logit scale, shared by its visual and textual voids; each void is abstained on
with probability expit(logit(rate) + u_f). The truths are the population means E[expit(logit(v_s) + u)],
E[expit(logit(t_s) + u)] and their difference (200,000 draws of u). Twins are answered correctly.

Every replicate is scored by `bench.void_scoring.score_voids`, the function `evprobe score` calls, so what
is measured is the printed interval (B family resamples, widened where a rate saturates). Reported per
measure: coverage pooled over the sub-scenarios and the lowest sub-scenario's, the share of gap intervals
excluding 0 where the true gap is 0 (false verdicts), and zero-width intervals (there must be none).

Target: 95% intervals cover at least 93% pooled (Monte Carlo s.e. about 0.4 points at 500 replicates x 6).

    python benchmarks/coverage_void_sub_scenarios.py [--reps 500] [--boot 1000] [--families 48] [--sigma 1.0]
    python benchmarks/coverage_void_sub_scenarios.py --quick   # a few replicates: that it runs
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np
from scipy.special import expit, logit

from evprobe.bench.generate import GenerateConfig, build
from evprobe.bench.sub_scenarios import cell_of
from evprobe.bench.void_scoring import score_voids

# (visual, textual) AbsRec at u = 0 per sub-scenario, in the benchmark's sub-scenario order.
RATES = ((0.02, 0.90), (0.15, 0.60), (0.30, 0.30), (0.05, 0.50), (0.40, 0.80), (0.10, 0.10))
MEASURES = ("visual", "textual", "gap")
TARGET = 0.93


def truths(visual: float, textual: float, sigma: float) -> dict[str, float]:
    u = np.random.default_rng(0).normal(0.0, sigma, 200_000)
    v, t = float(np.mean(expit(logit(visual) + u))), float(np.mean(expit(logit(textual) + u)))
    return {"visual": v, "textual": t, "gap": t - v}


def replicate(rng: np.random.Generator, items: dict, pairs: list, families: list[str], rates: dict[str, tuple],
              sigma: float, n_boot: int) -> dict[str, dict[str, tuple[float, float]]]:
    """Per sub-scenario and measure, the printed interval (lo, hi) of one simulated run."""
    u = dict(zip(families, rng.normal(0.0, sigma, len(families)), strict=True))
    decoded: dict[str, str | None] = {}
    for void, twin in pairs:
        visual, textual = rates[cell_of(void.system, void.initial_property)]
        p = expit(logit(textual if void.void == "unstated" else visual) + u[void.family_id])
        decoded[void.item_id] = "undetermined" if rng.random() < p else twin.reference_answer
        decoded[twin.item_id] = twin.reference_answer
    out = score_voids(items, [v for v, _ in pairs], decoded, families, n_boot=n_boot,
                      seed=int(rng.integers(1 << 31)))["by_sub_scenario"]
    return {cell: {"visual": block["occluded"]["abs_rec"].ci, "textual": block["unstated"]["abs_rec"].ci,
                   "gap": block["gap"]["textual_minus_visual"].ci} for cell, block in out.items()}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=500)
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--families", type=int, default=48, help="families per system (the main set: 48)")
    ap.add_argument("--sigma", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=37)
    ap.add_argument("--quick", action="store_true", help="4 replicates of 6 families per system, B = 200")
    args = ap.parse_args(argv)
    if args.quick:
        args.reps, args.families, args.boot = 4, 6, 200
    items = build(GenerateConfig(families_per_system=args.families, subset_per_cell=0,
                                 voids=("occluded", "unstated")))[1]
    by_id = {it.item_id: it for it in items}
    pairs = [(it, by_id[it.twin_id]) for it in items if it.void is not None and it.request == "answer_initial"]
    families = list(dict.fromkeys(it.family_id for it in items))
    cells = list(dict.fromkeys(cell_of(v.system, v.initial_property) for v, _ in pairs))
    rates = dict(zip(cells, RATES, strict=True))
    truth = {c: truths(*rates[c], args.sigma) for c in cells}
    print(f"coverage per sub-scenario (appendix K): {args.reps} replicates, B = {args.boot}, sigma = {args.sigma}, "
          f"{args.families // 2} families per sub-scenario")
    started = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    got = [replicate(rng, by_id, pairs, families, rates, args.sigma, args.boot) for _ in range(args.reps)]
    print(f"{'sub-scenario':<28} {'measure':<8} {'truth':>7}  {'coverage':>8}")
    pooled = {m: [] for m in MEASURES}
    zero_width = 0
    for c in cells:
        for m in MEASURES:
            lo, hi = np.array([g[c][m] for g in got]).T
            covered = (lo <= truth[c][m]) & (truth[c][m] <= hi)
            pooled[m].append(float(covered.mean()))
            zero_width += int(np.sum(hi == lo))
            print(f"{c:<28} {m:<8} {truth[c][m]:>+7.3f}  {100 * covered.mean():>7.1f}%")
    for m in MEASURES:
        flag = "" if np.mean(pooled[m]) >= TARGET else "  below target"
        print(f"pooled {m}: {100 * np.mean(pooled[m]):.1f}% (lowest sub-scenario {100 * min(pooled[m]):.1f}%){flag}")
    null = [c for c in cells if abs(truth[c]["gap"]) < 1e-12]
    for c in null:
        lo, hi = np.array([g[c]["gap"] for g in got]).T
        print(f"false verdicts at a true gap of 0 ({c}): {100 * np.mean((lo > 0) | (hi < 0)):.1f}%")
    print(f"zero-width intervals: {zero_width}")
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
