"""AUROC with family-bootstrap weights."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from evprobe.core.bootstrap import FamilyBootstrap, percentile_interval
from evprobe.core.proportion import clopper_pearson
from evprobe.probes.inference import refit_interval
from evprobe.probes.metrics import (
    accuracy_estimate,
    auroc,
    auroc_draws,
    auroc_estimate,
    auroc_reading,
    delong_variance,
    placements,
    weighted_auroc,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=2, max_size=40))
def test_auroc_equals_sklearn_with_ties(pairs) -> None:
    scores = np.array([s for s, _ in pairs], dtype=float)  # few values: many ties
    y = np.array([b for _, b in pairs], dtype=int)
    if y.min() == y.max():
        assert np.isnan(auroc(scores, y))
    else:
        assert abs(auroc(scores, y) - roc_auc_score(y, scores)) < 1e-12


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.booleans(), st.integers(0, 3)), min_size=2, max_size=30))
def test_weighted_auroc_is_the_auroc_of_the_replicated_sample(rows) -> None:
    """Weight w_i = row i repeated w_i times: the bootstrap's counts, for whole families."""
    scores = np.array([r[0] for r in rows], dtype=float)
    y = np.array([r[1] for r in rows], dtype=int)
    w = np.array([r[2] for r in rows])
    rep_s, rep_y = np.repeat(scores, w), np.repeat(y, w)
    got = weighted_auroc(scores, y, w[None, :])[0]
    if len(rep_y) == 0 or rep_y.min() == rep_y.max():
        assert np.isnan(got)
    else:
        assert abs(got - roc_auc_score(rep_y, rep_s)) < 1e-12


def test_estimates_use_the_projects_bootstrap() -> None:
    rng = np.random.default_rng(0)
    fams = np.repeat([f"f{i:02d}" for i in range(40)], 4)
    y = np.tile([0, 1, 0, 1], 40)
    scores = y + rng.normal(0, 1.0, 160)
    boot = FamilyBootstrap(sorted(set(fams)), 500, seed=1)
    est = auroc_estimate(scores, y, fams, boot)
    assert est.n == 160 and est.ci[0] < est.value < est.ci[1]
    assert abs(est.value - roc_auc_score(y, scores)) < 1e-12
    # NaN scores (rows not scored) are left out of the value and of n
    scores2 = scores.copy()
    scores2[:8] = np.nan
    assert auroc_estimate(scores2, y, fams, boot).n == 152
    acc = accuracy_estimate(((scores > 0.5) == y).astype(float), fams, boot)
    assert acc.n == 160 and acc.ci[0] <= acc.value <= acc.ci[1]
    assert auroc_estimate(scores, np.zeros(160, dtype=int), fams, boot).value is None


# -- the interval rule (probes.metrics.unit_interval) ---------------------------------------------


