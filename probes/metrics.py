"""AUROC and accuracy with family-bootstrap intervals, on the project's one bootstrap, and the one
interval rule for them.

Accuracy is a ratio of sums over families (correct / rows), so it goes straight through
`core.bootstrap.FamilyBootstrap`. AUROC is not a ratio of per-family sums: it compares
every positive with every negative, across families. Resampling still uses the bootstrap's
counts matrix (`counts[b, f]`: how often family f is drawn in resample b): a resample is the
pooled sample in which every row of family f appears counts[b, f] times, so its AUROC is the
Mann-Whitney statistic with row weights w_i = counts[b, family(i)]:

    AUROC_b = sum_{i pos, j neg} w_i w_j ([s_i > s_j] + [s_i == s_j] / 2) / (W_pos W_neg)

computed for all resamples at once from one sort of the scores: per tie group g, the weight of
negatives strictly below (a cumulative sum) plus half the negatives tied with it. The observed
AUROC is the same formula with unit weights (equal to scikit-learn's roc_auc_score, tested).
Resamples with no positive or no negative weight have no AUROC and are dropped before the
percentiles, as the bootstrap drops zero denominators.

The interval rule (`unit_interval`), for every printed probe AUROC and accuracy: the fixed-model
intervals here (`auroc_estimate`, `accuracy_estimate`) and the refit intervals of a sweep
(`probes.inference.refit_interval`). Both estimates lie in [0, 1] and are means of [0, 1] unit
values clustered by family: accuracy of the 0/1 correct rows; AUROC of the rows' placement values
(a positive's share of negatives scored below it, a negative's share of positives scored above it,
ties one half: their mean over all rows is exactly the AUROC). The printed interval is the hull of

1. the resampling interval (the bootstrap's percentiles, or the refits' estimate +- t x sd);
2. the cluster interval of `core.proportion`: Clopper-Pearson at an effective size n_eff. For
   accuracy that is core.proportion's own (n_eff = p (1 - p) / v, v the ratio estimator's variance
   over families, truncated at n). For AUROC the placement values are not independent of each other
   (each is estimated from the other class), so v is the family-linearised (DeLong) variance
   (`delong_variance`): with m positives and k negatives,
   psi_f = sum_{pos i in f} (V_i - A) / m + sum_{neg j in f} (V_j - A) / k and
   v = F / (F - 1) sum_f psi_f^2, which is the fixed-model bootstrap's variance (tested). Unlike a
   proportion's it is not truncated at the unclustered variance: a family holds both classes, so
   what its rows share cancels from its within-family comparisons, and a clustered variance below
   the unclustered one is the design, not noise. n_eff = A (1 - A) / v times Korn and Graubard's df
   factor, as for proportions. Where v = 0 (a perfect separation, or every score tied) nothing can
   be estimated: every family is one unit, n_eff = n^2 / sum_f n_f^2 (F for equal families), so
   1.0 on 144 families of equal size is [0.975, 1.000] and 0.5 with every score tied [0.416, 0.584];
3. the boundary reach (`core.proportion.reach`): the lower bound is lowered to at most the lower
   bound of a perfect estimate on the same families, (0.025)^(1 / n_eff at the boundary), and the
   upper bound raised to at least its mirror image. A perfect separation is the strongest evidence
   for a high value the families can hold; an estimate below it cannot claim more, as Clopper-Pearson
   lower bounds rise with the count. Without it 0.99998 printed [0.99978, 1.0] beside 1.0's
   [0.975, 1.0]: the variance of a near-perfect estimate rests on the one or two families that hold
   its few discordant pairs, and says nothing about how correlated a family's rows are.

So no interval is a point, and a near-perfect estimate whose interval reaches 1 is never narrower
than a perfect one's on the same families. Mid-range, a refit interval is unchanged (part 2 holds
only the test-sampling variance, which the refits' spread includes; part 3 binds only above 0.975
at 144 families, above 0.884 at 30), and a fixed-model one widens a little (Clopper-Pearson at the
effective size against the percentiles, as for a proportion).

Measured coverage near the boundary, `python benchmarks/coverage_auroc_boundary.py` (100 replicates
per line, 50 refits, families of four rows shaped like the benchmark, a planted signal whose held-out
AUROC is the truth; nominal 95%). The printed (refit) AUROC interval, coverage and mean width:

    truth    F | before (t x sd)  | parts 1-2 only   | the rule
    0.990   30 | 84.0%  0.027     | 86.0%  0.032     | 100.0%  0.116
    0.991  144 | 86.0%  0.014     | 87.0%  0.015     | 100.0%  0.025
    0.999   30 | 75.0%  0.013     | 100.0% 0.057     | 100.0%  0.116
    0.999  144 | 58.0%  0.0017    | 64.0%  0.0022    | 100.0%  0.025
    1       30 | 100.0% 0.116     | 100.0% 0.116     | 100.0%  0.116
    1      144 | 100.0% 0.025     | 100.0% 0.025     | 100.0%  0.025

(binomial se up to 5 points). Near 1 the refits' spread and the DeLong variance rest on the few
families with a discordant pair and undercover; the reach is what restores coverage, at the price of
the perfect estimate's width (conservative: 100%). The printed accuracy: 83.0% -> 99.0% at 0.988 and
144 families, 87.0% -> 100.0% at 0.986 and 30. The fixed-model AUROC interval: 53-73% -> 96-99%.
Mid-range (benchmarks/coverage.py, null and a planted 0.69-0.77) the printed interval is unchanged in
coverage and width to three decimals; the fixed-model one is 3-9% wider.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evprobe.core import proportion
from evprobe.core.bootstrap import Estimate, FamilyBootstrap, percentile_interval

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


@dataclass(frozen=True)
class ClusterReading:
    """An estimate in [0, 1] read as a mean of [0, 1] unit values clustered by family (module
    docstring): its cluster Clopper-Pearson interval and `size`, the effective number of families
    (every family one unit), which sets the boundary reach."""

    interval: tuple[float, float]
    size: float


def placements(scores: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(n,) placement values of rows with `scores` (n,) and labels `y` (n,) in {0, 1}: a positive's
    share of negatives scored below it, a negative's share of positives scored above it, ties one
    half. Their mean over either class (and over all rows) is the AUROC."""
    s = np.asarray(scores, dtype=np.float64)
    pos = np.asarray(y).astype(bool)

    def beaten(sorted_other: np.ndarray, x: np.ndarray) -> np.ndarray:  # (#other < x) + (#other == x) / 2
        left, right = np.searchsorted(sorted_other, x, "left"), np.searchsorted(sorted_other, x, "right")
        return (left + right) / 2.0

    sp, sn = np.sort(s[pos]), np.sort(s[~pos])
    out = np.empty(len(s))
    out[pos] = beaten(sn, s[pos]) / len(sn)
    out[~pos] = 1.0 - beaten(sp, s[~pos]) / len(sp)  # share of positives above, ties one half
    return out


