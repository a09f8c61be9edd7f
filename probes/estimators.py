"""Three linear probes in scikit-learn's estimator shape, each with a unit `direction_` in the
model's residual basis, so that probing and steering speak the same language.

- `LogisticProbe`: StandardScaler, then L2-regularised logistic regression, C = 1 by default
  (TRAPS's setting): minimise C * sum_i logloss(y_i, w.z_i + b) + ||w||^2 / 2 over standardised
  rows z, intercept unpenalised (scikit-learn's objective). `direction_` = w / scale, normalised:
  the decision w.(x - mean)/scale + b is a linear function of x whose gradient is w / scale.
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

Why a kernel solver. With n items << d dimensions (576 x 3,584 for a 7B model), the logistic
optimum lies in the span of the standardised training rows (representer theorem: the gradient
in w is C Z^T r + w, so w = -C Z^T r at the optimum; the intercept is unpenalised and the rows
are centred). Writing w = Z^T alpha turns the problem into n unknowns with the Gram matrix
K = Z Z^T: margins K alpha + b, penalty alpha^T K alpha / 2. `kernel_logistic` runs Newton's
method on (alpha, b) with an (n+1) x (n+1) linear solve per step; this is the same optimum as
scikit-learn's (tested), found in a few milliseconds instead of an lbfgs run over d features.
With n >= d, `primal_logistic` runs the same Newton iteration on (w, b).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg.lapack import dpotrf, dpotrs
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

_EPS = np.finfo(np.float64).eps


# -- shared math ------------------------------------------------------------------------------


def standardize_fit(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """StandardScaler's mean and scale: population std, and 1 where a feature is constant
    (scikit-learn replaces scales below 10 * eps by 1)."""
    X = np.asarray(X)
    mean = X.mean(axis=0, dtype=np.float64)
    var = X.var(axis=0, dtype=np.float64)
    scale = np.sqrt(var)
    scale[scale < 10 * np.finfo(np.float64).eps] = 1.0
    return mean.astype(X.dtype, copy=False), scale.astype(X.dtype, copy=False)


def unit(v: np.ndarray) -> np.ndarray:
    """v / |v| in float64 (a zero vector stays zero)."""
    v = np.asarray(v, dtype=np.float64)
    norm = np.linalg.norm(v)
    return v / norm if norm > 0 else v


def _log1pexp(m: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, m)


def _sigmoid(m: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * m))  # stable for large |m|


def kernel_logistic(
    K: np.ndarray,
    y: np.ndarray,
    C: float = 1.0,
    alpha0: np.ndarray | None = None,
    b0: float | None = None,
    tol: float = 1e-10,
    max_iter: int = 100,
    weight: np.ndarray | None = None,
) -> tuple[np.ndarray, float, int]:
    """Newton's method for min C sum_i weight_i logloss(y_i, (K alpha + b)_i) + alpha^T K alpha / 2.

    K: (n, n) Gram matrix of the (standardised) training rows; y: (n,) in {0, 1}. Returns
    (alpha (n,), b, iterations); w = Z^T alpha is the primal L2 logistic optimum.
    `weight` (n,) > 0 (default 1) counts row i weight_i times: a bootstrap resample that draws a
    family twice fits its distinct rows with weight 2, the same optimum as duplicating them
    (tested), on a smaller Gram matrix. With weights, r and D below carry the weight.

    The Newton system in (d_alpha, d_b), with r = sigma(m) - y, D = diag(sigma'(m)), v = C r +
    alpha, after dividing the alpha block by K (both sides lie in K's range), is
        (I + C D K) d_alpha + C D 1 d_b = -v,      1^T D (K d_alpha + 1 d_b) = -1^T r.
    Writing dm = K d_alpha + 1 d_b (the change of the margins) and q = D^{1/2} dm, it becomes one
    symmetric positive definite solve, M = I + C D^{1/2} K D^{1/2} (eigenvalues >= 1):
        M q = D^{1/2} (-K v) + D^{1/2} 1 d_b,   (D^{1/2} 1)^T q = -1^T r,   d_alpha = -v - C D^{1/2} q,
    solved by one Cholesky factorisation and two right-hand sides (d_b is then a scalar
    equation). A backtracking (Armijo) line search keeps every step a descent step. Stops when
    the Newton decrement^2 / 2 falls below tol * max(1, objective).
    """
    K = np.asarray(K, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = len(y)
    wt = np.ones(n) if weight is None else np.asarray(weight, dtype=np.float64)  # (n,)
    alpha = np.zeros(n) if alpha0 is None else np.array(alpha0, dtype=np.float64)
    if b0 is None:
        p = np.clip(float(wt @ y) / float(wt.sum()), 1e-6, 1 - 1e-6)
        b = float(np.log(p / (1 - p)))
    else:
        b = float(b0)
    Ka = K @ alpha
    m = Ka + b
    obj = C * float(wt @ (_log1pexp(m) - y * m)) + 0.5 * float(alpha @ Ka)
    rhs = np.empty((n, 2))
    M = np.empty((n, n))
    diag = np.arange(n)
    it = 0
    for it in range(1, max_iter + 1):
        p = _sigmoid(m)
        r = wt * (p - y)
        s = np.sqrt(wt * p * (1.0 - p))  # D^{1/2}
        v = C * r + alpha
        Kv = K @ v
        np.multiply(K, (C * s)[:, None], out=M)
        M *= s[None, :]
        M[diag, diag] += 1.0
        rhs[:, 0] = -s * Kv
        rhs[:, 1] = s
        # LAPACK's Cholesky directly: several times faster than np.linalg.cholesky at n ~ 500
        L, info = dpotrf(M.T, lower=1, clean=0, overwrite_a=1)  # M.T: the same symmetric matrix, Fortran order
        if info == 0:
            q01, info = dpotrs(L, rhs, lower=1)
        if info != 0:  # not numerically positive definite: fall back to least squares
            M = (C * s)[:, None] * K * s[None, :]
            M[diag, diag] += 1.0
            q01 = np.linalg.lstsq(M, rhs, rcond=None)[0]
        q0, q1 = q01[:, 0], q01[:, 1]
        db = (-r.sum() - s @ q0) / (s @ q1)
        da = -v - C * s * (q0 + q1 * db)
        Kda = K @ da
        slope = float(Kv @ da) + C * float(r.sum()) * db  # gradient (K v, C 1^T r) . step
        if -slope / 2 <= tol * max(1.0, abs(obj)):
            break
        aKa, aKda, daKda = float(alpha @ Ka), float(alpha @ Kda), float(da @ Kda)
        t = 1.0
        for _ in range(40):
            m_new = m + t * (Kda + db)
            new = C * float(wt @ (_log1pexp(m_new) - y * m_new)) + 0.5 * (aKa + 2 * t * aKda + t * t * daKda)
            if new <= obj + 1e-4 * t * slope:
                break
            t *= 0.5
        alpha = alpha + t * da
        b = b + t * db
        Ka = Ka + t * Kda
        m = Ka + b
        obj = new
    return alpha, b, it


def primal_logistic(
    Z: np.ndarray,
    y: np.ndarray,
    C: float = 1.0,
    w0: np.ndarray | None = None,
    b0: float | None = None,
    tol: float = 1e-10,
    max_iter: int = 100,
    weight: np.ndarray | None = None,
) -> tuple[np.ndarray, float, int]:
    """Newton's method for min C sum_i weight_i logloss(y_i, z_i.w + b) + |w|^2 / 2 (Z: (n, d),
    d <= n; `weight` as in kernel_logistic)."""
    Z = np.asarray(Z, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    wt = np.ones(len(y)) if weight is None else np.asarray(weight, dtype=np.float64)  # (n,)
    dim = Z.shape[1]
    w = np.zeros(dim) if w0 is None else np.array(w0, dtype=np.float64)
    if b0 is None:
        p = np.clip(float(wt @ y) / float(wt.sum()), 1e-6, 1 - 1e-6)
        b = float(np.log(p / (1 - p)))
    else:
        b = float(b0)
    m = Z @ w + b
    obj = C * float(wt @ (_log1pexp(m) - y * m)) + 0.5 * float(w @ w)
    it = 0
    for it in range(1, max_iter + 1):
        p = _sigmoid(m)
        r = wt * (p - y)
        d = wt * p * (1.0 - p)
        g = np.concatenate([C * (Z.T @ r) + w, [C * r.sum()]])
        H = np.empty((dim + 1, dim + 1))
        Zd = Z * (C * d)[:, None]
        H[:dim, :dim] = Z.T @ Zd
        H[np.arange(dim), np.arange(dim)] += 1.0
        H[:dim, dim] = H[dim, :dim] = Zd.sum(axis=0)
        H[dim, dim] = C * d.sum()
        try:
            step = -np.linalg.solve(H, g)
        except np.linalg.LinAlgError:
            step = -np.linalg.lstsq(H, g, rcond=None)[0]
        slope = float(g @ step)
        if -slope / 2 <= tol * max(1.0, abs(obj)):
            break
        dw, db = step[:dim], step[dim]
        dm = Z @ dw + db
        t = 1.0
        for _ in range(40):
            m_new = m + t * dm
            w_new = w + t * dw
            new = C * float(wt @ (_log1pexp(m_new) - y * m_new)) + 0.5 * float(w_new @ w_new)
            if new <= obj + 1e-4 * t * slope:
                break
            t *= 0.5
        w, b, m, obj = w + t * dw, b + t * db, m + t * dm, new
    return w, b, it


def mass_mean_direction(
    X: np.ndarray, y: np.ndarray, pooled_covariance: bool = False, shrinkage: float = 0.1
) -> np.ndarray:
    """Unnormalised mass-mean direction (d,) float64: mu_1 - mu_0, or with the pooled
    within-class covariance (Sigma_w + lambda I)^{-1} (mu_1 - mu_0), lambda = shrinkage x
    trace(Sigma_w) / d. For d > n the solve goes through the n x n Gram matrix (Woodbury):
    (lambda I + A^T A / m)^{-1} v = (v - A^T (m lambda I + A A^T)^{-1} A v) / lambda, with A the
    (n, d) within-class centred rows and m = n - 2."""
    X = np.asarray(X)
    y = np.asarray(y).astype(bool)
    mu1 = X[y].mean(axis=0, dtype=np.float64)
    mu0 = X[~y].mean(axis=0, dtype=np.float64)
    diff = mu1 - mu0
    if not pooled_covariance:
        return diff
    A = np.asarray(X, dtype=np.float64) - np.where(y[:, None], mu1, mu0)  # (n, d)
    n, dim = A.shape
    m = max(n - 2, 1)
    lam = shrinkage * float(np.einsum("ij,ij->", A, A)) / (m * dim)
    if lam <= 0:
        lam = 1e-12
    if dim <= n:
        S = A.T @ A / m
        S[np.arange(dim), np.arange(dim)] += lam
        return np.linalg.solve(S, diff)
    G = A @ A.T
    G[np.arange(n), np.arange(n)] += m * lam
    return (diff - A.T @ np.linalg.solve(G, A @ diff)) / lam


def lda_calibration(t: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(slope, offset) of the 1-D Gaussian LDA log-odds slope * t + offset for projections t.

    Class means m_1, m_0, pooled variance s2, priors pi: log-odds = (m_1 - m_0)/s2 * (t - (m_1 +
    m_0)/2) + log(pi_1 / pi_0). A zero variance (perfectly separated, identical projections) is
    floored so the sign of the decision still splits at the midpoint.
    """
    t = np.asarray(t, dtype=np.float64)
    y = np.asarray(y).astype(bool)
    m1, m0 = t[y].mean(), t[~y].mean()
    resid = np.where(y, t - m1, t - m0)
    s2 = float(resid @ resid) / max(len(t) - 2, 1)
    s2 = max(s2, 1e-12 * max(1.0, (m1 - m0) ** 2))
    slope = (m1 - m0) / s2
    prior = np.log(y.mean() / (1 - y.mean()))
    return float(slope), float(-slope * (m1 + m0) / 2 + prior)


# -- estimators -------------------------------------------------------------------------------


class _BinaryProbe(ClassifierMixin, BaseEstimator):
    """Shared plumbing: binary labels of any type, predict from the decision's sign."""

    def _prepare(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        X = np.asarray(X)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (n_samples, n_features), got shape {X.shape}")
        if X.dtype.kind != "f" or X.dtype.itemsize < 4:
            X = X.astype(np.float32 if X.dtype == np.float16 else np.float64)
        if not np.isfinite(X).all():
            raise ValueError("X contains NaN or infinity")
        y = np.asarray(y)
        if len(y) != len(X):
            raise ValueError(f"X has {len(X)} rows but y has {len(y)}")
        self.classes_ = np.unique(y)
        if len(self.classes_) != 2:
            raise ValueError(f"a probe needs exactly two classes, got {len(self.classes_)}: {self.classes_}")
        self.n_features_in_ = X.shape[1]
        return X, (y == self.classes_[1]).astype(np.float64)

    def _check(self, X: np.ndarray) -> np.ndarray:
        check_is_fitted(self, "direction_")
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise ValueError(f"X must have shape (n, {self.n_features_in_}), got {X.shape}")
        return X

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.classes_[(self.decision_function(X) > 0).astype(int)]


class LogisticProbe(_BinaryProbe):
    """StandardScaler + L2 logistic regression (C = 1: TRAPS), solved exactly by Newton's method,
    in the span of the training rows when n_samples < n_features (`solver="auto"`).

    Learned: `mean_`, `scale_` (the scaler), `coef_` (d,) in standardised space, `intercept_`,
    `direction_` (unit, residual basis), `n_iter_`, `classes_`.
    """

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

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        p = _sigmoid(self.decision_function(X))
        return np.column_stack([1 - p, p])


class MassMeanProbe(_BinaryProbe):
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

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        p = _sigmoid(self.decision_function(X))
        return np.column_stack([1 - p, p])


def centroid_fit(Z: np.ndarray, y01: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit class centroids (c_0, c_1) of L2-normalised standardised rows Z (n, d)."""
    norms = np.linalg.norm(Z, axis=1, keepdims=True)
    U = Z / np.where(norms > 0, norms, 1.0)
    y = np.asarray(y01).astype(bool)
    return unit(U[~y].mean(axis=0)), unit(U[y].mean(axis=0))


def centroid_decision(Z: np.ndarray, c0: np.ndarray, c1: np.ndarray) -> np.ndarray:
    """cos(z, c_1) - cos(z, c_0) for standardised rows Z (n, d); 0 for a zero row."""
    norms = np.linalg.norm(Z, axis=1)
    return (Z @ (c1 - c0)) / np.where(norms > 0, norms, 1.0)


class NearestCentroidProbe(_BinaryProbe):
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

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        p = np.clip((self.decision_function(X) + 2.0) / 4.0, 0.0, 1.0)
        return np.column_stack([1 - p, p])


PROBES: dict[str, type[_BinaryProbe]] = {
    "logistic": LogisticProbe,
    "massmean": MassMeanProbe,
    "centroid": NearestCentroidProbe,
}


def make_probe(name: str, C: float = 1.0, pooled_covariance: bool = False) -> _BinaryProbe:
    if name == "logistic":
        return LogisticProbe(C=C)
    if name == "massmean":
        return MassMeanProbe(pooled_covariance=pooled_covariance)
    if name == "centroid":
        return NearestCentroidProbe()
    raise ValueError(f"unknown probe {name!r}; use one of {', '.join(PROBES)}")
