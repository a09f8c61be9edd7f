"""The probe protocol: `LinearProbe`, the base every probe subclasses, and `ProbeCapabilities`.

A probe is scikit-learn's estimator shape: parameters declared once on `__init__`, `fit(X, y) -> self`
(X (n, d) float, y two classes), `decision_function(X) -> (n,)` (> 0 predicts `classes_[1]`), the
learned unit `direction_` (d,) along which the score grows, and `classes_`. Optional: `fitter()`, a
fast path for the fold engine (probes.engine: one training set, many label vectors, warm starts
across layers; the default fits a fresh clone per label vector, correct for any probe), and
`capabilities`, what else the sweep can do with it. `probes.registry` names probes;
`probes.probe_checks.check_probe` tests one against this protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

if TYPE_CHECKING:
    from evprobe.probes.engine import Fitter


@dataclass(frozen=True)
class ProbeCapabilities:
    """What the sweep can do with a probe beyond fitting and scoring it (which every probe supports,
    so every probe gets folds, nested selection, control tasks, the leakage check and transfer).

    refit_intervals: the sweep's refitted-pipeline intervals (probes.refit) solve this probe's own
    objective on family resamples; without them its intervals hold the fold models fixed and the
    sweep warns that they undercover.
    """

    refit_intervals: bool = False


class LinearProbe(ClassifierMixin, BaseEstimator):
    """The probe protocol (module docstring): subclass it, declare parameters on `__init__`, set
    `direction_` and `classes_` in `fit`, and register the class with `@register_probe(NAME)`."""

    name: ClassVar[str] = ""  # set by register_probe
    capabilities: ClassVar[ProbeCapabilities] = ProbeCapabilities()

    # Declared here for the protocol's shape; register_probe refuses a class that does not define both.
    def fit(self, X: np.ndarray, y: np.ndarray) -> LinearProbe:
        raise NotImplementedError(f"{type(self).__name__}.fit")

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__}.decision_function")

    def fitter(self) -> Fitter:
        """The fold engine's fitter for this probe with these parameters; the default refits a clone
        per label vector (probes.engine.EstimatorFitter)."""
        from evprobe.probes.engine import EstimatorFitter

        return EstimatorFitter(self)

    def _prepare(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(X as float32/float64 (n, d), y as 0/1 float64); sets classes_ and n_features_in_."""
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
