"""The own-data dose-response's null directions beside the probe (analysis.dose_response): the
label-free null per steered layer from the rows the direction was fitted on, and each null's share
of directions within |cos| 0.9 of the probe."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from evprobe.analysis.label_null import NEAR_COSINE, FitRows, LabelFreeNull, direction_rows, fit_rows_null
from evprobe.core.errors import InputError


def label_free_nulls(by_layer: dict[int, Any], vectors: dict[int, np.ndarray], fit_rows: Any, n: int, seed: int,
                d_model: int) -> tuple[dict[int, LabelFreeNull], list[str]]:
    """Per steered layer the label-free null (analysis.label_null) from `fit_rows` or the capture a
    fitted Direction names; notes say where there is none and why."""
    if not n:
        return {}, ["no label-free null (n_relabel=0), so no verdict on specificity"]
    out, notes = {}, []
    for layer_ in sorted(vectors):
        rows = _rows_at(fit_rows, layer_, len(vectors))
        if rows is None:
            d = by_layer[layer_]
            if getattr(d, "fit_rows", None) is None and not (getattr(d, "provenance", None) or {}).get("captures"):
                notes.append(f"no label-free null at L{layer_}: the direction carries no fit rows; pass fit_rows="
                             "(acts, labels, families), the rows it was fitted on, or fit it with evprobe.fit_direction, for a "
                             "verdict on specificity")
                continue
            rows = direction_rows(d)
        if np.asarray(rows.acts).ndim != 2 or np.asarray(rows.acts).shape[-1] != d_model:
            raise InputError(f"fit_rows at L{layer_}: acts must be (rows, d_model = {d_model}), got shape "
                             f"{np.asarray(rows.acts).shape}")
        try:
            out[layer_] = fit_rows_null(rows, vectors[layer_], n=n, seed=seed)
        except InputError as e:
            raise InputError(f"fit_rows at L{layer_}: {e}") from None
    return out, notes


def _rows_at(fit_rows: Any, layer_: int, n_layers: int) -> FitRows | None:
    """The FitRows given for one layer: a FitRows or (acts, labels, families) when one layer is
    steered, or a {layer: ...} mapping."""
    if fit_rows is None:
        return None
    if isinstance(fit_rows, Mapping):
        if layer_ not in fit_rows:
            raise InputError(f"fit_rows has no rows for layer {layer_}; give {{layer: (acts, labels, families)}} for "
                             f"every steered layer ({sorted(fit_rows)} given)")
        one = fit_rows[layer_]
    elif n_layers > 1:
        raise InputError(f"{n_layers} layers are steered: give fit_rows as {{layer: (acts, labels, families)}}")
    else:
        one = fit_rows
    if isinstance(one, FitRows):
        return one
    if not isinstance(one, tuple | list) or len(one) != 3:
        raise InputError("fit_rows must be (acts, labels, families) or an evprobe FitRows, got "
                         f"{type(one).__name__}")
    return FitRows(np.asarray(one[0]), np.asarray(one[1]), np.asarray(one[2], dtype=object))


def near_random(rand: np.ndarray, vectors: dict[int, np.ndarray]) -> dict[int, float]:
    """Per layer, the share of the random directions within |cos| 0.9 of the probe."""
    return {layer_: float(np.mean(np.abs(rand @ v) >= NEAR_COSINE)) if len(rand) else float("nan")
            for layer_, v in vectors.items()}


def near_free(label_free: dict[int, LabelFreeNull]) -> dict[int, float]:
    return {layer_: s.near_share() for layer_, s in label_free.items()}


__all__ = ["label_free_nulls", "near_free", "near_random"]
