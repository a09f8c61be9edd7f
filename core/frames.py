"""evprobe's rows as one pandas DataFrame: a run's records, a job's results rows, a sweep's rows.

    evprobe.to_dataframe("runs/qwen")                 # records.jsonl of a RUN folder
    evprobe.to_dataframe("dose/results.jsonl")        # dose-response / gating / patching rows
    evprobe.to_dataframe(sweep_result)                # a probes.sweep.SweepResult, or its sweep.json

Sources (`rows_of`): a folder (its records.jsonl or results.jsonl; both there is an error naming
them), a `.jsonl` file (complete lines only: an unterminated last line is left out with the usual
warning, as every reader does), a `.json` file holding `{"rows": [...]}` (sweep.json), an object
with `to_json()` giving such a mapping (SweepResult), that mapping itself, or any iterable of dicts.
A sweep's rows get its `label`, `positive`, `probe` and `model` as columns, so several sweeps
concatenate into one table.

Flattening (`flatten`), one rule for every source:
- a nested object becomes dotted columns: {"selectivity": {"value": .1, "n": 40}} ->
  `selectivity.value`, `selectivity.n` (at any depth; an empty object is one cell, {});
- an interval, a key `ci` or ending in `_ci` holding [lo, hi], becomes `KEY.lo` and `KEY.hi`
  (numbers sort, filter and plot; a list cell does not): `ci.lo`, `selectivity.ci.hi`;
- every other list stays one cell (a Python list): lengths vary (items, shuffles, scores);
- columns come in the order first seen; a row without a column holds NaN there (pandas' rule).

pandas is an optional extra (`pip install 'evprobe[pandas]'`): only `to_dataframe` imports it,
and says so in one line when it is missing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from evprobe.core.errors import InputError
from evprobe.core.files import read_complete_lines

ROW_FILES = ("records.jsonl", "results.jsonl")
SWEEP_COLUMNS = ("label", "positive", "probe", "model")
PANDAS_MISSING = "to_dataframe needs pandas, an optional extra: pip install 'evprobe[pandas]' (or pip install pandas)"


def flatten(row: Mapping[str, Any], sep: str = ".") -> dict[str, Any]:
    """One row with nested objects as dotted keys and [lo, hi] intervals as KEY.lo / KEY.hi."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any, key: str) -> None:
        if isinstance(value, Mapping) and value:
            for k, v in value.items():
                walk(f"{prefix}{sep}{k}" if prefix else str(k), v, str(k))
        elif _is_interval(key, value):
            out[f"{prefix}{sep}lo"], out[f"{prefix}{sep}hi"] = value
        else:
            out[prefix] = value

    for k, v in row.items():
        walk(str(k), v, str(k))
    return out


def _is_interval(key: str, value: Any) -> bool:
    return ((key == "ci" or key.endswith("_ci")) and isinstance(value, (list, tuple)) and len(value) == 2
            and all(v is None or isinstance(v, (int, float)) and not isinstance(v, bool) for v in value))


def rows_of(source: Any) -> list[dict[str, Any]]:
    """The rows of a source (module docstring), unflattened."""
    if isinstance(source, (str, Path)):
        return _rows_of_path(Path(source))
    if hasattr(source, "to_json") and callable(source.to_json):
        source = source.to_json()
    if isinstance(source, Mapping):
        if not isinstance(source.get("rows"), list):
            raise InputError("to_dataframe: a mapping must hold a list under 'rows' (as sweep.json does); for one "
                             "row, pass [row]")
        context = {k: source[k] for k in SWEEP_COLUMNS if k in source}
        return [{**context, **row} for row in source["rows"]]
    if isinstance(source, Iterable):
        rows = list(source)
        bad = next((i for i, r in enumerate(rows) if not isinstance(r, Mapping)), None)
        if bad is not None:
            raise InputError(f"to_dataframe: row {bad} is {type(rows[bad]).__name__}, not a dict; pass dicts, a "
                             "file or a folder")
        return [dict(r) for r in rows]
    raise InputError(f"to_dataframe: cannot read rows from {type(source).__name__}; pass a RUN/results folder, a "
                     ".jsonl or sweep.json file, a SweepResult or a list of dicts")


def _rows_of_path(path: Path) -> list[dict[str, Any]]:
    if path.is_dir():
        found = [path / name for name in ROW_FILES if (path / name).is_file()]
        if len(found) != 1:
            what = "both " + " and ".join(f.name for f in found) if found else f"no {' or '.join(ROW_FILES)}"
            raise InputError(f"{path}: {what}; give the file itself (to_dataframe(FOLDER / 'results.jsonl'))")
        path = found[0]
    if not path.is_file():
        raise InputError(f"{path} not found; give a RUN or results folder, a .jsonl file or a sweep.json")
    if path.suffix == ".jsonl":
        rows = []
        for number, line in read_complete_lines(path):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(f"{path}:{number}: not valid JSON ({err.msg}); move the file aside") from None
            if not isinstance(row, dict):
                raise InputError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
            rows.append(row)
        return rows
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"{path}: not JSON text ({err}); give a .jsonl file or a sweep.json") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object with 'rows' (a sweep.json)")
    return rows_of(data)


def require_pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise ImportError(PANDAS_MISSING) from None
    return pandas


def to_dataframe(source: Any, *, sep: str = ".") -> Any:
    """A pandas DataFrame of `source`'s rows, flattened (module docstring)."""
    pandas = require_pandas()
    return pandas.DataFrame([flatten(r, sep) for r in rows_of(source)])


__all__ = ["PANDAS_MISSING", "flatten", "require_pandas", "rows_of", "to_dataframe"]
