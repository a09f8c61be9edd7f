"""AUROC with family-bootstrap weights."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from evprobe.core.bootstrap import FamilyBootstrap
from evprobe.probes.metrics import accuracy_estimate, auroc, auroc_estimate, weighted_auroc


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
