"""What the explorer (experiments.report.explorer_data) reads from disk, checked before it is shown.

Rows: every line of a records.jsonl, items.jsonl or results.jsonl, and each results folder's
meta.json, is checked for the fields the explorer reads, with the types it reads them as (`RECORD`,
`ITEM`, `DOSE`, `PATCH`, `META`). A line that is not a JSON object, or whose field is missing or of
another type (a row without `item_id`, a `log_odds` that is a string), is left out with one warning
per file naming the file, its first such line and field, and how many lines were left out; a
meta.json that fails leaves its folder out. Left out, not stopped: the explorer is one section of a
report whose numbers come from the parts' own pages, so a damaged row costs the section one example,
said in the warning, not the user their report (build.py leaves out a file linked from outside the
same way).

Folders: a folder a meta.json names (`bench`, `directions_folder`) is read only when it lies inside
the report's folders (symlinks resolved), else the like-named folder beside the results when that one
does; a path leading outside is refused with one warning line (a report carries only what its user
put in it: an outside items.jsonl's items, histories and ids never reach the HTML).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evprobe.core.errors import InputError, OneLineWarning
from evprobe.core.files import read_complete_lines
from evprobe.core.json_files import json_kind, parse_json, read_json_text
from evprobe.core.json_types import JsonObject

FIX = "rerun the step that wrote it, or fix the line"


def _real(v: Any) -> bool:  # what f"{v:+.2f}" formats: a float, or an int within float's range
    return isinstance(v, float) or (isinstance(v, int) and not isinstance(v, bool) and abs(v) <= 1e308)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _bool(v: Any) -> bool:
    return isinstance(v, bool)


def _obj(v: Any) -> bool:
    return isinstance(v, dict)


def _reals(v: Any) -> bool:
    return isinstance(v, list) and all(x is None or _real(x) for x in v)


def _strs(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _layer_names(v: Any) -> bool:  # {"3": {"name": "..."}}: layer numbers to the direction steered there
    return isinstance(v, dict) and all(
        isinstance(k, str) and k.isdigit() and isinstance(e, dict) and isinstance(e.get("name"), str)
        for k, e in v.items())


@dataclass(frozen=True)
class Field:
    """One field the explorer reads: its dotted path, what it must be, and whether it must be there."""

    path: str
    ok: Callable[[Any], bool]
    want: str
    required: bool = False


def _fields(required: Mapping[str, tuple[Callable[[Any], bool], str]],
            optional: Mapping[str, tuple[Callable[[Any], bool], str]]) -> tuple[Field, ...]:
    return (tuple(Field(p, ok, want, True) for p, (ok, want) in required.items())
            + tuple(Field(p, ok, f"{want} or null", False) for p, (ok, want) in optional.items()))


STR, REAL, INT, BOOL, OBJ = (_str, "a string"), (_real, "a number"), (_int, "an integer"), (_bool, "true or false"), \
    (_obj, "an object")
RECORD = _fields({"item_id": STR}, {"model": STR, "reply": STR, "valid": BOOL, "choice": STR})
ITEM = _fields({"item_id": STR, "family_id": STR, "system": STR},
               {"image_pair_id": STR, "threshold_pair_id": STR, "resolved": BOOL,
                "images": (_strs, "a list of strings")})
DOSE = _fields({"item_id": STR}, {"kind": STR, "layer": INT, "alpha": REAL, "lp": OBJ, "lp.choice": STR,
                                  "lp.log_odds": REAL, "gen": OBJ, "gen.valid": BOOL, "gen.choice": STR,
                                  "gen.reply": STR, "lp_set": OBJ,
                                  "lp_set.log_odds": (_reals, "a list of numbers")})
PATCH = _fields({"source": STR, "target": STR, "ld_source": REAL, "ld_target": REAL}, {})
META = _fields({}, {"model": STR, "bench": STR, "config": OBJ, "config.bench": STR, "directions_folder": STR,
                    "layer_directions": (_layer_names, 'an object of layer numbers to {"name": ...}')})


def _at(row: JsonObject, path: str) -> tuple[bool, Any]:
    """(present, value) of a dotted field; absent under a parent that is absent or null."""
    value: Any = row
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return False, None
        value = value[key]
    return True, value


def problem(row: Any, fields: tuple[Field, ...]) -> str | None:
    """What keeps `row` from being shown (its first wrong field), or None."""
    if not isinstance(row, dict):
        return f"expected a JSON object, got {json_kind(row)}"
    for f in fields:
        present, value = _at(row, f.path)
        if not present or value is None:
            if f.required:
                return f"field '{f.path}' is missing; it must be {f.want}"
        elif not f.ok(value):
            return f"field '{f.path}' is {json_kind(value)}, not {f.want}"
    return None


def _left_out(first: str, n: int, what: str) -> None:
    warnings.warn(f"{first}; {n} {what} left out of the report's explorer ({FIX})", OneLineWarning, stacklevel=3)


def checked_rows(path: Path, fields: tuple[Field, ...]) -> list[JsonObject]:
    """The rows of the JSONL file `path` the explorer can show (module docstring); the rest left out with
    one warning naming the first. A file that is not UTF-8 is left out whole, likewise."""
    try:
        lines = read_complete_lines(path)
    except InputError as err:
        _left_out(str(err).split("; ")[0], 1, "file")
        return []
    out, bad, first = [], 0, ""
    for number, text in lines:
        try:
            row = parse_json(text, path, FIX, line=number)
            why = problem(row, fields)
        except InputError as err:
            row, why = None, str(err).split("; ")[0].removeprefix(f"{path}:{number}: ")
        if why is None:
            out.append(row)
        else:
            bad += 1
            first = first or f"{path}:{number}: {why}"
    if bad:
        _left_out(first, bad, "line(s) of this file")
    return out


def checked_meta(path: Path) -> JsonObject | None:
    """A results folder's meta.json ({} when there is none), or None, with one warning, when it is not one
    the explorer can read (its folder is then left out)."""
    if not path.is_file():
        return {}
    try:
        meta, _ = read_json_text(path, FIX)
    except (InputError, OSError) as err:
        _left_out(str(err).split("; ")[0], 1, "folder")
        return None
    why = problem(meta, META)
    if why is not None:
        _left_out(f"{path}: {why}", 1, "folder")
        return None
    return meta


def contained(recorded: str | None, sibling: Path, roots: list[Path], where: str) -> Path | None:
    """The folder a meta.json records (`recorded`), else the like-named `sibling` beside the results (a
    copied or moved pipeline), whichever first is a folder inside the roots; None when neither is. A
    recorded folder that exists outside them is refused with one warning (`where` names the field)."""
    resolved = [r.resolve() for r in roots]
    candidates = ([Path(recorded)] if recorded else []) + [sibling]
    for c in candidates:
        if c.is_dir() and any(r == c.resolve() or r in c.resolve().parents for r in resolved):
            return c
    if recorded and Path(recorded).is_dir():
        warnings.warn(f"{where} names {recorded}, which resolves to {Path(recorded).resolve()}, outside the report's "
                      f"folders; its folder is left out of the report's explorer (report on a folder holding "
                      "both, or copy it beside the results)", OneLineWarning, stacklevel=2)
    return None


__all__ = ["DOSE", "ITEM", "META", "PATCH", "RECORD", "Field", "checked_meta", "checked_rows", "contained",
           "problem"]
