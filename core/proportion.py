"""Intervals for proportions clustered in families that never collapse to a point (issue 15).

The family bootstrap (`core.bootstrap`) resamples whole families and takes percentiles of the ratio
estimator. For a proportion at 0% or 100% every resample gives the same value, so its percentile
interval is a point, `[1.000, 1.000] (n=144)`, although 144 successes out of 144 are compatible with a
true rate of 97% or less. This module gives every *proportion* a second interval that has width at the
boundary and accounts for clustering by family; `FamilyBootstrap.estimates` reports the hull (union)
of the two for measures flagged `binary=True`.

What counts as a proportion. A measure whose unit values are 0/1 outcomes (correct or not, chose stop
or not) or means of a few 0/1 outcomes of one unit (a policy's success averaged over two hidden
worlds): unit values in [0, 1], checked (`check_shares`). The caller says so explicitly; nothing is
guessed from the data.

The cluster interval (Korn & Graubard 1998, "Confidence intervals for proportions with small expected
number of positive counts estimated from survey data", Survey Methodology 24:193-201): a
Clopper-Pearson interval evaluated at an effective sample size n_eff instead of n.

- Inputs per measure: `num[f]`, `den[f]`, the sum of unit values and the number of units of family f.
  Only the F families with den[f] > 0 take part (a family without units of the measure says nothing).
  n = sum(den), p = sum(num) / n.
- Inside (0, 1) with F >= 2: the design-based (with-replacement, linearised) variance of the ratio
  estimator over families, v = F / (F - 1) * sum_f (num[f] - p den[f])^2 / n^2, which is what the
  family bootstrap estimates too. n_eff = p (1 - p) / v = n / deff (deff = the estimated design effect,
  Kish's 1 + (mbar - 1) ICC for equal families, estimated here directly so unequal family sizes need no
  separate ICC estimator), truncated at n (a design effect below 1 is not credited, as Korn & Graubard
  truncate). Then the degrees-of-freedom correction of Korn & Graubard, n_eff *= (t_{n-1} / t_{F-1})^2
  (97.5% t quantiles): with few families v itself is uncertain, and the interval widens as a t interval
  would.
- At p = 0 or 1, or with one family: v = 0 and the intra-family correlation cannot be estimated (no
  unit differs from another). We take the conservative end, ICC = 1: every family counts as one unit,
  n_eff = n^2 / sum(den^2), which is F when families are of equal size (the effective number of families
  otherwise). Korn & Graubard use n there; that assumes independence exactly when the data cannot show
  it: measured with the script below (seed 15), their rule covers 0.775 of data sets for 10 families of
  4 at rho = 0.8, p = 0.9 (0.756 with mixed sizes) where this rule covers 0.997.
  No df correction here: nothing is estimated, and Clopper-Pearson over F independent families is exact
  when each family's units agree. (For [0, 1]-valued units it stays valid: P(a unit is 1) <= its mean.)
- Clopper-Pearson at non-integer counts: x = p n_eff successes out of n_eff, lower bound the 2.5%
  quantile of Beta(x, n_eff - x + 1) (0 when x = 0), upper the 97.5% quantile of Beta(x + 1, n_eff - x)
  (1 when x = n_eff), via scipy.special.betaincinv. So a proportion's interval is never a point:
  144/144 in 36 families of 4 gives [0.9026, 1] (1 - 0.025^(1/36)), 144/144 in 144 single-unit
  families [0.9747, 1]; 0/n is the mirror image.

Why the hull with the bootstrap and not this interval alone: inside (0, 1) both estimate the same
variance; the bootstrap percentile interval follows the skew of the ratio estimator and is what every
other measure of a run reports, the beta interval adds width at and near the boundary and with few
families, where the percentile interval under-covers. The hull is never narrower than the old interval,
so no previously reported interval shrinks. Both intervals of the hull are reported as one interval; the
measured coverage below is the hull's.

Measured coverage: `python benchmarks/coverage_rates.py` (defaults: 1000 simulated data sets per cell,
B = 500 resamples, seed 15; about 20 s). Beta-binomial families (ICC rho), 95% nominal; old = the plain
percentile interval, new = the hull printed now; bound = mean lower bound. Rows for families of 4:

    design    F    n  rho     p |     old cov  width  bound |     new cov  width  bound
         4   10   40  0.0  0.98 |       0.512  0.050  0.950 |       0.995  0.237  0.763
         4   10   40  0.8  0.98 |       0.235  0.054  0.946 |       1.000  0.331  0.669
         4   10   40  0.8  1.00 |       1.000  0.000  1.000 |       1.000  0.308  0.692
         4   10   40  0.0  0.50 |       0.910  0.275  0.361 |       0.985  0.384  0.306
         4  144  576  0.0  0.50 |       0.936  0.080  0.460 |       0.954  0.086  0.457
         4  144  576  0.0  0.98 |       0.929  0.022  0.968 |       0.978  0.026  0.965
         4  144  576  0.8  0.98 |       0.904  0.039  0.957 |       0.948  0.050  0.946
         4  144  576  0.8  1.00 |       1.000  0.000  1.000 |       1.000  0.025  0.975

Over the 72 cells with 0 < p < 1 (families of 4 and of mixed sizes 1-8; F = 10, 30, 144; rho = 0,
0.3, 0.8; p = 0.5, 0.9, 0.98, 0.02): old lowest coverage 0.223, 51 cells below 0.93, zero-width
intervals in 72 of 108 cells; new lowest 0.919, 1 cell below 0.93 (mixed sizes, F = 144, rho = 0.8,
p = 0.98), none of zero width. With seed 16 the new interval has 3 cells below 0.93 (0.917-0.927), all
mixed sizes with rho = 0.8. Where it falls short: with strongly correlated families and p near 0 or 1
the uncertainty rests on the few families that hold the rare outcome (about 3 of 144 at p = 0.02,
rho = 0.8), so v is estimated from a handful of families while the df correction counts all F. A
Satterthwaite df (effective number of contributing families) fixes those cells but tripled widths
near the boundary elsewhere (0.05 -> 0.13 at F = 144, rho = 0.8), so it is not used. The price of
the conservative boundary rule: with 10 families of 4, 40/40 gives [0.692, 1] (the old [1, 1]); with
144 families, [0.975, 1]. Inside (0, 1) with many families the new interval is 5-10% wider than the old.

The same pieces serve estimates in [0, 1] that are not ratios of per-family sums: `size_from_variance`
takes any design-based variance (probes.metrics gives a probe AUROC's, the family-linearised DeLong
variance of its placement values) and `beta_interval` evaluates Clopper-Pearson at the size it gives.
`reach` is the boundary part of the probe interval rule (probes.metrics states it): no interval's
lower bound above a perfect estimate's on the same families. The rates scored here do not take it:
575/576 in 144 families prints [0.990, 1.000] beside 576/576's [0.975, 1].
"""

