"""Benchmark: the label against the design's factors (probes.factors), on data whose truth is known.

Families of four rows shaped like the benchmark's (probes.synthetic.reference_rows). The label is
the benchmark's sufficiency (history XOR threshold level XOR a per-family flip) and the factor is
threshold level; both are balanced two of four rows in every family and independent of each other.
Each is written along its own random direction, the label at strength `t`, the factor at `f`, on top
of a family offset and row noise (d = `--d`). Fitted and compared exactly as the sweep does (the
logistic probe on one batch of labels, 5 family folds, the pooled out-of-fold AUROCs, the sweep's
family bootstrap, probes.factors.scored / difference).

- `equal S`: t = f = S. Label and factor decode equally well in expectation (the setting is
  symmetric): the interval should cover 0 and "better" (interval above 0) should be called at most
  2.5% of the time; at S large both sit at the ceiling, where the verdict must stay "same".
- `better D`: t = S + D, f = S: the share called "better" is the power.

Printed per setting x size: coverage of 0 (equal only), the share called better / worse, the share
flagged at the ceiling, and the mean width, for the printed interval (`printed`: what a sweep with
refits prints, the paired bootstrap percentile interval widened to hold the MOVER interval, every
half-width times the label's refit-over-fixed interval width; the label's refit interval from the
sweep's own refit pass, `--refits` family resamples) and the same with the fold models held fixed
(`fixed`: what a sweep with --refits 0 prints), and the fixed interval's two parts alone (`paired`:
the percentile interval of the paired differences; `mover`: the MOVER interval of the two AUROCs'
own intervals with their correlation).

    python benchmarks/coverage_factors.py [--reps 300] [--families 30,144] [--equal 0.5,1.0,3.0]
                                          [--better 0.25,0.5] [--base 0.5] [--refits 50] [--jobs 2]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np

from evprobe.core import proportion
from evprobe.core.bootstrap import FamilyBootstrap, percentile_interval
from evprobe.probes.engine import LogisticFitter, cv_scores
from evprobe.probes.factors import compare_factors, factor_labels
from evprobe.probes.inference import sweep_refit_intervals
from evprobe.probes.splits import family_folds
from evprobe.probes.synthetic import reference_rows

K = 5
N_BOOT = 1000


@dataclass(frozen=True)
class Setting:
    name: str
    families: int
    d: int
    target: float
    factor: float
    refits: int


def one_replicate(s: Setting, rep: int) -> dict[str, tuple[float, float] | float | bool]:
    rng = np.random.default_rng([s.families, s.d, rep, int(s.target * 1000), int(s.factor * 1000)])
    rows = reference_rows(s.families, seed=int(rng.integers(1 << 30)))
    y = np.array([r["resolved"] for r in rows], dtype=np.int8)
    fam = np.array([r["family_id"] for r in rows], dtype=object)
    factors = factor_labels(rows, ("threshold_level",), y)
    name, z = factors.factors[0].labels[0][1:]  # threshold_level=low, (n,)
    _, inv = np.unique(fam, return_inverse=True)
    u, v = rng.standard_normal((2, s.d))
    X = rng.standard_normal((inv.max() + 1, s.d))[inv] + rng.standard_normal((len(rows), s.d))
    X += s.target * (2.0 * y[:, None] - 1.0) * u / np.linalg.norm(u)
    X += s.factor * (2.0 * z[:, None] - 1.0) * v / np.linalg.norm(v)
    X = X.astype(np.float32)
    folds = family_folds(fam, K, rep, y)
    res = cv_scores(X, LogisticFitter(1.0), folds, {"y": y, name: z}, key=0)
    boot = FamilyBootstrap(sorted(set(fam)), N_BOOT, rep)
    fixed = compare_factors(res.oof["y"], y, res.oof, factors, fam, boot)
    assert fixed is not None
    # the label's refit interval, from the sweep's own refit pass (one layer, one position, no nesting)
    oof = res.oof["y"]
    auc = fixed.target
    correct = float(np.mean((oof > 0) == y.astype(bool)))
    refit = sweep_refit_intervals(lambda li: X[:, None, :], [0], 1, y, fam, folds, boot, oof[None, :],
                                  [(auc, correct)], None, n_splits=K, C=1.0, n_refits=s.refits, seed=rep, n_jobs=1)
    printed = fixed.with_training_spread(refit.per_candidate[0][0])
    (f,) = fixed.readings
    (p,) = printed.readings
    one = lambda x: np.array([float(x)])  # noqa: E731
    # the MOVER interval alone: saturated_change over a NaN paired interval takes the MOVER bounds
    mlo, mhi = proportion.saturated_change((one(np.nan), one(np.nan)), one(f.target),
                                           (one(f.target_ci[0]), one(f.target_ci[1])), one(f.auroc),
                                           (one(f.auroc_ci[0]), one(f.auroc_ci[1])), sparse=np.array([True]),
                                           r=one(f.r))
    return {"d": f.difference, "printed": p.ci, "fixed": f.ci, "paired": f.paired,
            "mover": (float(mlo[0]), float(mhi[0])), "ceiling": f.at_ceiling, "scale": p.scale}


def _rate(x: np.ndarray) -> str:
    p = float(np.mean(x))
    return f"{p:.3f} +- {np.sqrt(p * (1 - p) / len(x)):.3f}"


def summarise(name: str, results: list[dict], equal: bool) -> str:
    parts = [f"{name:<26} n={len(results):4d} d {np.mean([r['d'] for r in results]):+.3f}",
             f"at ceiling {np.mean([r['ceiling'] for r in results]):.2f}, training scale "
             f"{np.mean([r['scale'] for r in results]):.2f}"]
    for rule in ("printed", "fixed", "paired", "mover"):
        lo = np.array([r[rule][0] for r in results])
        hi = np.array([r[rule][1] for r in results])
        text = f"{rule}: better {_rate(lo > 0)}, worse {_rate(hi < 0)}"
        if equal:
            text += f", covers 0 {_rate((lo <= 0) & (0 <= hi))}"
        parts.append(text + f", width {np.mean(hi - lo):.3f}")
    return " | ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--families", default="30,144")
    ap.add_argument("--equal", default="0.5,1.0,3.0", help="strengths of label and factor alike")
    ap.add_argument("--better", default="0.25,0.5", help="how much stronger the label is than the factor")
    ap.add_argument("--base", type=float, default=0.5, help="the factor's strength in the better settings")
    ap.add_argument("--d", type=int, default=32)
    ap.add_argument("--refits", type=int, default=50, help="refits of the label's pipeline (the sweep's default)")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    settings = [("equal", float(x), float(x)) for x in args.equal.split(",") if x]
    settings += [("better", args.base + float(x), args.base) for x in args.better.split(",") if x]
    with ProcessPoolExecutor(args.jobs) if args.jobs > 1 else nullcontext() as pool:
        run = pool.map if pool is not None else map  # --jobs 1: in this process
        for kind, t, f in settings:
            for n_fam in (int(x) for x in args.families.split(",")):
                s = Setting(kind, n_fam, args.d, t, f, args.refits)
                results = list(run(one_replicate, [s] * args.reps, range(args.reps)))
                print(summarise(f"{kind} {t:g}/{f:g}, {n_fam} families", results, kind == "equal"), flush=True)
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
