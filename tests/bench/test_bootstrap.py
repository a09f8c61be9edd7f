"""The family bootstrap: resampling by family, ratio estimates, percentile intervals, pairing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evprobe.core.bootstrap import DEFAULT_SEED, Estimate, FamilyBootstrap, Resampled, percentile_interval

FAMILIES = [f"fam-{i:03d}" for i in range(144)]


@pytest.fixture(scope="module")
def boot() -> FamilyBootstrap:
    return FamilyBootstrap(FAMILIES, n_boot=2000, seed=DEFAULT_SEED)


def test_counts_resample_whole_families(boot: FamilyBootstrap) -> None:
    assert boot.counts.shape == (2000, 144)
    assert boot.counts.dtype.kind == "i" and (boot.counts >= 0).all()
    assert (boot.counts.sum(axis=1) == 144).all()  # each resample draws F families
    assert boot.family_index(["fam-007", "fam-000"]).tolist() == [7, 0]
    # every family is drawn about B times in all (one expected draw per resample)
    assert abs(boot.counts.sum(axis=0).mean() - 2000) < 1e-9
    with pytest.raises(ValueError, match="fam-999"):
        boot.family_index(["fam-999"])


def test_seeded_resamples_are_reproducible() -> None:
    a = FamilyBootstrap(FAMILIES, 200, seed=7)
    b = FamilyBootstrap(FAMILIES, 200, seed=7)
    c = FamilyBootstrap(FAMILIES, 200, seed=8)
    assert np.array_equal(a.counts, b.counts)
    assert not np.array_equal(a.counts, c.counts)


def test_rate_is_the_ratio_estimator_over_families(boot: FamilyBootstrap) -> None:
    rng = np.random.default_rng(0)
    den = rng.integers(0, 6, size=144).astype(float)
    num = np.floor(den * rng.uniform(size=144))
    part = boot.resample(num, den)
    assert part.value == num.sum() / den.sum() and part.n == int(den.sum())
    for b in (0, 17, 1999):
        assert part.draws[b] == pytest.approx((boot.counts[b] @ num) / (boot.counts[b] @ den))
    est = boot.rate(num, den)
    lo, hi = np.percentile(part.draws, [2.5, 97.5], method="linear")
    assert est.ci == (pytest.approx(lo), pytest.approx(hi))
    assert est.ci[0] <= est.value <= est.ci[1]


def test_rates_vectorised_match_one_at_a_time(boot: FamilyBootstrap) -> None:
    rng = np.random.default_rng(1)
    den = rng.integers(1, 5, size=(144, 3)).astype(float)
    num = np.floor(den * rng.uniform(size=(144, 3)))
    together = boot.rates(num, den)
    alone = [boot.rate(num[:, m], den[:, m]) for m in range(3)]
    assert together == alone


def test_empty_denominators(boot: FamilyBootstrap) -> None:
    assert boot.rate(np.zeros(144), np.zeros(144)) == Estimate(None, (None, None), 0)
    assert boot.rate(np.zeros(144), np.zeros(144)).to_json() == {
        "value": None,
        "ci": [None, None],
        "n": 0,
    }
    # Only two families have units: resamples that draw neither have no value and are dropped.
    num, den = np.zeros(144), np.zeros(144)
    num[3], den[3], den[90] = 2.0, 2.0, 2.0
    part = boot.resample(num, den)
    finite = part.draws[~np.isnan(part.draws)]
    assert 0 < len(finite) < 2000
    lo, hi = np.percentile(finite, [2.5, 97.5], method="linear")
    est = boot.estimate(part)
    assert est.value == 0.5 and est.n == 4 and est.ci == (pytest.approx(lo), pytest.approx(hi))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.lists(st.one_of(st.floats(-10, 10), st.just(float("nan"))), min_size=3, max_size=3),
        min_size=1,
        max_size=60,
    )
)
def test_percentiles_match_numpy_linear(rows: list[list[float]]) -> None:
    draws = np.array(rows, dtype=float)
    lo, hi = percentile_interval(draws)
    for m in range(draws.shape[1]):
        column = draws[:, m][~np.isnan(draws[:, m])]
        if len(column) == 0:
            assert np.isnan(lo[m]) and np.isnan(hi[m])
        else:
            want = np.percentile(column, [2.5, 97.5], method="linear")
            assert lo[m] == pytest.approx(want[0]) and hi[m] == pytest.approx(want[1])


def test_interval_of_a_constant_is_exact(boot: FamilyBootstrap) -> None:
    den = np.full(144, 4.0)
    est = boot.rate(den / 2, den)  # every family at exactly one half
    assert est == Estimate(0.5, (0.5, 0.5), 576)


def test_family_clusters_widen_the_interval(boot: FamilyBootstrap) -> None:
    """A measure that is constant within families but varies between them: resampling families
    (4 units each) gives an interval about sqrt(4) = 2 times wider than resampling units would."""
    per_family = np.array([1.0, 0.0] * 72)
    family_level = boot.rate(per_family * 4, np.full(144, 4.0))
    units = [f"unit-{i}" for i in range(576)]
    item_boot = FamilyBootstrap(units, 2000, DEFAULT_SEED)
    item_level = item_boot.rate(np.repeat(per_family, 4), np.ones(576))
    assert family_level.value == item_level.value == 0.5
    width = family_level.ci[1] - family_level.ci[0]
    item_width = item_level.ci[1] - item_level.ci[0]
    assert width > 1.6 * item_width


def test_paired_difference_and_product(boot: FamilyBootstrap) -> None:
    rng = np.random.default_rng(2)
    den = np.full(144, 4.0)
    a_num = rng.integers(0, 5, size=144).astype(float)
    a = boot.resample(a_num, den)
    same = boot.difference(a, a)
    assert same == Estimate(0.0, (0.0, 0.0), 576)
    # b = a plus one extra success in every family: the paired difference is exactly 1/4
    b = boot.resample(np.minimum(a_num + 1, 4), den)
    shift = boot.difference(b, a)
    ceiling = (a_num == 4).sum()
    assert shift.value == pytest.approx((144 - ceiling) / 576)
    assert shift.ci[1] - shift.ci[0] < boot.estimate(a).ci[1] - boot.estimate(a).ci[0]
    prod = boot.product([a, b], n=576)
    assert prod.value == pytest.approx(a.value * b.value)
    clamp = boot.combine(lambda x, y: np.maximum(0.0, x - y), [a, b], n=576)
    assert clamp == Estimate(0.0, (0.0, 0.0), 576)


def test_subset_has_its_own_deterministic_resamples(boot: FamilyBootstrap) -> None:
    chosen = FAMILIES[::2]
    sub = boot.subset(list(reversed(chosen)))
    assert sub.families == tuple(chosen)  # parent order, whatever the order asked
    assert sub.counts.shape == (2000, 72) and (sub.counts.sum(axis=1) == 72).all()
    again = boot.subset(chosen)
    assert np.array_equal(sub.counts, again.counts) and sub.seed == again.seed
    assert sub.seed != boot.seed
    assert boot.subset(FAMILIES[1::2]).seed != sub.seed
    with pytest.raises(ValueError, match="nope"):
        boot.subset(["nope"])


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        FamilyBootstrap([], 10)
    with pytest.raises(ValueError):
        FamilyBootstrap(["a", "a"], 10)
    with pytest.raises(ValueError):
        FamilyBootstrap(["a"], 0)
    with pytest.raises(ValueError, match="shape"):
        FamilyBootstrap(["a", "b"], 10).rate(np.ones(3), np.ones(3))


def test_estimate_json() -> None:
    assert Estimate(0.25, (0.1, 0.4), 8).to_json() == {"value": 0.25, "ci": [0.1, 0.4], "n": 8}
    assert Estimate.empty("no select records").to_json() == {
        "value": None,
        "ci": [None, None],
        "n": 0,
        "reason": "no select records",
    }


def test_family_counts_of_measures_and_of_their_differences() -> None:
    """`Resampled.held` marks the families holding a unit of a measure; `families_of` counts those of
    any of several (a paired difference rests on the families of either measure). A missing value
    takes no count."""
    from evprobe.core.bootstrap import families_of

    boot = FamilyBootstrap([f"f{i}" for i in range(6)], 50, 1)
    num = np.array([[1, 0], [1, 1], [0, 0], [1, 0], [0, 1], [0, 0]], float)
    den = np.array([[2, 0], [1, 1], [0, 0], [1, 0], [0, 2], [0, 0]], float)
    a, b = boot.resample_many(num, den)
    assert a.held.tolist() == [True, True, False, True, False, False] and families_of(a) == 3
    assert families_of(b) == 2 and families_of(a, b) == 4  # f1 in both counts once
    assert families_of(a, Resampled(0.5, a.draws, 4)) is None  # a part that does not say: no count
    assert Estimate.empty("no units").in_families(3).to_json() == Estimate.empty("no units").to_json()
