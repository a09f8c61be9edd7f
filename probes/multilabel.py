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

The engine's `LogisticFitter` (probes.engine) sends the labels named `control:*` and `leakage:*`
through it (the target goes through its own per-label solve). Warm starts across layers work as for
one label, one (alpha (m, L), b (L,)) per training set. With m >= d (the primal case) every label
takes the per-label path.
"""

from __future__ import annotations


import numpy as np

from evprobe.probes.solvers import log1pexp as _log1pexp
from evprobe.probes.solvers import sigmoid as _sigmoid

BATCHED = ("control:", "leakage:")  # label-name prefixes solved together: control tasks, leakage shuffles
CG_TOL = 1e-5  # relative residual; see the module docstring
CG_MAX = 1000


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
    A = np.zeros((m, L)) if A0 is None else np.array(A0, dtype=np.float64)
    if b0 is None:
        p = np.clip(Y.mean(axis=0), 1e-6, 1 - 1e-6)
        b = np.log(p / (1 - p))
    else:
        b = np.array(b0, dtype=np.float64)
    KA = K @ A
    obj = _objective(Y, A, b, KA, C)
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
        t = np.ones(len(active))
        new = obj[active].copy()
        searching = ~done
        for _ in range(40):  # Armijo backtracking, per label
            j = np.flatnonzero(searching)
            if not len(j):
                break
            mn = marg[:, j] + t[j] * (KdA[:, j] + db[j])
            val = C * np.sum(_log1pexp(mn) - Ya[:, j] * mn, axis=0) + 0.5 * (aKa[j] + 2 * t[j] * aKd[j]
                                                                            + t[j] ** 2 * dKd[j])
            ok = val <= obj[active][j] + 1e-4 * t[j] * slope[j]
            new[j[ok]] = val[ok]
            searching[j[ok]] = False
            t[j[~ok]] *= 0.5
        move = ~done
        g = active[move]
        A[:, g] = Aa[:, move] + t[move] * dA[:, move]
        b[g] = ba[move] + t[move] * db[move]
        KA[:, g] = KAa[:, move] + t[move] * KdA[:, move]
        obj[g] = new[move]
        active = g
    return A, b, steps
