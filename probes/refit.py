"""Refit inference: the whole probe pipeline rerun inside every family resample.

Why. The family bootstrap of pooled out-of-fold scores (probes.metrics) holds the K fold models
fixed and only resamples which rows they score. It misses the variance that comes from training
on a different sample, and the variance of the fold deal; on null data its nominal 95% interval
covered the truth in 79-86% of replicates (benchmarks/coverage.py prints the measurement). Here
every resample reruns everything the reported number depends on:

1. draw F families with replacement (`FamilyBootstrap(..., n_refits, seed).counts`, whole
   families; a family drawn c times enters with weight c);
2. deal the drawn families into K folds (probes.splits.family_folds, stratified, deal seed
   `fold_seed + b`): every copy of a family is on one side of every split, since copies in
   training and test would be a leak;
3. at every candidate (layer, position): the K outer fits and, for the nested estimate, the
   K(K-1)/2 inner fits, each a weighted logistic fit (weight = copies) that scores its held-out
   rows; the pooled out-of-fold AUROC (rows weighted by copies) is that candidate's value in
   resample b;
4. the nested choice per outer fold from the inner AUROCs (probes.nested's rule: highest pooled
   inner AUROC, earliest candidate on ties), the chosen candidate's outer scores pooled: the
   nested value in resample b.

Cost. The refits work on the Gram matrix of each candidate's rows, computed once per candidate
(n^2 d) and sliced per training set: a refit is a Newton solve on the distinct training rows
(weights carry the copies), milliseconds at n ~ 500. So that one Gram serves every refit, the
rows are standardised with the scale of all the labelled rows (a label-free transform; the
logistic optimum does not depend on centring, see probes.solvers) rather than each training
set's own scale; benchmarks/coverage.py measures the printed intervals, so this difference is
inside what it measures. Warm starts: a training set's dual variables start the same
resample's training set at the next layer of a chunk, as in probes.engine.

Which interval. `interval_from_draws` turns the draws into the printed interval; the choice
and its measured coverage are documented there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from evprobe.core.bootstrap import DEFAULT_REFITS, FamilyBootstrap
from evprobe.probes.engine import LAYER_CHUNK, default_jobs
from evprobe.probes.solvers import kernel_logistic, primal_logistic, standardize_fit
from evprobe.probes.metrics import weighted_auroc
from evprobe.probes.splits import family_folds, fold_pairs



@dataclass(frozen=True, eq=False)
class Resample:
    """One family resample, on the distinct rows it draws.

    rows (m,) indices into the labelled rows; weight (m,) copies of each row's family;
    folds (m,) the fold of each row in this resample's deal.
    """

    rows: np.ndarray
    weight: np.ndarray
    folds: np.ndarray


@dataclass(frozen=True, eq=False)
class RefitDraws:
    """The pipeline's values on every resample.

    per_candidate (B, G): pooled out-of-fold AUROC of candidate g in replicate b (NaN where a
    fold had one class); accuracy (B, G) the weighted share of rows on the right side of 0.
    nested, nested_accuracy (B,) or None: the nested estimate in replicate b.
    """

    per_candidate: np.ndarray
    accuracy: np.ndarray
    nested: np.ndarray | None
    nested_accuracy: np.ndarray | None
    n_refits: int
    seconds: float


def draw_resamples(
    y: np.ndarray, families: Sequence[str], n_refits: int, seed: int, n_splits: int, fold_seed: int
) -> list[Resample]:
    """The B resamples: whole families drawn with replacement, each dealt into its own folds.

    (Rubin's Bayesian bootstrap, every family kept with an Exp(1) weight, was measured too: it
    covered 99% at 144 families on null data, no better than this; benchmarks/coverage.py.)"""
    fam = np.asarray(families, dtype=object)
    unique, inverse = np.unique(fam, return_inverse=True)
    weights = FamilyBootstrap(list(unique), n_refits, seed).counts.astype(np.float64)  # (B, F)
    out = []
    for b in range(n_refits):
        counts = weights[b]  # (F,) copies of each family
        rows = np.flatnonzero(counts[inverse] > 0)
        # a small sample's resample can hold fewer distinct families than folds: it is then dealt
        # into as many folds as it has families (each family its own fold), so no draw is dropped
        # or redrawn (either would condition the bootstrap on the draw)
        k = min(n_splits, len(np.unique(inverse[rows])))
        folds = family_folds(fam[rows], k, fold_seed + b, y[rows]) if k >= 2 else np.zeros(len(rows), np.int64)
        out.append(Resample(rows, counts[inverse[rows]], folds))
    return out


@dataclass(frozen=True, eq=False)
class Design:
    """One candidate's rows, standardised with the scale of all labelled rows: the Gram matrix
    (n, n) when d >= n (the kernel solver), else the rows themselves (n, d) (the primal one)."""

    gram: np.ndarray | None
    Z: np.ndarray | None

    @classmethod
    def of(cls, X: np.ndarray) -> Design:
        mean, scale = standardize_fit(X)
        Z = (X - mean) / scale  # (n, d) float32
        if Z.shape[1] >= Z.shape[0]:
            return cls((Z @ Z.T).astype(np.float64), None)
        return cls(None, Z.astype(np.float64))

    def fit_score(
        self, rows: np.ndarray, train: np.ndarray, y: np.ndarray, weight: np.ndarray, C: float,
        start: tuple[np.ndarray, float] | None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, float]]:
        """Weighted fit on rows[train]; decision values of all `rows` and the warm-start state."""
        a0, b0 = start if start is not None else (None, None)
        if self.gram is not None:
            G = self.gram[np.ix_(rows, rows[train])]  # (m, m_train)
            alpha, b, _ = kernel_logistic(G[train], y, C, a0, b0, tol=1e-8, weight=weight)
            return G @ alpha + b, (alpha, b)
        Z = self.Z[rows]  # type: ignore[index]  # (m, d)
        w, b, _ = primal_logistic(Z[train], y, C, a0, b0, tol=1e-8, weight=weight)
        return Z @ w + b, (w, b)


def _fit_sets(n_splits: int, nested: bool) -> list[tuple[int, ...]]:
    """Held-out fold tuples: (k,) the outer fits, (k, j) the inner fits."""
    return [(k,) for k in range(n_splits)] + (list(fold_pairs(n_splits)) if nested else [])


def refit_one(
    design: Design,
    y: np.ndarray,
    res: Resample,
    n_splits: int,
    C: float,
    nested: bool,
    warm: dict[tuple[int, ...], tuple[np.ndarray, float]] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One candidate's pipeline on one resample.

    Returns (oof (m,) out-of-fold scores of the resample's rows, inner_auc (K,) the weighted
    inner-CV AUROC of outer fold k's training rows, NaN when not nested or undefined).
    """
    yy = y[res.rows].astype(np.float64)
    f, w = res.folds, res.weight
    m = len(res.rows)
    oof = np.full(m, np.nan)
    inner = np.full((n_splits, m), np.nan)  # inner[k]: rows outside fold k, scored without k and their own fold
    for held in _fit_sets(int(f.max()) + 1, nested):  # this resample's folds (fewer for a tiny sample)
        train = ~np.isin(f, held)
        if not train.any() or yy[train].min() == yy[train].max():
            continue
        start = warm.get(held) if warm is not None else None
        scores, state = design.fit_score(res.rows, train, yy[train], w[train], C, start)  # (m,)
        if warm is not None:
            warm[held] = state
        if len(held) == 1:
            out = f == held[0]
            oof[out] = scores[out]
        else:
            k, j = held
            inner[k, f == j] = scores[f == j]
            inner[j, f == k] = scores[f == k]
    inner_auc = np.full(n_splits, np.nan)
    if nested:
        for k in range(n_splits):
            rows = (f != k) & np.isfinite(inner[k])
            if rows.any():
                inner_auc[k] = weighted_auroc(inner[k, rows], yy[rows], w[None, rows])[0]
    return oof, inner_auc


