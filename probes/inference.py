"""The intervals and the test evprobe prints for a probe's AUROC, from refits of the whole pipeline.

Interval (`refit_interval`). estimate +- t(B-1, 0.975) x sd of the B refit values
(probes.refit), clipped to [0, 1]. Why this form and not the refits' percentiles: each refit is
a fresh cross-validation of a resampled dataset, so the refit values scatter around what the
pipeline scores on a resample, not around the observed estimate. Under the null they centre on
0.5 whatever was observed, and their percentile interval always covers 0.5 (99-100% measured);
with a signal, resamples hold ~63% distinct families, train on less and score lower, so the
percentiles sit below the estimate. Their spread, though, is the sampling spread of the whole
pipeline (fits, fold deal, layer choice), which the fixed-model bootstrap misses. So the spread
comes from the refits and the centre from the estimate. The t quantile with B - 1 degrees of
freedom carries the Monte Carlo error of an sd taken from B refits. benchmarks/coverage.py
measures the result (README, "Probe intervals").

That interval then goes through the rule of every printed probe AUROC and accuracy
(`probes.metrics.unit_interval`): hulled with the estimate's cluster Clopper-Pearson interval and
given the boundary reach. So refits without spread (every resample separates the classes perfectly,
or every one is at 0.5 exactly) print the cluster interval, at a perfect separation the exact one
with every family one unit ([0.975, 1.000] at 144 families), and a near-perfect estimate with a
tiny spread (0.99998 +- 0.0001) is not printed narrower than a perfect one.

Test of the nested estimate (`sweep_refit_intervals` with permutations). The labels are relabelled
under chance as the sweep's per-row test does (probes.chance.chance_labels: a label balanced within
every family has each family's labels complemented at random, another within-family label is permuted
uniformly within families, a family-constant one among the families of each fold, so the observed
folds stay right for every draw), and the whole pipeline (fits, layer choice) reruns on each; p = (1
+ #{relabelled >= observed}) / (1 + P). (Uniform within-family permutations, `permuted_labels`, were
used before; they are not exact for sufficiency, probes.chance explains why.) `permutation_test` is the
generic form over uniform within-family permutations (its size is measured in tests/probes/test_refit.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from evprobe.probes.metrics import ClusterReading, accuracy_reading, auroc_reading, unit_interval

INTERVAL_METHOD = (
    "refit family bootstrap: the whole pipeline (fold deal, fits, nested layer choice) rerun on B resamples of "
    "whole families; estimate +- t(B-1) x sd of the refit values, clipped to [0, 1]; hulled with the cluster "
    "Clopper-Pearson interval at the effective size (AUROC: family-linearised DeLong variance of the placement "
    "values; accuracy: core.proportion; every family one unit where nothing varies) and the lower bound at most "
    "a perfect estimate's on the same families (the upper at least its mirror image): probes.metrics"
)
LEVEL = 0.95


def distinct_share(n_families: int) -> float:
    """Expected share of distinct families in a resample of F drawn with replacement:
    1 - (1 - 1/F)^F (0.634 at F = 30, 0.633 at 144, 1 - 1/e in the limit)."""
    return 1.0 - (1.0 - 1.0 / n_families) ** n_families


def refit_sd(refit_draws: np.ndarray, fixed_draws: np.ndarray | None, n_families: int) -> tuple[float, int]:
    """(sd, number of finite refit draws) of an estimate, from the module docstring's decomposition.

    V = V_fixed + rho * max(0, V_refit - V_fixed): the fixed-model bootstrap's variance is the
    test-sampling part, the rest of the refits' variance is the training part, measured on
    resamples that hold a share rho of distinct families and rescaled to the full sample's F
    (a fit's variance goes as 1 / its training families). Without fixed draws, V = V_refit.
    """
    d = np.asarray(refit_draws, dtype=np.float64)
    d = d[np.isfinite(d)]
    if len(d) < 2:
        return 0.0, len(d)
    v_refit = float(d.var(ddof=1))
    if fixed_draws is None:
        return float(np.sqrt(v_refit)), len(d)
    f = np.asarray(fixed_draws, dtype=np.float64)
    f = f[np.isfinite(f)]
    v_fixed = float(f.var(ddof=1)) if len(f) >= 2 else 0.0
    v = v_fixed + distinct_share(n_families) * max(0.0, v_refit - v_fixed)
    return float(np.sqrt(v)), len(d)


def refit_interval(
    estimate: float | None, refit_draws: np.ndarray | None, n_families: int,
    fixed_draws: np.ndarray | None = None, level: float = LEVEL, *, reading: ClusterReading,
) -> tuple[float | None, float | None]:
    """The printed interval of an AUROC (or accuracy) estimate (module docstring): estimate +- t x sd,
    under the rule of `probes.metrics.unit_interval` with the estimate's `reading` (its cluster
    interval and effective number of families: `auroc_reading`, `accuracy_reading`)."""
    if estimate is None or refit_draws is None or not np.isfinite(estimate):
        return None, None
    from scipy import stats

    sd, b = refit_sd(refit_draws, fixed_draws, n_families)
    half = float(stats.t.ppf(0.5 + level / 2, b - 1)) * sd if sd > 0.0 else 0.0
    return unit_interval((max(0.0, estimate - half), min(1.0, estimate + half)), reading, 100.0 * level)


@dataclass(frozen=True)
class PermutationTest:
    observed: float
    null: tuple[float, ...]  # the pipeline's value on each permutation
    p_value: float

    @classmethod
    def of(cls, observed: float, null: Sequence[float]) -> PermutationTest:
        """p = (1 + #{null >= observed}) / (1 + P); a NaN null value (a permutation the pipeline
        could not score) counts as >= observed, the conservative reading."""
        arr = np.asarray(null, dtype=np.float64)
        hits = int(np.sum(~(arr < observed - 1e-12)))
        return cls(float(observed), tuple(float(x) for x in arr), (1 + hits) / (1 + len(arr)))

    def to_json(self) -> dict[str, object]:
        null = np.asarray(self.null)
        return {"observed": self.observed, "p_value": self.p_value, "permutations": len(null),
                "null_mean": float(null.mean()) if len(null) else None,
                "null_95th": float(np.percentile(null, 95)) if len(null) else None,
                "method": "labels relabelled under chance (probes.chance.chance_labels); full pipeline rerun; "
                          "p = (1 + #{null >= observed}) / (1 + P)"}


def permuted_labels(y: np.ndarray, families: Sequence[str], rng: np.random.Generator) -> np.ndarray:
    """y permuted uniformly within every family; for a label constant within every family
    (system, initial property), the family labels permuted uniformly across families.

    Uniform over the permutation group, not balanced: the p-value is exact only when the
    observed labelling is one of the draws' equally likely outcomes under H0 (a balanced
    shuffle, as the leakage check uses, never reproduces the observed labelling)."""
    y = np.asarray(y)
    fam = np.asarray(families, dtype=object)
    _, inverse = np.unique(fam, return_inverse=True)
    members = [np.flatnonzero(inverse == f) for f in range(inverse.max() + 1)]
    if any(y[idx].min() != y[idx].max() for idx in members):
        out = y.copy()
        for idx in members:
            out[idx] = y[rng.permutation(idx)]
        return out
    family_label = np.array([y[idx[0]] for idx in members])
    return rng.permutation(family_label)[inverse]


def permutation_test(
    observed: float, pipeline: Callable[[np.ndarray], float], y: np.ndarray, families: Sequence[str],
    n_permutations: int, seed: int,
) -> PermutationTest:
    """p-value of `observed` against `pipeline(permuted y)` over uniform within-family permutations."""
    rng = permutation_rng(seed)
    null = [float(pipeline(permuted_labels(y, families, rng))) for _ in range(n_permutations)]
    return PermutationTest.of(observed, null)


def permutation_rng(seed: int) -> np.random.Generator:
    return np.random.default_rng([seed, 2])  # a stream apart from the folds and the refits


@dataclass(frozen=True)
class RefitIntervals:
    """The printed intervals of a sweep, from one `probes.refit.rerun` pass.

    per_candidate[g] = (AUROC interval, accuracy interval) of candidate g; nested likewise (None
    without nested selection); permutation: the nested estimate's test (None when not run).
    """

    per_candidate: tuple[tuple[tuple[float | None, float | None], tuple[float | None, float | None]], ...]
    nested: tuple[tuple[float | None, float | None], tuple[float | None, float | None]] | None
    permutation: PermutationTest | None
    n_refits: int
    seconds: float
    method: str = INTERVAL_METHOD
    # the nested AUROC's draws: (refit values (B,), fixed-model bootstrap values (B,)), for paired
    # differences between sweeps on the same families and seed (`refit_difference`); None without nesting
    nested_draws: tuple[np.ndarray, np.ndarray] | None = None


def fixed_draws(scores: np.ndarray, y: np.ndarray, families: Sequence[str], boot) -> tuple[np.ndarray, np.ndarray]:
    """(AUROC draws (B,), accuracy draws (B,)) of out-of-fold `scores` (n,) with the fold models
    held fixed, over `boot`'s family resamples (FamilyBootstrap); NaN scores left out."""
    from evprobe.probes.metrics import auroc_draws

    ok = np.isfinite(scores)
    fam = boot.family_index(list(np.asarray(families, dtype=object)[ok]))
    correct = ((scores[ok] > 0) == np.asarray(y)[ok].astype(bool)).astype(np.float64)
    accuracy = boot.resample(boot.per_family(fam, correct), boot.per_family(fam, np.ones(len(correct)))).draws
    return auroc_draws(scores, y, families, boot), accuracy


