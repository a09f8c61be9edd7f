"""Checks of the own-data functions' arguments, run before any work: each failure one InputError
line naming the argument, the value given and the fix.

Numbers are Python or numpy numbers, never bools (`True` is not a count of resamples). Readouts
must be finite (NaN where a measure is undefined) and at most MAX_VALUE in magnitude: the
intervals sum squares of per-family sums and multiply two such sums, so a value of 1e308 would
turn every bound into inf. Identifiers (conditions, items, families, groups) are present scalars:
None or NaN is no family. Resampling is bounded in memory (MAX_BOOT_NUMBERS).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from evprobe.core.errors import InputError, shown

# |value| <= 1e50 keeps (F x n x value)^4, the largest power an interval forms, finite for up to 1e9
# items; a readout beyond it is in the wrong units (rescale it)
MAX_VALUE = 1e50
MAX_BOOT = 1_000_000
# n_boot x (families + cells): the resample counts and each condition's resampled ratios, 8 bytes
# each, under about 400 MB per array
MAX_BOOT_NUMBERS = 50_000_000


def integer(name: str, value: Any, low: int, high: int | None = None, fix: str = "") -> int:
    """`value` as an int after checking it is an integer (not a bool) in [low, high]."""
    ok = isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))
    if not ok or value < low or (high is not None and value > high):
        span = f">= {low}" if high is None else f"from {low} to {high}"
        kind = "a bool" if isinstance(value, (bool, np.bool_)) else shown(value, 40)
        raise InputError(f"{name} must be an integer {span}, got {kind}{'; ' + fix if fix else ''}")
    return int(value)


def real(name: str, value: Any, *, positive: bool = False, bound: float | None = None, fix: str = "") -> float:
    """`value` as a float after checking it is a finite real number (not a bool), > 0 when
    `positive`, at most `bound` in magnitude."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    x = float(value) if ok else math.nan
    if not ok or not math.isfinite(x) or (positive and not x > 0) or (bound is not None and abs(x) > bound):
        want = "a finite number" + (" > 0" if positive else "") + (f" of magnitude <= {bound:g}" if bound else "")
        kind = "a bool" if isinstance(value, (bool, np.bool_)) else shown(value, 40)
        raise InputError(f"{name} must be {want}, got {kind}{'; ' + fix if fix else ''}")
    return x


def missing(value: Any) -> bool:
    """None, NaN, pd.NA or NaT: no value."""
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN, NaT; pd.NA raises (its truth is ambiguous)
    except (TypeError, ValueError):  # pd.NA, or an array (no id either)
        return True


def identifiers(name: str, values: Sequence[Any], what: str, fix: str) -> None:
    """Refuse a missing or unhashable id among `values` (one per row), naming the first."""
    for i, v in enumerate(values):
        try:
            hash(v)  # a tuple holding a list passes isinstance(v, Hashable) and fails here
            bad = missing(v)
        except TypeError:
            bad = True
        if bad:
            raise InputError(f"{name}: {what} {i} is {shown(v, 40)}, not an id; {fix}")


def readouts(values: np.ndarray, where: Callable[[tuple[int, ...]], str]) -> None:
    """Refuse inf and values beyond MAX_VALUE in a float array (NaN: undefined, allowed)."""
    bad = np.isinf(values) | (np.abs(np.nan_to_num(values)) > MAX_VALUE)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise InputError(f"{where(index)}: {float(values[index])!r} is not a readout; values "
                         f"must be finite and at most {MAX_VALUE:g} in magnitude (NaN where undefined): rescale "
                         "the measure, or mark the value NaN")


def boot_memory(n_boot: int, n_families: int, n_cells: int) -> None:
    """Refuse a bootstrap whose arrays would pass MAX_BOOT_NUMBERS numbers."""
    size = n_boot * (n_families + n_cells)
    if size > MAX_BOOT_NUMBERS:
        raise InputError(f"n_boot {n_boot} x ({n_families} families + {n_cells} cells) = {size:,} numbers per "
                         f"resample array, beyond {MAX_BOOT_NUMBERS:,}; lower n_boot (e.g. 2000) or use fewer groups")


__all__ = ["MAX_BOOT", "MAX_BOOT_NUMBERS", "MAX_VALUE", "boot_memory", "identifiers", "integer", "missing", "readouts",
           "real"]
