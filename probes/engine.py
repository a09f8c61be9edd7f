"""Fit a probe on a set of training rows and score every row: the loop under every sweep,
control, nested selection and transfer matrix.

A `Fitter` does what its probe's estimator does (probes.estimators; the same math functions in
probes.solvers). Every probe gets one from `LinearProbe.fitter()`: `EstimatorFitter` (a clone fitted
per label vector) by default, or a fast path, with two savings that matter at 40 layers x 576 items
x 3,584 dimensions:

- one training set, several label vectors: the scaler and the Gram matrix (the expensive part,
  m^2 d) are computed once and shared by the real labels and the shuffled control;
- warm starts: the logistic dual variables of a training set (alpha = -C (sigma(m) - y) at the
  optimum, so bounded by C and comparable across layers after standardisation) start the same
  training set's fit at the next layer, which cuts Newton steps.

`cv_scores` runs the K outer folds (training on a condition's rows of the other folds, scoring
every row) and, for nested selection, the K(K-1)/2 inner training sets "all folds but k and j"
(probes.nested explains why those are exactly the inner cross-validation fits).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from evprobe.probes.solvers import (
    centroid_decision,
    centroid_fit,
    kernel_logistic,
    lda_calibration,
    mass_mean_direction,
    primal_logistic,
    standardize_fit,
)
from evprobe.probes.splits import fold_pairs

R = TypeVar("R")


class Fitter(ABC):
    """Fit on X[train] for each label vector, return scores (decision values) of all rows;
    a score > 0 predicts class 1. A label with one class among the training rows gives NaN."""

    name = "base"

    @abstractmethod
    def fit_score(
        self, X: np.ndarray, train: np.ndarray, ys: Mapping[str, np.ndarray], key: Hashable = None
    ) -> dict[str, np.ndarray]:
        """Each label's scores of all rows (subclasses: logistic, mass-mean, centroid)."""

    @staticmethod
    def _usable(y: np.ndarray) -> bool:
        return len(y) > 1 and y.min() != y.max()

    def _each_label(self, X: np.ndarray, train: np.ndarray, ys: Mapping[str, np.ndarray],
                    score: Callable[[np.ndarray], np.ndarray]) -> dict[str, np.ndarray]:
        """{name: score(y[train])} for each label, NaN (n,) where the training rows hold one class."""
        out = {}
        for name, y in ys.items():
            yt = np.asarray(y)[train]
            out[name] = score(yt) if self._usable(yt) else np.full(len(X), np.nan)
        return out


