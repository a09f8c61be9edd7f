"""evprobe's rows as one pandas DataFrame: a run's records, a job's results rows, a sweep's rows.

    evprobe.to_dataframe("runs/qwen")                 # records.jsonl of a RUN folder
    evprobe.to_dataframe("dose/results.jsonl")        # dose-response / gating / patching rows
    evprobe.to_dataframe(sweep_result)                # a probes.sweep.SweepResult, or its sweep.json
    evprobe.to_dataframe(evprobe.load_capture("acts")) # a loaded capture: one row per item, layer, position
    evprobe.to_dataframe(acts, rows, layers=[8, 16])  # your arrays: (n, layers, d) or (n, layers, positions, d)
    evprobe.to_dataframe(result, table="null")        # an analysis result (steering_dose_response, pair_patching,
                                                      # probe_layers, label_free_directions): one of its tables

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

Activations (`activation_rows`): a loaded capture (`load_capture`, or several pooled by
`load_captures`) or an array (n, layers, d) / (n, layers, positions, d) with its `rows` (one dict
per item, as `write_capture` takes them) give one row per (item, layer, position): the item's
fields, then `layer` (the model's layer number: the capture's, or `layers=` for an array,
default 0..L-1), `position` (its name, default `pos0`, ...) and `acts`, the vector as a float32
numpy array in one cell. `layer=` / `position=` keep one layer / position (or a list of them);
`acts=False` gives the items' fields alone, one row per item (the capture's index.jsonl).

pandas is an optional extra (`pip install 'evprobe[pandas]'`): only `to_dataframe` imports it,
and says so in one line when it is missing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from evprobe.core.errors import InputError
from evprobe.core.json_files import read_json_lines, read_json_object

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
        return [row for _, row in read_json_lines(path, "move the file aside")]
    data, _ = read_json_object(path, "give a .jsonl file or a sweep.json (a JSON object with 'rows')")
    return rows_of(data)


def _is_capture(source: Any) -> bool:
    """A loaded capture (probes.captures.Capture) or a pooled CaptureSet, by shape: core reads
    them without importing probes."""
    return (hasattr(source, "index") and hasattr(source, "meta") and hasattr(source, "acts")) or (
        hasattr(source, "captures") and hasattr(source, "index") and hasattr(source, "source_names"))


def _is_array(source: Any) -> bool:
    return not isinstance(source, (str, bytes, Path, Mapping, list, tuple)) and hasattr(source, "__array__")


def _chosen(name: str, want: Any, have: list[Any]) -> list[int]:
    if want is None:
        return list(range(len(have)))
    wanted = list(want) if isinstance(want, (list, tuple, set, range)) else [want]
    bad = [w for w in wanted if w not in have]
    if bad:
        raise InputError(f"to_dataframe: {name} {', '.join(map(str, bad))} not there; the source has "
                         f"{', '.join(map(str, have))}")
    return [have.index(w) for w in wanted]


def activation_rows(source: Any, rows: Any = None, *, layers: Any = None, positions: Any = None, layer: Any = None,
                    position: Any = None, acts: bool = True) -> list[dict[str, Any]]:
    """The rows of a capture or of an array with its rows (module docstring), unflattened."""
    import numpy as np

    if hasattr(source, "captures") and hasattr(source, "source_names"):  # pooled: each capture, its index rows
        parts = [(cap, [source.index[i] for i in range(int(source.offsets[s]), int(source.offsets[s + 1]))])
                 for s, cap in enumerate(source.captures)]
        return [row for cap, index in parts
                for row in _capture_rows(cap.acts, index, cap.meta, layer, position, acts, np)]
    if _is_capture(source):
        return _capture_rows(source.acts, source.index, source.meta, layer, position, acts, np)
    array = np.asarray(source)
    if array.ndim == 3:
        array = array[:, :, None, :]
    if array.ndim != 4:
        raise InputError(f"to_dataframe: an array must be (n, layers, d) or (n, layers, positions, d), got shape "
                         f"{array.shape}")
    if rows is None:
        raise InputError("to_dataframe: an array needs its rows, one dict per item: to_dataframe(acts, rows)")
    rows = list(rows)
    if len(rows) != array.shape[0] or not all(isinstance(r, Mapping) for r in rows):
        raise InputError(f"to_dataframe: acts has {array.shape[0]} items but {len(rows)} rows were given; give one "
                         "dict per item, in acts' order")
    names = list(layers) if layers is not None else list(range(array.shape[1]))
    where = list(positions) if positions is not None else [f"pos{i}" for i in range(array.shape[2])]
    if (len(names), len(where)) != array.shape[1:3]:
        raise InputError(f"to_dataframe: {len(names)} layers and {len(where)} positions named for an array of "
                         f"{array.shape[1]} layers and {array.shape[2]} positions")
    index = [{**r, "row": i} for i, r in enumerate(rows)]
    meta = {"layers": names, "positions": where}
    return [{k: v for k, v in row.items() if k != "row" or "row" in rows[0]}
            for row in _capture_rows(array, index, meta, layer, position, acts, np)]


def _capture_rows(array: Any, index: Any, meta: Mapping[str, Any], layer: Any, position: Any, acts: bool,
                  np: Any) -> list[dict[str, Any]]:
    if not acts:
        return [dict(r) for r in index]
    li = _chosen("layer", layer, list(meta["layers"]))
    pi = _chosen("position", position, list(meta["positions"]))
    out = []
    for r in index:
        item = array[int(r["row"])]
        for i in li:
            for j in pi:
                out.append({**r, "layer": meta["layers"][i], "position": meta["positions"][j],
                            "acts": np.asarray(item[i, j], dtype=np.float32)})
    return out


def require_pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise ImportError(PANDAS_MISSING) from None
    return pandas


def to_dataframe(source: Any, rows: Any = None, *, sep: str = ".", layers: Any = None, positions: Any = None,
                 layer: Any = None, position: Any = None, acts: bool = True, table: str | None = None) -> Any:
    """A pandas DataFrame of `source`'s rows, flattened (module docstring). `rows`, `layers`,
    `positions`: an array's item dicts and axis names; `layer`, `position`, `acts`: for a capture or
    an array, which layers and positions, and whether the vectors come too. `table`: which of a
    result's tables (an analysis result's `to_dataframe(table)`: e.g. a dose-response's effects,
    null, crossfit or items; default its main one)."""
    pandas = require_pandas()
    if (_is_capture(source) or _is_array(source)) and not isinstance(source, pandas.DataFrame):  # a frame has a shape too
        if table is None:
            return pandas.DataFrame([flatten(r, sep) for r in activation_rows(
                source, rows, layers=layers, positions=positions, layer=layer, position=position, acts=acts)])
    else:
        extra = {"rows": rows, "layers": layers, "positions": positions, "layer": layer, "position": position}
        given = [k for k, v in extra.items() if v is not None] + ([] if acts else ["acts"])
        own = getattr(source, "to_dataframe", None)
        result = callable(own) and not isinstance(source, type)  # an analysis result knows its own tables
        if given:
            raise InputError(f"to_dataframe: {', '.join(given)} apply to a capture or an array, not to "
                             f"{type(source).__name__}" + ("; choose one of its tables with table=" if result else ""))
        if result:
            return own() if table is None else own(table)
        if table is None:  # a DataFrame (paired_effects' table) is copied; anything else is read as rows
            return source.copy() if isinstance(source, pandas.DataFrame) else pandas.DataFrame(
                [flatten(r, sep) for r in rows_of(source)])
    raise InputError(f"to_dataframe: table= chooses among an analysis result's tables, not {type(source).__name__}'s")

__all__ = ["PANDAS_MISSING", "activation_rows", "flatten", "require_pandas", "rows_of", "to_dataframe"]
