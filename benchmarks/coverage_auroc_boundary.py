"""Benchmark: coverage of the probe intervals near the boundary (true AUROC 0.99, 0.999 and 1), where
the truth is known.

The interval rule of every printed probe AUROC and accuracy (probes.metrics, `unit_interval`) adds
to the resampling interval a cluster Clopper-Pearson interval and a boundary reach, so that no
interval is a point and a near-perfect estimate is not printed narrower than a perfect one. This
measures what the rule prints where it matters: a planted signal strong enough that the probe's
held-out AUROC is about 0.99, about 0.999, or 1 (every held-out positive above every negative).

Each replicate draws F families of four rows with the benchmark's structure
(probes.synthetic.reference_rows, labels = sufficiency): X = a family's shared state + a row's own
noise + strength x (2 y - 1) x u along a fixed unit direction u, d = 24, one layer. The sweep's
code scores it: grouped 5-fold CV of the logistic probe (probes.engine.cv_scores), the fixed-model
family bootstrap (B = 2000, probes.metrics), and the refits of the whole pipeline
(probes.refit.refit_bootstrap, `--refits`). The truth is what cross-validation estimates, as in
benchmarks/coverage.py: the expected AUROC (accuracy) on new families of the fold models, measured on
`--test-families` fresh families drawn once per setting, averaged over folds and replicates.

Intervals, each for the AUROC and the accuracy:

- `fixed`: the family bootstrap with the fold models held fixed, plain percentiles (before) and
  under the rule (`auroc_estimate`, `accuracy_estimate`: what baselines and transfer print);
- `printed`: estimate +- t x sd of the refits (before: the exact interval on the F families when
  the sd is 0) and under the rule (`refit_interval`: what a sweep prints); `no reach` is the rule's
  hull without its boundary reach (part 3), to show what the reach adds.

    python benchmarks/coverage_auroc_boundary.py [--reps 100] [--refits 50] [--families 30,144]
                                                 [--settings 0.99,0.999,1] [--jobs 2]

Prints one line per setting x size x measure x interval: coverage with its binomial standard error,
mean width, mean lower bound, and the share of zero-width intervals. The defaults' output is quoted
in probes/metrics.py (the rule) and the README ("Probes", intervals that cover).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

K = 5
D = 24
# planted strength per (target truth, families): the held-out AUROC of the fold models lands near the
# target (the truth printed is the measured one)
STRENGTH = {("0.99", 30): 2.65, ("0.99", 144): 2.6, ("0.999", 30): 3.4, ("0.999", 144): 3.45,
            ("1", 30): 7.0, ("1", 144): 7.0}


def sample(n_families: int, strength: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X (n, d) float32, y (n,), families (n,)) of one replicate (module docstring)."""
    from evprobe.probes.synthetic import reference_rows

    rows = reference_rows(n_families, seed=int(rng.integers(1 << 30)))
    y = np.array([int(r["resolved"]) for r in rows], dtype=np.int8)
    fam = np.array([r["family_id"] for r in rows], dtype=object)
    u = np.ones(D) / np.sqrt(D)
    shared = np.repeat(rng.standard_normal((n_families, D)), 4, axis=0)  # a family's shared state
    X = shared + rng.standard_normal((len(y), D)) + strength * (2.0 * y[:, None] - 1.0) * u
    return X.astype(np.float32), y, fam


def old_printed(est: float, draws: np.ndarray, fixed: np.ndarray, n_families: int) -> tuple[float, float]:
    """What a sweep printed before the rule: estimate +- t x sd, clipped; the exact interval on the F
    families where the sd is 0."""
    from scipy import stats

    from evprobe.core.proportion import clopper_pearson
    from evprobe.probes.inference import refit_sd

    sd, b = refit_sd(draws, fixed, n_families)
    if sd <= 0.0:
        return clopper_pearson(est * n_families, n_families)
    half = float(stats.t.ppf(0.975, b - 1)) * sd
    return max(0.0, est - half), min(1.0, est + half)