class LogisticFitter(Fitter):
    """`LogisticProbe`'s fast path. Labels named with a `probes.multilabel.BATCHED` prefix (the sweep's
    control tasks, leakage shuffles, chance permutations and design factors) are solved together
    (probes.multilabel: on the shared Gram matrix when m < d, in the primal otherwise); every other
    label runs its own Newton solve."""

    name = "logistic"

    def __init__(self, C: float = 1.0, tol: float = 1e-8) -> None:
        self.C = C
        self.tol = tol
        self._warm: dict[Hashable, Any] = {}
        self.newton_steps = 0

    def fit_score(self, X, train, ys, key=None):
        from evprobe.probes.multilabel import BATCHED, kernel_logistic_many, primal_logistic_many

        Xt = X[train]  # (m, d)
        mean, scale = standardize_fit(Xt)
        Z = (Xt - mean) / scale  # (m, d), float32 like X
        m, d = Z.shape
        kernel = m < d
        K = (Z @ Z.T).astype(np.float64) if kernel else None  # (m, m): the one m^2 d product, shared by every label
        many = [n for n in ys if n.startswith(BATCHED)]
        mean64 = mean.astype(np.float64)
        out: dict[str, np.ndarray] = {}
        for name, y in ys.items():
            if name in many:
                continue
            yt = np.asarray(y)[train].astype(np.float64)
            if not self._usable(yt):
                out[name] = np.full(len(X), np.nan)
                continue
            warm = self._warm.get((key, name)) if key is not None else None
            if kernel:
                a0, b0 = warm if warm is not None and len(warm[0]) == m else (None, None)
                alpha, b, it = kernel_logistic(K, yt, self.C, a0, b0, tol=self.tol)
                w = Z.T @ alpha.astype(Z.dtype)  # (d,) standardised-space weights
                state = alpha
            else:
                w0, b0 = warm if warm is not None and len(warm[0]) == d else (None, None)
                w, b, it = primal_logistic(Z, yt, self.C, w0, b0, tol=self.tol)
                state = w
            self.newton_steps += it
            if key is not None:
                self._warm[(key, name)] = (state, b)
            v = (w / scale).astype(X.dtype)  # read direction in the residual basis
            out[name] = (X @ v).astype(np.float64) + (b - float(mean64 @ v))
        if many:
            Y = np.stack([np.asarray(ys[n])[train] for n in many], axis=1).astype(np.float64)  # (m, L)
            usable = np.array([self._usable(Y[:, j]) for j in range(len(many))])
            for j in np.flatnonzero(~usable):
                out[many[j]] = np.full(len(X), np.nan)
            if usable.any():
                names = [n for n, u in zip(many, usable, strict=True) if u]
                warm = self._warm.get((key, tuple(names))) if key is not None else None
                rows = m if kernel else d  # alpha (m, L) in the kernel case, W (d, L) in the primal
                A0, B0 = warm if warm is not None and warm[0].shape == (rows, len(names)) else (None, None)
                solve = kernel_logistic_many if kernel else primal_logistic_many
                A, B, steps = solve(K if kernel else Z, Y[:, usable], self.C, A0, B0, tol=self.tol)
                self.newton_steps += int(steps.sum())
                if key is not None:
                    self._warm[(key, tuple(names))] = (A, B)
                W = Z.T @ A.astype(Z.dtype) if kernel else A.astype(Z.dtype)  # (d, L) standardised-space weights
                V = W / scale[:, None]  # (d, L) read directions, residual basis
                S = (X @ V).astype(np.float64) + (B - mean64 @ V.astype(np.float64))  # (n, L)
                for name, col in zip(names, S.T, strict=True):
                    out[name] = col
        return {n: out[n] for n in ys}


class MassMeanFitter(Fitter):
    name = "massmean"

    def __init__(self, pooled_covariance: bool = False, shrinkage: float = 0.1) -> None:
        self.pooled_covariance = pooled_covariance
        self.shrinkage = shrinkage

    def fit_score(self, X, train, ys, key=None):
        Xt = X[train]

        def score(yt: np.ndarray) -> np.ndarray:
            direction = mass_mean_direction(Xt, yt, self.pooled_covariance, self.shrinkage)
            t = (X @ (direction / np.linalg.norm(direction)).astype(X.dtype)).astype(np.float64)  # (n,)
            slope, offset = lda_calibration(t[train], yt)
            return slope * t + offset

        return self._each_label(X, train, ys, score)


class CentroidFitter(Fitter):
    name = "centroid"

    def fit_score(self, X, train, ys, key=None):
        Xt = X[train]
        mean, scale = standardize_fit(Xt)
        Z = (X - mean) / scale  # every row, standardised with the training statistics

        def score(yt: np.ndarray) -> np.ndarray:
            c0, c1 = centroid_fit(Z[train], yt)
            return centroid_decision(Z, c0.astype(Z.dtype), c1.astype(Z.dtype)).astype(np.float64)

        return self._each_label(X, train, ys, score)


class EstimatorFitter(Fitter):
    """Any probe, the slow sure way: a fresh clone of `probe` fitted on the training rows for each
    label vector, its decision values on every row. What a probe without a fast path gets; the fast
    paths are tested against it (probes.probe_checks.check_probe)."""

    def __init__(self, probe: Any) -> None:
        self.probe = probe
        self.name = type(probe).name

    def fit_score(self, X, train, ys, key=None):
        from sklearn.base import clone

        Xt = X[train]

        def score(yt: np.ndarray) -> np.ndarray:
            est = clone(self.probe).fit(Xt, yt)
            if list(est.classes_) != sorted(set(yt.tolist())):
                raise ValueError(f"probe {self.name!r}: classes_ {est.classes_} after fit(X, y) with labels "
                                 f"{sorted(set(yt.tolist()))}; set classes_ = np.unique(y) in fit")
            return np.asarray(est.decision_function(X), dtype=np.float64).reshape(len(X))

        return self._each_label(X, train, ys, score)


