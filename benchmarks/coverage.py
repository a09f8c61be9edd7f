"""Benchmark: coverage of the probe intervals evprobe prints, on data where the truth is known.

For each setting (null: no signal, true AUROC 0.5; planted: a sufficiency direction written into
the residual stream from layer 1 on) and each size (30 and 144 families of four rows with the
benchmark's structure, probes.synthetic.reference_rows), `--reps` independent samples are drawn.
On each, the sweep's own code computes the grouped 5-fold CV AUROC at every layer and the nested
best-layer estimate (probes.engine.cv_scores, probes.nested.nested_estimate), and two intervals
are checked against the truth:

- `fixed`: the family bootstrap of the pooled out-of-fold scores with the fold models held fixed
  (probes.metrics.auroc_estimate; what evprobe printed before refits);
- `refit-plain`: estimate +- t x sd of the refit values alone (probes.refit: the whole pipeline
  refitted on `--refits` family resamples);
- `printed`: what evprobe prints (probes.inference.refit_interval): the same with the variance
  split into its test-sampling part (fixed models) and its training part (the rest of the
  refits' variance, rescaled from the resamples' distinct families to the sample's).

`fixed` and `printed` go through the interval rule of every printed probe AUROC (probes.metrics,
`unit_interval`: hulled with the cluster Clopper-Pearson interval, with the boundary reach);
`fixed pct` and `printed t x sd` are the same intervals without it (what evprobe printed before the
rule), so the pairs show what the rule changes mid-range. Near the boundary: benchmarks/coverage_auroc_boundary.py.

The truth of a planted setting is what cross-validation estimates: the expected AUROC, on new
families, of the probe trained on the training folds (for the nested estimate: of the procedure
that chooses the layer on the training folds and fits there). It is measured on `--test-families`
fresh families drawn once per setting, scored by every outer-fold model of every replicate and
averaged over folds and replicates. Under the null it is 0.5 exactly.

    python benchmarks/coverage.py [--reps 200] [--refits 50] [--families 30,144] [--d 48]
                                  [--layers 2] [--settings null,planted] [--jobs 2]

Prints one line per setting x size x estimate: coverage of each interval with its binomial
standard error, mean width, the estimator's mean and sd across replicates and the truth.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
from scipy import stats

from evprobe.core.bootstrap import FamilyBootstrap, percentile_interval
from evprobe.probes.engine import LogisticFitter, cv_scores
from evprobe.probes.inference import refit_interval, refit_sd
from evprobe.probes.metrics import auroc, auroc_draws, auroc_estimate, auroc_reading
from evprobe.probes.nested import nested_estimate, nested_select
from evprobe.probes.refit import refit_bootstrap
from evprobe.probes.splits import family_folds
from evprobe.probes.synthetic import reference_rows

K = 5
STRENGTH = {"null": 0.0, "planted": 1.0}  # planted: true AUROC ~0.7-0.8 at these sizes


@dataclass(frozen=True)
class Setting:
    name: str
    families: int
    d: int
    layers: int
    refits: int


def sample(n_families: int, d: int, n_layers: int, strength: float, rng: np.random.Generator, u: np.ndarray):
    """(X (n, layers, d) float32, y (n,), families (n,)): a residual stream that random-walks over
    layers around a per-family offset; the label's direction u enters at layer 1 and stays."""
    rows = reference_rows(n_families, seed=int(rng.integers(1 << 30)))
    y = np.array([int(r["resolved"]) for r in rows], dtype=np.int8)
    fam = np.array([r["family_id"] + f".{id(rows)}" for r in rows], dtype=object)
    offset = np.repeat(rng.standard_normal((n_families, d)), 4, axis=0)  # a family's shared state
    h = offset + rng.standard_normal((len(y), d))
    X = np.empty((len(y), n_layers, d), dtype=np.float32)
    for layer in range(n_layers):
        h = h + 0.5 * rng.standard_normal((len(y), d))
        X[:, layer] = h + (layer >= 1) * strength * (y[:, None] - 0.5) * 2 * u
    return X, y, fam


