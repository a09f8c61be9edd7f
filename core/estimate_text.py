"""One formatter for an estimate: `0.812 [0.744, 0.871] (n=144)`, and one spelling of a missing one.

Every printer, report and console line formats an interval estimate through `estimate_text`, from
a `core.bootstrap.Estimate` or its JSON (`{"value", "ci", "n", ...}`):

- a value with its interval: `VALUE [LO, HI] (n=N)`, numbers through `core.decimals.fixed` (zero is
  never negative), after `scale` (100 for percent) with `digits` decimals and an optional sign;
- an interval computed on families (clusters) says how many: `(n=576 in 144 families)` (the estimate's
  `n_families`), since the interval's effective n is the number of families, not of units; with
  fewer than `FEW_FAMILIES` (8) it adds a warning, `(n=20 in only 5 families: the interval may be too
  narrow)`, also where the line leaves out n (`(only 5 families: ...)`): intervals are held to their
  coverage from 8 families up (`benchmarks/coverage_paired_effects.py`);
- a value fixed by design (no sampling interval): `VALUE (fixed by design, n=N)`;
- every unit identical (no spread to resample): `VALUE (identical in all N UNITS)`;
- an interval that could not be computed: `VALUE [NA, NA] (n=N)`, or `VALUE (REASON, n=N)` when the
  estimate says why there is none (a clamped score at its bound on every resample: bench.pecs);
- an interval whose ends differ but would print alike at `digits` decimals (a tiny effect: a
  head's share of a gap, `[0.000, 0.000]`) gets more decimals, up to 9, until they print apart,
  so no interval is printed as a point unless it is one;
- missing: `NA (REASON)` when the estimate says why, else `NA (n=0)` for an empty denominator, and
  `NA (not measured)` where there is no estimate at all. "NA" is the only word for a missing value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evprobe.core.decimals import fixed

MISSING = "NA"
FIXED_TEXT = "fixed by design"  # printed in place of a fixed value's interval (core.bootstrap)
# Below this many families an interval rests on too few clusters for its coverage to be relied on:
# issue 52 asks every interval to cover from 8 families up, where benchmarks/coverage_paired_effects.py
# measures it; below, a family's oddity moves the interval and the t approximation leans on normality.
FEW_FAMILIES = 8
FEW_FAMILIES_TEXT = "the interval may be too narrow"


def missing_text(reason: str | None = None) -> str:
    """`NA (reason)`: a missing value, saying why (the one spelling)."""
    return f"{MISSING} ({reason or 'not measured'})"


def estimate_text(e: Any, digits: int = 3, *, scale: float = 1.0, sign: bool = False, unit: str = "",
                  n: bool = True, units: str = "units") -> str:
    """The estimate `e` (an Estimate, its JSON, or None) as text (module docstring). `unit` follows
    the value (`+1.23 nats [...]`); `n=False` leaves out the count where the line states it once;
    `units` names what an identical estimate's n counts (pairs, items)."""
    d = e.to_json() if hasattr(e, "to_json") else e
    if not isinstance(d, Mapping) or not d:
        return missing_text()
    count = d.get("n")
    if d.get("value") is None:
        return missing_text(d.get("reason") or ("n=0" if not count else f"n={count}"))

    lo, hi = d.get("ci") or (None, None)
    places = digits
    if lo is not None and hi is not None and lo != hi:
        while places < 9 and fixed(lo * scale + 0.0, places, sign) == fixed(hi * scale + 0.0, places, sign):
            places += 1

    def num(x: float) -> str:
        return fixed(x * scale + 0.0, places, sign)

    value = num(d["value"]) + (f" {unit}" if unit else "")
    if d.get("fixed_by_design"):
        return f"{value} ({FIXED_TEXT}" + (f", n={count})" if n else ")")
    if d.get("identical_units"):
        return f"{value} (identical in all {count} {units})"
    if (lo is None or hi is None) and d.get("reason"):
        return f"{value} ({d['reason']}" + (f", n={count})" if n and count is not None else ")")
    if lo is None or hi is None:
        return f"{value} [{MISSING}, {MISSING}]" + (f" (n={count})" if n and count is not None else "")
    return f"{value} [{num(lo)}, {num(hi)}]" + _count_text(count if n else None, d.get("n_families"))


def count_text(count: int | None, families: int | None) -> str:
    """`(n=576 in 144 families)` (with the warning below FEW_FAMILIES) for a line or a figure title that
    states a count apart from its intervals, as estimate_text words it; `(n=576)` where families is None."""
    return _count_text(count, families).strip()


def _count_text(count: int | None, families: int | None) -> str:
    """` (n=576 in 144 families)`, ` (n=20 in only 5 families: WARNING)`, ` (only 5 families: WARNING)`
    where n is left out, or ` (n=576)` where the families are not known (module docstring)."""
    few = families is not None and families < FEW_FAMILIES
    where = "" if families is None else (f"only {families} " if few else f"{families} ") + (
        "family" if families == 1 else "families")
    warning = f": {FEW_FAMILIES_TEXT}" if few else ""
    if count is None:
        return f" ({where}{warning})" if few else ""
    return f" (n={count}" + (f" in {where}" if where else "") + f"{warning})"


__all__ = ["FEW_FAMILIES", "FEW_FAMILIES_TEXT", "FIXED_TEXT", "MISSING", "count_text", "estimate_text",
           "missing_text"]
