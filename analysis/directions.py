"""A steering direction fitted from your own arrays, ready for `steering_dose_response`.

    d = evprobe.fit_direction(acts, labels, families, layer=3)    # acts (rows, d_model) at layer 3
    result = evprobe.steering_dose_response(handle, prompts, images, direction=d, candidates=["A", "B"],
                                            target="A", families=families)   # label-free null from d's rows

The direction is the registered probe's (`probe=`, default the mass-mean difference; any name,
ProbeSpec or estimator instance probes.registry takes, with `probe_params`) fitted on the rows as
`evprobe fit-directions` fits it on a capture: unit norm, pointing toward label 1, refused when the
two classes' mean rows are identical (any "direction" would be rounding noise). It is a
probes.directions.Direction: its provenance says the layer, position, label, probe and counts, and
it keeps the rows it was fitted on (`fit_rows`), so the label-free null of a steering claim
(analysis.label_null) refits the same probe on them without `fit_rows=`. `model=` (a handle or a
model name) records the model, and steering it on another model is then refused, as for a direction
read from a file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from evprobe.analysis.inputs import integer
from evprobe.analysis.label_null import check_rows
from evprobe.core.errors import InputError, shown
from evprobe.probes.directions import Direction, FitRows, class_gap, direction_name, probe_part
from evprobe.probes.registry import ProbeSpec


def fit_direction(acts: Any, labels: Any, families: Any, *, layer: int, position: str = "last",
                  label: str = "label", probe: Any = "massmean", probe_params: Mapping[str, Any] | None = None,
                  model: Any = None) -> Direction:
    """The probe's unit direction on `acts` (rows, d_model) toward label 1 (module docstring).

    labels: one 0/1 (or bool) per row; families: one id per row (the unit the label-free null keeps
    or flips whole); layer: the decoder layer the rows were read at (where it steers); position: the
    name of the position they were read at (provenance only); label: the label's name."""
    layer = integer("layer", layer, 0, fix="the decoder layer the rows were read at")
    if not isinstance(position, str) or not position or not isinstance(label, str) or not label:
        raise InputError(f"position {shown(position, 20)} and label {shown(label, 20)} must be non-empty names")
    X, y, fam = check_rows(acts, labels, families, min_rows=2)
    if y.min() == y.max():
        raise InputError(f"every row has label {int(y[0])}; a direction needs rows of both labels")
    try:
        spec = ProbeSpec.of(probe, probe_params or {})
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"probe {shown(probe, 30)}: {e}") from None
    gap, identical = class_gap(X, y)
    if identical:
        raise InputError(f"the two labels' mean rows are identical (distance {gap:.2g}); no direction to fit")
    # float32 rows, as a capture file holds them: the command's fit on the same rows, to the bit
    v = np.asarray(spec.make().fit(X.astype(np.float32), y).direction_, dtype=np.float64)  # (d_model,)
    norm = float(np.linalg.norm(v))
    if not (np.isfinite(norm) and norm > 0):
        raise InputError(f"the {spec.name} probe gave a vector of norm {norm!r} on these rows; no direction")
    name_of_model = getattr(model, "model_id", model)
    if name_of_model is not None and not isinstance(name_of_model, str):
        raise InputError(f"model must be a handle or a model name, got {shown(model, 30)}")
    prov = {
        "model": name_of_model,
        "layer": layer,
        "position": position,
        "label": label,
        "positive": True,
        "probe": spec.name,
        **({"probe_params": dict(spec.params)} if spec.params else {}),
        "condition": None,
        "fitted_from": "arrays",
        "n_items": int(len(y)),
        "n_positive": int(y.sum()),
        "n_negative": int((1 - y).sum()),
        "n_families": int(len(set(fam))),
        "mean_norm": float(np.linalg.norm(X, axis=1).mean()),
        "d_model": int(X.shape[1]),
        "sign": "points toward the positive class",
    }
    rows = FitRows(X, y, fam, spec.name, dict(spec.params))
    return Direction(direction_name(label, True, probe_part(spec), layer, position, None),
                     (v / norm).astype(np.float32), prov, fit_rows=rows)


__all__ = ["fit_direction"]
