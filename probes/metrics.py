"""AUROC and accuracy with family-bootstrap intervals, on the project's one bootstrap.

Accuracy is a ratio of sums over families (correct / rows), so it goes straight through
`bench.bootstrap.FamilyBootstrap.rate`. AUROC is not a ratio of per-family sums: it compares
every positive with every negative, across families. Resampling still uses the bootstrap's
counts matrix (`counts[b, f]`: how often family f is drawn in resample b): a resample is the
pooled sample in which every row of family f appears counts[b, f] times, so its AUROC is the
Mann-Whitney statistic with row weights w_i = counts[b, family(i)]:

    AUROC_b = sum_{i pos, j neg} w_i w_j ([s_i > s_j] + [s_i == s_j] / 2) / (W_pos W_neg)

computed for all resamples at once from one sort of the scores: per tie group g, the weight of
negatives strictly below (a cumulative sum) plus half the negatives tied with it. The observed
AUROC is the same formula with unit weights (equal to scikit-learn's roc_auc_score, tested).
Resamples with no positive or no negative weight have no AUROC and are dropped before the
percentiles, as the bootstrap drops zero denominators; intervals are its pointwise 95%
percentile intervals, except where every resample gives the same value (a perfect separation,
or a baseline exactly at 0.5): then the exact binomial interval on the F families, never a point.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from evprobe.core.bootstrap import Estimate, FamilyBootstrap, percentile_interval
from evprobe.core.proportion import clopper_pearson

CHUNK = 256  # resamples per vectorised block: bounds memory at CHUNK x n floats per array


def weighted_auroc(scores: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """AUROC of `scores` (n,) for labels `y` (n,) in {0, 1} under each row of `weights` (B, n).

    Returns (B,) values, NaN where a weighting has no positive or no negative mass.
    """
    scores = np.asarray(scores, dtype=np.float64)
    y = np.asarray(y).astype(bool)
    weights = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    yy = y[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])  # first row of each tie group
    out = np.empty(weights.shape[0])
    for lo in range(0, weights.shape[0], CHUNK):
        W = weights[lo : lo + CHUNK][:, order]  # (b, n) in score order
        neg = np.add.reduceat(np.where(yy, 0.0, W), starts, axis=1)  # (b, groups)
        pos = np.add.reduceat(np.where(yy, W, 0.0), starts, axis=1)
        below = np.cumsum(neg, axis=1) - neg  # negative mass strictly below each group
        num = np.einsum("bg,bg->b", pos, below + 0.5 * neg)
        den = pos.sum(axis=1) * neg.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[lo : lo + CHUNK] = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return out


def auroc(scores: np.ndarray, y: np.ndarray) -> float:
    """Plain AUROC (ties count one half); NaN when one class is absent."""
    return float(weighted_auroc(scores, y, np.ones((1, len(scores))))[0])


def auroc_draws(scores: np.ndarray, y: np.ndarray, families: Sequence[str], boot: FamilyBootstrap) -> np.ndarray:
    """(B,) AUROC of `scores` (n,) on each of `boot`'s family resamples (rows with a NaN score
    left out): the fold models held fixed, only which families are scored resampled."""
    scores = np.asarray(scores, dtype=np.float64)
    ok = np.isfinite(scores)
    fam = boot.family_index(list(np.asarray(families, dtype=object)[ok]))
    return weighted_auroc(scores[ok], np.asarray(y)[ok], boot.counts[:, fam])


def auroc_estimate(
    scores: np.ndarray, y: np.ndarray, families: Sequence[str], boot: FamilyBootstrap
) -> Estimate:
    """AUROC with its family-bootstrap interval; rows with a NaN score are left out (and not
    counted in n). `families` are the rows' family ids, all in `boot`."""
    scores = np.asarray(scores, dtype=np.float64)
    ok = np.isfinite(scores)
    if not ok.any():
        return Estimate.empty("no scored rows")
    s, yy = scores[ok], np.asarray(y)[ok]
    fam = boot.family_index(list(np.asarray(families, dtype=object)[ok]))
    if yy.min() == yy.max():
        return Estimate.empty("one class only")
    value = auroc(s, yy)
    draws = auroc_draws(scores, y, families, boot)
    lo, hi = percentile_interval(draws)
    if np.isfinite(lo[0]) and lo[0] == hi[0]:  # every resample agreed (e.g. 1.0, or a baseline at 0.5):
        # never a point; the exact interval on the families, as probes.inference does for refits
        f = len(np.unique(fam))
        lo[0], hi[0] = clopper_pearson(value * f, f)
    return Estimate(value, (_f(lo[0]), _f(hi[0])), int(ok.sum()))


def accuracy_estimate(
    correct: np.ndarray, families: Sequence[str], boot: FamilyBootstrap
) -> Estimate:
    """Share of correct rows (ratio of per-family sums) with its family-bootstrap interval, widened
    for a proportion (`FamilyBootstrap.rate(..., binary=True)`, core.proportion: never zero width at
    0% or 100%). `correct` is (n,) 0/1 with NaN for rows that were not scored (left out)."""
    correct = np.asarray(correct, dtype=np.float64)
    ok = np.isfinite(correct)
    if not ok.any():
        return Estimate.empty("no scored rows")
    fam = boot.family_index(list(np.asarray(families, dtype=object)[ok]))
    num = boot.per_family(fam, correct[ok])
    den = boot.per_family(fam, np.ones(int(ok.sum())))
    return boot.rate(num, den, binary=True)  # a share of 0/1 rows: never a zero-width interval


def _f(x: float) -> float | None:
    return None if np.isnan(x) else float(x)
