"""A picklable reader of the labelled rows' activations, one layer at a time.

`CaptureSet.block` reads through the open memmaps of the parent process; worker processes
(probes.refit runs its refits in processes for large sweeps) cannot share those, so they get a
`BlockReader`: per capture, the acts.npy path and which of its file rows go where in the output,
fixed in the parent. A worker opens each file read-only (np.load(mmap_mode="r"), no pickle) once
and reads exactly what `CaptureSet.block` would (tested equal). The values were checked finite
once, when the captures were loaded (probes.captures); readers do not check them again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class BlockReader:
    files: tuple[str, ...]  # acts.npy of each capture that holds some of the rows
    take: tuple[np.ndarray, ...]  # per file: output slots (ascending file rows)
    file_rows: tuple[np.ndarray, ...]  # per file: rows to read, ascending
    positions: tuple[int, ...]
    n: int
    d_model: int
    _open: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, captures: Any, rows: np.ndarray, positions: Sequence[int], *, reuse: bool = False) -> BlockReader:
        """The reader of `captures.block(li, rows, positions)` (a probes.captures.CaptureSet);
        `reuse`: read through the captures' own open memmaps (in this process) instead of
        opening the files again."""
        rows = np.asarray(rows, dtype=np.int64)
        source = np.searchsorted(captures.offsets, rows, side="right") - 1
        files, takes, reads = [], [], []
        for s, cap in enumerate(captures.captures):
            take = np.flatnonzero(source == s)
            if take.size == 0:
                continue
            file_rows = cap.rows[rows[take] - captures.offsets[s]]
            order = np.argsort(file_rows, kind="stable")  # ascending reads from the memmap
            files.append(str(cap.acts.filename))
            takes.append(take[order])
            reads.append(file_rows[order])
        opened = {str(c.acts.filename): c.acts for c in captures.captures} if reuse else {}
        return cls(tuple(files), tuple(takes), tuple(reads), tuple(positions), len(rows), captures.d_model, opened)

    def __call__(self, layer_idx: int) -> np.ndarray:
        """(n, len(positions), d_model) float32 at one layer."""
        out = np.empty((self.n, len(self.positions), self.d_model), dtype=np.float32)
        for path, take, file_rows in zip(self.files, self.take, self.file_rows, strict=True):
            acts = self._open.get(path)
            if acts is None:
                acts = self._open[path] = np.load(path, mmap_mode="r", allow_pickle=False)
            data = acts[file_rows, layer_idx]  # (k, n_positions, d) float16 copy
            out[take] = data[:, list(self.positions), :]
        return out

    def __getstate__(self) -> dict[str, Any]:  # the open memmaps stay behind
        return {k: v for k, v in self.__dict__.items() if k != "_open"} | {"_open": {}}
