"""Steering directions as vectors: a direction's provenance (duck-typed: hooks does not import
probes), the check that it was fitted on the model it steers, its unit vector with every refusal
in one line, seeded random unit directions (the null of a dose-response) and the mean residual norm
(the unit of `Steering.from_norm_units`). hooks.steering and hooks.ablation take directions
through these."""

from __future__ import annotations

from typing import Any

import numpy as np


def provenance_of(direction: Any) -> Any:
    """The provenance mapping of a direction that carries one (probes.directions.Direction, or any
    object with a `vector` and a `provenance` mapping), else None (a raw vector). Duck-typed:
    hooks does not import probes."""
    from collections.abc import Mapping

    prov = getattr(direction, "provenance", None)
    return prov if isinstance(prov, Mapping) and hasattr(direction, "vector") else None


def direction_label(direction: Any) -> str:
    name = getattr(direction, "name", None)
    return f"{name}" if isinstance(name, str) and name else "(unnamed)"


def model_of(handle: Any) -> str | None:
    model_id = getattr(handle, "model_id", None)
    return model_id if isinstance(model_id, str) else None


def check_direction_model(handle: Any, direction: Any, *, allow_other_model: bool = False) -> None:
    """Refuse (one line, ValueError) a direction with provenance fitted on another model than
    `handle.model_id` (hooks.fingerprint.check_fitted_on), unless `allow_other_model`. A raw
    vector, or a provenance naming no model, passes."""
    prov = provenance_of(direction)
    if prov is None or prov.get("model") is None or allow_other_model:
        return
    from evprobe.hooks.fingerprint import check_fitted_on

    check_fitted_on(direction_label(direction), str(prov["model"]), model_of(handle) or "an unnamed model")


def unit_direction(direction: Any, *, d_model: int | None = None, what: str = "direction") -> np.ndarray:
    """`direction` (numpy / torch / sequence, shape (d_model,)) as a read-only float64 unit vector.

    Raises ValueError for a wrong shape, a zero or non-finite vector; TypeError for a direction
    that carries provenance (use Steering.from_direction, or its `.vector` to drop the provenance).
    """
    if provenance_of(direction) is not None:
        raise TypeError(f"{what} is the direction {direction_label(direction)} with its provenance (fitted on "
                        f"{provenance_of(direction).get('model')!r}); use Steering.from_direction(direction, alpha), "
                        "or pass direction.vector to use the bare vector")
    if hasattr(direction, "detach"):  # torch tensor
        direction = direction.detach().to("cpu").double().numpy()
    v = np.array(direction, dtype=np.float64)  # copy: the caller's array stays theirs
    if v.ndim != 1:
        raise ValueError(f"{what} must be one vector of shape (d_model,), got shape {v.shape}; "
                         f"pass a single row (e.g. directions[i]), not a matrix")
    if d_model is not None and v.shape[0] != d_model:
        raise ValueError(f"{what} has {v.shape[0]} entries but the model's residual width is {d_model}; "
                         f"use a direction fitted on this model's activations (shape ({d_model},))")
    if not np.isfinite(v).all():
        raise ValueError(f"{what} contains NaN or inf; check how it was computed")
    with np.errstate(over="ignore", under="ignore"):  # handled below
        norm = float(np.linalg.norm(v))
    if (norm == 0.0 or not np.isfinite(norm)) and np.abs(v).max() > 0:
        # entries near 1e308 square to inf (and near 1e-300 to 0): the norm of the vector scaled to max 1
        v /= np.abs(v).max()
        norm = float(np.linalg.norm(v))
    if norm == 0.0:
        raise ValueError(f"{what} is the zero vector and has no direction; pass a nonzero vector "
                         f"(e.g. a probe's weight vector or random_directions(...))")
    v /= norm
    v.flags.writeable = False
    return v


def random_directions(d_model: int, n: int, seed: int) -> np.ndarray:
    """(n, d_model) float64 unit vectors, Gaussian then normalised, reproducible from `seed`."""
    if d_model < 1 or n < 1:
        raise ValueError(f"need d_model >= 1 and n >= 1, got d_model={d_model}, n={n}")
    rows = np.random.default_rng(seed).standard_normal((n, d_model))  # (n, d_model)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def mean_residual_norm(acts: np.ndarray) -> float:
    """Mean L2 norm of the rows of an (items, d_model) activation array.

    This is the unit of `Steering.from_norm_units`: measure it on the capture set
    at the steered layer and position, and store it with the direction.
    """
    a = np.asarray(acts, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] == 0:
        raise ValueError(f"acts must be a non-empty (items, d_model) array, got shape {a.shape}")
    return float(np.linalg.norm(a, axis=1).mean())


__all__ = ["check_direction_model", "direction_label", "mean_residual_norm", "model_of", "provenance_of",
           "random_directions", "unit_direction"]
