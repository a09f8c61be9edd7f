"""One formatter for a number with a fixed count of decimals: `fixed(-0.0004, 3)` is "0.000", never
"-0.000". A value that rounds to zero prints as zero (with "+" when a sign is asked for), so a
table cell reads "+0.00 [+0.00, +0.00]" and not "-0.00 [-0.00, -0.00]"; anything else is Python's
own rounding (format spec `.Nf` / `+.Nf`)."""

from __future__ import annotations


def fixed(x: float, digits: int, sign: bool = False) -> str:
    """`x` with `digits` decimals, a leading sign with `sign=True`; zero is never negative."""
    text = f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"
    zero = f"{0:.{digits}f}"
    if text.lstrip("+-") == zero:
        return f"+{zero}" if sign else zero
    return text


__all__ = ["fixed"]
