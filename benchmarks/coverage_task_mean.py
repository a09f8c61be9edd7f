"""Benchmark: coverage of the mean over tasks' interval (bench.task_means, seed 003's Average) where
the truth is known.

Each replicate draws S = 3 systems of F families each, with the estimates' layout: a shared task
(mass: 4 units in every family) and one task per system (4 units in each family of that system), so
the T = 4 tasks have unequal sizes (4F/3 against 4F units) and the unweighted mean differs from the
pooled share. Units are clustered in families: a family's rate for a task is Beta with mean p_t and
intra-family correlation rho, its units Bernoulli of that rate. The truth is the mean of the four
p_t. The interval is the one `evprobe score` prints: the run's family bootstrap (`FamilyBootstrap`,
binary rates), `task_mean`, `FamilyBootstrap.estimate`.

    python benchmarks/coverage_task_mean.py [--reps 400] [--families 8,48] [--rho 0.3] [--n-boot 1000]
    python benchmarks/coverage_task_mean.py --quick   # 40 replicates, 8 families per system (tests)

Prints per setting (task rates) and size: coverage of the truth with its binomial standard error, the
mean width, and how often the interval was a point (never, by construction).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from evprobe.bench.task_means import task_mean
from evprobe.core.bootstrap import FamilyBootstrap

SETTINGS = {  # task rates: mass, then one per system
    "inside": (0.6, 0.2, 0.5, 0.8),
    "near 100%": (0.97, 0.9, 0.95, 0.99),
    "at 100%": (1.0, 1.0, 1.0, 1.0),
}
UNITS = 4  # units per family and task


def one_replicate(rates: tuple[float, ...], per_system: int, rho: float, n_boot: int,
                  rng: np.random.Generator) -> tuple[float, float, float]:
    """(truth, lo, hi) of one simulated run."""
    n_fam = 3 * per_system
    system = np.repeat(np.arange(3), per_system)
    num, den = np.zeros((n_fam, 4)), np.zeros((n_fam, 4))
    k = (1.0 - rho) / rho  # Beta(p k, (1 - p) k) has intra-family correlation rho
    for t, p in enumerate(rates):
        held = np.ones(n_fam, bool) if t == 0 else system == t - 1
        if p in (0.0, 1.0):
            fam_rate = np.full(n_fam, p)
        else:
            fam_rate = rng.beta(p * k, (1 - p) * k, n_fam)
        den[held, t] = UNITS
        num[held, t] = rng.binomial(UNITS, fam_rate[held])
    boot = FamilyBootstrap([f"f{i}" for i in range(n_fam)], n_boot, int(rng.integers(2**31)))
    est = FamilyBootstrap.estimate(task_mean(boot.resample_many(num, den, binary=True)))
    return float(np.mean(rates)), float(est.ci[0]), float(est.ci[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--families", default="8,48", help="families per system, comma-separated")
    ap.add_argument("--rho", type=float, default=0.3)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="40 replicates, 8 families per system, 300 resamples")
    args = ap.parse_args(argv)
    if args.quick:
        args.reps, args.families, args.n_boot = 40, "8", 300
    print(f"mean over 4 tasks of unequal size, truth the mean of the task rates (rho {args.rho}, "
          f"{args.reps} replicates, {args.n_boot} resamples)")
    print("setting      families  coverage (se)    mean width  points")
    for name, rates in SETTINGS.items():
        for per_system in (int(x) for x in args.families.split(",")):
            started = time.perf_counter()
            rng = np.random.default_rng([20261207, per_system, len(name)])
            runs = [one_replicate(rates, per_system, args.rho, args.n_boot, rng) for _ in range(args.reps)]
            cover = np.mean([lo <= truth <= hi for truth, lo, hi in runs])
            se = np.sqrt(cover * (1 - cover) / args.reps)
            width = np.mean([hi - lo for _, lo, hi in runs])
            points = sum(hi == lo for _, lo, hi in runs)
            print(f"{name:<12} {3 * per_system:>8}  {cover:.3f} ({se:.3f})    {width:.3f}       {points}"
                  f"   [{time.perf_counter() - started:.1f} s]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
