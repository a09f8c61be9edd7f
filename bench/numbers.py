"""Number formatting shared by the generator, prompts and checks."""

from __future__ import annotations

SIG_DIGITS = 6  # seed 000, Table 8: stored physical quantities have six significant digits


def round_sig(x: float, digits: int = SIG_DIGITS) -> float:
    """`x` rounded to `digits` significant digits (0 stays 0)."""
    if x == 0.0:
        return 0.0
    return float(f"{x:.{digits - 1}e}")


def fmt(x: float, digits: int = SIG_DIGITS) -> str:
    """Plain decimal text of `x` at `digits` significant digits, trailing zeros dropped.

    Prompts print exactly the stored value, so a model reads what the generator used.
    """
    r = round_sig(x, digits)
    text = f"{r:.{digits}g}"
    if "e" in text:  # tiny or huge magnitudes: write them out as plain decimals
        text = f"{r:.12f}".rstrip("0").rstrip(".")
    return text
