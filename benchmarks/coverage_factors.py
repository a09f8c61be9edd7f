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
flagged at the ceiling, and the mean width, for the printed interval (`printed`: the paired
bootstrap percentile interval widened to hold the MOVER interval) and its two parts alone
(`paired`: the percentile interval of the paired differences, fold models fixed; `mover`: the MOVER
interval of the two AUROCs' own intervals with their correlation).

    python benchmarks/coverage_factors.py [--reps 300] [--families 30,144] [--equal 0.5,1.0,3.0]
                                          [--better 0.25,0.5] [--base 0.5] [--jobs 2]
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
from evprobe.probes.factors import difference, scored
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


def one_replicate(s: Setting, rep: int) -> dict[str, tuple[float, float] | float | bool]:
    rng = np.random.default_rng([s.families, s.d, rep, int(s.target * 1000), int(s.factor * 1000)])
    rows = reference_rows(s.families, seed=int(rng.integers(1 << 30)))
    y = np.array([r["resolved"] for r in rows], dtype=np.int8)
    z = np.array([r["threshold_level"] == "low" for r in rows], dtype=np.int8)
    fam = np.array([r["family_id"] for r in rows], dtype=object)
    _, inv = np.unique(fam, return_inverse=True)
    u, v = rng.standard_normal((2, s.d))
    X = rng.standard_normal((inv.max() + 1, s.d))[inv] + rng.standard_normal((len(rows), s.d))
    X += s.target * (2.0 * y[:, None] - 1.0) * u / np.linalg.norm(u)
    X += s.factor * (2.0 * z[:, None] - 1.0) * v / np.linalg.norm(v)
    folds = family_folds(fam, K, rep, y)
    res = cv_scores(X.astype(np.float32), LogisticFitter(1.0), folds, {"y": y, "factor:threshold_level=low": z}, key=0)
    boot = FamilyBootstrap(sorted(set(fam)), N_BOOT, rep)
    a, b = scored(res.oof["y"], y, fam, boot), scored(res.oof["factor:threshold_level=low"], z, fam, boot)
    assert a is not None and b is not None
    d, printed = difference(a, b)
    lo, hi = percentile_interval(a.draws - b.draws)
    r = float(np.corrcoef(a.draws, b.draws)[0, 1]) if a.draws.std() > 0 and b.draws.std() > 0 else 0.0
    one = lambda x: np.array([float(x)])  # noqa: E731
    # MOVER alone: saturated_change over a NaN paired interval takes the MOVER bounds
    mlo, mhi = proportion.saturated_change((one(np.nan), one(np.nan)), one(a.value), (one(a.ci[0]), one(a.ci[1])),
                                           one(b.value), (one(b.ci[0]), one(b.ci[1])), sparse=np.array([True]),
                                           r=one(r))
    ceiling = float(proportion.perfect_lower(a.size))
    return {"d": d, "printed": printed, "paired": (float(lo[0]), float(hi[0])), "mover": (float(mlo[0]), float(mhi[0])),
            "ceiling": min(a.value, b.value) >= ceiling}


def _rate(x: np.ndarray) -> str:
    p = float(np.mean(x))
    return f"{p:.3f} +- {np.sqrt(p * (1 - p) / len(x)):.3f}"


def summarise(name: str, results: list[dict], equal: bool) -> str:
    parts = [f"{name:<26} n={len(results):4d} d {np.mean([r['d'] for r in results]):+.3f}",
             f"at ceiling {np.mean([r['ceiling'] for r in results]):.2f}"]
    for rule in ("printed", "paired", "mover"):
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
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    settings = [("equal", float(x), float(x)) for x in args.equal.split(",") if x]
    settings += [("better", args.base + float(x), args.base) for x in args.better.split(",") if x]
    with ProcessPoolExecutor(args.jobs) if args.jobs > 1 else nullcontext() as pool:
        run = pool.map if pool is not None else map  # --jobs 1: in this process
        for kind, t, f in settings:
            for n_fam in (int(x) for x in args.families.split(",")):
                s = Setting(kind, n_fam, args.d, t, f)
                results = list(run(one_replicate, [s] * args.reps, range(args.reps)))
                print(summarise(f"{kind} {t:g}/{f:g}, {n_fam} families", results, kind == "equal"), flush=True)
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
