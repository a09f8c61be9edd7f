"""The math under every linear probe, in one place: the scaler, the L2 logistic solvers (Newton in
the span of the training rows, or in the primal), the mass-mean direction with its LDA calibration,
and the cosine centroids. The estimators (probes.estimators), the fold engine (probes.engine), the
batched control-task solver (probes.multilabel) and the refits (probes.refit) all call these.

Why a kernel solver. With n items << d dimensions (576 x 3,584 for a 7B model), the logistic
optimum lies in the span of the standardised training rows (representer theorem: the gradient
in w is C Z^T r + w, so w = -C Z^T r at the optimum; the intercept is unpenalised and the rows
are centred). Writing w = Z^T alpha turns the problem into n unknowns with the Gram matrix
K = Z Z^T: margins K alpha + b, penalty alpha^T K alpha / 2. `kernel_logistic` runs Newton's
method on (alpha, b) with an (n+1) x (n+1) linear solve per step; this is the same optimum as
scikit-learn's (tested), found in a few milliseconds instead of an lbfgs run over d features.
With n >= d, `primal_logistic` runs the same Newton iteration on (w, b).

Kept hand-written rather than scikit-learn's LogisticRegression: the sweep needs warm starts across
layers, row weights for family resamples, one Gram matrix shared by many label vectors, and the
dual solve when n << d; tests/probes/test_estimators.py checks the optimum against scikit-learn's.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg.lapack import dpotrf, dpotrs

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


def log1pexp(m: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, m)


def sigmoid(m: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * m))  # stable for large |m|


def log_odds_share(y: np.ndarray, weight: np.ndarray | None = None) -> float:
    """The cold start's intercept: the log-odds of the (weighted) positive share, clipped to 1e-6.

    Every solver starts from it with zero weights, and takes a warm start (another layer's or fold's
    fit) only where its objective is no worse: a fit carried to a layer it does not suit can put every
    margin near -90, where sigma' underflows, the Newton system degenerates and the iteration returned
    NaN (kernel solvers) or stopped at the start (primal), as tests/probes/test_warm_starts.py shows."""
    wt = np.ones(len(y)) if weight is None else weight
    p = np.clip(float(wt @ y) / float(wt.sum()), 1e-6, 1 - 1e-6)
    return float(np.log(p / (1 - p)))


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

    def start(alpha: np.ndarray, b: float) -> tuple[np.ndarray, float, np.ndarray, float]:
        Ka = K @ alpha
        m = Ka + b
        return alpha, b, Ka, C * float(wt @ (log1pexp(m) - y * m)) + 0.5 * float(alpha @ Ka)

    alpha, b, Ka, obj = start(np.zeros(n), log_odds_share(y, wt))
    if alpha0 is not None or b0 is not None:
        warm = start(np.zeros(n) if alpha0 is None else np.array(alpha0, dtype=np.float64),
                     log_odds_share(y, wt) if b0 is None else float(b0))
        if warm[3] <= obj:  # a warm start worse than the cold one is dropped (`log_odds_share`)
            alpha, b, Ka, obj = warm
    m = Ka + b
    rhs = np.empty((n, 2))
    M = np.empty((n, n))
    diag = np.arange(n)
    it = 0
    for it in range(1, max_iter + 1):
        p = sigmoid(m)
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
            new = C * float(wt @ (log1pexp(m_new) - y * m_new)) + 0.5 * (aKa + 2 * t * aKda + t * t * daKda)
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

    def start(w: np.ndarray, b: float) -> tuple[np.ndarray, float, np.ndarray, float]:
        m = Z @ w + b
        return w, b, m, C * float(wt @ (log1pexp(m) - y * m)) + 0.5 * float(w @ w)

    w, b, m, obj = start(np.zeros(dim), log_odds_share(y, wt))
    if w0 is not None or b0 is not None:
        warm = start(np.zeros(dim) if w0 is None else np.array(w0, dtype=np.float64),
                     log_odds_share(y, wt) if b0 is None else float(b0))
        if warm[3] <= obj:  # as in kernel_logistic
            w, b, m, obj = warm
    it = 0
    for it in range(1, max_iter + 1):
        p = sigmoid(m)
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
            new = C * float(wt @ (log1pexp(m_new) - y * m_new)) + 0.5 * float(w_new @ w_new)
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