def one_replicate(args: tuple[str, int, int, int, tuple[np.ndarray, np.ndarray]]) -> dict[str, tuple]:
    """{measure: (estimate, truth, fixed before, fixed, printed before, printed, printed without the
    reach)} of one replicate."""
    from evprobe.core.bootstrap import FamilyBootstrap, percentile_interval
    from evprobe.probes.engine import LogisticFitter, cv_scores
    from evprobe.probes.inference import fixed_draws, refit_interval
    from evprobe.probes.metrics import accuracy_estimate, accuracy_reading, auroc, auroc_estimate, auroc_reading
    from evprobe.probes.refit import refit_bootstrap
    from evprobe.probes.splits import family_folds

    setting, n_families, rep, refits, (Xt, yt) = args
    rng = np.random.default_rng([20261207, n_families, rep, len(setting)])
    X, y, fam = sample(n_families, STRENGTH[(setting, n_families)], rng)
    folds = family_folds(fam, K, rep, y)
    boot = FamilyBootstrap(sorted(set(fam)), 2000, rep)
    oof = cv_scores(X, LogisticFitter(1.0), folds, {"y": y}).oof["y"]
    both = np.concatenate([X, Xt])
    truth_auc, truth_acc = [], []
    for k in range(K):  # the fold models on fresh families: the truth cross-validation estimates
        train = np.r_[folds != k, np.zeros(len(yt), dtype=bool)]
        s = LogisticFitter(1.0).fit_score(both, train, {"y": np.r_[y, yt]})["y"][len(y):]
        truth_auc.append(auroc(s, yt))
        truth_acc.append(float(np.mean((s > 0) == yt.astype(bool))))
    draws = refit_bootstrap(lambda li: X[:, None, :], [0], 1, y, fam, n_splits=K, n_refits=refits, seed=rep,
                            fold_seed=1000 + rep, nested=False)
    fa, fc = fixed_draws(oof, y, fam, boot)
    fam_idx = np.unique(fam, return_inverse=True)[1]
    correct = ((oof > 0) == y.astype(bool)).astype(np.float64)
    auc_est, acc_est = auroc_estimate(oof, y, fam, boot), accuracy_estimate(correct, fam, boot)
    out = {}
    for name, est, truth, fixed_rule, fdraws, rdraws, reading in (
        ("AUROC", auc_est.value, np.mean(truth_auc), auc_est.ci, fa, draws.per_candidate[:, 0],
         auroc_reading(oof, y, fam_idx)),
        ("accuracy", acc_est.value, np.mean(truth_acc), acc_est.ci, fc, draws.accuracy[:, 0],
         accuracy_reading(correct, fam_idx)),
    ):
        lo, hi = percentile_interval(fdraws)
        before = old_printed(est, rdraws, fdraws, n_families)
        out[name] = (est, float(truth), (float(lo[0]), float(hi[0])), fixed_rule, before,
                     refit_interval(est, rdraws, n_families, fdraws, reading=reading),
                     (min(before[0], reading.interval[0]), max(before[1], reading.interval[1])))
    return out


def run_setting(setting: str, n_families: int, reps: int, refits: int, jobs: int, test_families: int) -> list[str]:
    Xt, yt, _ = sample(test_families, STRENGTH[(setting, n_families)], np.random.default_rng([99, n_families]))
    work = [(setting, n_families, rep, refits, (Xt, yt)) for rep in range(reps)]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(one_replicate, work))
    lines = []
    for name in ("AUROC", "accuracy"):
        rows = [r[name] for r in results]
        est = np.array([r[0] for r in rows])
        truth = float(np.mean([r[1] for r in rows]))  # the unconditional truth: averaged over replicates
        exact = "=1" if truth == 1.0 else ""  # every fold model separated every fresh family
        head = (f"{setting:>5s} F={n_families:4d} {name:8s} truth {truth:.5f}{exact} estimate mean {est.mean():.5f} "
                f"sd {est.std(ddof=1):.5f} at 1: {np.mean(est == 1.0):4.2f}")
        cells = []
        for label, idx in (("fixed before", 2), ("fixed", 3), ("printed before", 4), ("no reach", 6), ("printed", 5)):
            lo = np.array([r[idx][0] for r in rows])
            hi = np.array([r[idx][1] for r in rows])
            cover = ((lo <= truth) & (truth <= hi)).astype(float)
            se = np.sqrt(cover.mean() * (1 - cover.mean()) / len(cover))
            cells.append(f"{label} {100 * cover.mean():5.1f}% (+-{100 * se:.1f}) width {np.mean(hi - lo):.4f} "
                         f"lower {np.mean(lo):.4f} points {np.mean(hi == lo):.2f}")
        lines.append(head + " | " + " | ".join(cells))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--refits", type=int, default=50)
    ap.add_argument("--families", default="30,144")
    ap.add_argument("--settings", default="0.99,0.999,1")
    ap.add_argument("--test-families", type=int, default=500)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    print(f"coverage of nominal 95% probe intervals near the boundary; {args.reps} replicates per line, "
          f"{args.refits} refits each, d={D}, one layer, 5 grouped folds", flush=True)
    for setting in args.settings.split(","):
        for f in (int(x) for x in args.families.split(",")):
            for line in run_setting(setting, f, args.reps, args.refits, args.jobs, args.test_families):
                print(line, flush=True)
    print(f"total {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
