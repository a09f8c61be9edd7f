"""Write a capture folder from your own arrays and labels, so `evprobe sweep`, `evprobe directions`
and `probes.sweep` run on any data, not only on captures of the benchmark.

    write_capture(path, acts, rows, layers=[8, 16], positions=["last"], model="my-model")

- `acts`: (n, layers, positions, d) or (n, layers, d) (one position), any real float or integer
  dtype (a torch tensor: pass `t.float().cpu().numpy()`). Stored as float16, the capture format's
  dtype: a value that is NaN or infinite, or beyond float16's range (|x| > 65504), is refused,
  never clipped.
- `rows`: one dict per item, in acts' order, with at least `family_id` (the unit that is kept
  whole when folds are dealt and when the bootstrap resamples: items that share a source, e.g. one
  prompt template, one document, one image, share a family) and the label fields. `item_id` is
  optional (default: the row number). Ids may be strings or integers (written as strings).
  Fields of the capture schema (`core.capture_schema.INDEX_TYPES`: `system`, `history`, `resolved`,
  `image_pair_id`, ...) keep their kinds; any other field is yours: its values must be one scalar
  type (bool, int, float or str; None = unknown, that row is dropped from that label) and its kind
  is declared in meta.json `fields` so the reader accepts it. A field named like a derived label
  (`stopped`, `valid`, `initial`, ...) or like what pooling adds (`source`, `source_name`) is
  refused: the label reader would compute that name instead of reading your values. NaN in a row
  is refused (write None for a missing value).
- `layers`: the model's layer numbers on the second axis (default 0..L-1); `positions`: names of
  the third axis (default `pos0`, `pos1`, ...).

Files, as `evprobe capture` writes them (`probes.captures` reads them): acts.npy (little-endian
float16, a plain .npy), meta.json (format, shape, model, layers, positions, d_model, regime,
requests, n_items, acts_dtype, fields, written_by), index.jsonl (one row per item, the commit log).
Each appears whole under its final name or not at all (a temporary file and a rename, fsynced);
the index is written last, so a folder killed part-way has no committed rows. A folder that
already holds a capture is refused unless `overwrite=True` (which removes the old index first, so
old rows are never read against new activations).

Every refusal is a `CaptureError` (an `InputError`): one line naming the problem and the fix.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib.format import open_memmap

from evprobe.core.capture_schema import CAPTURE_FORMAT, INDEX_TYPES, KINDS, USER_KINDS
from evprobe.core.errors import shown
from evprobe.core.files import atomic_write_json, atomic_write_jsonl
from evprobe.core.json_types import JsonObject
from evprobe.probes.captures import ACTS_FILE, INDEX_FILE, META_FILE, CaptureError
from evprobe.probes.label_sets import DERIVED_LABELS

FLOAT16_MAX = float(np.finfo(np.float16).max)  # 65504
CHUNK_ROWS = 64  # rows converted and checked at a time: memory stays (64, layers, positions, d)
RESERVED = frozenset({*DERIVED_LABELS, "source", "source_name", "row"})


def write_capture(
    path: str | Path,
    acts: Any,
    rows: Sequence[Mapping[str, Any]],
    *,
    layers: Sequence[int] | None = None,
    positions: Sequence[str] | None = None,
    model: str = "unknown",
    regime: str = "standard",
    overwrite: bool = False,
) -> Path:
    """Write a capture folder at `path` from `acts` and `rows` (see the module docstring); returns
    `path`. Everything is checked before a file appears; nothing is written on a refusal."""
    path = Path(path)
    acts = _as_array(acts)
    if acts.ndim == 3:
        acts = acts[:, :, None, :]  # (n, layers, 1, d): one position
    n, n_layers, n_positions, d = acts.shape
    if len(rows) != n:
        raise CaptureError(f"acts has {n} rows but {len(rows)} row dicts were given; give one dict per item, in "
                           "acts' order")
    layers = _layers(layers, n_layers)
    positions = _positions(positions, n_positions)
    if type(model) is not str or type(regime) is not str or not regime:
        raise CaptureError(f"model and regime must be strings, got {shown(model)} and {shown(regime)}")
    index, fields = _index_rows(rows)
    _make_room(path, overwrite)
    tmp = _acts_tmp(path / ACTS_FILE, acts)  # every value checked before anything is replaced
    (path / INDEX_FILE).unlink(missing_ok=True)  # overwrite: uncommit old rows before their activations go
    os.replace(tmp, path / ACTS_FILE)
    requests = sorted({r["request"] for r in index if "request" in r})
    meta = {"format": CAPTURE_FORMAT, "model": model, "layers": layers, "positions": positions, "d_model": d,
            "regime": regime, "requests": requests, "n_items": n, "shape": [n, n_layers, n_positions, d],
            "acts_dtype": "float16", "fields": fields, "written_by": "evprobe.write_capture"}
    atomic_write_json(path / META_FILE, meta)
    atomic_write_jsonl(path / INDEX_FILE, index)  # last: the commit
    return path


def _as_array(acts: Any) -> np.ndarray:
    try:
        arr = np.asarray(acts)  # a memmap stays a memmap: nothing is copied here
    except (TypeError, ValueError, RuntimeError) as err:
        raise CaptureError(f"acts cannot be read as a numpy array ({type(err).__name__}: {err}); pass a numpy "
                           "array (a torch tensor: t.float().cpu().numpy())") from None
    if arr.dtype.kind not in "fiu":
        raise CaptureError(f"acts has dtype {arr.dtype}; pass real numbers (float or integer), e.g. "
                           "t.float().cpu().numpy() for a torch tensor")
    if arr.ndim not in (3, 4) or 0 in arr.shape:
        raise CaptureError(f"acts has shape {arr.shape}; expected (items, layers, positions, d_model) or "
                           "(items, layers, d_model), none of them 0")
    return arr


def _layers(layers: Sequence[int] | None, n_layers: int) -> list[int]:
    if layers is None:
        return list(range(n_layers))
    out = list(layers)
    if len(out) != n_layers or not all(type(v) is int or isinstance(v, np.integer) for v in out):
        raise CaptureError(f"layers {shown(out)} must be {n_layers} integers, one per entry of acts' second axis")
    out = [int(v) for v in out]
    if len(set(out)) != len(out):
        raise CaptureError(f"layers {shown(out)} repeat a layer; give each model layer once")
    return out


def _positions(positions: Sequence[str] | None, n_positions: int) -> list[str]:
    if positions is None:
        return [f"pos{i}" for i in range(n_positions)]
    out = [positions] if isinstance(positions, str) else list(positions)
    if len(out) != n_positions or not all(type(p) is str and p for p in out) or len(set(out)) != len(out):
        raise CaptureError(f"positions {shown(out)} must be {n_positions} distinct non-empty names, one per entry "
                           "of acts' position axis")
    return out


def _scalar(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value  # numpy scalars (e.g. from pandas)


def _index_rows(rows: Sequence[Mapping[str, Any]]) -> tuple[list[JsonObject], dict[str, str]]:
    """The index rows to write ({row, item_id, family_id, ...}) and the user fields' kinds."""
    index: list[JsonObject] = []
    seen: dict[str, int] = {}
    types: dict[str, set[str]] = {}
    for i, given in enumerate(rows):
        if not isinstance(given, Mapping):
            raise CaptureError(f"row {i} is {type(given).__name__}, not a dict; give one dict of fields per item")
        row = {str(k): _scalar(v) for k, v in given.items()}
        if row.get("family_id") is None:
            raise CaptureError(f"row {i} has no family_id; give every row a family_id (items from one source, e.g. "
                               "one template or document, share one; use the row number if each item is its own)")
        for key in ("family_id", "item_id"):
            if key in row and type(row[key]) is int:
                row[key] = str(row[key])  # ids are strings in the format
        row.setdefault("item_id", str(i))
        item_id = row["item_id"]
        if item_id in seen:
            raise CaptureError(f"rows {seen[item_id]} and {i} share item_id {item_id!r}; item ids must be unique")
        seen[item_id] = i
        for name, value in row.items():
            if name in RESERVED:
                raise CaptureError(f"row {i}: field {name!r} is a name evprobe computes itself; rename it "
                                   f"(e.g. {name + '_label'!r})")
            if type(value) is float and not math.isfinite(value):
                raise CaptureError(f"row {i}: field {name!r} is {value}; write None for a missing value "
                                   "(pandas: df.astype(object).where(df.notna(), None))")
            kind = INDEX_TYPES.get(name)
            if kind is not None:
                test, must = KINDS[kind]
                if not test(value) and name in ("family_id", "item_id"):
                    raise CaptureError(f"row {i}: field {name!r} must be a non-empty string or an integer, got "
                                       f"{shown(value)}")
                if not test(value):
                    raise CaptureError(f"row {i}: field {name!r} {must}, got {shown(value)} (a field of "
                                       f"{CAPTURE_FORMAT}; rename yours if it means something else)")
            elif value is not None:
                if type(value) not in (bool, int, float, str):
                    raise CaptureError(f"row {i}: field {name!r} is {type(value).__name__} {shown(value)}; labels "
                                       "are scalars (bool, int, float, str or None)")
                types.setdefault(name, set()).add(type(value).__name__)
            else:
                types.setdefault(name, set())
        index.append({"row": i, **row})
    fields = {name: _kind(name, seen_types) for name, seen_types in types.items()}
    if not fields and not any(k in INDEX_TYPES and k not in ("row", "item_id", "family_id") for r in index for k in r):
        raise CaptureError("the rows carry no label field besides family_id/item_id; add the fields to probe for "
                           "(e.g. {'family_id': 'doc-3', 'truthful': True})")
    return index, fields


