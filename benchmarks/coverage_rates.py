"""Benchmark: coverage of the printed interval of a proportion on simulated clustered 0/1 data.

The truth is known, so coverage (the share of simulated data sets whose 95% interval holds the true
rate) and mean width can be measured, for three intervals of the same data:
- old: the family-bootstrap percentile interval (`FamilyBootstrap.rates(num, den)`, as before issue 15);
- cluster: the cluster Clopper-Pearson interval alone (`core.proportion.cluster_interval`);
- new: what is printed now for a proportion, `FamilyBootstrap.rates(num, den, binary=True)`, the hull.

Data. F families; family f has m_f units (design "4": every family 4 units, as the benchmark's 4
decisions per family; design "mix": sizes drawn once per cell, uniformly from 1..8). Within-family
correlation is beta-binomial: family rate p_f ~ Beta(p (1 - rho) / rho, (1 - p) (1 - rho) / rho),
whose intra-class correlation is rho, and the m_f units are Bernoulli(p_f); rho = 0 means
independent units. Grid: rho in {0, 0.3, 0.8}, p in {0.5, 0.9, 0.98, 1.0, 0.0, 0.02}, F in {10, 30,
144}. At p = 1.0 (0.0) every unit is 1 (0), so any interval that reaches 1 (0) covers: there the
informative column is the bound (mean lower bound at p = 1, mean upper bound at p = 0).

Each cell draws --reps data sets; one `FamilyBootstrap` (B = --boot resamples, its seed derived from
the cell) scores all of them at once as columns of one (F, reps) matrix. Every data set therefore sees
the same resample counts, which is how a real run uses one seeded bootstrap; the coverage averages over
data sets at that fixed resample matrix. Monte Carlo standard error of a coverage near 95% with 1000
data sets: about 0.7 points.

    python benchmarks/coverage_rates.py [--reps 1000] [--boot 500] [--seed 15]

About 20 s on 2 CPU cores with the defaults (22 s measured).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from evprobe.core.bootstrap import FamilyBootstrap
from evprobe.core.proportion import cluster_interval

DESIGNS = ("4", "mix")
RHOS = (0.0, 0.3, 0.8)
PS = (0.5, 0.9, 0.98, 1.0, 0.0, 0.02)
FAMILIES = (10, 30, 144)
TARGET = 0.93


def simulate(
    rng: np.random.Generator, sizes: np.ndarray, p: float, rho: float, reps: int
) -> np.ndarray:
    """(F, reps) successes per family under the beta-binomial model of the module docstring."""
    f = len(sizes)
    if rho == 0.0 or p in (0.0, 1.0):
        rate = np.full((f, reps), p)
    else:
        k = (1.0 - rho) / rho  # a + b of the beta
        rate = rng.beta(p * k, (1.0 - p) * k, size=(f, reps))
    return rng.binomial(sizes[:, None], rate).astype(float)


def summarise(p: float, lo: np.ndarray, hi: np.ndarray) -> dict[str, float]:
    cover = (lo <= p) & (p <= hi)
    bound = np.mean(lo) if p >= 0.5 else np.mean(hi)  # the side away from the boundary near p
    return {"cov": float(np.mean(cover)), "width": float(np.mean(hi - lo)), "bound": float(bound),
            "zero": float(np.mean(hi - lo <= 0.0))}


def run_cell(design: str, f: int, rho: float, p: float, reps: int, boot: int, seed: int) -> dict:
    cell_seed = int(np.random.SeedSequence([seed, DESIGNS.index(design), f, RHOS.index(rho),
                                            PS.index(p)]).generate_state(1)[0])
    rng = np.random.default_rng(cell_seed)
    sizes = np.full(f, 4) if design == "4" else rng.integers(1, 9, size=f)
    num = simulate(rng, sizes, p, rho, reps)  # (F, reps)
    den = np.repeat(sizes[:, None].astype(float), reps, axis=1)
    fb = FamilyBootstrap([f"f{i}" for i in range(f)], boot, cell_seed)
    old = fb.rates(num, den)
    new = fb.rates(num, den, binary=True)
    c_lo, c_hi = cluster_interval(num, den)
    as_arrays = lambda ests: (np.array([e.ci[0] for e in ests]), np.array([e.ci[1] for e in ests]))  # noqa: E731
    return {
        "design": design, "F": f, "n": int(sizes.sum()), "rho": rho, "p": p,
        "old": summarise(p, *as_arrays(old)),
        "cluster": summarise(p, c_lo, c_hi),
        "new": summarise(p, *as_arrays(new)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000, help="simulated data sets per cell")
    ap.add_argument("--boot", type=int, default=500, help="bootstrap resamples B")
    ap.add_argument("--seed", type=int, default=15)
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = [run_cell(d, f, rho, p, args.reps, args.boot, args.seed)
            for d in DESIGNS for f in FAMILIES for rho in RHOS for p in PS]
    print(f"coverage of 95% intervals for a proportion; {args.reps} data sets per cell, "
          f"B = {args.boot}, seed {args.seed}")
    print("bound = mean lower bound (p >= 0.5) or mean upper bound (p < 0.5); "
          "zero = share of zero-width intervals")
    head = (f"{'design':>6} {'F':>4} {'n':>4} {'rho':>4} {'p':>5} | "
            + " | ".join(f"{k + ' cov':>11} {'width':>6} {'bound':>6}" for k in ("old", "cluster", "new"))
            + f" | {'old zero':>8}")
    print(head)
    print("-" * len(head))
    for r in rows:
        cols = " | ".join(f"{r[k]['cov']:>11.3f} {r[k]['width']:>6.3f} {r[k]['bound']:>6.3f}"
                          for k in ("old", "cluster", "new"))
        print(f"{r['design']:>6} {r['F']:>4} {r['n']:>4} {r['rho']:>4.1f} {r['p']:>5.2f} | {cols} | "
              f"{r['old']['zero']:>8.3f}")
    inner = [r for r in rows if 0.0 < r["p"] < 1.0]
    for k in ("old", "cluster", "new"):
        worst = min(inner, key=lambda r: r[k]["cov"])
        below = [r for r in inner if r[k]["cov"] < TARGET]
        print(f"{k:>7}: lowest coverage with 0 < p < 1: {worst[k]['cov']:.3f} "
              f"(design {worst['design']}, F={worst['F']}, rho={worst['rho']}, p={worst['p']}); "
              f"{len(below)} of {len(inner)} such cells below {TARGET}; "
              f"zero-width intervals in {sum(r[k]['zero'] > 0 for r in rows)} of {len(rows)} cells")
    print(f"{time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
