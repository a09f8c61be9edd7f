"""Named unit directions with their provenance, for the steering experiments.

`fit_directions` fits a probe on every labelled row of a capture (optionally one condition at a
time: `by="system"` gives one direction per system, as TRAPS's per-dataset void directions) at
the given layers and one position, and keeps its `direction_`: a unit vector in the model's
residual basis pointing toward the positive class (`resolved=True`: toward "the evidence is
enough"; ask for `--label resolved=False` to point toward insufficiency, TRAPS's void - control
sign). The default probe is the mass-mean one: mu_1 - mu_0 is the displacement between the
classes, which is what adding alpha * v to a hidden state moves along (TRAPS section 5.5).

Files (no pickles anywhere):

- `DIR/<name>.npy`: the float32 unit vector, shape (d_model,), a plain .npy;
- `DIR/directions.json`: `{"directions": [{name, file, model, layer, position, label, positive,
  probe, condition, regimes, captures, restriction, n_items, n_positive, n_negative, items,
  mean_norm, d_model}, ...]}`. `items` are the item ids used. `mean_norm` is the mean
  Euclidean norm of the residual at that layer and position over those items, so a steering
  strength can be stated in units of the typical norm (alpha = k * mean_norm).

Writing merges into an existing directions.json by name (a later fit of the same name replaces
the earlier one), so directions of several layers or runs accumulate in one folder.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evprobe.core.files import atomic_write_bytes
from evprobe.probes.captures import CaptureError, CaptureSet, LabelSet
from evprobe.probes.estimators import make_probe

DIRECTIONS_FILE = "directions.json"
_SAFE = re.compile(r"[^A-Za-z0-9._=+-]")


@dataclass(frozen=True, eq=False)
class Direction:
    name: str
    vector: np.ndarray  # (d_model,) float32, unit norm
    provenance: dict[str, Any]

    @property
    def layer(self) -> int:
        return int(self.provenance["layer"])

    @property
    def position(self) -> str:
        return str(self.provenance["position"])

    @property
    def mean_norm(self) -> float:
        return float(self.provenance["mean_norm"])


def direction_name(label: str, positive: Any, probe: str, layer: int, position: str, condition: str | None) -> str:
    name = f"{label}={positive}.{probe}.L{layer}.{position}" + (f".{condition}" if condition else "")
    return _SAFE.sub("_", name)


def fit_directions(
    captures: CaptureSet,
    labelset: LabelSet,
    layers: Sequence[int],
    position: str,
    probe: str = "massmean",
    conditions: Sequence[tuple[str, np.ndarray]] | None = None,
    C: float = 1.0,
    pooled_covariance: bool = False,
) -> list[Direction]:
    """One direction per layer (and per condition: (name, mask over labelled rows) pairs)."""
    pi = captures.position_index(position)
    groups = [(None, np.ones(labelset.n, dtype=bool))] if not conditions else list(conditions)
    out = []
    for layer in layers:
        li = captures.layer_index(layer)
        X = captures.block(li, labelset.rows, [pi])[:, 0]  # (n, d) float32
        for cond_name, mask in groups:
            y = labelset.y[mask]
            if y.min() == y.max():
                raise CaptureError(f"condition {cond_name} has one class of {labelset.title} only; no direction")
            est = make_probe(probe, C=C, pooled_covariance=pooled_covariance).fit(X[mask], y)
            rows = labelset.rows[mask]
            prov = {
                "model": captures.model,
                "layer": int(layer),
                "position": position,
                "label": labelset.name,
                "positive": labelset.positive,
                "probe": probe,
                "condition": cond_name,
                "regimes": sorted({captures.index[r]["source_name"] for r in rows}),
                "captures": [str(c.path) for c in captures.captures],
                "restriction": labelset.restriction,
                "n_items": int(mask.sum()),
                "n_positive": int(y.sum()),
                "n_negative": int((1 - y).sum()),
                "items": [captures.index[r]["item_id"] for r in rows],
                "mean_norm": float(np.linalg.norm(X[mask].astype(np.float64), axis=1).mean()),
                "d_model": int(X.shape[1]),
                "sign": "points toward the positive class",
            }
            name = direction_name(labelset.name, labelset.positive, probe, layer, position, cond_name)
            out.append(Direction(name, np.asarray(est.direction_, dtype=np.float32), prov))
    return out


def write_directions(out_dir: str | Path, directions: Sequence[Direction]) -> Path:
    """Write each vector as `<name>.npy` and merge provenance into directions.json."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    index_path = out_dir / DIRECTIONS_FILE
    entries: dict[str, dict[str, Any]] = {}
    if index_path.is_file():
        for e in _read_index(index_path):
            entries[e["name"]] = e
    for d in directions:
        buf = io.BytesIO()
        np.save(buf, d.vector.astype(np.float32), allow_pickle=False)
        atomic_write_bytes(out_dir / f"{d.name}.npy", buf.getvalue())
        entries[d.name] = {"name": d.name, "file": f"{d.name}.npy", **d.provenance}
    payload = {"directions": sorted(entries.values(), key=lambda e: e["name"])}
    atomic_write_bytes(index_path, (json.dumps(payload, indent=2) + "\n").encode("utf-8"))
    return index_path


def _read_index(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        entries = data["directions"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise CaptureError(f"{path}: not a directions index ({err}); move it aside") from None
    return list(entries)


def read_directions(directory: str | Path) -> dict[str, Direction]:
    """Every direction of a folder written by `write_directions`, by name, checked: a plain
    float .npy of shape (d_model,) with unit norm, next to its provenance."""
    directory = Path(directory)
    index_path = directory / DIRECTIONS_FILE
    if not index_path.is_file():
        raise CaptureError(f"{index_path} not found; write directions with `evprobe directions ACTS --layer L`")
    out = {}
    for e in _read_index(index_path):
        file = Path(e["file"])
        if file.is_absolute() or ".." in file.parts or len(file.parts) != 1:
            raise CaptureError(f"{index_path}: direction file {e['file']!r} must be a plain name inside the folder")
        try:
            vec = np.load(directory / file, allow_pickle=False)
        except ValueError as err:
            raise CaptureError(f"{directory / file}: not a plain numeric .npy ({err})") from None
        if vec.ndim != 1 or vec.dtype.kind != "f" or vec.shape[0] != e["d_model"]:
            raise CaptureError(f"{directory / file}: expected a float vector of length {e['d_model']}, got "
                               f"{vec.dtype} {vec.shape}")
        if not abs(float(np.linalg.norm(vec.astype(np.float64))) - 1.0) < 1e-3:
            raise CaptureError(f"{directory / file}: not a unit vector")
        prov = {k: v for k, v in e.items() if k not in ("name", "file")}
        out[e["name"]] = Direction(e["name"], vec, prov)
    return out