def sweep_refit_intervals(
    layer_block, layer_idx: Sequence[int], n_positions: int, y: np.ndarray, families: Sequence[str],
    folds: np.ndarray, boot, oof_all: np.ndarray, estimates: Sequence[tuple[float | None, float | None]],
    nested: tuple[np.ndarray, float | None, float | None] | None, *, n_splits: int, C: float, n_refits: int,
    seed: int, permutations: int = 0, n_jobs: int | None = None, skip=None,
) -> RefitIntervals:
    """Every printed probe interval of a sweep, from one pass of refits over the layers.

    oof_all (G, n): the sweep's out-of-fold scores per candidate (NaN rows for skipped ones);
    estimates[g] = (AUROC, accuracy) as the sweep reports them; nested = (pooled outer scores
    (n,), AUROC, accuracy) of the nested estimate. The replicates are the `n_refits` family
    resamples, then (with permutations) the observed sample and `permutations` label
    permutations, all rerun in the same pass so each candidate's Gram matrix is built once.
    """
    from evprobe.probes.refit import Replicate, draw_resamples, identity, rerun

    y = np.asarray(y)
    n_families = len(set(np.asarray(families, dtype=object)))
    reps = [Replicate(r, y) for r in draw_resamples(y, families, n_refits, seed, n_splits, seed + 1)]
    with_test = permutations > 0 and nested is not None
    if with_test:
        from evprobe.probes.chance import chance_labels

        same = identity(len(y), folds)
        relabelled = chance_labels(y, families, folds, permutations, seed)  # (P, n), as the per-row test
        reps += [Replicate(same, y)] + [Replicate(same, lab) for lab in relabelled]
    draws = rerun(layer_block, layer_idx, n_positions, reps, n_splits=n_splits, C=C, nested=nested is not None,
                  n_jobs=n_jobs, skip=skip)
    B = n_refits

    def pair(scores: np.ndarray, auc: float | None, acc: float | None, auc_draws: np.ndarray, acc_draws: np.ndarray):
        if auc is None or not np.isfinite(scores).any():
            return (None, None), (None, None)
        fa, fc = fixed_draws(scores, y, families, boot)
        ok = np.isfinite(scores)
        fam = np.unique(np.asarray(families, dtype=object)[ok], return_inverse=True)[1]
        correct = ((scores[ok] > 0) == y[ok].astype(bool)).astype(np.float64)
        return (refit_interval(auc, auc_draws, n_families, fa, reading=auroc_reading(scores[ok], y[ok], fam)),
                refit_interval(acc, acc_draws, n_families, fc, reading=accuracy_reading(correct, fam)))

    per_candidate = tuple(pair(oof_all[g], auc, acc, draws.per_candidate[:B, g], draws.accuracy[:B, g])
                          for g, (auc, acc) in enumerate(estimates))
    nested_ci = test = nested_draws = None
    if nested is not None and draws.nested is not None and draws.nested_accuracy is not None:
        pooled, auc, acc = nested
        nested_ci = pair(pooled, auc, acc, draws.nested[:B], draws.nested_accuracy[:B])
        if auc is not None and np.isfinite(pooled).any():
            nested_draws = (draws.nested[:B].copy(), fixed_draws(pooled, y, families, boot)[0])
        if with_test:
            test = PermutationTest.of(float(draws.nested[B]), draws.nested[B + 1 :])
    return RefitIntervals(per_candidate, nested_ci, test, n_refits, draws.seconds, nested_draws=nested_draws)


