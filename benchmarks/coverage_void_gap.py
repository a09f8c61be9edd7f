"""Benchmark: coverage of the void block's paired textual-vs-visual gap (bench.void_scoring) on simulated
replies whose true abstention rates are known.

Data. The real void items of a generated benchmark (`--voids occluded,unstated`, F families per system,
2 sufficient twins per family, so 2 pairs of each void type per family). Family f draws a propensity u_f ~
N(0, sigma) on the logit scale, shared by its visual and textual voids (the same scenes, the same model:
what pairing exploits); each void is abstained on with probability expit(a_type + u_f). The truth is the
population mean gap E[expit(a_t + u) - expit(a_v + u)] (200,000 draws of u), the quantity AbsRec(textual)
- AbsRec(visual) estimates when every family holds the same number of voids. Twins are answered
correctly (they do not enter the gap).

Every replicate is scored by `bench.void_scoring.score_voids`, the function `evprobe score` calls, so what
is measured is the printed interval (B family resamples, widened where a rate saturates). A replicate's
interval covers when it holds the truth; at a true gap of 0, one that excludes 0 is a false verdict.

Scenarios (AbsRec at u = 0: visual, textual):
- null: 0.30, 0.30 (no gap; coverage = 1 - false-verdict rate);
- seed-like: 0.15, 0.60 (the seed's "about 4x");
- saturating: 0.02, 0.90.

Target: 95% intervals cover at least 93% (Monte Carlo s.e. about 1 point at 500 replicates).

    python benchmarks/coverage_void_gap.py [--reps 500] [--boot 1000] [--families 10,48] [--sigma 1.0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from evprobe.bench.generate import GenerateConfig, build
from evprobe.bench.void_scoring import score_voids

SCENARIOS = {"null": (0.30, 0.30), "seed-like": (0.15, 0.60), "saturating": (0.02, 0.90)}
TARGET = 0.93


def logit(p: float) -> float:
    return float(np.log(p / (1 - p)))


def expit(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def true_gap(visual: float, textual: float, sigma: float) -> float:
    u = np.random.default_rng(0).normal(0.0, sigma, 200_000)
    return float(np.mean(expit(logit(textual) + u) - expit(logit(visual) + u)))


def replicate(rng: np.random.Generator, items: dict, pairs: list, families: list[str], visual: float,
              textual: float, sigma: float, n_boot: int) -> tuple[float, float, float]:
    """(value, lo, hi) of the printed gap for one simulated run."""
    u = dict(zip(families, rng.normal(0.0, sigma, len(families)), strict=True))
    decoded: dict[str, str | None] = {}
    for void, twin in pairs:
        a = logit(textual if void.void == "unstated" else visual)
        decoded[void.item_id] = "undetermined" if rng.random() < expit(np.array(a + u[void.family_id])) else twin.reference_answer
        decoded[twin.item_id] = twin.reference_answer
    voids = [v for v, _ in pairs]
    gap = score_voids(items, voids, decoded, families, n_boot=n_boot, seed=int(rng.integers(1 << 31)))["gap"]
    e = gap["textual_minus_visual"]
    return e.value, e.ci[0], e.ci[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=500)
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--families", default="10,48", help="families per system, comma-separated")
    ap.add_argument("--sigma", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=31)
    args = ap.parse_args()
    print(f"coverage of the paired textual - visual AbsRec gap: {args.reps} replicates, B = {args.boot}, "
          f"sigma = {args.sigma}")
    print(f"{'families':>8}  {'scenario':<11} {'truth':>7}  {'coverage':>8}  {'excl. 0':>7}  {'mean width':>10}  {'zero width':>10}")
    started = time.perf_counter()
    for per_system in (int(x) for x in args.families.split(",")):
        items = build(GenerateConfig(families_per_system=per_system, subset_per_cell=0,
                                     voids=("occluded", "unstated")))[1]
        by_id = {it.item_id: it for it in items}
        pairs = [(it, by_id[it.twin_id]) for it in items if it.void is not None and it.request == "answer_initial"]
        families = list(dict.fromkeys(it.family_id for it in items))
        for name, (visual, textual) in SCENARIOS.items():
            truth = true_gap(visual, textual, args.sigma)
            rng = np.random.default_rng([args.seed, per_system, len(name)])
            got = np.array([replicate(rng, by_id, pairs, families, visual, textual, args.sigma, args.boot)
                            for _ in range(args.reps)])
            lo, hi = got[:, 1], got[:, 2]
            cover = float(np.mean((lo <= truth) & (truth <= hi)))
            excludes_zero = float(np.mean((lo > 0) | (hi < 0)))
            flag = "" if cover >= TARGET else "  below target"
            print(f"{3 * per_system:>8}  {name:<11} {truth:>+7.3f}  {100 * cover:>7.1f}%  {100 * excludes_zero:>6.1f}%  "
                  f"{np.mean(hi - lo):>10.3f}  {int(np.sum(hi == lo)):>10}{flag}")
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
