"""Named unit directions with their provenance, for the steering experiments.

`fit_directions` fits a probe on every labelled row of a capture (optionally one condition at a
time: `by="system"` gives one direction per system, as TRAPS's per-dataset void directions) at
the given layers and one position, and keeps its `direction_`: a unit vector in the model's
residual basis pointing toward the positive class (`resolved=True`: toward "the evidence is
enough"; ask for `--label resolved=False` to point toward insufficiency, TRAPS's void - control
sign). The default probe is the mass-mean one: mu_1 - mu_0 is the displacement between the
classes, which is what adding alpha * v to a hidden state moves along (TRAPS section 5.5).

Files (no pickles anywhere):

- `DIR/<name>.safetensors`: the float32 unit vector, shape (d_model,), under the tensor key
  `direction`, with the provenance in the safetensors metadata (every value JSON text, since
  safetensors metadata values are strings: `layer` "12", `position` "\"last\"", `positive` "true",
  ...; plus `format` "\"evprobe-direction/1\"" and `name`), so one file is a complete direction for
  any tool that reads safetensors (`load_direction(file)` here; `safetensors.safe_open` elsewhere);
- `DIR/directions.json`: the folder's index, `{"directions": [{name, file, model, layer, position,
  label, positive, probe, condition, regimes, captures, restriction, n_items, n_positive,
  n_negative, items, mean_norm, d_model, sign, model_fingerprint, captures_relative_to}, ...]}`.
  `items` are the item ids used. `captures` are relative to the folder (probes.provenance: never
  read from the working directory); `model_fingerprint` the capture's model digests. `mean_norm`
  is the mean Euclidean norm of the residual at that layer and position over those items, so a
  steering strength can be stated in units of the typical norm (alpha = k * mean_norm). Folder
  readers take the provenance from here (the file's metadata must name the same direction, with
  the same model, layer, position, label, probe and width).

Steering from Python: `hooks.steering.Steering.from_direction(direction, alpha)` takes a Direction by
its `vector` and `provenance` (hooks never imports probes): its layer, its position ("last" steers
the last prompt token), alpha in multiples of `mean_norm`, and `model` (the capture's model name),
which every hooks steering and ablation function checks against the handle it meets (one-line
refusal, override `allow_other_model=True`; hooks.fingerprint.check_fitted_on, as the CLI).

Names (`direction_name`), which are also the file names, contain no `=` and split on `.` into
LABEL.PROBE.L<layer>.POSITION[.CONDITION]: LABEL is the label when the positive class is true
(`resolved`) and LABEL-POSITIVE otherwise (`resolved-false`, `system-sliding`); CONDITION is the
condition with `=` written `-` (`system-bouncing`, `half-half_a`); in every part a character other
than A-Z a-z 0-9 _ - becomes `_`. E.g. `resolved.massmean.L12.last.half-half_a.safetensors`.

Folders written before this format (`<label>=<positive>....npy` files) are still read: an index
entry's file decides the reader, `.npy` through `np.load(allow_pickle=False)` (never unpickled).
New directions written into such a folder get new-style names beside the old ones.

Writing merges into an existing directions.json by name (a later fit of the same name replaces
the earlier one), so directions of several layers or runs accumulate in one folder.

Reading checks everything before any vector is used: directions.json must hold a `directions`
list of objects, each with a non-empty string `name` and `file`, an integer `layer`, a string
`position`, a positive integer `d_model` and, when given, a finite positive `mean_norm`; each
vector must be a finite float vector of length `d_model` with unit norm; and, when the caller
names the width of the capture or model it will meet (`read_directions(dir, d_model=...)`,
`check_width`), that width. Each refusal is one `CaptureError` line naming the file, the entry's
line in directions.json and the fix, raised before any product with activations is formed. A
vector file that is a symlink to a file outside the folder is refused (the folder is the direction).
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from evprobe.core.errors import shown
from evprobe.core.files import atomic_write_bytes
from evprobe.core.json_files import parse_json
from evprobe.core.json_types import JsonObject
from evprobe.probes.captures import CaptureError, CaptureSet
from evprobe.probes.label_sets import LabelSet
from evprobe.probes.registry import ProbeSpec
from evprobe.probes.geometry import number_text
from evprobe.probes.provenance import fingerprint, portable

if TYPE_CHECKING:
    from evprobe.probes.protocol import LinearProbe

DIRECTIONS_FILE = "directions.json"
FORMAT = "evprobe-direction/1"  # the safetensors metadata's `format`
SUFFIX = ".safetensors"
TENSOR_KEY = "direction"
LEGACY_SUFFIX = ".npy"  # folders written before safetensors: still read
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, eq=False)
class FitRows:
    """The rows a direction was fitted on: acts (rows, d_model) at its layer and position, labels
    (rows,) 0/1, families (rows,), and the probe (name and parameters) it was fitted with. The
    label-free null (analysis.label_null) refits the probe on them."""

    acts: np.ndarray = field(repr=False)
    labels: np.ndarray = field(repr=False)
    families: np.ndarray = field(repr=False)
    probe: str = "massmean"
    probe_params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class Direction:
    name: str
    vector: np.ndarray  # (d_model,) float32, unit norm
    provenance: JsonObject
    source: Path | None = None  # the file the provenance was read from (relative capture paths start there)
    line: int | None = None  # its entry's line in that file (directions.json)
    fit_rows: FitRows | None = field(default=None, repr=False)  # a direction fitted from arrays keeps its rows

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
    """The direction's name and file stem (module docstring): LABEL[-POSITIVE].PROBE.L<layer>.POSITION[.CONDITION]."""
    head = label if positive is True else f"{label}-{_word(positive)}"
    parts = [head, probe, f"L{layer}", position] + ([condition.replace("=", "-")] if condition else [])
    return ".".join(_UNSAFE.sub("_", str(p)) for p in parts)


