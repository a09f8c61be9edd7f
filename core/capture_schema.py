"""Typed schema of a capture folder's `index.jsonl` rows and `meta.json`, shared by their readers
(`probes.captures.load_capture`, `experiments.capture.store.load_index`).

Probes may not import bench (nor bench.schema's pydantic models), so the schema is written here
as a table of field -> kind; tests/test_schemas_more.py checks that each item field's kind fits
`bench.items.Item`'s annotation and that the table names exactly the fields `evprobe capture`
writes. The checks are strict as bench.schema's: nothing is converted ("false" is no bool, true is
no integer, 1.0 is no row number).

Each check returns None or (field, one phrase naming the field, what it must be and the value);
the readers add file:line and the fix, making the one-line `core.errors.InputError`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from evprobe.core.errors import shown

CAPTURE_FORMAT = "evprobe-capture/1"  # meta.json's `format` (experiments.capture.FORMAT)

# kind -> (test, what a value must be)
KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "count": (lambda v: type(v) is int and v >= 0, "must be a non-negative integer"),
    "id": (lambda v: type(v) is str and v != "", "must be a non-empty string"),
    "str": (lambda v: type(v) is str, "must be a string"),
    "str?": (lambda v: v is None or type(v) is str, "must be a string or null"),
    "int?": (lambda v: v is None or type(v) is int, "must be an integer or null"),
    "bool?": (lambda v: v is None or type(v) is bool, "must be true, false or null"),
    "bool": (lambda v: type(v) is bool, "must be true or false"),
    "number": (lambda v: _finite(v), "must be a finite number"),
    "number?": (lambda v: v is None or _finite(v), "must be a finite number or null"),
    "object": (lambda v: type(v) is dict, "must be an object"),
    "scores": (lambda v: type(v) is dict and all(type(k) is str and _finite(x) for k, x in v.items()),
               "must be an object of finite numbers"),
    "numbers": (lambda v: _nested(v, _finite), "must be a (nested) list of finite numbers"),
    "ints": (lambda v: _nested(v, lambda x: type(x) is int), "must be a (nested) list of integers"),
}


def _finite(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def _nested(v: Any, leaf: Callable[[Any], bool]) -> bool:
    return type(v) is list and all(_nested(x, leaf) if type(x) is list else leaf(x) for x in v)

# index.jsonl: `row` and `item_id`, the item fields (experiments.capture.INDEX_FIELDS, typed as in
# bench.items.Item), then what the capture measured for the row. Fields outside the table are refused.
INDEX_ITEM_TYPES: dict[str, str] = {
    "request": "str", "variant": "str?", "family_id": "id", "system": "str", "initial_property": "str",
    "decision_id": "str?", "history": "int?", "threshold_level": "str?", "test": "str?", "hidden_world": "str?",
    "image_pair_id": "str?", "threshold_pair_id": "str?", "resolved": "bool?", "reference_action": "str?",
    "reference_answer": "str?",
}
# Item fields written only when they differ from their default (bench.items.OMIT_WHEN_DEFAULT), so a
# capture of the main set, and one written before the field existed, have the same lines; a reader
# takes a missing one as its default (the information-injection level: 0, the standard prompt).
# The void fields (bench.voids): a void item's type and its sufficient twin's item id.
INDEX_OPTIONAL_ITEM_TYPES: dict[str, str] = {"injection": "count", "void": "str?", "twin_id": "str?"}
INDEX_OPTIONAL_DEFAULTS: dict[str, object] = {"injection": 0, "void": None, "twin_id": None}
INDEX_TYPES: dict[str, str] = {
    "row": "count", "item_id": "id", **INDEX_ITEM_TYPES, **INDEX_OPTIONAL_ITEM_TYPES,
    "text_span": "str", "n_tokens": "count", "n_image_tokens": "count", "n_text_tokens": "count",
    "n_clipped": "count",
}
# The benchmark's cell: the fields whose values together say what kind of prompt an item is (24 cells:
# system x initial property x history x threshold level; bench.family builds every family in one system
# x initial property and varies history and threshold within it). A sweep's control tasks permute within
# cells. It is the benchmark's design, kept here beside its index schema because probes may not import
# bench; probes.control_tasks.default_cell_fields uses it only where a capture's index carries it.
BENCHMARK_CELL_FIELDS = ("system", "initial_property", "history", "threshold_level")
# A row must have these; the others are checked when present (a capture of an older evprobe, or a
# synthetic one (probes.synthetic), writes the item fields only).
INDEX_REQUIRED = ("row", "item_id", "family_id")
# A capture written from the user's own arrays (probes.capture_writer.write_capture) declares its own
# label fields in meta.json `fields` ({name: kind}): scalar kinds only, since a label is a scalar, and
# never a name of the table above (those keep their kinds). Captures without `fields` read as before.
USER_KINDS = ("bool?", "int?", "number?", "str?")


def _kind_problem(name: str, kind: str, value: Any) -> tuple[str, str] | None:
    test, must = KINDS[kind]
    return None if test(value) else (name, f"field {name!r} {must}, got {shown(value)}")


def index_row_problem(row: Any, fields: dict[str, str] | None = None) -> tuple[str, str] | None:
    """(field, what is wrong) with one parsed index.jsonl line, or None. `fields`: the capture's
    declared user fields (meta.json `fields`, checked by `meta_problem`), allowed beside the table."""
    if not isinstance(row, dict):
        return "", f"expected a JSON object, got {shown(row)}"
    for name in INDEX_REQUIRED:
        if name not in row:
            return name, f"missing field {name!r}"
    for name, value in row.items():
        kind = INDEX_TYPES.get(name) or (fields or {}).get(name)
        if kind is None:
            return name, f"unknown field {name!r} (not in format {CAPTURE_FORMAT})"
        bad = _kind_problem(name, kind, value)
        if bad:
            return bad
    return None


def row_problem(row: Any, types: dict[str, str], required: Sequence[str], what: str) -> str | None:
    """What is wrong with one parsed JSONL row of a fixed format (`types`: field -> kind; fields
    outside it are refused; `required` must be there), or None. For the jobs' results rows."""
    if not isinstance(row, dict):
        return f"expected a JSON object, got {shown(row)}"
    for name in required:
        if name not in row:
            return f"missing field {name!r}"
    for name, value in row.items():
        kind = types.get(name)
        if kind is None:
            return f"unknown field {name!r} (not a field of a {what})"
        bad = _kind_problem(name, kind, value)
        if bad:
            return bad[1]
    return None