from __future__ import annotations

import numpy as np

from evprobe.core import cluster_t

LEVEL = 95.0
METHOD = (
    "proportions (binary=True): hull of the family-bootstrap percentile interval and a cluster "
    "Clopper-Pearson interval at the effective sample size n_eff = p(1-p)/v (v: variance of the "
    "ratio estimator over families, truncated at n, Korn-Graubard df factor (t_{n-1}/t_{F-1})^2); "
    "at 0% or 100% n_eff = n^2/sum(den_f^2) (every family one unit, ICC = 1)"
)


def check_shares(num: np.ndarray, den: np.ndarray) -> None:
    """Refuse per-family sums that cannot come from unit values in [0, 1]: a negative or fractional
    count of units, or a family whose sum lies outside [0, its number of units]. `num`, `den`: (F, M)."""
    num, den = np.asarray(num, float), np.asarray(den, float)
    if np.any(~np.isfinite(num)) or np.any(~np.isfinite(den)):
        raise ValueError("a proportion's per-family sums must be finite")
    if np.any(den < 0) or np.any(den != np.round(den)):
        raise ValueError("a proportion's per-family denominators must be whole counts of units")
    tol = 1e-9 * np.maximum(den, 1.0)  # sums of floats in [0, 1] may round by a few ulps
    bad = (num < -tol) | (num > den + tol)
    if np.any(bad):
        f, m = np.argwhere(bad)[0]
        raise ValueError(
            f"measure {m}: family {f} sums to {num[f, m]:g} over {den[f, m]:g} units; the unit "
            "values of a proportion lie in [0, 1] (binary=True is for shares, not costs or counts)"
        )


def boundary_size(den: np.ndarray) -> np.ndarray:
    """n^2 / sum(den_f^2) (M,) from per-family unit counts (F, M): the effective number of families,
    every family one unit (ICC = 1); F for equal families. NaN where a measure has no unit."""
    den = np.atleast_2d(np.asarray(den, float).T).T
    n = den.sum(axis=0)
    ok = n > 0
    return np.where(ok, n**2 / np.where(ok, (den**2).sum(axis=0), 1.0), np.nan)