def _kind(name: str, types: set[str]) -> str:
    """The user field's kind from the Python types of its values."""
    if types <= {"bool"}:
        return "bool?"  # (an always-null field reads as bool?: a label of no rows)
    if types == {"int"}:
        return "int?"
    if types <= {"int", "float"}:
        return "number?"
    if types == {"str"}:
        return "str?"
    raise CaptureError(f"field {name!r} mixes value types ({', '.join(sorted(types))}); give one type per field "
                       "(e.g. all str)")


def _make_room(path: Path, overwrite: bool) -> None:
    there = [f for f in (ACTS_FILE, META_FILE, INDEX_FILE) if (path / f).exists()]
    if path.exists() and not path.is_dir():
        raise CaptureError(f"{path} exists and is not a folder; give a folder path for the capture")
    if there and not overwrite:
        raise CaptureError(f"{path} already holds a capture ({', '.join(there)}); give another path or "
                           "overwrite=True")
    path.mkdir(parents=True, exist_ok=True)


def _acts_tmp(path: Path, acts: np.ndarray) -> Path:
    """acts as little-endian float16 in a temporary .npy beside `path` (fsynced; the caller renames
    it), chunk by chunk, each chunk checked for NaN/inf before and after the cast (float16 overflow
    becomes inf). On a refusal the temporary file is removed."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        mm = open_memmap(tmp, mode="w+", dtype=np.dtype("<f2"), shape=acts.shape)
        for start in range(0, acts.shape[0], CHUNK_ROWS):
            chunk = np.asarray(acts[start : start + CHUNK_ROWS])  # (k, layers, positions, d)
            bad = ~np.isfinite(chunk) if chunk.dtype.kind == "f" else None
            if bad is not None and bad.any():
                row = start + int(np.argwhere(bad)[0][0])
                raise CaptureError(f"acts row {row} holds NaN or inf ({int(bad.sum())} values in rows {start}.."
                                   f"{start + len(chunk) - 1}); fix or drop those items first")
            with np.errstate(over="ignore"):  # overflow is reported below, as one line
                half = chunk.astype("<f2")
            over = ~np.isfinite(half)
            if over.any():
                row = start + int(np.argwhere(over)[0][0])
                peak = float(np.abs(chunk.astype(np.float64)).max())
                raise CaptureError(f"acts row {row} has values beyond float16's range (|x| up to {peak:.4g} > "
                                   f"{FLOAT16_MAX:g}); captures store float16: rescale the activations first")
            mm[start : start + len(chunk)] = half
        mm.flush()
        del mm
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        return Path(tmp)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


__all__ = ["USER_KINDS", "write_capture"]