def direction_file(name: str) -> str:
    return f"{name}{SUFFIX}"


def _word(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


IDENTICAL_MEANS = 1e-6  # class-mean distance below this x the mean row norm: no direction


def class_gap(X: np.ndarray, y: np.ndarray) -> tuple[float, bool]:
    """The distance between the two classes' mean rows of X (rows, d) float64, and whether they are
    identical (below IDENTICAL_MEANS x the mean row norm): any "direction" would be rounding noise."""
    gap = float(np.linalg.norm(X[y == 1].mean(0) - X[y == 0].mean(0)))
    return gap, not gap > IDENTICAL_MEANS * float(np.linalg.norm(X, axis=1).mean())


def probe_part(spec: ProbeSpec) -> str:
    """The probe's part of a direction's name: parameters that differ from the defaults are in it,
    so two fits of one probe with different parameters at one layer are two directions
    (logistic-C_0_5), not one overwritten."""
    return spec.name + "".join(f"-{k}={v}" for k, v in spec.params)


def fit_directions(
    captures: CaptureSet,
    labelset: LabelSet,
    layers: Sequence[int],
    position: str,
    probe: str | ProbeSpec | LinearProbe = "massmean",
    conditions: Sequence[tuple[str, np.ndarray]] | None = None,
) -> list[Direction]:
    """One direction per layer (and per condition: (name, mask over labelled rows) pairs) from a
    registered probe (a name, a ProbeSpec or an estimator instance). A layer whose two classes have
    identical mean states gets none (a warning says so)."""
    spec = ProbeSpec.of(probe)
    pi = captures.position_index(position)
    groups = [(None, np.ones(labelset.n, dtype=bool))] if not conditions else list(conditions)
    model_print = fingerprint(captures)  # the capture's model digests, checked where the capture is read back
    out = []
    for layer in layers:
        li = captures.layer_index(layer)
        X = captures.block(li, labelset.rows, [pi])[:, 0]  # (n, d) float32
        for cond_name, mask in groups:
            y = labelset.y[mask]
            if y.min() == y.max():
                raise CaptureError(f"condition {cond_name} has one class of {labelset.title} only; no direction")
            gap, identical = class_gap(X[mask].astype(np.float64), y)
            where = f"layer {layer}/{position}" + (f" ({cond_name})" if cond_name else "")
            if not np.isfinite(gap):  # never read as "identical means": a NaN gap fails every comparison
                raise CaptureError(f"no direction for {labelset.title} at {where}: the class-mean distance is "
                                   f"{number_text(gap, '.2g', 'the activations hold NaN or inf')}; read the "
                                   "captures with load_capture (which refuses such rows) or --nonfinite drop")
            if identical:
                # Identical class means (e.g. a position whose state is the same for every row of a
                # family, labels balanced within families): any "direction" would be rounding noise.
                warnings.warn(f"no direction for {labelset.title} at {where}: the two classes' mean states are "
                              f"identical (distance {gap:.2g}); skipped", stacklevel=2)
                continue
            est = spec.make().fit(X[mask], y)
            rows = labelset.rows[mask]
            prov = {
                "model": captures.model,
                "layer": int(layer),
                "position": position,
                "label": labelset.name,
                "positive": labelset.positive,
                "probe": spec.name,
                **({"probe_params": dict(spec.params)} if spec.params else {}),
                "condition": cond_name,
                "regimes": sorted({captures.index[r]["source_name"] for r in rows}),
                "captures": [str(c.path.absolute()) for c in captures.captures],  # written relative to the folder
                "restriction": labelset.restriction,
                "n_items": int(mask.sum()),
                "n_positive": int(y.sum()),
                "n_negative": int((1 - y).sum()),
                "items": [captures.index[r]["item_id"] for r in rows],
                "mean_norm": float(np.linalg.norm(X[mask].astype(np.float64), axis=1).mean()),
                "d_model": int(X.shape[1]),
                "sign": "points toward the positive class",
                **({"model_fingerprint": model_print} if model_print else {}),
            }
            name = direction_name(labelset.name, labelset.positive, probe_part(spec), layer, position, cond_name)
            out.append(Direction(name, np.asarray(est.direction_, dtype=np.float32), prov))
    return out


def write_directions(out_dir: str | Path, directions: Sequence[Direction]) -> Path:
    """Write each vector as `<name>.safetensors` (with its provenance as metadata) and merge the
    provenance into directions.json."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    index_path = out_dir / DIRECTIONS_FILE
    entries: dict[str, JsonObject] = {}
    if index_path.is_file():
        for _, e in _read_index(index_path):
            entries[e["name"]] = e
    for d in directions:
        prov = portable(d, out_dir)  # capture paths relative to this folder
        atomic_write_bytes(out_dir / direction_file(d.name), direction_bytes(Direction(d.name, d.vector, prov)))
        entries[d.name] = {"name": d.name, "file": direction_file(d.name), **prov}
    payload = {"directions": sorted(entries.values(), key=lambda e: e["name"])}
    atomic_write_bytes(index_path, (json.dumps(payload, indent=2) + "\n").encode("utf-8"))
    return index_path


def direction_bytes(d: Direction) -> bytes:
    """One direction as a safetensors file: the (d_model,) float32 vector and JSON-text metadata."""
    from safetensors.numpy import save

    metadata = {"format": json.dumps(FORMAT), "name": json.dumps(d.name),
                **{k: json.dumps(v) for k, v in d.provenance.items()}}
    return save({TENSOR_KEY: np.ascontiguousarray(d.vector, dtype=np.float32)}, metadata=metadata)


def load_direction(path: str | Path) -> Direction:
    """One `.safetensors` direction file on its own, provenance from its metadata; checked: a
    float vector under `direction`, unit norm, metadata of this format."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise CaptureError(f"{path} not found; write directions with `evprobe directions ACTS --layer L`")
    try:
        with safe_open(str(path), framework="numpy") as fh:
            metadata = fh.metadata() or {}
            if TENSOR_KEY not in fh.keys():
                raise CaptureError(f"{path}: no tensor {TENSOR_KEY!r} (it has {', '.join(fh.keys()) or 'none'}); "
                                   "write it with `evprobe directions`")
            vec = fh.get_tensor(TENSOR_KEY)
    except (SafetensorError, OSError, ValueError, TypeError) as err:
        raise CaptureError(f"{path}: not a readable safetensors file ({type(err).__name__}: {err}); write it "
                           "again with `evprobe directions`") from None
    try:
        meta = {k: parse_json(v, path, "", error=CaptureError) for k, v in metadata.items()}
    except CaptureError:  # not JSON, or nested too deep
        raise CaptureError(f"{path}: its metadata values are not JSON text; write it again with "
                           "`evprobe directions`") from None
    if meta.get("format") != FORMAT or type(meta.get("name")) is not str:
        raise CaptureError(f"{path}: metadata format is {meta.get('format')!r}, not {FORMAT!r} with a name; write "
                           "it with `evprobe directions`")
    name = meta.pop("name")
    meta.pop("format")
    return Direction(name, _checked_vector(path, vec, meta.get("d_model")), meta, path)


FIX_FOLDER = "write the folder again with `evprobe directions ACTS --layer L --out DIR`"


def _checked_vector(path: Path, vec: np.ndarray, d_model: Any, where: str = "its metadata") -> np.ndarray:
    """`vec` as float32 after the checks of the module docstring; `where` names what gave `d_model`."""
    if vec.ndim != 1 or vec.dtype.kind != "f":
        want = f" of length {d_model}" if d_model is not None else ""
        raise CaptureError(f"{path}: expected a float vector{want}, got {vec.dtype} {vec.shape}; {FIX_FOLDER}")
    if d_model is not None and vec.shape[0] != d_model:
        raise CaptureError(f"{path}: the vector has {vec.shape[0]} entries but {where} says d_model {d_model}; "
                           f"{FIX_FOLDER}")
    bad = np.flatnonzero(~np.isfinite(vec))
    if bad.size:  # before the norm: NaN would read as "not a unit vector" and hide where it is
        raise CaptureError(f"{path}: entry {int(bad[0])} of the vector is {vec[bad[0]]} ({bad.size} non-finite "
                           f"in all); a direction must be finite: {FIX_FOLDER}")
    if not abs(float(np.linalg.norm(vec.astype(np.float64))) - 1.0) < 1e-3:
        raise CaptureError(f"{path}: not a unit vector")
    return vec.astype(np.float32)


def check_width(direction: Direction, d_model: int, against: str) -> None:
    """Refuse `direction` unless its vector has `d_model` entries, the width of `against` (a
    capture or model that its vector will multiply): one line, before any product is formed."""
    if direction.vector.shape != (int(d_model),):
        raise CaptureError(f"direction {direction.name!r} has width {direction.vector.shape[0]} but {against} has "
                           f"d_model {d_model}; use directions fitted on that model's activations "
                           "(`evprobe directions ACTS --layer L`)")


# An entry's keys that readers use, with what each must be (mean_norm only when present: old folders).
ENTRY_KEYS: dict[str, tuple[Any, str]] = {
    "name": (lambda v: type(v) is str and v != "", "a non-empty string"),
    "file": (lambda v: type(v) is str and v != "", "a file name in the folder, e.g. \"NAME.safetensors\""),
    "layer": (lambda v: type(v) is int and v >= 0, "a non-negative integer (the model's layer number)"),
    "position": (lambda v: type(v) is str and v != "", "a position name such as \"last\""),
    "d_model": (lambda v: type(v) is int and v > 0, "a positive integer (the vector's length)"),
}
OPTIONAL_KEYS: dict[str, tuple[Any, str]] = {
    "mean_norm": (lambda v: type(v) in (int, float) and np.isfinite(v) and v > 0, "a finite positive number"),
}


def _entry_lines(text: str) -> list[int]:
    """The line on which each element of the top-level `directions` list starts (empty when the
    text is not laid out as expected: then messages say line 1)."""
    decoder = json.JSONDecoder()
    found = re.search(r'"directions"\s*:\s*\[', text)
    if not found:
        return []
    i, out = found.end(), []
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text) or text[i] == "]":
            return out
        out.append(text.count("\n", 0, i) + 1)
        try:
            _, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return out