def refit_difference(
    a: float, a_draws: tuple[np.ndarray, np.ndarray], a_ci: tuple[float, float],
    b: float, b_draws: tuple[np.ndarray, np.ndarray], b_ci: tuple[float, float],
    n_families: int, level: float = LEVEL,
) -> tuple[float, tuple[float, float]]:
    """(a - b, its interval) of two nested AUROCs estimated on the same families with the same
    seed (two sweeps of one capture's levels), so refit b and bootstrap resample b drew the same
    families in both: `refit_interval`'s rule applied to the per-resample differences (the pairing
    removes what the two share, e.g. hard families). a_draws, b_draws = (refit (B,), fixed (B,))
    as `RefitIntervals.nested_draws`. Where the differences have no spread (identical sweeps) the
    interval is the MOVER combination of the two estimates' own intervals, never a point.
    The result is clipped to [-1, 1]."""
    from scipy import stats

    d = a - b
    sd, k = refit_sd(a_draws[0] - b_draws[0], a_draws[1] - b_draws[1], n_families)
    if sd > 0.0 and k >= 2:
        half = float(stats.t.ppf(0.5 + level / 2, k - 1)) * sd
        return d, (max(-1.0, d - half), min(1.0, d + half))
    lo = d - float(np.hypot(a - a_ci[0], b_ci[1] - b))
    hi = d + float(np.hypot(a_ci[1] - a, b - b_ci[0]))
    return d, (max(-1.0, lo), min(1.0, hi))