@dataclass(frozen=True, eq=False)
class Replicate:
    """One rerun of the pipeline: which rows with which weights and folds, and the labels (n,)
    of all labelled rows (the real ones for a resample, permuted ones for a permutation)."""

    sample: Resample
    y: np.ndarray


def identity(n: int, folds: np.ndarray) -> Resample:
    """Every row once, in the original folds: the observed sample as a replicate."""
    return Resample(np.arange(n), np.ones(n), np.asarray(folds))


def refit_bootstrap(
    layer_block: Callable[[int], np.ndarray],
    layer_idx: Sequence[int],
    n_positions: int,
    y: np.ndarray,
    families: Sequence[str],
    *,
    n_splits: int,
    C: float = 1.0,
    n_refits: int = DEFAULT_REFITS,
    seed: int = 0,
    fold_seed: int = 0,
    nested: bool = True,
    n_jobs: int | None = None,
    skip: Callable[[int, int], bool] | None = None,
) -> RefitDraws:
    """Rerun the grouped CV (and nested choice) of a logistic probe on `n_refits` resamples
    (see `rerun` for the arguments)."""
    y = np.asarray(y)
    resamples = draw_resamples(y, families, n_refits, seed, n_splits, fold_seed)
    return rerun(layer_block, layer_idx, n_positions, [Replicate(r, y) for r in resamples],
                 n_splits=n_splits, C=C, nested=nested, n_jobs=n_jobs, skip=skip)