def delong_variance(scores: np.ndarray, y: np.ndarray, family_idx: np.ndarray) -> float:
    """The family-linearised (DeLong) variance of the AUROC of `scores` (n,), `y` (n,) with both
    classes, rows of families `family_idx` (n,) ints (module docstring, part 2); 0 when nothing varies
    between families (a perfect separation, every score tied)."""
    y = np.asarray(y).astype(bool)
    fam = np.asarray(family_idx)
    v_row = placements(scores, y)  # (n,)
    m, k = int(y.sum()), int((~y).sum())
    a = float(v_row[y].mean())
    psi = np.bincount(fam, weights=np.where(y, (v_row - a) / m, (v_row - a) / k))  # (F,) per family
    n_fam = int((np.bincount(fam) > 0).sum())
    return n_fam / max(n_fam - 1, 1) * float(psi @ psi)


def auroc_reading(scores: np.ndarray, y: np.ndarray, family_idx: np.ndarray, level: float = 95.0) -> ClusterReading:
    """The cluster reading of the AUROC of `scores` (n,), `y` (n,) with both classes, rows of
    families `family_idx` (n,) ints: Clopper-Pearson at n_eff from `delong_variance` (module
    docstring, part 2)."""
    fam = np.asarray(family_idx)
    a = auroc(scores, y)
    den = np.bincount(fam).astype(float)  # rows per family
    size = float(proportion.boundary_size(den)[0])
    n_eff = proportion.size_from_variance(
        np.array([a]), np.array([delong_variance(scores, y, fam)]), np.array([np.inf]), np.array([float(len(fam))]),
        np.array([float((den > 0).sum())]), np.array([size]), level)
    lo, hi = proportion.beta_interval(np.array([a]), n_eff, level)
    return ClusterReading((float(lo[0]), float(hi[0])), size)