def one_replicate(setting: Setting, strength: float, rep: int, test: tuple[np.ndarray, np.ndarray] | None):
    rng = np.random.default_rng([setting.families, setting.d, rep, int(strength * 1000)])
    u = np.ones(setting.d) / np.sqrt(setting.d)
    X, y, fam = sample(setting.families, setting.d, setting.layers, strength, rng, u)
    folds = family_folds(fam, K, 0, y)
    boot = FamilyBootstrap(sorted(set(fam)), 2000, rep)
    oof = np.full((setting.layers, len(y)), np.nan)
    inner = np.full((setting.layers, K, len(y)), np.nan)
    fitter = LogisticFitter(1.0)
    truth_layer = np.full(setting.layers, 0.5)
    fold_truth = np.full((setting.layers, K), 0.5)
    for layer in range(setting.layers):
        res = cv_scores(X[:, layer], fitter, folds, {"y": y}, inner_label="y", key=0)
        oof[layer], inner[layer] = res.oof["y"], res.inner
        if test is not None:  # the fold models scored on fresh families: the truth they estimate
            Xt, yt = test
            both = np.concatenate([X[:, layer], Xt[:, layer]])
            for k in range(K):
                train = np.r_[folds != k, np.zeros(len(yt), dtype=bool)]
                s = LogisticFitter(1.0).fit_score(both, train, {"y": np.r_[y, yt]})["y"][len(y):]
                fold_truth[layer, k] = auroc(s, yt)
            truth_layer[layer] = fold_truth[layer].mean()
    cands = [(layer, "last") for layer in range(setting.layers)]
    nres = nested_estimate(oof, inner, y, folds, fam, boot, cands)
    chosen, _ = nested_select(inner, y, folds)
    truth_nested = float(np.mean([fold_truth[g, k] for k, g in enumerate(chosen)]))
    draws = refit_bootstrap(lambda li: X[:, li][:, None, :], list(range(setting.layers)), 1, y, fam,
                            n_splits=K, n_refits=setting.refits, seed=rep, fold_seed=1000 + rep)
    out = []
    last = setting.layers - 1
    fixed_last = auroc_estimate(oof[last], y, fam, boot)
    fam_idx = np.unique(fam, return_inverse=True)[1]
    for name, est, fixed_ci, scores, column, truth in (
        ("last layer", fixed_last.value, fixed_last.ci, oof[last], draws.per_candidate[:, last], truth_layer[last]),
        ("nested", nres.auroc.value, nres.auroc.ci, nres.pooled, draws.nested, truth_nested),
    ):
        fixed = auroc_draws(scores, y, fam, boot)  # the fold models held fixed
        reading = auroc_reading(scores, y, fam_idx)
        plain = refit_interval(est, column, setting.families, reading=reading)
        printed = refit_interval(est, column, setting.families, fixed_draws=fixed, reading=reading)
        sd, b = refit_sd(column, fixed, setting.families)  # the printed interval without the rule
        half = float(stats.t.ppf(0.975, b - 1)) * sd
        bare = (max(0.0, est - half), min(1.0, est + half))
        lo, hi = percentile_interval(fixed)  # the fixed-model interval without the rule
        out.append((name, est, fixed_ci, plain, printed, truth, bare, (float(lo[0]), float(hi[0]))))
    return out


def run_setting(setting: Setting, kind: str, reps: int, jobs: int, test_families: int) -> list[str]:
    strength = STRENGTH[kind]
    test = None
    if strength > 0:
        u = np.ones(setting.d) / np.sqrt(setting.d)
        Xt, yt, _ = sample(test_families, setting.d, setting.layers, strength, np.random.default_rng(99), u)
        test = (Xt, yt)
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(one_replicate, [setting] * reps, [strength] * reps, range(reps), [test] * reps))
    lines = []
    for j, name in enumerate(("last layer", "nested")):
        rows = [r[j] for r in results]
        est = np.array([r[1] for r in rows])
        truths = np.array([r[5] for r in rows])
        truth = float(truths.mean())  # the unconditional truth: averaged over replicates
        cells = []
        for label, idx in (("fixed pct", 7), ("fixed", 2), ("refit-plain", 3), ("printed t x sd", 6), ("printed", 4)):
            cover = np.array([r[idx][0] <= truth <= r[idx][1] for r in rows], dtype=float)
            width = np.mean([r[idx][1] - r[idx][0] for r in rows])
            se = np.sqrt(cover.mean() * (1 - cover.mean()) / len(cover))
            cells.append(f"{label} {100 * cover.mean():5.1f}% (+-{100 * se:.1f}) width {width:.3f}")
        lines.append(f"{kind:8s} F={setting.families:4d} {name:10s} truth {truth:.3f} estimate mean {est.mean():.3f} "
                     f"sd {est.std(ddof=1):.3f} | " + " | ".join(cells))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--refits", type=int, default=50)
    ap.add_argument("--families", default="30,144")
    ap.add_argument("--d", type=int, default=48)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--settings", default="null,planted")
    ap.add_argument("--test-families", type=int, default=500)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    print(f"coverage of nominal 95% probe intervals; {args.reps} replicates per line, {args.refits} refits each, "
          f"d={args.d}, {args.layers} layers, 5 grouped folds", flush=True)
    for kind in args.settings.split(","):
        for f in (int(x) for x in args.families.split(",")):
            setting = Setting(kind, f, args.d, args.layers, args.refits)
            for line in run_setting(setting, kind, args.reps, args.jobs, args.test_families):
                print(line, flush=True)
    print(f"total {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