def _int_list(value: Any, positive: bool) -> bool:
    return isinstance(value, list) and all(type(v) is int and (v > 0 if positive else True) for v in value)


def meta_problem(meta: Any, acts_shape: Sequence[int] | None = None) -> tuple[str, str] | None:
    """(top-level key, what is wrong) with a parsed meta.json, or None. `format` must be this
    format, `shape` 4 positive integers (equal to `acts_shape`, acts.npy's shape, when given),
    `layers` distinct integers, `positions` distinct strings, `d_model` a positive integer."""
    if not isinstance(meta, dict):
        return "", f"expected a JSON object, got {shown(meta)}"
    for name in ("format", "shape", "layers", "positions", "d_model"):
        if name not in meta:
            return name, f"missing field {name!r}"
    if meta["format"] != CAPTURE_FORMAT:
        return "format", f"field 'format' must be {CAPTURE_FORMAT!r}, got {shown(meta['format'])}"
    shape = meta["shape"]
    if not (_int_list(shape, positive=True) and len(shape) == 4):
        return "shape", f"field 'shape' must be a list of 4 positive integers, got {shown(shape)}"
    if acts_shape is not None and tuple(shape) != tuple(acts_shape):
        return "shape", f"field 'shape' must be acts.npy's shape {list(acts_shape)}, got {shown(shape)}"
    layers, positions = meta["layers"], meta["positions"]
    if not _int_list(layers, positive=False) or len(set(layers)) != len(layers):
        return "layers", f"field 'layers' must be a list of distinct integers, got {shown(layers)}"
    if not (isinstance(positions, list) and all(type(p) is str and p for p in positions)
            and len(set(positions)) == len(positions)):
        return "positions", f"field 'positions' must be a list of distinct non-empty strings, got {shown(positions)}"
    d_model = meta["d_model"]
    if not (type(d_model) is int and d_model > 0):
        return "d_model", f"field 'd_model' must be a positive integer, got {shown(d_model)}"
    return fields_problem(meta.get("fields", {}))


def fields_problem(fields: Any) -> tuple[str, str] | None:
    """("fields", what is wrong) with meta.json's declared user fields, or None."""
    if type(fields) is not dict:
        return "fields", f"field 'fields' must be an object of field name -> kind, got {shown(fields)}"
    for name, kind in fields.items():
        if name in INDEX_TYPES:
            return "fields", (f"field 'fields' redeclares {name!r}, a field of {CAPTURE_FORMAT} "
                              f"(kind {INDEX_TYPES[name]})")
        if kind not in USER_KINDS:
            return "fields", f"field 'fields' gives {name!r} kind {shown(kind)}; use one of {', '.join(USER_KINDS)}"
    return None


__all__ = ["BENCHMARK_CELL_FIELDS", "CAPTURE_FORMAT", "INDEX_ITEM_TYPES", "INDEX_OPTIONAL_DEFAULTS", "INDEX_OPTIONAL_ITEM_TYPES", "INDEX_REQUIRED", "INDEX_TYPES", "KINDS", "USER_KINDS",
           "fields_problem", "index_row_problem", "meta_problem", "row_problem"]
