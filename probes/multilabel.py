"""Many label vectors on one Gram matrix: the logistic probe for the control tasks.

The sweep fits ~20 control tasks beside the target at every layer, position and outer fold. The
engine's `LogisticFitter` shares the scaler and the Gram matrix K (m, m) between label
vectors, but each label then runs its own Newton iteration whose cost is one Cholesky
factorisation of an m x m matrix per step (~3.5 ms at m = 460 on one core, ~5-10 steps): 20
controls x 5 folds x 40 layers would add about 70 s of CPU to a 7B-size sweep.

`kernel_logistic_many` solves the *same* problem as `probes.solvers.kernel_logistic` (same
objective, same Newton system, same Armijo line search, same stopping rule: Newton decrement^2 / 2
<= tol * max(1, objective)) for all labels at once, with the Newton system solved by conjugate
gradients instead of a factorisation. The system matrix M = I + C D^{1/2} K D^{1/2} is symmetric
positive definite (eigenvalues >= 1), so CG converges; a Jacobi preconditioner (diag M =
1 + C D_i K_ii) absorbs the spread of D between memorised and unfitted rows. Every CG step of all
labels is one (m, m) x (m, 2L) product (in float32), so the labels share the BLAS work. CG stops at a
relative residual of 1e-5 (`CG_TOL`): Newton steps that close to the exact ones change neither
the number of Newton steps nor the optimum reached beyond the stopping rule's own slack (measured
on layers of the 7B-size benchmark: scores (of mean size ~6) within 3.5e-4 of a tol = 1e-12
reference, as are the engine's exact solves, and within 6e-6 (warm start) to 5e-4 (cold start)
of those; a 1e-10 tolerance took 1.8 times as long). Tests compare the optimum and the scores
with `kernel_logistic`. Labels drop out of the batch as they converge.

With m >= d (the primal case: the organism's 64 dimensions, ~920 training rows) `primal_logistic_many`
does the same for `probes.solvers.primal_logistic`: same objective, Newton system, Armijo search and
stopping rule, for all labels at once. Each label's (d+1) x (d+1) Hessian C Za^T D_l Za + diag(1, .., 1, 0)
(Za = [Z, 1]) comes from one float32 product D^T Q of the labels' weights with the rows' outer products
Q (m, (d+1)(d+2)/2, upper triangles), built once per training set (at most `PRIMAL_Q_BYTES`; beyond that,
one product per label), and is solved exactly (batched LAPACK). Measured on the organism's capture (m = 920, d = 64):
100 labels per fold in 0.22 s one at a time (3.2 Newton steps each), in ~0.08 s batched.

The engine's `LogisticFitter` (probes.engine) sends the labels named with a `BATCHED` prefix through
them: control tasks, leakage shuffles, the chance test's permutations (probes.chance) and the design
factors (probes.factors); the target goes through its own per-label solve. Warm starts across layers
work as for one label, one (alpha (m, L), b (L,)) or (W (d, L), b (L,)) per training set.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from evprobe.probes.solvers import log1pexp as _log1pexp
from evprobe.probes.solvers import sigmoid as _sigmoid

# label-name prefixes solved together: control tasks, leakage shuffles, chance permutations, design factors
BATCHED = ("control:", "leakage:", "chance:", "factor:")
PRIMAL_Q_BYTES = 64 * 2**20  # the primal solver's outer products Q (m, (d+1)(d+2)/2) float32, at most this
CG_TOL = 1e-5  # relative residual; see the module docstring
CG_MAX = 1000


def _intercepts(Y: np.ndarray) -> np.ndarray:
    """(L,) cold-start intercepts: each label's log-odds of its positive share (as the one-label solvers)."""
    p = np.clip(Y.mean(axis=0), 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


def _better_start(cold: tuple[np.ndarray, ...], weights0: np.ndarray | None, b0: np.ndarray | None,
                  start: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """(weights, b, product, objective) to start from, per label: the warm start (weights0, b0) where its
    objective is no worse than the cold start's `cold`, as the one-label solvers (probes.solvers.log_odds_share)."""
    if weights0 is None and b0 is None:
        return cold
    warm = start(np.zeros_like(cold[0]) if weights0 is None else np.array(weights0, dtype=np.float64),
                 cold[1] if b0 is None else np.array(b0, dtype=np.float64))
    keep = warm[-1] <= cold[-1]  # (L,)
    return tuple(np.where(keep, w, c) for c, w in zip(cold, warm, strict=True))


def _armijo(obj: np.ndarray, slope: np.ndarray, done: np.ndarray,
            value: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Armijo backtracking per label, as the one-label solvers do: (step sizes t (l,), objectives there (l,)).
    `value(j, t_j)` is the objective of labels j after steps of size t_j; labels `done` do not move."""
    t = np.ones(len(obj))
    new = obj.copy()
    searching = ~done
    for _ in range(40):
        j = np.flatnonzero(searching)
        if not len(j):
            break
        val = value(j, t[j])
        ok = val <= obj[j] + 1e-4 * t[j] * slope[j]
        new[j[ok]] = val[ok]
        searching[j[ok]] = False
        t[j[~ok]] *= 0.5
    return t, new


def _objective(Y: np.ndarray, A: np.ndarray, b: np.ndarray, KA: np.ndarray, C: float) -> np.ndarray:
    m = KA + b
    return C * np.sum(_log1pexp(m) - Y * m, axis=0) + 0.5 * np.einsum("ml,ml->l", A, KA)


def _cg(K32: np.ndarray, S: np.ndarray, RHS: np.ndarray, C: float, prec: np.ndarray) -> np.ndarray:
    """Solve (I + C diag(S_l) K diag(S_l)) X_l = RHS_l for every column l (S, RHS: (m, c)).

    K32 is K in float32: the product is the whole cost and float32 halves it; its relative
    error (~1e-7) is far below the CG tolerance. Everything else stays float64."""
    X = np.zeros_like(RHS)
    R = RHS.copy()
    Z = R / prec
    P = Z.copy()
    rz = np.einsum("ml,ml->l", R, Z)
    stop = CG_TOL * np.sqrt(np.einsum("ml,ml->l", RHS, RHS))
    live = np.flatnonzero(stop > 0)
    for _ in range(CG_MAX):
        if not len(live):
            break
        Pc, Sc = P[:, live], S[:, live]
        AP = Pc + C * Sc * (K32 @ (Sc * Pc).astype(np.float32))  # (m, c): the one shared product
        a = rz[live] / np.einsum("ml,ml->l", Pc, AP)
        X[:, live] += a * Pc
        R[:, live] -= a * AP
        Zc = R[:, live] / prec[:, live]
        rz_new = np.einsum("ml,ml->l", R[:, live], Zc)
        P[:, live] = Zc + (rz_new / rz[live]) * Pc
        rz[live] = rz_new
        live = live[np.sqrt(np.einsum("ml,ml->l", R[:, live], R[:, live])) > stop[live]]
    return X


def kernel_logistic_many(
    K: np.ndarray,
    Y: np.ndarray,
    C: float = 1.0,
    A0: np.ndarray | None = None,
    b0: np.ndarray | None = None,
    tol: float = 1e-10,
    max_iter: int = 100,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`kernel_logistic` for the columns of Y (m, L) at once: (alpha (m, L), b (L,), steps (L,))."""
    K = np.asarray(K, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    m, L = Y.shape

    def start(A: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
        KA = K @ A
        return A, b, KA, _objective(Y, A, b, KA, C)

    A, b, KA, obj = _better_start(start(np.zeros((m, L)), _intercepts(Y)), A0, b0, start)
    kdiag = np.diag(K)[:, None]
    K32 = K.astype(np.float32)
    steps = np.zeros(L, dtype=np.int64)
    active = np.arange(L)
    for it in range(1, max_iter + 1):
        if not len(active):
            break
        Ya, Aa, KAa, ba = Y[:, active], A[:, active], KA[:, active], b[active]
        marg = KAa + ba
        p = _sigmoid(marg)
        r = p - Ya
        s = np.sqrt(p * (1.0 - p))  # D^{1/2}, (m, l)
        V = C * r + Aa
        KV = K @ V
        S2 = np.concatenate([s, s], axis=1)
        X = _cg(K32, S2, np.concatenate([-s * KV, s], axis=1), C, 1.0 + C * S2 * S2 * kdiag)
        q0, q1 = X[:, : len(active)], X[:, len(active) :]
        db = (-r.sum(axis=0) - np.einsum("ml,ml->l", s, q0)) / np.einsum("ml,ml->l", s, q1)
        dA = -V - C * s * (q0 + q1 * db)
        KdA = K @ dA
        slope = np.einsum("ml,ml->l", KV, dA) + C * r.sum(axis=0) * db
        steps[active] = it
        done = -slope / 2 <= tol * np.maximum(1.0, np.abs(obj[active]))
        aKa, aKd, dKd = (np.einsum("ml,ml->l", u, v) for u, v in ((Aa, KAa), (Aa, KdA), (dA, KdA)))

        def value(j: np.ndarray, tj: np.ndarray) -> np.ndarray:
            mn = marg[:, j] + tj * (KdA[:, j] + db[j])
            return C * np.sum(_log1pexp(mn) - Ya[:, j] * mn, axis=0) + 0.5 * (aKa[j] + 2 * tj * aKd[j] + tj**2 * dKd[j])

        t, new = _armijo(obj[active], slope, done, value)
        move = ~done
        g = active[move]
        A[:, g] = Aa[:, move] + t[move] * dA[:, move]
        b[g] = ba[move] + t[move] * db[move]
        KA[:, g] = KAa[:, move] + t[move] * KdA[:, move]
        obj[g] = new[move]
        active = g
    return A, b, steps


def _hessians(Za: np.ndarray, Q: np.ndarray | None, D: np.ndarray, C: float) -> np.ndarray:
    """(L, d+1, d+1) Hessians C Za^T diag(D_l) Za + diag(1, .., 1, 0) of the primal objective for the
    weights D (m, L); Q (m, (d+1)(d+2)/2) float32 are the upper triangles of the rows' outer products, or
    None (one product per label)."""
    m, e = Za.shape
    if Q is not None:
        i, j = np.triu_indices(e)
        upper = (D.astype(np.float32).T @ Q).astype(np.float64)  # (L, e(e+1)/2): the one shared product
        H = np.empty((D.shape[1], e, e))
        H[:, i, j] = upper
        H[:, j, i] = upper
    else:
        H = np.stack([Za.T @ (Za * D[:, j : j + 1]) for j in range(D.shape[1])])
    H *= C
    idx = np.arange(e - 1)
    H[:, idx, idx] += 1.0  # the penalty |w|^2 / 2; the intercept is unpenalised
    return H


def _solve(H: np.ndarray, G: np.ndarray) -> np.ndarray:
    """Solve H_l x_l = G_l for every label (H (L, e, e), G (L, e)); least squares where H_l is singular
    (a saturated fit whose intercept block vanishes), as `primal_logistic` does."""
    try:
        return np.linalg.solve(H, G[:, :, None])[:, :, 0]
    except np.linalg.LinAlgError:
        return np.stack([np.linalg.lstsq(h, g, rcond=None)[0] for h, g in zip(H, G, strict=True)])


def primal_logistic_many(
    Z: np.ndarray,
    Y: np.ndarray,
    C: float = 1.0,
    W0: np.ndarray | None = None,
    b0: np.ndarray | None = None,
    tol: float = 1e-10,
    max_iter: int = 100,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`primal_logistic` for the columns of Y (m, L) at once: (W (d, L), b (L,), steps (L,)) (module
    docstring). Z (m, d) are the standardised training rows."""
    Z = np.asarray(Z, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    m, d = Z.shape
    L = Y.shape[1]
    Za = np.concatenate([Z, np.ones((m, 1))], axis=1)  # (m, d+1)
    Q = None
    if m * (d + 1) * (d + 2) * 2 <= PRIMAL_Q_BYTES:
        i, j = np.triu_indices(d + 1)
        Z32 = Za.astype(np.float32)
        Q = Z32[:, i] * Z32[:, j]  # (m, (d+1)(d+2)/2): the upper triangles of the rows' outer products

    def start(W: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
        M = Z @ W + b  # (m, L) margins
        return W, b, M, C * np.sum(_log1pexp(M) - Y * M, axis=0) + 0.5 * np.einsum("dl,dl->l", W, W)

    W, b, M, obj = _better_start(start(np.zeros((d, L)), _intercepts(Y)), W0, b0, start)
    steps = np.zeros(L, dtype=np.int64)
    active = np.arange(L)
    for it in range(1, max_iter + 1):
        if not len(active):
            break
        Ya, Wa, Ma, ba = Y[:, active], W[:, active], M[:, active], b[active]
        p = _sigmoid(Ma)
        r = p - Ya
        G = np.concatenate([C * (Z.T @ r) + Wa, C * r.sum(axis=0)[None, :]], axis=0)  # (d+1, l) gradients
        step = -_solve(_hessians(Za, Q, p * (1.0 - p), C), G.T).T  # (d+1, l) Newton steps
        slope = np.einsum("el,el->l", G, step)
        steps[active] = it
        done = -slope / 2 <= tol * np.maximum(1.0, np.abs(obj[active]))
        dW, db = step[:d], step[d]
        dM = Z @ dW + db  # (m, l)

        def value(j: np.ndarray, tj: np.ndarray) -> np.ndarray:
            mn, wn = Ma[:, j] + tj * dM[:, j], Wa[:, j] + tj * dW[:, j]
            return C * np.sum(_log1pexp(mn) - Ya[:, j] * mn, axis=0) + 0.5 * np.einsum("dl,dl->l", wn, wn)

        t, new = _armijo(obj[active], slope, done, value)
        move = ~done
        g = active[move]
        W[:, g] = Wa[:, move] + t[move] * dW[:, move]
        b[g] = ba[move] + t[move] * db[move]
        M[:, g] = Ma[:, move] + t[move] * dM[:, move]
        obj[g] = new[move]
        active = g
    return W, b, steps
