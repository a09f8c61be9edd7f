"""Non-finite activations in a capture: finding the rows that hold NaN or inf, and what leaving
them out takes with them (probes.captures' `nonfinite` policy; its module docstring has the rules)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evprobe.core.errors import InputError

NONFINITE_POLICIES = ("refuse", "drop")  # what a committed row holding NaN or inf does (module docstring)
PAIR_KEYS = ("image_pair_id", "threshold_pair_id")  # matched pairs: their rows are left out together
CHECK_BYTES = 32 << 20  # rows read at a time by the finite check: memory stays ~32 MiB


@dataclass(frozen=True)
class NonFinite:
    """What `nonfinite="drop"` left out of one capture (module docstring)."""

    rows: tuple[int, ...]  # acts.npy rows holding NaN or inf
    families: tuple[str, ...]  # families left out whole (those rows' and their pair partners')
    n_dropped: int  # committed rows left out (every row of those families)
    first: str  # where the first bad value is: row, item, layer, position

    def text(self, path: Path) -> str:
        """The one line that says what was left out."""
        left = f"{len(self.families)} famil{'y' if len(self.families) == 1 else 'ies'}, {self.n_dropped} rows"
        if not self.rows:
            return (f"{path / 'acts.npy'}: left out {left} whose rows hold NaN or inf in another capture of this set "
                    "(--nonfinite drop keeps the captures' items matched)")
        return (f"{path / 'acts.npy'}: {len(self.rows)} committed row(s) hold NaN or inf (first: {self.first}); "
                f"left out with their families as --nonfinite drop asks: {left}")


def nonfinite_rows(acts: np.ndarray, rows: np.ndarray, *, first_only: bool = False) -> np.ndarray:
    """The rows among `rows` (ascending acts.npy rows) holding a NaN or an infinity anywhere,
    ascending; with `first_only`, at most the first. Reads runs of consecutive rows as memmap
    slices, CHECK_BYTES at a time (no copy of the file); a float16 value is non-finite exactly
    when its exponent bits are all ones, so the test is one max over the magnitude bits."""
    if acts.dtype != np.dtype("<f2"):
        raise InputError(f"{getattr(acts, 'filename', 'acts')}: expected float16 activations, got {acts.dtype}")
    rows = np.asarray(rows, dtype=np.int64)
    per = max(1, CHECK_BYTES // max(1, acts[0].nbytes))
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    out: list[np.ndarray] = []
    for run in np.split(rows, breaks):
        for lo in range(0, len(run), per):
            start, stop = int(run[lo]), int(run[min(lo + per, len(run)) - 1]) + 1
            bits = acts[start:stop].view(np.uint16)
            if int(np.max(bits & np.uint16(0x7FFF))) < 0x7C00:  # the common case: all finite
                continue
            bad = ((bits.reshape(stop - start, -1) & np.uint16(0x7FFF)) >= 0x7C00).any(axis=1)
            found = np.flatnonzero(bad) + start
            if first_only:
                return found[:1]
            out.append(found)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def families_with_partners(rows: Sequence[Mapping[str, Any]], families: set[str]) -> set[str]:
    """`families` and, until none is added, every family sharing a pair id with one of them."""
    families = set(families)
    while True:
        pairs = {(k, r[k]) for r in rows if r["family_id"] in families for k in PAIR_KEYS if r.get(k) is not None}
        more = {r["family_id"] for r in rows if any((k, r.get(k)) in pairs for k in PAIR_KEYS)} - families
        if not more:
            return families
        families |= more
