"""Benchmark: coverage of PECS per dataset, its equal-weight mean and J (bench.pecs) on simulated runs
whose true rates are known.

Data. Three datasets (systems) of F families each, as the benchmark's; every family has C controls and
V voids (the main set: 26 and 10 per family). Family f of a dataset draws its own reply shares around
the dataset's true ones (a Dirichlet with concentration K over correct / abstain / wrong for controls,
a Beta with the same K over abstain for voids; K = inf: no family effect), then each reply is drawn
from those shares. The truth of a dataset is Acc x max(0, AbsRec - FalseAbs) at its true rates (the
expected shares), J = AbsRec - FalseAbs, and the equal-weight mean is the mean of the three datasets'.

Every simulated run is scored exactly as `evprobe score` scores one: the per-family counts go through
one `FamilyBootstrap` (B resamples of all 3F families, --boot) and `bench.pecs.from_family_sums`, so
what is measured is the printed interval. An estimate printed without an interval (bench.pecs: the same
value, or J <= 0, on every resample) covers when its value equals the truth; its share is printed.

Scenarios (true Acc, AbsRec, FalseAbs per dataset):
- inside: (0.90, 0.50, 0.05), (0.80, 0.30, 0.10), (0.95, 0.70, 0.02): J well above 0 everywhere;
- near: (0.90, 0.15, 0.10) in every dataset: J = 0.05, the clamp close;
- boundary: (0.90, 0.10, 0.10) in every dataset: J = 0, PECS = 0 (appendix M.3's zero boundary);
- organism-like: the quickstart's per-system rates (0.996, 0.23 / 0.24 / 0.31, 0.001).

Target: 95% intervals cover at least 93% (Monte Carlo s.e. about 0.7 points at 1000 runs). Measured
(1000 runs, B = 1000): every cell at 48 families 92.2% or more; at 10 families 89.5% or more (the
percentile bootstrap with few families); the mean at the zero boundary 96.0-98.4%.

    python benchmarks/coverage_pecs.py [--reps 1000] [--boot 1000] [--seed 30]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from evprobe.bench import pecs
from evprobe.core.bootstrap import FamilyBootstrap

SYSTEMS = ("sliding", "bouncing", "spring")
SCENARIOS = {
    "inside": ((0.90, 0.50, 0.05), (0.80, 0.30, 0.10), (0.95, 0.70, 0.02)),
    "near": ((0.90, 0.15, 0.10),) * 3,
    "boundary": ((0.90, 0.10, 0.10),) * 3,
    "organism-like": ((0.996, 0.23, 0.001), (0.994, 0.24, 0.002), (0.997, 0.31, 0.001)),
}
TARGET = 0.93


def simulate(rng: np.random.Generator, rates: tuple[tuple[float, float, float], ...], families: int,
             controls: int, voids: int, k: float) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """Per-family (numerator, denominator), each (3F,), of every tallied part (module docstring)."""
    n = len(SYSTEMS) * families
    out = {}
    for s, (system, (acc, abs_rec, false_abs)) in enumerate(zip(SYSTEMS, rates)):
        rows = slice(s * families, (s + 1) * families)
        shares = np.array([acc, false_abs, max(0.0, 1.0 - acc - false_abs)])
        if np.isfinite(k):
            alpha = np.maximum(shares * k, 1e-9)
            control_shares = rng.dirichlet(alpha, size=families)
            void_abs = rng.beta(max(abs_rec * k, 1e-9), max((1 - abs_rec) * k, 1e-9), size=families)
        else:
            control_shares = np.tile(shares, (families, 1))
            void_abs = np.full(families, abs_rec)
        counts = np.array([rng.multinomial(controls, p / p.sum()) for p in control_shares])
        abstained = rng.binomial(voids, void_abs)
        for part, num, den in (("acc", counts[:, 0], controls), ("false_abs", counts[:, 1], controls),
                               ("abs_rec", abstained, voids)):
            full_num, full_den = np.zeros(n), np.zeros(n)
            full_num[rows], full_den[rows] = num, den
            out[(system, part)] = (full_num, full_den)
    return out


def scored(parts: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]], boot: FamilyBootstrap) -> dict:
    """The per-dataset section of the simulated parts, as `evprobe score` computes it from family sums
    (bench.pecs.from_family_sums: the datasets' families are disjoint, so their sums add up)."""
    n = len(boot.families) // len(SYSTEMS)
    systems = [system for system in SYSTEMS for _ in range(n)]
    sums = {part: tuple(sum(parts[(s, part)][i] for s in SYSTEMS) for i in (0, 1)) for part in pecs.PARTS}
    return pecs.from_family_sums(boot, systems, sums)


def truths(rates: tuple[tuple[float, float, float], ...]) -> dict[str, float]:
    per = [a * max(0.0, r - f) for a, r, f in rates]
    out = {f"pecs {s}": v for s, v in zip(SYSTEMS, per)}
    out["j sliding"] = rates[0][1] - rates[0][2]
    out["pecs mean"] = float(np.mean(per))
    out["j mean"] = float(np.mean([r - f for _, r, f in rates]))
    return out


def found(section: dict) -> dict[str, dict]:
    out = {f"pecs {s}": section["datasets"][s]["pecs"] for s in SYSTEMS}
    out["j sliding"] = section["datasets"]["sliding"]["j"]
    out["pecs mean"] = section["equal_weight_mean"]["pecs"]
    out["j mean"] = section["equal_weight_mean"]["j"]
    return {k: e.to_json() for k, e in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=30)
    ap.add_argument("--families", type=int, nargs="+", default=[48, 10])
    ap.add_argument("--concentration", type=float, nargs="+", default=[20.0, float("inf")])
    args = ap.parse_args()
    start = time.perf_counter()
    print("| scenario | F per dataset | family effect K | measure | truth | coverage | no interval | mean width |")
    print("|---|---|---|---|---|---|---|---|")
    worst: dict[int, float] = {}
    for name, rates in SCENARIOS.items():
        truth = truths(rates)
        for families in args.families:
            for k in args.concentration:
                rng = np.random.default_rng([args.seed, families, len(name), int(min(k, 1e6))])
                ids = [f"f{i}" for i in range(len(SYSTEMS) * families)]
                hits = {m: [] for m in truth}
                points = {m: 0 for m in truth}
                widths = {m: [] for m in truth}
                for rep in range(args.reps):
                    boot = FamilyBootstrap(ids, args.boot, seed=args.seed * 100_003 + rep)
                    result = found(scored(simulate(rng, rates, families, 26, 10, k), boot))
                    for m, e in result.items():
                        lo, hi = e["ci"]
                        if lo is None:
                            points[m] += 1
                            hits[m].append(abs(e["value"] - truth[m]) < 1e-12)
                        else:
                            hits[m].append(lo - 1e-12 <= truth[m] <= hi + 1e-12)
                            widths[m].append(hi - lo)
                for m in truth:
                    cover = float(np.mean(hits[m]))
                    worst[families] = min(worst.get(families, 1.0), cover)
                    width = f"{np.mean(widths[m]):.3f}" if widths[m] else "NA"
                    print(f"| {name} | {families} | {k:g} | {m} | {truth[m]:.3f} | {100 * cover:.1f}% | "
                          f"{100 * points[m] / args.reps:.1f}% | {width} |")
    for families, cover in worst.items():
        verdict = "meets" if cover >= TARGET else "misses"
        print(f"worst coverage at {families} families a dataset: {100 * cover:.1f}% ({verdict} the "
              f"{100 * TARGET:.0f}% target)")
    print(f"{args.reps} runs per cell, B = {args.boot}; {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
