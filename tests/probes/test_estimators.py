"""The three probes: scikit-learn's estimator shape, exact agreement with scikit-learn's logistic
regression, the mass-mean direction, and recovery of a planted direction."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from evprobe.probes.estimators import LogisticProbe, MassMeanProbe, NearestCentroidProbe
from evprobe.probes.solvers import kernel_logistic, mass_mean_direction, primal_logistic, standardize_fit

PROBES = [LogisticProbe(), MassMeanProbe(), MassMeanProbe(pooled_covariance=True), NearestCentroidProbe()]


def _data(n: int, d: int, seed: int = 0, strength: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * rng.uniform(0.5, 3.0, d) + rng.normal(0, 2, d)
    y = (X[:, 0] / 3 + strength * rng.standard_normal(n) > X[:, 0].mean() / 3).astype(int)
    return X, y


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: repr(p))
def test_sklearn_estimator_shape(probe) -> None:
    X, y = _data(60, 20)
    labels = np.where(y == 1, "yes", "no")  # any two label values
    fresh = clone(probe)
    assert fresh.get_params() == probe.get_params()
    assert not [k for k in vars(fresh) if k.endswith("_")]  # nothing learned before fit
    assert fresh.fit(X, labels) is fresh
    learned = [k for k in vars(fresh) if k.endswith("_")]
    assert "direction_" in learned and "classes_" in learned
    assert list(fresh.classes_) == ["no", "yes"]
    assert abs(np.linalg.norm(fresh.direction_) - 1) < 1e-9
    proba = fresh.predict_proba(X)
    assert proba.shape == (60, 2) and np.allclose(proba.sum(axis=1), 1) and (proba >= 0).all()
    assert set(fresh.predict(X)) <= {"no", "yes"}
    # predict agrees with the sign of the decision and with the larger probability
    dec = fresh.decision_function(X)
    assert np.array_equal(fresh.predict(X) == "yes", dec > 0)
    assert np.array_equal(proba[:, 1] > 0.5, dec > 0) or isinstance(fresh, NearestCentroidProbe)
    assert 0.0 <= fresh.score(X, labels) <= 1.0
    with pytest.raises(ValueError, match="two classes"):
        clone(probe).fit(X, np.zeros(60))


@pytest.mark.parametrize(("n", "d", "solver"), [(40, 100, "kernel"), (60, 500, "auto"), (200, 30, "primal"),
                                                (200, 30, "auto"), (50, 80, "primal")])
def test_logistic_matches_sklearn_pipeline(n: int, d: int, solver: str) -> None:
    """The kernel (representer) solution equals StandardScaler + LogisticRegression(C=1)."""
    X, y = _data(n, d, seed=n + d)
    sk = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, tol=1e-12, max_iter=100_000)).fit(X, y)
    probe = LogisticProbe(solver=solver).fit(X, y)
    X_test = _data(30, d, seed=99)[0]
    scale = np.abs(sk.decision_function(X_test)).max()
    assert np.abs(probe.decision_function(X_test) - sk.decision_function(X_test)).max() < 1e-4 * max(scale, 1)
    assert np.allclose(probe.coef_, sk[-1].coef_[0], atol=1e-5)
    assert np.allclose(probe.mean_, sk[0].mean_) and np.allclose(probe.scale_, sk[0].scale_)
    # the direction is the standardised weights mapped back to the residual basis
    w = sk[-1].coef_[0] / sk[0].scale_
    assert np.dot(probe.direction_, w / np.linalg.norm(w)) > 1 - 1e-8


def test_kernel_and_primal_newton_agree_with_C() -> None:
    X, y = _data(40, 80, seed=5)  # n < d: alpha is unique up to K's null space (the constant)
    mean, scale = standardize_fit(X)
    Z = (X - mean) / scale
    for C in (0.01, 1.0, 100.0):
        alpha, b1, _ = kernel_logistic(Z @ Z.T, y, C)
        w, b2, _ = primal_logistic(Z, y, C)
        assert np.allclose(Z.T @ alpha, w, atol=1e-6 * max(1, np.abs(w).max())) and abs(b1 - b2) < 1e-6
        r = 1 / (1 + np.exp(-(Z @ w + b2))) - y
        assert np.allclose(Z.T @ (alpha + C * r), 0, atol=1e-5 * max(1, C))  # the dual: w = -C Z^T r


def test_mass_mean_direction_is_normalised_mean_difference() -> None:
    X, y = _data(90, 25, seed=2)
    diff = X[y == 1].mean(axis=0) - X[y == 0].mean(axis=0)
    probe = MassMeanProbe().fit(X, y)
    assert np.allclose(probe.direction_, diff / np.linalg.norm(diff))


def test_pooled_covariance_through_woodbury_equals_direct_solve() -> None:
    X, y = _data(30, 70, seed=4)  # d > n: the Gram (Woodbury) path
    A = X - np.where(y[:, None] == 1, X[y == 1].mean(0), X[y == 0].mean(0))
    S = A.T @ A / (len(X) - 2)
    lam = 0.1 * np.trace(S) / X.shape[1]
    diff = X[y == 1].mean(0) - X[y == 0].mean(0)
    direct = np.linalg.solve(S + lam * np.eye(X.shape[1]), diff)
    assert np.allclose(mass_mean_direction(X, y, True, 0.1), direct, rtol=1e-6, atol=1e-9)
    X2, y2 = _data(100, 10, seed=4)  # d <= n: the direct path
    A2 = X2 - np.where(y2[:, None] == 1, X2[y2 == 1].mean(0), X2[y2 == 0].mean(0))
    S2 = A2.T @ A2 / 98
    d2 = X2[y2 == 1].mean(0) - X2[y2 == 0].mean(0)
    assert np.allclose(mass_mean_direction(X2, y2, True, 0.1),
                       np.linalg.solve(S2 + 0.1 * np.trace(S2) / 10 * np.eye(10), d2))


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: repr(p))
def test_probes_recover_a_planted_direction(probe) -> None:
    """Isotropic noise plus a class shift along u: every probe's direction_ has cosine > 0.95."""
    rng = np.random.default_rng(8)
    d, n = 32, 1000
    u = rng.standard_normal(d)
    u /= np.linalg.norm(u)
    y = rng.integers(0, 2, n)
    X = rng.standard_normal((n, d)) + np.outer(2.0 * (y - 0.5), u) + 5.0  # an offset the probes must ignore
    fitted = clone(probe).fit(X, y)
    assert np.dot(fitted.direction_, u) > 0.95