def accuracy_reading(correct: np.ndarray, family_idx: np.ndarray, level: float = 95.0) -> ClusterReading:
    """The cluster reading of the share of `correct` (n,) 0/1 rows of families `family_idx` (n,):
    core.proportion's cluster interval (module docstring, part 2)."""
    fam = np.asarray(family_idx)
    num = np.bincount(fam, weights=np.asarray(correct, dtype=np.float64)).astype(float)
    den = np.bincount(fam, minlength=len(num)).astype(float)
    lo, hi = proportion.cluster_interval(num, den, level)
    return ClusterReading((float(lo[0]), float(hi[0])), float(proportion.boundary_size(den)[0]))


def unit_interval(
    resampled: tuple[float | None, float | None], reading: ClusterReading, level: float = 95.0
) -> tuple[float | None, float | None]:
    """The printed interval of a probe AUROC or accuracy (module docstring: the rule): the hull of
    the resampling interval and the cluster reading's, with the boundary reach. A None or NaN bound
    of the resampling interval takes the cluster interval's."""
    lo, hi = (np.nan if x is None else float(x) for x in resampled)
    lo2, hi2 = proportion.hull((np.array([lo]), np.array([hi])),
                               (np.array([reading.interval[0]]), np.array([reading.interval[1]])))
    lo3, hi3 = proportion.reach((lo2, hi2), np.array([reading.size]), level)
    return max(0.0, float(lo3[0])), min(1.0, float(hi3[0]))


def auroc_estimate(
    scores: np.ndarray, y: np.ndarray, families: Sequence[str], boot: FamilyBootstrap
) -> Estimate:
    """AUROC with its family-bootstrap interval under the rule (`unit_interval`); rows with a NaN
    score are left out (and not counted in n). `families` are the rows' family ids, all in `boot`."""
    scores = np.asarray(scores, dtype=np.float64)
    ok = np.isfinite(scores)
    if not ok.any():
        return Estimate.empty("no scored rows")
    s, yy = scores[ok], np.asarray(y)[ok]
    fam = boot.family_index(list(np.asarray(families, dtype=object)[ok]))
    if yy.min() == yy.max():
        return Estimate.empty("one class only")
    value = auroc(s, yy)
    lo, hi = percentile_interval(auroc_draws(scores, y, families, boot))
    ci = unit_interval((_f(lo[0]), _f(hi[0])), auroc_reading(s, yy, fam))
    return Estimate(value, ci, int(ok.sum())).in_families(len(np.unique(fam)))  # clusters: families


def accuracy_estimate(
    correct: np.ndarray, families: Sequence[str], boot: FamilyBootstrap
) -> Estimate:
    """Share of correct rows (ratio of per-family sums) with its family-bootstrap interval under the
    rule (`unit_interval`: never zero width at 0% or 100%, never narrower near them than there).
    `correct` is (n,) 0/1 with NaN for rows that were not scored (left out)."""
    correct = np.asarray(correct, dtype=np.float64)
    ok = np.isfinite(correct)
    if not ok.any():
        return Estimate.empty("no scored rows")
    fam = boot.family_index(list(np.asarray(families, dtype=object)[ok]))
    num = boot.per_family(fam, correct[ok])
    den = boot.per_family(fam, np.ones(int(ok.sum())))
    est = boot.rate(num, den)  # the percentile interval; the rule adds the cluster reading
    return Estimate(est.value, unit_interval(est.ci, accuracy_reading(correct[ok], fam)), est.n).in_families(
        len(np.unique(fam)))


def _f(x: float) -> float | None:
    return None if np.isnan(x) else float(x)
