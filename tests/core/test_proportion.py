"""Intervals for proportions clustered in families (core.proportion, FamilyBootstrap binary=True)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from evprobe.core.bootstrap import FamilyBootstrap
from evprobe.core.proportion import check_shares, cluster_interval, effective_size, hull
from evprobe.probes.metrics import accuracy_estimate


def fams(k: int) -> list[str]:
    return [f"f{i:03d}" for i in range(k)]


# -- hand-computed cases ---------------------------------------------------------------------------


def test_all_successes_in_36_families_of_4_reach_down_to_clopper_pearson_over_families() -> None:
    den = np.full(36, 4.0)
    boot = FamilyBootstrap(fams(36), n_boot=200, seed=1)
    old = boot.rate(den, den)
    new = boot.rate(den, den, binary=True)
    assert old.ci == (1.0, 1.0)  # the percentile interval collapses: every resample is 144/144
    # ICC cannot be estimated, so every family counts as one unit: Clopper-Pearson 36/36,
    # lower bound 0.025^(1/36) = 0.902606...
    assert new.value == 1.0 and new.n == 144
    assert new.ci[0] == pytest.approx(0.025 ** (1 / 36), abs=1e-12)
    assert new.ci[0] == pytest.approx(0.9026062, abs=1e-7)
    assert new.ci[1] == 1.0


def test_none_is_the_mirror_image() -> None:
    den = np.full(36, 4.0)
    est = FamilyBootstrap(fams(36), n_boot=200, seed=1).rate(0 * den, den, binary=True)
    assert est.value == 0.0 and est.ci[0] == 0.0
    assert est.ci[1] == pytest.approx(1 - 0.025 ** (1 / 36), abs=1e-12)


def test_independent_units_give_the_exact_interval_for_144_of_144() -> None:
    ones = np.ones(144)  # 144 families of one unit each: n_eff = n = 144
    lo, hi = cluster_interval(ones, ones)
    assert lo[0] == pytest.approx(0.9747081, abs=1e-7) and hi[0] == 1.0


def test_unequal_families_count_as_their_effective_number_at_the_boundary() -> None:
    den = np.array([1.0, 2.0, 3.0, 6.0])  # n = 12, sum of squares 50: n_eff = 144 / 50 = 2.88
    assert effective_size(den, den)[0] == pytest.approx(2.88)
    lo, _ = cluster_interval(den, den)
    assert lo[0] == pytest.approx(0.025 ** (1 / 2.88), abs=1e-12)


def test_inside_the_interval_is_clopper_pearson_at_the_korn_graubard_size() -> None:
    num = np.array([4.0, 3.0, 2.0, 4.0, 1.0])
    den = np.full(5, 4.0)
    # by hand: n = 20, p = 0.7; residuals num - 2.8 = 1.2, 0.2, -0.8, 1.2, -1.8 (squares sum 6.8);
    # v = 5/4 * 6.8 / 400 = 0.02125; p(1-p)/v = 0.21 / 0.02125 = 9.882 (< n);
    # df factor (t_19 / t_4)^2 at 97.5%: (2.0930 / 2.7764)^2 = 0.5683; n_eff = 5.616
    n_eff = 0.21 / 0.02125 * (stats.t.ppf(0.975, 19) / stats.t.ppf(0.975, 4)) ** 2
    assert n_eff == pytest.approx(5.616, abs=1e-3)
    assert effective_size(num, den)[0] == pytest.approx(n_eff, rel=1e-12)
    x = 0.7 * n_eff
    lo, hi = cluster_interval(num, den)
    assert lo[0] == pytest.approx(stats.beta.ppf(0.025, x, n_eff - x + 1), rel=1e-9)
    assert hi[0] == pytest.approx(stats.beta.ppf(0.975, x + 1, n_eff - x), rel=1e-9)


def test_a_design_effect_below_one_is_not_credited() -> None:
    # every family exactly 2 of 4: no family-level variance, v = 0; n_eff is n (times the df factor)
    num, den = np.full(36, 2.0), np.full(36, 4.0)
    factor = (stats.t.ppf(0.975, 143) / stats.t.ppf(0.975, 35)) ** 2
    assert effective_size(num, den)[0] == pytest.approx(144 * factor, rel=1e-12)
    est = FamilyBootstrap(fams(36), n_boot=200, seed=1).rate(num, den, binary=True)
    assert FamilyBootstrap(fams(36), n_boot=200, seed=1).rate(num, den).ci == (0.5, 0.5)
    assert est.ci[0] < 0.42 and est.ci[1] > 0.58  # no longer [0.5, 0.5]


# -- clustering --------------------------------------------------------------------------------------


def test_correlated_families_give_wider_intervals_than_independent_units() -> None:
    # 72 of 144 either way: whole families agree (ICC 1) or every family splits 2-2 (ICC < 0)
    clustered = np.array([4.0, 0.0] * 18)
    split = np.full(36, 2.0)
    den = np.full(36, 4.0)
    boot = FamilyBootstrap(fams(36), n_boot=500, seed=2)
    wide = boot.rate(clustered, den, binary=True)
    narrow = boot.rate(split, den, binary=True)
    assert wide.value == narrow.value == 0.5
    assert wide.ci[1] - wide.ci[0] > 2 * (narrow.ci[1] - narrow.ci[0])
    # at 100%, 144 units in 36 families of 4 are wider than 144 independent units
    lo_fam, _ = cluster_interval(den, den)
    lo_ind, _ = cluster_interval(np.ones(144), np.ones(144))
    assert lo_fam[0] < lo_ind[0]


def test_estimated_effective_size_matches_n_over_the_kish_design_effect() -> None:
    # 120 families of 4 with family rates drawn from a beta of ICC 0.5: deff = 1 + 3 * 0.5 = 2.5
    rng = np.random.default_rng(0)
    p_f = rng.beta(0.5, 0.5, size=(120, 400))  # mean 0.5, ICC 1 / (0.5 + 0.5 + 1) = 0.5
    num = rng.binomial(4, p_f).astype(float)
    den = np.full_like(num, 4.0)
    factor = (stats.t.ppf(0.975, 479) / stats.t.ppf(0.975, 119)) ** 2
    n_eff = effective_size(num, den) / factor  # (400,) before the df correction
    assert np.median(n_eff) == pytest.approx(480 / 2.5, rel=0.1)


# -- never a point ------------------------------------------------------------------------------------


def test_no_proportion_has_a_zero_width_interval() -> None:
    rng = np.random.default_rng(5)
    for f in (1, 2, 3, 10, 36):
        den = rng.integers(0, 6, size=(f, 300)).astype(float)
        den[0] = np.maximum(den[0], 1.0)  # at least one unit per measure
        rate = rng.choice([0.0, 0.02, 0.5, 0.98, 1.0], size=300)
        num = rng.binomial(den.astype(int), rate).astype(float)
        ests = FamilyBootstrap(fams(f), n_boot=100, seed=f).rates(num, den, binary=True)
        for e in ests:
            assert e.ci[0] <= e.value <= e.ci[1]
            assert e.ci[1] - e.ci[0] > 0.0, (f, e)


def test_the_hull_holds_the_percentile_interval() -> None:
    rng = np.random.default_rng(6)
    den = rng.integers(1, 9, size=(30, 50)).astype(float)
    num = rng.binomial(den.astype(int), 0.3).astype(float)
    boot = FamilyBootstrap(fams(30), n_boot=300, seed=3)
    for old, new in zip(boot.rates(num, den), boot.rates(num, den, binary=[True] * 50), strict=True):
        assert new.value == old.value and new.n == old.n
        assert new.ci[0] <= old.ci[0] and new.ci[1] >= old.ci[1]


def test_flags_are_per_measure_and_sub_bootstraps_mix() -> None:
    den = np.full((10, 2), 4.0)
    boot = FamilyBootstrap(fams(10), n_boot=100, seed=4)
    rate, cost = boot.rates(den, den, binary=[True, False])
    assert rate.ci[0] < 1.0 and cost.ci == (1.0, 1.0)  # the unflagged measure keeps percentiles
    sub = boot.subset(fams(10)[:4])
    parts = [boot.resample(den[:, 0], den[:, 0], binary=True),
             sub.resample(np.full(4, 4.0), np.full(4, 4.0), binary=True)]
    a, b = FamilyBootstrap.estimates(parts)
    assert a.ci[0] == pytest.approx(0.025 ** (1 / 10)) and b.ci[0] == pytest.approx(0.025 ** (1 / 4))


def test_hull_takes_the_other_bound_where_one_is_undefined() -> None:
    lo, hi = hull((np.array([0.2, np.nan]), np.array([0.4, np.nan])),
                  (np.array([0.1, 0.3]), np.array([0.5, np.nan])))
    assert list(lo) == [0.1, 0.3] and hi[0] == 0.5 and np.isnan(hi[1])


def test_empty_measures_have_no_interval() -> None:
    lo, hi = cluster_interval(np.zeros((3, 1)), np.zeros((3, 1)))
    assert np.isnan(lo[0]) and np.isnan(hi[0])
    est = FamilyBootstrap(fams(3), n_boot=50, seed=1).rate(np.zeros(3), np.zeros(3), binary=True)
    assert est.value is None and est.ci == (None, None)


# -- checks: shares only --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("num", "den", "words"),
    [
        ([5.0, 1.0], [4.0, 4.0], "sums to 5"),  # a cost summed as if it were a share
        ([-1.0, 1.0], [4.0, 4.0], "sums to -1"),
        ([1.0, 1.0], [2.5, 4.0], "whole counts"),
        ([np.nan, 1.0], [4.0, 4.0], "finite"),
    ],
)
def test_sums_that_are_not_shares_are_refused(num: list, den: list, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        check_shares(np.array(num)[:, None], np.array(den)[:, None])
    boot = FamilyBootstrap(fams(2), n_boot=10, seed=1)
    with pytest.raises(ValueError):
        boot.rate(np.array(num), np.array(den), binary=True)


def test_sums_of_shares_pass() -> None:
    check_shares(np.array([[0.5, 4.0], [2.0, 0.0]]), np.array([[1.0, 4.0], [2.0, 3.0]]))


# -- a caller: probe accuracy -----------------------------------------------------------------------


def test_probe_accuracy_at_100_percent_is_not_a_point() -> None:
    families = [f for f in fams(20) for _ in range(4)]  # 80 rows, 20 families of 4
    boot = FamilyBootstrap(fams(20), n_boot=200, seed=7)
    est = accuracy_estimate(np.ones(80), families, boot)
    assert est.value == 1.0 and est.n == 80
    assert est.ci == pytest.approx((0.025 ** (1 / 20), 1.0))


def test_a_saturated_paired_change_never_collapses() -> None:
    from evprobe.core.proportion import cluster_interval, saturated_change

    # 36 families of 4: every item stopped after steering (p1 = 1), none before (p0 = 0)
    den = np.full((36, 1), 4.0)
    ci1, ci0 = cluster_interval(den.copy(), den), cluster_interval(np.zeros_like(den), den)
    point = (np.array([1.0]), np.array([1.0]))  # what the paired bootstrap prints: +1 [+1, +1]
    lo, hi = saturated_change(point, np.array([1.0]), ci1, np.array([0.0]), ci0)
    assert hi[0] == 1.0 and lo[0] < 1.0
    assert lo[0] == pytest.approx(1.0 - np.sqrt((1 - ci1[0][0]) ** 2 + ci0[1][0] ** 2))
    # inside (0, 1) the paired bootstrap interval stands untouched
    inner = (np.array([0.1]), np.array([0.3]))
    lo, hi = saturated_change(inner, np.array([0.6]), (np.array([0.5]), np.array([0.7])),
                              np.array([0.4]), (np.array([0.3]), np.array([0.5])))
    assert (lo[0], hi[0]) == (0.1, 0.3)


def test_a_paired_change_where_every_unit_agrees_is_widened_too() -> None:
    """Two conditions with identical replies at 60%: every resample's change is 0, so the paired
    bootstrap prints +0 [+0, +0]; the MOVER interval from the two cluster intervals stands in."""
    from evprobe.core.proportion import cluster_interval, saturated_change

    num = np.array([[3.0], [2.0], [4.0], [1.0], [2.0]] * 6)  # 30 families of 4 items, 12/20 = 60%
    den = np.full_like(num, 4.0)
    ci = cluster_interval(num, den)
    p = np.array([num.sum() / den.sum()])
    lo, hi = saturated_change((np.array([0.0]), np.array([0.0])), p, ci, p, ci)
    assert lo[0] < 0.0 < hi[0]
    assert hi[0] == pytest.approx(np.sqrt((ci[1][0] - p[0]) ** 2 + (p[0] - ci[0][0]) ** 2))