def four_row_families(n_families: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(family ids (n,), family index (n,), labels (n,)): families of two positives and two negatives."""
    fams = np.repeat([f"f{i:03d}" for i in range(n_families)], 4).astype(object)
    return fams, np.repeat(np.arange(n_families), 4), np.tile([1, 0, 1, 0], n_families)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.booleans()), min_size=2, max_size=30))
def test_placement_values_average_to_the_auroc(pairs) -> None:
    scores = np.array([s for s, _ in pairs], dtype=float)  # ties count one half
    y = np.array([b for _, b in pairs], dtype=int)
    if y.min() == y.max():
        return
    v = placements(scores, y)
    assert ((0 <= v) & (v <= 1)).all()
    for part in (v[y == 1], v[y == 0], v):
        assert abs(part.mean() - auroc(scores, y)) < 1e-12


def test_the_delong_variance_is_the_fixed_model_bootstraps() -> None:
    """Family-linearised variance against the family bootstrap's, on the benchmark's shape (a
    family's shared component enters both classes)."""
    rng = np.random.default_rng(1)
    fams, idx, y = four_row_families(144)
    boot = FamilyBootstrap(sorted(set(fams)), 2000, seed=0)
    for shift in (0.0, 1.0, 3.0):
        scores = np.repeat(rng.standard_normal(144), 4) + rng.standard_normal(576) + shift * y
        sd_boot = np.nanstd(auroc_draws(scores, y, fams, boot), ddof=1)
        assert np.sqrt(delong_variance(scores, y, idx)) == pytest.approx(sd_boot, rel=0.1), shift


def test_a_near_perfect_auroc_is_never_narrower_than_a_perfect_one() -> None:
    """The issue's case: one discordant pair among 288 x 288 (0.99999) printed [0.99978, 1.0] beside
    a perfect separation's [0.975, 1.0]. Under the rule both reach down to the perfect one's bound,
    for the fixed-model interval and for the refits' (tiny spread against none)."""
    fams, idx, y = four_row_families(144)
    boot = FamilyBootstrap(sorted(set(fams)), 1000, seed=2)
    perfect = y.astype(float)
    near = perfect.copy()
    near[1] = 1.5  # one negative of family 0 above the positives of every other family but one
    near[4] = 1.25  # ... scored below it: one positive of family 1
    near[near == 1.0] = 2.0
    assert 0.9999 < auroc(near, y) < 1.0
    width = lambda ci: ci[1] - ci[0]  # noqa: E731
    p_est, n_est = auroc_estimate(perfect, y, fams, boot), auroc_estimate(near, y, fams, boot)
    assert p_est.ci == pytest.approx((0.025 ** (1 / 144), 1.0), abs=1e-12)
    assert n_est.ci[0] <= p_est.ci[0] and n_est.ci[1] == 1.0 and width(n_est.ci) >= width(p_est.ci)
    p_ref = refit_interval(1.0, np.ones(50), 144, reading=auroc_reading(perfect, y, idx))
    tiny = np.clip(auroc(near, y) + 1e-4 * np.random.default_rng(0).standard_normal(50), 0, 1)
    n_ref = refit_interval(auroc(near, y), tiny, 144, reading=auroc_reading(near, y, idx))
    assert p_ref == pytest.approx(p_est.ci, abs=1e-12)
    assert n_ref[0] <= p_ref[0] and width(n_ref) >= width(p_ref)
    # accuracy, which shares the refit intervals: 575/576 against 576/576
    correct = np.ones(576)
    p_acc = accuracy_estimate(correct, fams, boot)
    correct[5] = 0.0
    n_acc = accuracy_estimate(correct, fams, boot)
    assert n_acc.ci[0] <= p_acc.ci[0] and width(n_acc.ci) >= width(p_acc.ci)


def test_mid_range_intervals_are_the_resampling_ones() -> None:
    """At a mid-range AUROC the cluster interval and the reach sit inside the refits' interval, so
    the rule prints estimate +- t x sd unchanged; the fixed-model interval widens a little (the
    Clopper-Pearson interval at the effective size, as a proportion's does)."""
    from scipy import stats

    rng = np.random.default_rng(3)
    fams, idx, y = four_row_families(144)
    scores = np.repeat(rng.standard_normal(144), 4) + rng.standard_normal(576) + 1.0 * y
    a = auroc(scores, y)
    assert 0.65 < a < 0.8
    draws = a + 0.03 * rng.standard_normal(50)  # the refits' spread exceeds the fixed models'
    half = stats.t.ppf(0.975, 49) * draws.std(ddof=1)
    assert refit_interval(a, draws, 144, reading=auroc_reading(scores, y, idx)) == pytest.approx((a - half, a + half))
    boot = FamilyBootstrap(sorted(set(fams)), 2000, seed=4)
    lo, hi = percentile_interval(auroc_draws(scores, y, fams, boot))
    est = auroc_estimate(scores, y, fams, boot)
    assert est.ci[0] <= lo[0] and est.ci[1] >= hi[0]
    assert est.ci[1] - est.ci[0] < 1.25 * (hi[0] - lo[0])


def test_tied_scores_read_every_family_as_one_unit() -> None:
    """Every score tied: AUROC 0.5 on every resample; the interval is Clopper-Pearson 72 of 144, as
    the organism sweep's layer-0 rows print ([0.416, 0.584])."""
    fams, idx, y = four_row_families(144)
    est = auroc_estimate(np.zeros(576), y, fams, FamilyBootstrap(sorted(set(fams)), 200, seed=5))
    assert est.value == 0.5 and est.ci == pytest.approx(clopper_pearson(72, 144), abs=1e-9)
