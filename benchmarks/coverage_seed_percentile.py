"""Benchmark: coverage of seed 000's interval (`evprobe score --as seed000`) beside evprobe's, for a rate.

The seed mode prints seed 000's interval rule (B.4): the family-bootstrap percentile interval, plain
(`bench.seed_scoring.PercentileBootstrap`, the code path the seed mode uses). evprobe's own interval for
a rate hulls it with a cluster Clopper-Pearson interval (`core.proportion`). Where the truth is known,
this measures both: clustered 0/1 data as in benchmarks/coverage_rates.py (families of 4 units,
beta-binomial within-family correlation rho, true rate p), at the family counts a run can have (6, 8,
12, 24, 144). The seed's rule under-covers with few families and is a point at 0% or 100%: the seed
mode reproduces that, it does not correct it (docs/reference/scoring.md).

    python benchmarks/coverage_seed_percentile.py [--reps 1000] [--boot 2000] [--seed 55] [--quick]

--quick: 8 families only, 200 data sets, B = 200 (a test runs it).
"""

from __future__ import annotations

import argparse
import runpy
import time
from pathlib import Path

import numpy as np

from evprobe.bench.seed_scoring import PercentileBootstrap
from evprobe.core.bootstrap import FamilyBootstrap

simulate = runpy.run_path(str(Path(__file__).with_name("coverage_rates.py")))["simulate"]
FAMILIES = (6, 8, 12, 24, 144)
RHOS = (0.0, 0.3)
PS = (0.5, 0.9, 0.98)
UNITS = 4  # units per family, as the benchmark's 4 decisions per family


def cell(f: int, rho: float, p: float, reps: int, boot: int, seed: int) -> tuple[float, float, float, float]:
    """(seed-rule coverage, evprobe coverage, seed-rule zero-width share, seed-rule mean width)."""
    rng = np.random.default_rng([seed, f, RHOS.index(rho), PS.index(p)])
    sizes = np.full(f, UNITS)
    num = simulate(rng, sizes, p, rho, reps)
    den = np.repeat(sizes[:, None].astype(float), reps, axis=1)
    families = [f"f{i}" for i in range(f)]
    out = []
    for boot_class in (PercentileBootstrap, FamilyBootstrap):
        ests = boot_class(families, boot, seed).rates(num, den, binary=True)
        lo = np.array([e.ci[0] for e in ests])
        hi = np.array([e.ci[1] for e in ests])
        out.append((float(np.mean((lo <= p) & (p <= hi))), float(np.mean(hi - lo <= 0.0)), float(np.mean(hi - lo))))
    (seed_cov, seed_zero, seed_width), (own_cov, _, _) = out
    return seed_cov, own_cov, seed_zero, seed_width


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000, help="simulated data sets per cell")
    ap.add_argument("--boot", type=int, default=2000, help="bootstrap resamples B (the seed's 2,000)")
    ap.add_argument("--seed", type=int, default=55)
    ap.add_argument("--quick", action="store_true", help="8 families, 200 data sets, B = 200")
    args = ap.parse_args(argv)
    families, reps, boot = ((8,), 200, 200) if args.quick else (FAMILIES, args.reps, args.boot)
    t0 = time.perf_counter()
    print(f"coverage of 95% intervals for a rate, families of {UNITS}; {reps} data sets per cell, B = {boot}, "
          f"seed {args.seed}; MC se near 0.95: {np.sqrt(0.95 * 0.05 / reps):.3f}")
    print(f"{'F':>4} {'rho':>4} {'p':>5} | {'seed cov':>8} {'zero':>5} {'width':>6} | {'evprobe cov':>11}")
    for f in families:
        for rho in RHOS:
            for p in PS:
                seed_cov, own_cov, zero, width = cell(f, rho, p, reps, boot, args.seed)
                print(f"{f:>4} {rho:>4.1f} {p:>5.2f} | {seed_cov:>8.3f} {zero:>5.3f} {width:>6.3f} | {own_cov:>11.3f}")
    print(f"{time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
