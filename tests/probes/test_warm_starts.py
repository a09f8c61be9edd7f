"""Warm starts never spoil a logistic fit: each solver starts from another layer's fit only where its
objective is no worse than the cold start's (probes.solvers.log_odds_share).

Before that rule a warm start whose margins were all near -90 (a fit carried to a layer it does not
suit, as the sweep's warm starts across layers did in tests/experiments/test_void_transfer.py) sent
both kernel solvers to NaN and left both primal solvers at the start (intercept -92 reported as the
optimum) or at 1970."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from evprobe.probes.multilabel import kernel_logistic_many, primal_logistic_many
from evprobe.probes.solvers import kernel_logistic, primal_logistic

TOL = 1e-10


def _problem(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    Z_wide = rng.normal(size=(40, 80))  # n < d: the kernel solvers
    Z_tall = rng.normal(size=(40, 5))  # n > d: the primal solvers
    y = (rng.random(40) < 0.4).astype(np.float64)
    return Z_wide, Z_tall, y


def _margins(solver: str, Z_wide, Z_tall, y, w0, b0) -> np.ndarray:
    """(n,) fitted margins of `solver` from the start (w0, b0); w0 None is the cold start."""
    K = Z_wide @ Z_wide.T
    if solver == "kernel":
        a, b, _ = kernel_logistic(K, y, 1.0, w0, b0, tol=TOL)
        return K @ a + b
    if solver == "primal":
        w, b, _ = primal_logistic(Z_tall, y, 1.0, w0, b0, tol=TOL)
        return Z_tall @ w + b
    if solver == "kernel_many":
        A, b, _ = kernel_logistic_many(K, y[:, None], 1.0, None if w0 is None else w0[:, None],
                                       None if b0 is None else np.array([b0]), tol=TOL)
        return (K @ A + b)[:, 0]
    W, b, _ = primal_logistic_many(Z_tall, y[:, None], 1.0, None if w0 is None else w0[:, None],
                                   None if b0 is None else np.array([b0]), tol=TOL)
    return (Z_tall @ W + b)[:, 0]


@pytest.mark.parametrize("solver", ["kernel", "primal", "kernel_many", "primal_many"])
@pytest.mark.parametrize("b0", [-30.0, -60.0, -92.0, -200.0, 200.0])
def test_a_far_warm_start_reaches_the_cold_optimum(solver: str, b0: float) -> None:
    Z_wide, Z_tall, y = _problem(1)
    n_weights = 40 if solver.startswith("kernel") else 5
    cold = _margins(solver, Z_wide, Z_tall, y, None, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no division by zero on the way either
        warm = _margins(solver, Z_wide, Z_tall, y, np.zeros(n_weights), b0)
    assert np.all(np.isfinite(warm))
    np.testing.assert_allclose(warm, cold, atol=1e-4)


def test_a_good_warm_start_is_still_taken() -> None:
    """The rule keeps the warm start where it helps: from the optimum itself, one Newton step."""
    Z_wide, _, y = _problem(2)
    K = Z_wide @ Z_wide.T
    a, b, cold_steps = kernel_logistic(K, y, 1.0, tol=TOL)
    _, _, warm_steps = kernel_logistic(K, y, 1.0, a, b, tol=TOL)
    A, B, steps = kernel_logistic_many(K, np.stack([y, y], axis=1), 1.0, np.stack([a, np.zeros(40)], axis=1),
                                       np.array([b, -92.0]), tol=TOL)
    assert warm_steps == 1 < cold_steps
    assert steps[0] == 1 and steps[1] > 1  # per label: the good start kept, the far one dropped
    np.testing.assert_allclose(K @ A[:, 1] + B[1], K @ a + b, atol=1e-4)
