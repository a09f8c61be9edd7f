"""Read capture folders safely (the labels made from them: probes.label_sets).

A capture folder (written by `evprobe capture`) holds:

- `acts.npy`: float16, shape (n_items, n_layers, n_positions, d_model), created whole up front
  and filled row by row. Opened with `np.load(..., mmap_mode="r", allow_pickle=False)`: nothing
  is unpickled, ever (an object array is refused with a clear error), and nothing is read until
  a layer is asked for.
- `index.jsonl`: the commit log, one JSON object per finished row (`row`, `item_id` and the item
  fields). Only rows listed here hold finished data; lines may come in any row order (the
  capture batches items by image count). A last line without its newline is a torn append: left
  out with a warning while a capture is writing the folder (its lock file names a live process,
  `core.lock.being_written`), refused otherwise, since a capture no process writes must have a
  complete index (a cut file had lost its last row without a word); read-only either way, this
  reader never truncates anything. Any other bad line is an error naming file and line. Rows are checked against `core.capture_schema` (typed fields, no unknown
  ones: `row` a non-negative integer, not true; `resolved` true, false or null; ...).
- `meta.json`: `format`, `shape` (acts.npy's), `model`, `layers` (the model's layer numbers, the
  second axis), `positions` (names, the third axis), `d_model`, `regime`, `requests`, ...; the
  typed keys are checked (`core.capture_schema.meta_problem`), errors naming the key's line. A
  capture written from the user's own arrays (`probes.capture_writer.write_capture`) also has
  `fields` ({name: kind}): its own label fields, allowed in index rows beside the schema's.

Every error is a `CaptureError`, an `InputError`: one line naming file, line, field and the fix.

Values are checked at read, once per load: every committed row of acts.npy must be finite. A NaN or
an infinity (which `evprobe capture` and `write_capture` never write: a damaged file, or a writer of
its own) would otherwise pass into every statistic (one NaN cell made a layer "degenerate"). The
check reads the committed rows in chunks of about 32 MiB through the memmap (float16 bit pattern:
exponent bits all ones; about 5 GB/s from the page cache, e.g. 4 ms for 9,216 x 15 x 64 and 7 ms
for 144 x 28 x 3584), and uncommitted rows (not yet filled) are not read. `nonfinite` says what a
bad row does:

- `"refuse"` (default): a `CaptureError` naming the file, the first bad row (its item id and
  index.jsonl line), the layer, the position and the fix;
- `"drop"` (`--nonfinite drop`): every family holding such a row is left out whole (the family is
  the unit of folds and bootstrap, and matched pairs live within it), together with any family
  sharing an `image_pair_id` / `threshold_pair_id` with one left out, so matched pairs stay
  together. `Capture.nonfinite` says what was left out, a one-line `OneLineWarning` says so at
  load, and `labels` counts the rows under "non-finite activations (family left out at read)".
  `load_captures` leaves a family out of every capture when any capture drops it (regimes of the
  same items stay matched).

Several captures of the same items (prompt regimes) pool into one `CaptureSet`; its rows are the
captures' indexed rows one after another, each index row gaining `source` (capture position) and
`source_name` (the regime, or the folder name when two captures share a regime).

Labels from captures and a run's records: probes.label_sets.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from tokenize import TokenError
from typing import Any

import numpy as np

from evprobe.core.capture_schema import index_row_problem, meta_problem
from evprobe.core.errors import InputError, OneLineWarning
from evprobe.core.files import key_line, warn_incomplete_line
from evprobe.core.json_files import read_json_lines, read_json_text
from evprobe.core.json_types import JsonObject
from evprobe.core.lock import being_written
from evprobe.probes.nonfinite import (  # noqa: F401 - NONFINITE_POLICIES, nonfinite_rows: read from here too
    NONFINITE_POLICIES,
    NonFinite,
    families_with_partners,
    nonfinite_rows,
)

ACTS_FILE = "acts.npy"
INDEX_FILE = "index.jsonl"
META_FILE = "meta.json"


class CaptureError(InputError):
    """A capture folder, records file or label request that cannot be used as given (an
    `InputError`: one line naming file, line, field and the fix)."""


FIX_CAPTURE = "move the folder aside and capture again (`evprobe capture`), or fix the line"


# -- captures ---------------------------------------------------------------------------------


def read_json_rows(path: Path, fix: str, *, warn: bool = True) -> tuple[list[tuple[int, JsonObject]], int]:
    """(line number, object) of every complete line (`core.json_files.read_json_lines`: a bad one is
    an error naming it), and the number of an unterminated last line left out (0: none; read-only,
    the file is never cut here; with `warn`, a warning names it)."""
    lines = read_json_lines(path, fix, warn=warn, error=CaptureError)
    size, torn = path.stat().st_size, 0
    if size:
        with path.open("rb") as fh:
            fh.seek(size - 1)
            if fh.read(1) != b"\n":
                fh.seek(0)
                torn = fh.read().count(b"\n") + 1
    return lines, torn


def _open_acts(path: Path) -> np.ndarray:
    if not path.is_file():
        raise CaptureError(f"{path} not found; capture activations first (`evprobe capture --out {path.parent}`)")
    try:
        acts = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, EOFError, SyntaxError, TokenError) as err:  # object arrays need pickle: refused, never
        # unpickled; a cut file is EOFError, a damaged header SyntaxError or TokenError
        raise CaptureError(f"{path}: not a plain numeric .npy file ({type(err).__name__}: {err}); it must be "
                           "float16 activations written by `evprobe capture`") from None
    if not isinstance(acts, np.ndarray):
        raise CaptureError(f"{path}: expected one array, got {type(acts).__name__}")
    size = path.stat().st_size
    if size != acts.offset + acts.nbytes:  # a header length that moved the data, or bytes after it
        raise CaptureError(f"{path}: {size} bytes, but its header describes {acts.offset + acts.nbytes}; it "
                           "must be float16 activations written by `evprobe capture`")
    if acts.dtype != np.dtype("<f2"):  # what capture writes; any other (e.g. byte-swapped >f2) is refused
        raise CaptureError(f"{path}: expected little-endian float16 activations (<f2), got dtype {acts.dtype.str}")
    if acts.ndim != 4:
        raise CaptureError(f"{path}: expected shape (items, layers, positions, d_model), got {acts.shape}")
    return acts


@dataclass(frozen=True, eq=False)
class Capture:
    """One capture folder: the activations memmap, its committed index rows and meta.json."""

    path: Path
    acts: np.ndarray  # memmap (n_rows_in_file, n_layers, n_positions, d_model), float16
    index: tuple[JsonObject, ...]  # committed rows, sorted by `row`
    meta: JsonObject
    n_torn: int = 0  # 1 when a torn last index line was left out (only while a capture writes the folder)
    nonfinite: NonFinite | None = None  # rows left out for NaN / inf (nonfinite="drop"); None: none

    @property
    def rows(self) -> np.ndarray:
        """Row numbers (first axis of `acts`) of the committed rows, ascending."""
        return np.fromiter((r["row"] for r in self.index), dtype=np.int64, count=len(self.index))

    @property
    def layers(self) -> list[int]:
        return list(self.meta["layers"])

    @property
    def positions(self) -> list[str]:
        return list(self.meta["positions"])

    @property
    def d_model(self) -> int:
        return int(self.meta["d_model"])

    @property
    def model(self) -> str:
        return str(self.meta.get("model", "unknown"))

    @property
    def regime(self) -> str:
        return str(self.meta.get("regime", "unknown"))


def load_capture(path: str | Path, *, nonfinite: str = "refuse") -> Capture:
    """Open a capture folder read-only (see the module docstring for the rules). `nonfinite`:
    "refuse" (default) or "drop", what a committed row holding NaN or inf does."""
    cap = _load_capture(path, nonfinite)
    if cap.nonfinite is not None:
        warnings.warn(cap.nonfinite.text(cap.path), OneLineWarning, stacklevel=2)
    return cap


def _load_capture(path: str | Path, nonfinite: str) -> Capture:
    if nonfinite not in NONFINITE_POLICIES:
        raise CaptureError(f"nonfinite={nonfinite!r}: use one of {', '.join(NONFINITE_POLICIES)} (what a row "
                           "holding NaN or inf does)")
    path = Path(path)
    if not path.is_dir():
        raise CaptureError(f"{path}: not a folder; give the ACTS folder written by `evprobe capture`")
    meta_path = path / META_FILE
    if not meta_path.is_file():
        raise CaptureError(f"{meta_path} not found; is {path} a capture folder (`evprobe capture --out ...`)?")
    meta, text = read_json_text(meta_path, FIX_CAPTURE, CaptureError)
    bad = meta_problem(meta)
    if bad:
        raise CaptureError(f"{meta_path}:{key_line(text, bad[0])}: {bad[1]}; {FIX_CAPTURE}")
    acts = _open_acts(path / ACTS_FILE)
    bad = meta_problem(meta, acts.shape)
    if bad:
        raise CaptureError(f"{meta_path}:{key_line(text, bad[0])}: {bad[1]}; {FIX_CAPTURE}")
    expected = (len(meta["layers"]), len(meta["positions"]), int(meta["d_model"]))
    if acts.shape[1:] != expected:
        raise CaptureError(f"{path / ACTS_FILE}: shape {acts.shape} does not match meta.json "
                           f"(layers, positions, d_model) = {expected}")
    index_path = path / INDEX_FILE
    if not index_path.is_file():
        raise CaptureError(f"{index_path} not found; the capture has no finished rows yet")
    lines, torn = read_json_rows(index_path, FIX_CAPTURE, warn=False)
    if torn and not being_written(path):  # a torn append is only a state of a capture still being written
        raise CaptureError(f"{index_path}:{torn}: the last line is incomplete and no process is writing {path} (its "
                           "capture was killed, or the file was cut); rerun the `evprobe capture` that wrote it "
                           "(same --out) to finish it, or move the folder aside")
    if torn:
        warn_incomplete_line(index_path)
    seen_rows: set[int] = set()
    seen_ids: set[str] = set()
    rows = []
    line_of: dict[int, int] = {}  # acts.npy row -> its index.jsonl line, for the finite check's message
    for number, row in lines:
        bad = index_row_problem(row, meta.get("fields"))  # a user capture's declared label fields
        if bad:
            raise CaptureError(f"{index_path}:{number}: {bad[1]}; {FIX_CAPTURE}")
        r, item_id = row["row"], row["item_id"]
        if not r < acts.shape[0]:
            raise CaptureError(f"{index_path}:{number}: field 'row' {r!r} is not a row of acts.npy "
                               f"(0..{acts.shape[0] - 1}); {FIX_CAPTURE}")
        if r in seen_rows or item_id in seen_ids:
            raise CaptureError(f"{index_path}:{number}: row {r} / item {item_id!r} listed twice; move the folder aside")
        seen_rows.add(r)
        seen_ids.add(item_id)
        rows.append(row)
        line_of[r] = number
    if not rows:
        raise CaptureError(f"{index_path}: no finished rows yet; wait for the capture or rerun it")
    rows.sort(key=lambda x: x["row"])
    cap = Capture(path, acts, tuple(rows), meta, int(bool(torn)))
    bad = nonfinite_rows(acts, cap.rows, first_only=nonfinite == "refuse")
    if not bad.size:
        return cap
    where = _where_nonfinite(cap, int(bad[0]), line_of)
    if nonfinite == "refuse":
        raise CaptureError(f"{path / ACTS_FILE}: {where}; activations must be finite: capture again (`evprobe "
                           "capture`), or leave such rows' families out with --nonfinite drop "
                           "(load_capture(..., nonfinite=\"drop\"))")
    by_row = {r["row"]: r for r in rows}
    return _without_families(cap, {by_row[int(b)]["family_id"] for b in bad}, tuple(int(b) for b in bad), where)


def _where_nonfinite(cap: Capture, r: int, line_of: Mapping[int, int]) -> str:
    """'row R (item ..., index.jsonl line N) holds NaN at layer L, position P (dimension j)'."""
    block = np.asarray(cap.acts[r], dtype=np.float32)  # (layers, positions, d)
    li, pi, j = (int(v) for v in np.argwhere(~np.isfinite(block))[0])
    value = block[li, pi, j]
    kind = "NaN" if np.isnan(value) else ("inf" if value > 0 else "-inf")
    item = next(x["item_id"] for x in cap.index if x["row"] == r)
    return (f"row {r} (item {item!r}, {INDEX_FILE} line {line_of.get(r, '?')}) holds {kind} at layer "
            f"{cap.layers[li]}, position {cap.positions[pi]!r} (dimension {j})")


def _without_families(cap: Capture, families: set[str], bad: tuple[int, ...], first: str) -> Capture:
    """`cap` with the rows of `families` left out (nonfinite="drop"); an error when none is left."""
    families = families_with_partners(cap.index, families) & {r["family_id"] for r in cap.index}
    keep = tuple(r for r in cap.index if r["family_id"] not in families)
    if not keep:
        where = f"first: {first}" if first else "in this capture or another of the set"
        raise CaptureError(f"{cap.path / ACTS_FILE}: every family holds a row with NaN or inf ({where}), so "
                           "--nonfinite drop leaves nothing; capture again (`evprobe capture`)")
    prior = cap.nonfinite
    rows = tuple(sorted(set(bad) | set(prior.rows if prior else ())))
    dropped = NonFinite(rows, tuple(sorted(families | set(prior.families if prior else ()))),
                        len(cap.index) - len(keep) + (prior.n_dropped if prior else 0), prior.first if prior else first)
    return replace(cap, index=keep, nonfinite=dropped)


@dataclass(frozen=True, eq=False)
class CaptureSet:
    """One or more captures with the same layers, positions and d_model, pooled row-wise."""

    captures: tuple[Capture, ...]
    index: tuple[JsonObject, ...]  # the captures' index rows in order, with `source`, `source_name`
    source_names: tuple[str, ...]  # one per capture: its regime, or folder name if regimes repeat
    _offsets: np.ndarray = field(repr=False)  # (n_captures + 1,) first pooled row of each capture

    @classmethod
    def of(cls, captures: Capture | Sequence[Capture]) -> CaptureSet:
        caps = (captures,) if isinstance(captures, Capture) else tuple(captures)
        if not caps:
            raise CaptureError("no capture given")
        first = caps[0]
        for cap in caps[1:]:
            if (cap.layers, cap.positions, cap.d_model) != (first.layers, first.positions, first.d_model):
                raise CaptureError(f"{cap.path} has other layers, positions or d_model than {first.path}; "
                                   "pool only captures of one model with the same --layers and --positions")
        regimes = Counter(c.regime for c in caps)
        names = [c.regime if regimes[c.regime] == 1 else c.path.name for c in caps]
        if len(set(names)) != len(names):
            names = [f"{n}#{i}" for i, n in enumerate(names)]
        index = tuple(
            {**row, "source": s, "source_name": names[s]} for s, cap in enumerate(caps) for row in cap.index
        )
        offsets = np.cumsum([0] + [len(c.index) for c in caps])
        return cls(caps, index, tuple(names), offsets)

    @property
    def n_rows(self) -> int:
        return len(self.index)

    @property
    def layers(self) -> list[int]:
        return self.captures[0].layers

    @property
    def positions(self) -> list[str]:
        return self.captures[0].positions

    @property
    def d_model(self) -> int:
        return self.captures[0].d_model

    @property
    def model(self) -> str:
        return ", ".join(sorted({c.model for c in self.captures}))

    def layer_index(self, layer: int) -> int:
        """Axis-1 position of a model layer number; an error lists what was captured."""
        try:
            return self.layers.index(int(layer))
        except ValueError:
            raise CaptureError(f"layer {layer} was not captured (captured: {_short(self.layers)}); "
                               "pick one of those") from None

    def position_index(self, position: str) -> int:
        try:
            return self.positions.index(position)
        except ValueError:
            raise CaptureError(f"position {position!r} was not captured (captured: "
                               f"{', '.join(self.positions)}); pick one of those") from None

    @property
    def offsets(self) -> np.ndarray:
        """(n_captures + 1,) the first pooled row of each capture."""
        return self._offsets

    def block(self, layer_idx: int, rows: np.ndarray, positions: Sequence[int] | None = None) -> np.ndarray:
        """float32 activations of pooled `rows` at one layer: (len(rows), n_positions, d_model).

        Reads only those rows' slices of the memmap (each row's (positions, d) slice is
        contiguous on disk), capture by capture, in ascending file order (probes.blocks)."""
        from evprobe.probes.blocks import BlockReader

        pos = list(range(len(self.positions))) if positions is None else list(positions)
        return BlockReader.of(self, rows, pos, reuse=True)(layer_idx)


def load_captures(paths: Sequence[str | Path], *, nonfinite: str = "refuse") -> CaptureSet:
    """Several capture folders pooled (`CaptureSet.of`). With nonfinite="drop" a family left out of
    one capture is left out of every capture (module docstring), so regimes stay matched."""
    caps = [_load_capture(p, nonfinite) for p in paths]
    dropped = set().union(*(c.nonfinite.families for c in caps if c.nonfinite is not None))
    if dropped:  # the same families out of every capture: regimes of the same items stay matched
        caps = [c if not {r["family_id"] for r in c.index} & dropped else _without_families(c, dropped, (), "")
                for c in caps]
    for c in caps:
        if c.nonfinite is not None:
            warnings.warn(c.nonfinite.text(c.path), OneLineWarning, stacklevel=2)
    return CaptureSet.of(caps)


def _short(values: Sequence[Any], limit: int = 12) -> str:
    text = ", ".join(str(v) for v in values[:limit])
    return text + (f", ... ({len(values)} in all)" if len(values) > limit else "")
