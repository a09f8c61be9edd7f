"""`check_probe`: the contract every registered probe is tested against (scikit-learn's
`check_estimator`, for the probe protocol). A new probe's test calls it; each failure is one line
naming the broken promise.

On a planted signal (two classes apart along one unit direction, plus noise), the probe must:
clone (parameters declared on `__init__`), fit and return itself, set `classes_` and a finite unit
`direction_` (d,) pointing toward the planted one (cosine >= 0.3), give finite decision values whose
sign separates the classes (AUROC > 0.9), give the same decision on a row alone as in a batch, and
its fold-engine fitter (`fitter()`) must score rows as a fresh fit does: the same sign on every
row off the boundary, and decision values correlated above 0.999 (a fast path may solve to a looser tolerance).
"""

from __future__ import annotations

import numpy as np

from evprobe.probes.metrics import auroc
from evprobe.probes.registry import ProbeSpec


class ProbeContractError(AssertionError):
    """A registered probe breaks the protocol (the message says which promise)."""


def planted_data(n: int = 80, d: int = 24, gap: float = 3.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X (n, d) float32, y (n,) 0/1, the planted unit direction (d,))."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(d)
    v /= np.linalg.norm(v)
    y = np.arange(n) % 2
    X = rng.standard_normal((n, d)) + np.outer(y - 0.5, v) * gap
    return X.astype(np.float32), y, v


def check_probe(probe: str | ProbeSpec | object, n: int = 80, d: int = 24) -> None:
    """Raise ProbeContractError unless the registered `probe` (a name, spec or instance) keeps the
    protocol (module docstring), in both n < d and n > d shapes."""
    from sklearn.base import clone

    from evprobe.probes.engine import EstimatorFitter

    spec = ProbeSpec.of(probe)
    for rows, dims, gap in ((n, d, 3.0), (n // 2, d * 3, 8.0)):  # n > d, then n < d (the kernel shape)
        X, y, v = planted_data(rows, dims, gap)
        where = f"probe {spec} on X {X.shape}"
        est = spec.make()
        try:
            clone(est)
        except Exception as err:  # noqa: BLE001 (any failure is the finding)
            raise ProbeContractError(f"{where}: scikit-learn cannot clone it ({err}); store each __init__ "
                                     "argument unchanged on self under its own name") from None
        fitted = est.fit(X, y)
        if fitted is not est:
            raise ProbeContractError(f"{where}: fit must return self")
        if not hasattr(est, "classes_") or list(est.classes_) != [0, 1]:
            raise ProbeContractError(f"{where}: classes_ must be np.unique(y) after fit")
        direction = np.asarray(getattr(est, "direction_", None), dtype=np.float64)
        if direction.shape != (dims,) or not np.isfinite(direction).all():
            raise ProbeContractError(f"{where}: direction_ must be a finite vector of shape ({dims},), got "
                                     f"{direction.shape}")
        if abs(np.linalg.norm(direction) - 1) > 1e-6:
            raise ProbeContractError(f"{where}: direction_ must be a unit vector (norm {np.linalg.norm(direction):.6g})")
        if direction @ v < 0.3:  # a random unit vector: cos ~ N(0, 1/d), |cos| < 0.15 at these d
            raise ProbeContractError(f"{where}: direction_ is {np.degrees(np.arccos(np.clip(direction @ v, -1, 1))):.0f} "
                                     "degrees from the planted one; it must point toward the positive class")
        s = np.asarray(est.decision_function(X), dtype=np.float64)
        if s.shape != (rows,) or not np.isfinite(s).all():
            raise ProbeContractError(f"{where}: decision_function must give {rows} finite values, got {s.shape}")
        if auroc(s, y) <= 0.9:
            raise ProbeContractError(f"{where}: decision values separate a planted signal with AUROC {auroc(s, y):.3f} "
                                     "(<= 0.9); larger must mean the positive class")
        single = np.array([float(np.asarray(est.decision_function(X[i : i + 1])).reshape(-1)[0]) for i in range(3)])
        if not np.allclose(single, s[:3], rtol=1e-5, atol=1e-6):
            raise ProbeContractError(f"{where}: a row scored alone differs from the same row in a batch "
                                     f"({single[0]:.6g} vs {s[0]:.6g})")
        train = np.arange(rows) % 4 != 0
        ys = {"y": y}
        fast = est.fitter().fit_score(X, train, ys)["y"]
        slow = EstimatorFitter(spec.make()).fit_score(X, train, ys)["y"]
        if fast.shape != (rows,) or not np.isfinite(fast).all():
            raise ProbeContractError(f"{where}: fitter().fit_score must score every row finitely")
        clear = np.abs(slow) > 1e-4 * np.abs(slow).max()  # rows on the boundary may fall either side
        agree = (np.sign(fast) == np.sign(slow)) | ~clear
        corr = float(np.corrcoef(fast, slow)[0, 1]) if fast.std() > 0 and slow.std() > 0 else 0.0
        if not agree.all() or corr < 0.999:
            raise ProbeContractError(f"{where}: fitter() scores disagree with a fresh fit (sign on "
                                     f"{int((~agree).sum())} of {rows} rows, correlation {corr:.6f}); the fast path "
                                     "must fit what fit() fits")
