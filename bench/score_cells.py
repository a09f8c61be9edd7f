"""The cells and blocks of scores.md (`bench.score_report`, `bench.void_report`): how a scored number prints.

Rates print as percentages with their 95% interval and n, `58.5 [55.6, 61.5] (n=576)`; costs as
plain numbers, `0.99 [0.96, 1.02] (n=576)`; paired differences in percentage points with a sign,
`+14.2 [+8.7, +20.5] (n=288)`; PECS with three decimals. All through core.estimate_text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evprobe.core.estimate_text import estimate_text


def fmt_estimate(est: dict[str, Any] | None, scale: float, digits: int, sign: bool = False, units: str = "units") -> str:
    """An estimate's JSON as text, scaled (core.estimate_text, the one formatter); `units` names what
    an estimate identical in every unit counts."""
    return estimate_text(est, digits, scale=scale, sign=sign, units=units)  # the one formatter (core.estimate_text)


def pct(est: dict[str, Any] | None) -> str:
    """A rate as a percentage: `58.5 [55.6, 61.5] (n=576)`."""
    return fmt_estimate(est, 100.0, 1)


def cost(est: dict[str, Any] | None) -> str:
    """A cost in assigned units: `0.99 [0.96, 1.02] (n=576)`."""
    return fmt_estimate(est, 1.0, 2)


def points(est: dict[str, Any] | None) -> str:
    """A paired difference of rates in percentage points: `+14.2 [+8.7, +20.5] (n=288)`."""
    return fmt_estimate(est, 100.0, 1, sign=True)


def plain(est: dict[str, Any] | None, units: str = "units") -> str:
    """A score printed as a number with three decimals (PECS): `0.292 [0.250, 0.331] (n=5184)`."""
    return fmt_estimate(est, 1.0, 3, units=units)


def table_text(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def section_text(title: str, note: str, table: str) -> str:
    """A `## title` section: the note, then the table."""
    return f"## {title}\n\n{note}\n\n{table}\n" if note else f"## {title}\n\n{table}\n"


__all__ = ["cost", "fmt_estimate", "pct", "plain", "points", "section_text", "table_text"]