@dataclass(frozen=True, eq=False)
class FoldScores:
    """Scores of one layer/position under one training condition.

    oof[name]: (n,) row i scored by the fit on the condition's rows outside fold(i).
    inner: (K, n) or None; inner[k, i] (fold(i) != k) scored by the fit on the condition's
      rows outside folds k and fold(i); NaN on fold k's rows.
    full[name]: (n,) or None, scored by the fit on all the condition's rows.
    """

    oof: dict[str, np.ndarray]
    inner: np.ndarray | None
    full: dict[str, np.ndarray] | None


def cv_scores(
    X: np.ndarray,
    fitter: Fitter,
    folds: np.ndarray,
    ys: Mapping[str, np.ndarray],
    train_mask: np.ndarray | None = None,
    inner_label: str | None = None,
    want_full: bool = False,
    key: Hashable = None,
) -> FoldScores:
    """Grouped cross-validated scores of every row of X (n, d) at one layer/position.

    `folds` (n,) are family folds; `train_mask` (n,) limits training to a condition's rows
    (default: all). `inner_label` names the label whose inner (nested) scores are wanted.
    `key` identifies the condition/position for warm starts across layers.
    """
    n = len(X)
    n_splits = int(folds.max()) + 1
    cond = np.ones(n, dtype=bool) if train_mask is None else np.asarray(train_mask, dtype=bool)
    oof = {name: np.full(n, np.nan) for name in ys}
    for k in range(n_splits):
        held = folds == k
        scores = fitter.fit_score(X, cond & ~held, ys, key=(key, "outer", k))
        for name, s in scores.items():
            oof[name][held] = s[held]
    inner = None
    if inner_label is not None:
        inner = np.full((n_splits, n), np.nan)
        y_inner = {inner_label: ys[inner_label]}
        for k, j in fold_pairs(n_splits):
            out_k, out_j = folds == k, folds == j
            s = fitter.fit_score(X, cond & ~out_k & ~out_j, y_inner, key=(key, "inner", k, j))[inner_label]
            inner[k, out_j] = s[out_j]  # validation fold j of outer fold k
            inner[j, out_k] = s[out_k]  # validation fold k of outer fold j
    full = fitter.fit_score(X, cond, ys, key=(key, "full")) if want_full else None
    return FoldScores(oof, inner, full)


LAYER_CHUNK = 4  # consecutive layers per task; warm starts chain within a chunk


def default_jobs() -> int:
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def map_layers(
    captures: Any,
    rows: np.ndarray,
    layer_idx: Sequence[int],
    pos_idx: Sequence[int],
    work: Callable[[int, np.ndarray, Fitter], R],
    make: Callable[[], Fitter],
    n_jobs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[R]:
    """`work(layer_index, block, fitter)` for every layer, block = (len(rows), P, d) float32.

    Layers go in fixed chunks of LAYER_CHUNK consecutive layers, one fresh fitter per chunk (so
    warm starts chain within a chunk), chunks spread over `n_jobs` threads (default: the CPUs
    this process may use). BLAS is held to one thread meanwhile: at these sizes (Cholesky of
    ~500 x 500, Gram of 500 x 3,584) one BLAS thread per layer is much faster than threads
    inside every call, which spin against each other. Results come back in layer order and do
    not depend on n_jobs (the chunks do not).
    """
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    chunks = [list(layer_idx[i : i + LAYER_CHUNK]) for i in range(0, len(layer_idx), LAYER_CHUNK)]
    jobs = max(1, min(n_jobs or default_jobs(), len(chunks)))
    done = 0

    def run(chunk: list[int]) -> list[R]:
        fitter = make()
        return [work(li, captures.block(li, rows, pos_idx), fitter) for li in chunk]

    out: list[R] = []
    with threadpool_limits(limits=1, user_api="blas"):
        if jobs == 1:
            for chunk in chunks:
                out.extend(run(chunk))
                done += len(chunk)
                if progress is not None:
                    progress(done, len(layer_idx))
        else:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                futures = [pool.submit(run, chunk) for chunk in chunks]
                for chunk, fut in zip(chunks, futures, strict=True):
                    out.extend(fut.result())
                    done += len(chunk)
                    if progress is not None:
                        progress(done, len(layer_idx))
    return out
