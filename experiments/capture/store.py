"""Where a capture's rows live: `acts.npy` (float16, rows x layers x positions x d_model) and its
commit log `index.jsonl` (one line per stored row), as a `core.jobs.RowStore`.

The acts file is created whole (header + sparse zeros) before the first row and filled with
`os.pwrite` (a writable memmap would keep every written page resident). A batch's rows are on
disk and fsync'ed BEFORE its index lines are appended (and fsync'ed), so every indexed row holds
finished data; a row that is not indexed may hold zeros or a torn write and is recomputed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evprobe.core.capture_schema import index_row_problem
from evprobe.core.errors import InputError
from evprobe.core.files import append_log_lines, atomic_write_bytes, cut_torn_tail, open_for_writing, refuse_link
from evprobe.core.json_files import read_json_lines
from evprobe.core.jobs import RowKey, RowStore
from evprobe.core.json_types import JsonObject

ACTS_FILE = "acts.npy"
INDEX_FILE = "index.jsonl"
ACTS_KEY = "acts"  # a computed row carries its (layers, positions, d_model) float16 array under this key


def create_acts(path: Path, shape: tuple[int, ...]) -> None:
    """A whole .npy file of zeros (sparse on disk) under its final name, or nothing."""
    from numpy.lib.format import open_memmap

    tmp = path.with_name(f".{path.name}.tmp")
    mm = open_memmap(tmp, mode="w+", dtype=np.float16, shape=shape)
    mm.flush()
    del mm
    with tmp.open("rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def acts_offset(path: Path, shape: tuple[int, ...]) -> int:
    """Byte offset of the data in an existing acts.npy, after checking its shape and dtype."""
    try:
        mm = np.load(path, mmap_mode="r")
    except (ValueError, OSError) as err:
        raise InputError(f"{path}: not a readable .npy file ({err}); move the folder aside") from None
    if mm.shape != shape or mm.dtype != np.float16 or not mm.flags.c_contiguous:
        raise InputError(f"{path} has shape {mm.shape} and dtype {mm.dtype}, expected {shape} float16; "
                         "use another --out")
    offset = int(mm.offset)
    del mm
    return offset


def load_index(path: Path, item_ids: Sequence[str] | None = None, *, warn: bool = True) -> dict[int, JsonObject]:
    """Committed index rows by row number (read only: an unterminated last line is left out, with a
    warning unless `warn` is False: the writer's own read). Each row is checked against the index
    schema (`core.capture_schema.index_row_problem`: typed fields, no unknown ones). A line that is
    not UTF-8 or not JSON, a schema problem, a duplicate row, or a row whose item id is not that row
    of the selection is a one-line error naming the line."""
    out: dict[int, JsonObject] = {}
    lines_of: dict[int, int] = {}
    for number, row in read_json_lines(path, "move the folder aside", warn=warn, objects=False):
        bad = index_row_problem(row)
        if bad:
            raise InputError(f"{path}:{number}: {bad[1]}; move the folder aside")
        index, item_id = row["row"], row["item_id"]
        if index in out:
            raise InputError(f"{path}:{number}: field 'row' repeats row {index} of line {lines_of[index]}; "
                             "move the folder aside")
        lines_of[index] = number
        if item_ids is not None and not (0 <= index < len(item_ids) and item_ids[index] == item_id):
            raise InputError(f"{path}:{number}: row {index} is {item_id!r}, which is not that row of this "
                             "selection; use another --out")
        out[index] = row
    return out


class CaptureRows(RowStore):
    """acts.npy + index.jsonl of one folder. `item_ids` is the folder's selection (row i is item i);
    `selection_of(shard)` gives a shard's selection when this store receives a merge."""

    def __init__(self, folder: Path, item_ids: Sequence[str] | None,
                 selection_of: Callable[[Any], list[str]] | None = None) -> None:
        self.folder, self.item_ids, self.selection_of = folder, item_ids, selection_of
        self.acts_path, self.index_path = folder / ACTS_FILE, folder / INDEX_FILE
        self.fd: int | None = None

    def done(self, *, warn: bool = True) -> dict[RowKey, JsonObject]:
        return {(row["item_id"], ""): row for row in load_index(self.index_path, self.item_ids, warn=warn).values()}

    def repair(self) -> None:
        refuse_link(self.acts_path)  # before the model loads: rows are never written through a link
        cut_torn_tail(self.index_path)

    def prepare(self, meta: JsonObject) -> None:
        shape = tuple(meta["shape"])
        if not self.acts_path.is_file():
            if self.index_path.is_file() and load_index(self.index_path):
                raise InputError(f"{self.acts_path} is missing but {self.index_path} lists rows; use another --out")
            create_acts(self.acts_path, shape)
        self.offset = acts_offset(self.acts_path, shape)
        self.row_bytes = int(np.prod(shape[1:])) * 2

    def append(self, rows: list[JsonObject]) -> None:
        fd = open_for_writing(self.acts_path, os.O_WRONLY)
        try:
            for row in rows:
                data = np.ascontiguousarray(row[ACTS_KEY], dtype="<f2").tobytes()
                if os.pwrite(fd, data, self.offset + row["row"] * self.row_bytes) != len(data):
                    raise OSError(f"{self.acts_path}: short write at row {row['row']}")
            os.fsync(fd)  # rows on disk before the index says so
        finally:
            os.close(fd)
        append_log_lines(self.index_path, [{k: v for k, v in row.items() if k != ACTS_KEY} for row in rows])

    def write_merged(self, parts: Sequence[tuple[RowStore, Any]], order: Sequence[RowKey]) -> None:
        """Shard captures -> one acts.npy (rows in selection order) and index.jsonl (single-run order)."""
        assert self.item_ids is not None and self.selection_of is not None
        full_row = {item_id: r for r, item_id in enumerate(self.item_ids)}
        index: dict[str, JsonObject] = {}
        sources: list[tuple[np.ndarray, list[tuple[int, int]]]] = []  # (shard acts, [(shard row, full row)])
        width: tuple[int, ...] | None = None
        for store, part in parts:
            assert isinstance(store, CaptureRows)
            mine = self.selection_of(part.shard)
            acts_path = store.acts_path
            if not acts_path.is_file():
                raise InputError(f"shard {part.shard} ({part.folder}) is incomplete: it has no {ACTS_FILE}; rerun "
                                 f"shard {part.shard.k} with the same command to finish it")
            acts = np.load(acts_path, mmap_mode="r")
            width = width or tuple(acts.shape[1:])
            if acts.shape != (len(mine), *width) or acts.dtype != np.float16:
                raise InputError(f"{acts_path} has shape {acts.shape} {acts.dtype}, expected {(len(mine), *width)} "
                                 "float16; rerun that shard into a fresh --out")
            for r, row in load_index(store.index_path, mine).items():
                index[row["item_id"]] = {**row, "row": full_row[row["item_id"]]}
            sources.append((acts, [(r, full_row[item_id]) for r, item_id in enumerate(mine)]))
        assert width is not None
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{ACTS_FILE}.merging.npy"
        create_acts(tmp, (len(self.item_ids), *width))
        offset, row_bytes = int(np.load(tmp, mmap_mode="r").offset), int(np.prod(width)) * 2
        fd = os.open(tmp, os.O_WRONLY)
        try:  # row by row: a writable memmap would keep every written page resident
            for acts, rows in sources:
                for r, full in rows:
                    data = np.ascontiguousarray(acts[r]).astype("<f2").tobytes()
                    if os.pwrite(fd, data, offset + full * row_bytes) != len(data):
                        raise OSError(f"{tmp}: short write at row {full}")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.acts_path)
        atomic_write_bytes(self.index_path, "".join(json.dumps(index[k]) + "\n" for k, _ in order).encode("utf-8"))