def size_from_variance(
    p: np.ndarray, v: np.ndarray, n_max: np.ndarray, n_units: np.ndarray, n_fam: np.ndarray,
    boundary: np.ndarray, level: float = LEVEL,
) -> np.ndarray:
    """n_eff (M,) of M estimates in [0, 1] from their design-based variance `v` (module docstring):
    p (1 - p) / v truncated at `n_max`, times the Korn-Graubard factor (t_{n_units-1} / t_{n_fam-1})^2;
    `boundary` (every family one unit) at p = 0 or 1, with fewer than two families, or where v = 0 and
    `n_max` is not finite (nothing varies, so nothing bounds the size). All arguments (M,)."""
    p, v, n_max = (np.asarray(x, float) for x in (p, v, n_max))
    n_units, n_fam, boundary = (np.asarray(x, float) for x in (n_units, n_fam, boundary))
    with np.errstate(invalid="ignore", divide="ignore"):
        kg = np.minimum(np.where(v > 0, p * (1.0 - p) / np.where(v > 0, v, 1.0), n_max), n_max)
        q = 1.0 - (100.0 - level) / 200.0
        from scipy.special import stdtrit  # here: scipy costs every CLI --help ~0.3 s at import

        df_factor = (stdtrit(np.maximum(n_units - 1, 1), q) / stdtrit(np.maximum(n_fam - 1, 1), q)) ** 2
    inside = (p > 0) & (p < 1) & (n_fam >= 2) & np.isfinite(kg)
    return np.where(inside, kg * df_factor, boundary)


def effective_size(num: np.ndarray, den: np.ndarray, level: float = LEVEL) -> np.ndarray:
    """n_eff (M,) of M proportions from per-family sums (F, M); NaN where a measure has no unit."""
    num, den = np.atleast_2d(np.asarray(num, float).T).T, np.atleast_2d(np.asarray(den, float).T).T
    n = den.sum(axis=0)  # (M,)
    p, e, held = cluster_t.residuals(num, den)  # the cluster t interval's variance: one estimator
    v, n_fam = cluster_t.variance(e, held)  # NaN with one family: then the boundary size is used
    out = size_from_variance(p, v, n, n, n_fam, boundary_size(den), level)
    return np.where(n > 0, out, np.nan)


def beta_interval(p: np.ndarray, n_eff: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi), each (M,): Clopper-Pearson for p n_eff successes out of n_eff (non-integer counts,
    module docstring); it always holds p. NaN where p is NaN."""
    p = np.clip(np.asarray(p, float), 0.0, 1.0)  # sums of floats may overshoot by an ulp
    ok = np.isfinite(p) & np.isfinite(n_eff)
    p, n_eff = np.where(ok, p, 0.5), np.where(ok, n_eff, 1.0)
    x = p * n_eff
    alpha = (100.0 - level) / 100.0
    from scipy.special import betaincinv  # here, as stdtrit above

    with np.errstate(invalid="ignore"):
        lo = np.where(p > 0, betaincinv(np.where(p > 0, x, 1.0), n_eff - x + 1.0, alpha / 2), 0.0)
        hi = np.where(
            p < 1, betaincinv(x + 1.0, np.where(p < 1, n_eff - x, 1.0), 1.0 - alpha / 2), 1.0
        )
    lo, hi = np.minimum(lo, p), np.maximum(hi, p)  # the interval holds the estimate
    return np.where(ok, lo, np.nan), np.where(ok, hi, np.nan)


def cluster_interval(
    num: np.ndarray, den: np.ndarray, level: float = LEVEL
) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi), each (M,), of M proportions from per-family sums `num`, `den` of shape (F, M):
    Clopper-Pearson at n_eff (module docstring). NaN where a measure has no unit."""
    num, den = np.atleast_2d(np.asarray(num, float).T).T, np.atleast_2d(np.asarray(den, float).T).T
    n = den.sum(axis=0)
    ok = n > 0
    p = np.where(ok, num.sum(axis=0) / np.where(ok, n, 1.0), np.nan)
    return beta_interval(p, effective_size(num, den, level), level)


def perfect_lower(size: float | np.ndarray, level: float = LEVEL) -> float | np.ndarray:
    """Lower bound of a perfect estimate read with `size` independent units (Clopper-Pearson of
    size successes out of size): (alpha / 2)^(1 / size); 0.9747 at 144, 0.8843 at 30."""
    return ((100.0 - level) / 200.0) ** (1.0 / np.asarray(size, float))