def _read_index(path: Path) -> list[tuple[int, JsonObject]]:
    """(line, entry) of each direction in directions.json, every entry checked (ENTRY_KEYS)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise CaptureError(f"{path}: not a directions index ({err}); move it aside or {FIX_FOLDER}") from None
    data = parse_json(text, path, f"move it aside or {FIX_FOLDER}", error=CaptureError)  # bounded depth
    if not isinstance(data, dict) or not isinstance(data.get("directions"), list):
        got = type(data).__name__ if not isinstance(data, dict) else f"'directions' {shown(data.get('directions'))}"
        raise CaptureError(f"{path}:1: not a directions index (expected {{\"directions\": [...]}}, got {got}); move "
                           f"it aside or {FIX_FOLDER}")
    lines = _entry_lines(text)
    out, seen = [], {}
    for i, e in enumerate(data["directions"]):
        line = lines[i] if i < len(lines) else 1
        where = f"{path}:{line}: direction entry {i + 1}"
        if not isinstance(e, dict):
            raise CaptureError(f"{where} is {type(e).__name__} {shown(e, 40)}, not an object with "
                               f"{', '.join(ENTRY_KEYS)}; {FIX_FOLDER}")
        for key, (ok, must) in ENTRY_KEYS.items():
            if key not in e:
                raise CaptureError(f"{where} has no {key!r} (it must be {must}); add it or {FIX_FOLDER}")
            if not ok(e[key]):
                raise CaptureError(f"{where}: {key!r} must be {must}, got {shown(e[key])}; {FIX_FOLDER}")
        for key, (ok, must) in OPTIONAL_KEYS.items():
            if key in e and not ok(e[key]):
                raise CaptureError(f"{where}: {key!r} must be {must}, got {shown(e[key])}; {FIX_FOLDER}")
        if e["name"] in seen:
            raise CaptureError(f"{where}: name {e['name']!r} is listed twice (first on line {seen[e['name']]}); "
                               f"{FIX_FOLDER}")
        seen[e["name"]] = line
        out.append((line, e))
    return out


def read_directions(directory: str | Path, *, d_model: int | None = None,
                    against: str = "the capture or model") -> dict[str, Direction]:
    """Every direction of a folder written by `write_directions` (or an older `.npy` folder), by
    name, checked (module docstring): a finite float vector of shape (d_model,) with unit norm,
    next to its provenance (from directions.json; a safetensors file's metadata must name the
    same direction). `d_model`: the width of `against`, which every vector must have."""
    directory = Path(directory)
    index_path = directory / DIRECTIONS_FILE
    if not index_path.is_file():
        raise CaptureError(f"{index_path} not found; write directions with `evprobe directions ACTS --layer L`")
    out = {}
    for line, e in _read_index(index_path):
        file = Path(e["file"])
        if file.is_absolute() or ".." in file.parts or len(file.parts) != 1:
            raise CaptureError(f"{index_path}:{line}: direction file {e['file']!r} must be a plain name inside the "
                               "folder")
        path = directory / file
        width_from = f"{index_path}:{line}"
        if path.is_symlink() and not path.resolve().is_relative_to(directory.resolve()):
            raise CaptureError(f"{path}: a symlink to {path.resolve()}, outside {directory} ({index_path}:{line}); a "
                               f"folder's directions are its own files: copy the file in, or {FIX_FOLDER}")
        if file.suffix == SUFFIX:
            found = load_direction(path)
            if found.name != e["name"]:
                raise CaptureError(f"{path}: holds direction {found.name!r}, but {index_path}:{line} lists it as "
                                   f"{e['name']!r}; {FIX_FOLDER}")
            vec = _checked_vector(path, found.vector, e["d_model"], width_from)
            _same_provenance(path, found.provenance, e, f"{index_path}:{line}")
        elif file.suffix == LEGACY_SUFFIX:
            vec = _checked_vector(path, _load_npy(path), e["d_model"], width_from)
        else:
            raise CaptureError(f"{index_path}:{line}: direction file {e['file']!r} is neither {SUFFIX} nor "
                               f"{LEGACY_SUFFIX}; {FIX_FOLDER}")
        prov = {k: v for k, v in e.items() if k not in ("name", "file")}
        d = Direction(e["name"], vec, prov, index_path, line)
        if d_model is not None:
            try:
                check_width(d, d_model, against)
            except CaptureError as err:
                raise CaptureError(f"{path} ({index_path}:{line}): {err}") from None
        out[e["name"]] = d
    return out


# What a vector file's metadata and its directions.json entry must agree on (where both give it): what
# the direction is, of which model. Capture paths, items and norms are the index's to state (readers
# take them from there, and the capture is checked against them where it is read).
IDENTITY_KEYS = ("model", "model_fingerprint", "layer", "position", "label", "positive", "probe", "probe_params",
                 "condition", "d_model")


def _same_provenance(path: Path, meta: JsonObject, entry: JsonObject, where: str) -> None:
    for key in IDENTITY_KEYS:
        if key in meta and key in entry and meta[key] != entry[key]:
            raise CaptureError(f"{path}: its metadata says {key} {shown(meta[key], 40)} but {where} says "
                               f"{shown(entry[key], 40)}; the file and the index describe different directions: "
                               f"{FIX_FOLDER}")


def _load_npy(path: Path) -> np.ndarray:
    """A direction of a folder written before safetensors; never unpickled."""
    try:
        vec = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise CaptureError(f"{path}: not a plain numeric .npy ({err})") from None
    if not isinstance(vec, np.ndarray):
        raise CaptureError(f"{path}: expected one array, got {type(vec).__name__}")
    return vec
