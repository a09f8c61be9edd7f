"""The three built-in probes, in the probe protocol (probes.protocol: scikit-learn's estimator shape),
each with a unit `direction_` in the model's residual basis, so that probing and steering speak the
same language. A probe's parameters are declared once, on its `__init__` (scikit-learn's rule);
`probes.registry` names it, and every caller receives a `ProbeSpec` (name + parameters).

- `LogisticProbe`: StandardScaler, then L2-regularised logistic regression, C = 1 by default
  (TRAPS's setting): minimise C * sum_i logloss(y_i, w.z_i + b) + ||w||^2 / 2 over standardised
  rows z, intercept unpenalised (scikit-learn's objective). `direction_` = w / scale, normalised:
  the decision w.(x - mean)/scale + b is a linear function of x whose gradient is w / scale.
  Solved by probes.solvers (Newton in the span of the training rows when n < d).
- `MassMeanProbe`: mu_1 - mu_0 (difference of class means, the direction TRAPS steers with);
  with `pooled_covariance=True`, (Sigma_w + lambda I)^{-1} (mu_1 - mu_0) (Fisher's LDA
  direction, Sigma_w the pooled within-class covariance, lambda = `shrinkage` x its mean
  eigenvalue, which keeps it defined when d > n). Scores are the 1-D Gaussian LDA log-odds of
  the projection x.direction_ (equal class variances): monotone in the projection.
- `NearestCentroidProbe`: TRAPS appendix H: standardise, L2-normalise each row, average per
  class, assign to the class whose centroid has the larger cosine. The decision is
  cos(z, c_1) - cos(z, c_0) in [-2, 2]; `predict_proba` maps it linearly to [0, 1] (a score,
  not a calibrated probability). `direction_` = (c_1/|c_1| - c_0/|c_0|) / scale normalised,
  the first-order read direction in the residual basis.

Directions are read directions: the probe's linear score grows along `direction_`. For the
mass-mean probe without covariance this is also the displacement between the class means
(steering's v = (h_1 - h_0)/|h_1 - h_0|); for the logistic probe the two differ when features
are correlated, which is why `probes.directions` writes the mass-mean direction for steering by
default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from evprobe.probes.protocol import LinearProbe, ProbeCapabilities
from evprobe.probes.registry import ProbeSpec, register_probe
from evprobe.probes.solvers import (
    centroid_decision,
    centroid_fit,
    kernel_logistic,
    lda_calibration,
    mass_mean_direction,
    primal_logistic,
    sigmoid,
    standardize_fit,
    unit,
)

if TYPE_CHECKING:
    from evprobe.probes.engine import Fitter


@register_probe("logistic")
class LogisticProbe(LinearProbe):
    """StandardScaler + L2 logistic regression (C = 1: TRAPS), solved exactly by Newton's method,
    in the span of the training rows when n_samples < n_features (`solver="auto"`).

    Learned: `mean_`, `scale_` (the scaler), `coef_` (d,) in standardised space, `intercept_`,
    `direction_` (unit, residual basis), `n_iter_`, `classes_`.
    """

    capabilities = ProbeCapabilities(refit_intervals=True)  # probes.refit solves this objective

    def __init__(self, C: float = 1.0, solver: str = "auto", tol: float = 1e-10, max_iter: int = 100) -> None:
        self.C = C
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter

    def fit(self, X: np.ndarray, y: np.ndarray) -> LogisticProbe:
        if self.solver not in ("auto", "kernel", "primal"):
            raise ValueError(f"solver must be auto, kernel or primal, got {self.solver!r}")
        if not self.C > 0:
            raise ValueError(f"C must be positive, got {self.C}")
        X, y01 = self._prepare(X, y)
        self.mean_, self.scale_ = standardize_fit(X)
        Z = (X - self.mean_) / self.scale_  # (n, d)
        kernel = self.solver == "kernel" or (self.solver == "auto" and Z.shape[0] < Z.shape[1])
        if kernel:
            K = Z @ Z.T  # (n, n)
            alpha, b, it = kernel_logistic(K, y01, self.C, tol=self.tol, max_iter=self.max_iter)
            coef = Z.T.astype(np.float64) @ alpha
        else:
            coef, b, it = primal_logistic(Z, y01, self.C, tol=self.tol, max_iter=self.max_iter)
        self.coef_ = coef
        self.intercept_ = float(b)
        self.n_iter_ = it
        self.direction_ = unit(coef / self.scale_)
        return self

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        X = self._check(X)
        return ((X - self.mean_) / self.scale_) @ self.coef_ + self.intercept_

    def fitter(self) -> Fitter:
        """One Gram matrix per training set for every label vector; control tasks solved together."""
        from evprobe.probes.engine import LogisticFitter

        return LogisticFitter(self.C)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        p = sigmoid(self.decision_function(X))
        return np.column_stack([1 - p, p])


@register_probe("massmean")
class MassMeanProbe(LinearProbe):
    """Difference of class means (optionally through the pooled within-class covariance).

    Learned: `direction_` (unit, residual basis), `slope_`, `offset_` (the 1-D LDA log-odds of
    the projection), `classes_`.
    """

    def __init__(self, pooled_covariance: bool = False, shrinkage: float = 0.1) -> None:
        self.pooled_covariance = pooled_covariance
        self.shrinkage = shrinkage

    def fit(self, X: np.ndarray, y: np.ndarray) -> MassMeanProbe:
        if not self.shrinkage > 0:
            raise ValueError(f"shrinkage must be positive, got {self.shrinkage}")
        X, y01 = self._prepare(X, y)
        self.direction_ = unit(mass_mean_direction(X, y01, self.pooled_covariance, self.shrinkage))
        self.slope_, self.offset_ = lda_calibration(X @ self.direction_, y01)
        return self

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        return self.slope_ * (self._check(X) @ self.direction_) + self.offset_

    def fitter(self) -> Fitter:
        from evprobe.probes.engine import MassMeanFitter

        return MassMeanFitter(self.pooled_covariance, self.shrinkage)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        p = sigmoid(self.decision_function(X))
        return np.column_stack([1 - p, p])


@register_probe("centroid")
class NearestCentroidProbe(LinearProbe):
    """Cosine nearest centroid in standardised space (TRAPS appendix H).

    Learned: `mean_`, `scale_`, `centroids_` (2, d) unit centroids in standardised space,
    `direction_` (unit, residual basis), `classes_`.
    """

    def __init__(self) -> None:
        pass

    def fit(self, X: np.ndarray, y: np.ndarray) -> NearestCentroidProbe:
        X, y01 = self._prepare(X, y)
        self.mean_, self.scale_ = standardize_fit(X)
        c0, c1 = centroid_fit((X - self.mean_) / self.scale_, y01)
        self.centroids_ = np.stack([c0, c1])
        self.direction_ = unit((c1 - c0) / self.scale_)
        return self

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        Z = (self._check(X) - self.mean_) / self.scale_
        return centroid_decision(Z, self.centroids_[0], self.centroids_[1])

    def fitter(self) -> Fitter:
        from evprobe.probes.engine import CentroidFitter

        return CentroidFitter()

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        p = np.clip((self.decision_function(X) + 2.0) / 4.0, 0.0, 1.0)
        return np.column_stack([1 - p, p])


def make_probe(name: str, **params: object) -> LinearProbe:
    """A fresh estimator of the registered probe `name` with `params` (probes.registry refuses an
    unknown name or parameter in one line)."""
    return ProbeSpec.of(name, params).make()