PROCESS_WORK = 1000  # candidates x replicates from which refits run in worker processes (see `rerun`)


@dataclass(frozen=True, eq=False)
class _Work:
    """Everything a chunk of layers needs; sent once to each worker process."""

    layer_block: Callable[[int], np.ndarray]
    layer_idx: tuple[int, ...]
    n_positions: int
    replicates: tuple[Replicate, ...]
    n_splits: int
    C: float
    nested: bool
    skip: frozenset[tuple[int, int]]


def _run_chunk(work: _Work, chunk: list[int]) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    """(candidate, replicate, out-of-fold scores, inner AUROCs) of every fit in a chunk of layers;
    warm starts chain along the chunk's layers, as in probes.engine."""
    warm: dict[tuple[int, int], dict[tuple[int, ...], tuple[np.ndarray, float]]] = {}
    out = []
    for slot in chunk:
        block = work.layer_block(work.layer_idx[slot])  # (n, P, d)
        for p in range(work.n_positions):
            if (slot, p) in work.skip:
                continue
            g = slot * work.n_positions + p
            design = Design.of(block[:, p])
            for b, rep in enumerate(work.replicates):
                oof, auc_k = refit_one(design, rep.y, rep.sample, work.n_splits, work.C, work.nested,
                                       warm.setdefault((p, b), {}))
                out.append((g, b, oof, auc_k))
    return out


_WORKER: _Work | None = None


def _init_worker(work: _Work) -> None:
    global _WORKER
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")  # one BLAS thread per worker process
    _WORKER = work


def _run_in_worker(chunk: list[int]) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    assert _WORKER is not None
    return _run_chunk(_WORKER, chunk)