def reach(
    interval: tuple[np.ndarray, np.ndarray], size: np.ndarray, level: float = LEVEL
) -> tuple[np.ndarray, np.ndarray]:
    """The boundary reach of an interval of an estimate in [0, 1] on families of effective number
    `size` (`boundary_size`): its lower bound lowered to at most a perfect estimate's lower bound on
    the same families (`perfect_lower`), its upper bound raised to at least the mirror image's.
    No estimate that is not perfect then claims more than a perfect one does (probes.metrics states
    the rule that uses it). All arrays (M,); NaN stays NaN."""
    lo, hi = (np.asarray(x, float) for x in interval)
    floor = perfect_lower(size, level)
    return np.where(np.isnan(lo), lo, np.minimum(lo, floor)), np.where(np.isnan(hi), hi, np.maximum(hi, 1.0 - floor))


def hull(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """The smallest interval holding both (lo, hi) pairs; a NaN bound in one takes the other's."""
    return np.fmin(a[0], b[0]), np.fmax(a[1], b[1])


def saturated_change(
    change: tuple[np.ndarray, np.ndarray], p1: np.ndarray, ci1: tuple[np.ndarray, np.ndarray],
    p0: np.ndarray, ci0: tuple[np.ndarray, np.ndarray], *, sparse: np.ndarray | None = None,
    r: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """A paired change p1 - p0 of two proportions whose interval never collapses.

    `change` is the family bootstrap's paired interval; where either proportion sits at 0 or 1
    (there every resample agrees and that interval can be a point, `+100 [+100, +100]`), or where
    the paired interval is a point for another reason (every unit chose alike in both conditions:
    `+0 [+0, +0]`), it is widened to hold Newcombe's (1998) MOVER interval built from the two cluster intervals:
    d - sqrt((p1 - l1)^2 + (u0 - p0)^2), d + sqrt((u1 - p1)^2 + (p0 - l0)^2). MOVER ignores the
    pairing; pairs of one item are positively correlated, so ignoring it can only widen the
    interval. Elsewhere the paired bootstrap interval stands. All arrays (M,); NaN stays NaN.

    `sparse` (M,) marks further changes to widen the same way: `analysis.effects` marks
    those where a rate has fewer than 5 units of its rarer outcome, where the normal approximation
    behind a percentile or t interval fails (a rate near 100% at 72 families covered 91.8% without
    it; benchmarks/coverage_paired_effects.py). There the MOVER interval for correlated estimates
    (Zou & Donner 2008, Statistics in Medicine 27:1693-1702) uses `r` (M,), the correlation of the
    two estimates, d - sqrt(a^2 + b^2 - 2 r a b) with a = p1 - l1, b = u0 - p0 (the upper end
    alike), so the pairing is credited where it is measured. Where a rate sits at 0 or 1 or the
    paired interval is a point, r is taken as 0 as above: nothing measures the pairing there.
    """
    point = change[0] == change[1]
    edge = np.isin(p1, (0.0, 1.0)) | np.isin(p0, (0.0, 1.0)) | point
    given = np.zeros_like(np.asarray(p1, float)) if r is None else np.clip(np.nan_to_num(r), -1.0, 1.0)
    corr = np.where(edge, 0.0, given)  # nothing measures the pairing at a saturated rate or a point
    d = p1 - p0

    def reach(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.sqrt(np.maximum(a**2 + b**2 - 2.0 * corr * a * b, 0.0))

    lo = d - reach(p1 - ci1[0], ci0[1] - p0)
    hi = d + reach(ci1[1] - p1, p0 - ci0[0])
    if sparse is not None:
        edge = edge | np.asarray(sparse, bool)
    return (np.where(edge, np.fmin(change[0], lo), change[0]), np.where(edge, np.fmax(change[1], hi), change[1]))


def clopper_pearson(successes: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval for `successes` (rounded) out of n independent units (scipy's beta
    quantiles; `beta_interval` is the same at non-integer counts)."""
    from scipy import stats

    x = int(round(successes))
    tail = (1 - level) / 2
    lo = 0.0 if x <= 0 else float(stats.beta.ppf(tail, x, n - x + 1))
    hi = 1.0 if x >= n else float(stats.beta.ppf(1 - tail, x + 1, n - x))
    return lo, hi
