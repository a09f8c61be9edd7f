"""Benchmark: coverage of `evprobe confabulation`'s rate intervals (seed 002, appendix O) where the truth
is known.

Design, as the command samples: up to `sample` void failures drawn without replacement from a run's
failures, each of F families holding 1-6 failures (uneven, as a run's are). A family has its own
propensity for each axis, p_f ~ Beta with mean p and intra-family correlation rho (what the family
bootstrap must carry); a classified failure is positive with probability p_f. A share u of the
classifications is unreadable (unclassified): the command reports the rate counting them neither way
(a lower bound) and the rate counting them positive (an upper bound). The intervals are
`bench.judge_agreement.family_rate`, the function the command calls.

Truths: the lower-bound rate targets p x (1 - u), the upper-bound rate p x (1 - u) + u (what an
infinite run of this design gives). Target: 95% intervals cover at least 93% (Monte Carlo s.e. about 1
point at 500 replicates); no interval is a point.

    python benchmarks/coverage_confabulation_rates.py [--reps 500] [--boot 1000]
    python benchmarks/coverage_confabulation_rates.py --quick   # a few replicates: that it runs
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from evprobe.bench.judge_agreement import family_rate

TARGET = 0.93
SETTINGS = (  # (families, sample, p, rho, unclassified share): HP near-universal, ES rare, as the seed found
    (24, 100, 0.90, 0.2, 0.05),
    (24, 100, 0.50, 0.2, 0.05),
    (24, 100, 0.08, 0.2, 0.05),
    (60, 100, 0.50, 0.2, 0.0),
    (12, 40, 0.50, 0.3, 0.1),
)


def failures(rng: np.random.Generator, n_families: int, sample: int, p: float, rho: float,
             u: float) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(family ids, positive (n,), unclassified (n,)) of one sampled run."""
    sizes = rng.integers(1, 7, n_families)  # failures per family
    a = p * (1 - rho) / rho
    b = (1 - p) * (1 - rho) / rho
    propensity = rng.beta(a, b, n_families)
    fam = np.repeat(np.arange(n_families), sizes)
    take = rng.choice(len(fam), size=min(sample, len(fam)), replace=False)
    fam = fam[take]
    unread = rng.random(len(fam)) < u
    positive = (rng.random(len(fam)) < propensity[fam]) & ~unread
    return [f"f{i:03d}" for i in fam], positive.astype(float), unread.astype(float)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=500)
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    reps, boot = (20, 200) if args.quick else (args.reps, args.boot)
    t0 = time.perf_counter()
    points = 0
    print(f"{reps} replicates a row, {boot} family resamples; target {TARGET:.0%}")
    print("families  sample  p     rho   unclassified  lower-bound coverage  upper-bound coverage  mean width")
    for n_families, sample, p, rho, u in SETTINGS:
        rng = np.random.default_rng([n_families, sample, int(p * 100), int(rho * 100), int(u * 100)])
        hit_lo = hit_hi = 0
        widths = []
        for r in range(reps):
            fam, positive, unread = failures(rng, n_families, sample, p, rho, u)
            lo = family_rate(positive, fam, boot, r)
            hi = family_rate(np.maximum(positive, unread), fam, boot, r)
            for est, truth, counter in ((lo, p * (1 - u), "lo"), (hi, p * (1 - u) + u, "hi")):
                a, b = est.ci
                points += a == b
                covered = a <= truth <= b
                if counter == "lo":
                    hit_lo += covered
                    widths.append(b - a)
                else:
                    hit_hi += covered
        print(f"{n_families:8d}  {sample:6d}  {p:.2f}  {rho:.2f}  {u:12.2f}  {hit_lo / reps:20.1%}  "
              f"{hit_hi / reps:20.1%}  {np.mean(widths):10.3f}")
    print(f"zero-width intervals: {points}")
    print(f"{time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