def rerun(
    layer_block: Callable[[int], np.ndarray],
    layer_idx: Sequence[int],
    n_positions: int,
    replicates: Sequence[Replicate],
    *,
    n_splits: int,
    C: float = 1.0,
    nested: bool = True,
    n_jobs: int | None = None,
    skip: Callable[[int, int], bool] | None = None,
    processes: bool | None = None,
) -> RefitDraws:
    """The pipeline on every replicate.

    layer_block(li) gives the labelled rows' activations at layer index li: (n, n_positions, d)
    float32. Candidates are ordered layer-major (g = layer_slot * n_positions + position), as in
    probes.sweep. skip(layer_slot, position) marks candidates not fitted (degenerate ones):
    their values are NaN and the nested choice never picks them.

    Chunks of layers run in `n_jobs` threads, or, with `processes` (default: when there are
    PROCESS_WORK candidate-replicates or more and more than one job), in as many worker processes
    (spawned; `layer_block` must then be picklable, e.g. probes.blocks.BlockReader): the refits'
    many small Newton steps hold the interpreter lock, so threads barely overlap (134 s CPU in
    102 s wall on the 7B-size benchmark). Results do not depend on either choice (tested).
    """
    from threadpoolctl import threadpool_limits

    started = time.perf_counter()
    B = len(replicates)
    n_cand = len(layer_idx) * n_positions
    per_candidate = np.full((B, n_cand), np.nan)
    accuracy = np.full((B, n_cand), np.nan)
    inner_auc = np.full((n_cand, B, n_splits), np.nan)
    oofs: list[list[np.ndarray | None]] = [[None] * B for _ in range(n_cand)]
    slots = list(range(len(layer_idx)))
    chunks = [slots[i : i + LAYER_CHUNK] for i in range(0, len(slots), LAYER_CHUNK)]
    skipped = frozenset((slot, p) for slot in slots for p in range(n_positions) if skip is not None and skip(slot, p))
    work = _Work(layer_block, tuple(layer_idx), n_positions, tuple(replicates), n_splits, C, nested, skipped)
    jobs = max(1, min(n_jobs or default_jobs(), len(chunks)))
    if processes is None:
        processes = jobs > 1 and n_cand * B >= PROCESS_WORK
    results: list[tuple[int, int, np.ndarray, np.ndarray]] = []
    if processes and jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_init_worker, initargs=(work,)) as pool:
            for part in pool.map(_run_in_worker, chunks):
                results.extend(part)
    else:
        with threadpool_limits(limits=1, user_api="blas"):
            if jobs == 1:
                for chunk in chunks:
                    results.extend(_run_chunk(work, chunk))
            else:
                with ThreadPoolExecutor(max_workers=jobs) as pool:
                    for part in pool.map(lambda c: _run_chunk(work, c), chunks):
                        results.extend(part)
    for g, b, oof, auc_k in results:
        res, yb = replicates[b].sample, replicates[b].y
        oofs[g][b] = oof
        inner_auc[g, b] = auc_k
        ok = np.isfinite(oof)
        if ok.any():
            yy, w = yb[res.rows][ok], res.weight[ok]
            per_candidate[b, g] = weighted_auroc(oof[ok], yy, w[None, :])[0]
            accuracy[b, g] = float(w @ ((oof[ok] > 0) == yy.astype(bool))) / float(w.sum())
    nested_draws = nested_accuracy = None
    if nested:
        nested_draws, nested_accuracy = np.full(B, np.nan), np.full(B, np.nan)
        for b, rep in enumerate(replicates):
            res = rep.sample
            pooled = np.full(len(res.rows), np.nan)
            for k in range(n_splits):
                col = inner_auc[:, b, k]
                if not np.isfinite(col).any():
                    continue
                g = int(np.nanargmax(col))  # first maximum: the earliest candidate on ties
                held = res.folds == k
                pooled[held] = oofs[g][b][held]  # type: ignore[index]
            ok = np.isfinite(pooled)
            if ok.any():
                yy, w = rep.y[res.rows][ok], res.weight[ok]
                nested_draws[b] = weighted_auroc(pooled[ok], yy, w[None, :])[0]
                nested_accuracy[b] = float(w @ ((pooled[ok] > 0) == yy.astype(bool))) / float(w.sum())
    return RefitDraws(per_candidate, accuracy, nested_draws, nested_accuracy, B, time.perf_counter() - started)
