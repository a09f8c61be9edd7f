"""Numbers with units in replies to numeric requests: what a written quantity is worth in the unit
the request asks for.

Seed 000's appendix B describes its numeric parser only in part: a reasoning reply is read at its
final `ANSWER:` line, and when that line is missing a number is taken from the working before it,
and the ruler error is relative to the true reading. It says nothing about units. Our rules, where
it is silent (each has a test in tests/bench/test_numeric.py):

- Every numeric request asks for one quantity in one SI unit (`QUANTITIES`: a ruler reading in m,
  a mass in kg, a friction or restitution coefficient without unit, a stiffness in N/m, a sliding
  distance in m, an energy in J, a period in s). A bare number is taken in that unit: "450" for a
  ruler reading is 450 m (then out of range or scored wrong), never silently rescaled.
- A number followed by a unit of the same kind is converted exactly (decimal arithmetic): "45 cm"
  and "450 mm" are 0.45 m, "1200 g" is 1.2 kg, "350 ms" is 0.35 s, "0.3 N/cm" is 30 N/m, "30%"
  is 0.3 for a coefficient. So "0.45 m (45 cm)" reads one value, 0.45.
- A number followed by a unit of another kind is not a reading of the quantity asked for: it is
  working ("F = 3 N over t = 0.8 s, so m = 1.2 kg" reads 1.2). When every number in the text
  has a unit of another kind, the reply is `invalid:wrong_unit` ("1.5 m/s" for a ruler reading,
  "1.2 m" for a mass).
- Scientific notation: "4.5e-1", "4.5 x 10^-1", "4.5 × 10⁻¹" are 0.45.
- A comma between digits ("0,45" or "1,200") is a decimal comma or a thousands separator: we do
  not guess which, the reply is `invalid:ambiguous_comma`.

Nothing here returns 0 for a reading it could not make: a misread is an invalid reply with its
reason (`bench.parse`), and invalid replies stay in every denominator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

# Kinds of quantity a unit can express. The first six are asked for; the rest are recognised so
# that "1.5 m/s" is not read as "1.5 m" and "3 N" not as a stiffness.
UNITS: dict[str, tuple[str, str]] = {  # unit text (lower case) -> (kind, factor to the SI unit)
    "m": ("length", "1"), "metre": ("length", "1"), "metres": ("length", "1"),
    "meter": ("length", "1"), "meters": ("length", "1"),
    "cm": ("length", "0.01"), "centimetre": ("length", "0.01"), "centimetres": ("length", "0.01"),
    "centimeter": ("length", "0.01"), "centimeters": ("length", "0.01"),
    "mm": ("length", "0.001"), "millimetre": ("length", "0.001"), "millimetres": ("length", "0.001"),
    "millimeter": ("length", "0.001"), "millimeters": ("length", "0.001"),
    "kg": ("mass", "1"), "kilogram": ("mass", "1"), "kilograms": ("mass", "1"),
    "g": ("mass", "0.001"), "gram": ("mass", "0.001"), "grams": ("mass", "0.001"),
    "n/m": ("stiffness", "1"), "n m^-1": ("stiffness", "1"), "n/cm": ("stiffness", "100"),
    "n/mm": ("stiffness", "1000"), "kn/m": ("stiffness", "1000"),
    "j": ("energy", "1"), "joule": ("energy", "1"), "joules": ("energy", "1"),
    "mj": ("energy", "0.001"), "kj": ("energy", "1000"),
    "s": ("time", "1"), "sec": ("time", "1"), "secs": ("time", "1"), "second": ("time", "1"),
    "seconds": ("time", "1"), "ms": ("time", "0.001"), "millisecond": ("time", "0.001"),
    "milliseconds": ("time", "0.001"),
    "%": ("dimensionless", "0.01"), "percent": ("dimensionless", "0.01"),
    # recognised, never asked for
    "m/s": ("speed", "1"), "m/s^2": ("acceleration", "1"), "m/s²": ("acceleration", "1"),
    "n": ("force", "1"), "newton": ("force", "1"), "newtons": ("force", "1"),
    "n s": ("impulse", "1"), "n·s": ("impulse", "1"), "n*s": ("impulse", "1"),
}
_UNIT_TEXTS = sorted(UNITS, key=len, reverse=True)  # longest first: "m/s^2" before "m/s" before "m"
# Case matters for two units: "mJ" (millijoule) and "MJ" differ, as do "m" and "M"; we accept the
# SI spellings and their all-lower-case forms, and compare lower-cased.
_UNIT = re.compile(
    r"[ \t]*(" + "|".join(re.escape(u) for u in _UNIT_TEXTS) + r")(?![A-Za-z0-9/^²·*])", re.I
)
_NUMBER = re.compile(
    r"(?<![\w.,])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?"
    r"(?:[ \t]*[x×*][ \t]*10(?:\^[ \t]*\(?([-+]?\d+)\)?|([⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+)))?"
)
_COMMA_NUMBER = re.compile(r"\d,\d")
_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")


@dataclass(frozen=True)
class Quantity:
    """What a numeric request asks for: its kind and the unit the prompt names."""

    kind: str  # length | mass | dimensionless | stiffness | energy | time
    unit: str  # as the prompt writes it ("m", "kg", "N/m", ...; "" without unit)


@dataclass(frozen=True)
class Found:
    """One number in a text: its span, and its value in the quantity's SI unit, or None when its
    unit is of another kind."""

    start: int
    end: int
    value: Decimal | None
    unit: str  # as written ("" for a bare number)


def has_ambiguous_comma(text: str) -> bool:
    return bool(_COMMA_NUMBER.search(text))


def find_numbers(text: str, quantity: Quantity) -> list[Found]:
    """Every number in `text`, converted to `quantity`'s SI unit where its unit allows."""
    out = []
    for m in _NUMBER.finditer(text):
        mantissa = m.group(0)
        exponent = m.group(1) or (m.group(2).translate(_SUPERSCRIPT) if m.group(2) else None)
        if exponent is not None:
            mantissa = re.split(r"[ \t]*[x×*]", mantissa, maxsplit=1)[0]
        try:
            value = Decimal(mantissa)
            if exponent is not None:
                value = value.scaleb(int(exponent))
        except (InvalidOperation, ValueError):
            continue
        end, unit = m.end(), ""
        u = _UNIT.match(text, end)
        if u:
            unit, end = u.group(1), u.end()
            kind, factor = UNITS[unit.lower()]
            value = value * Decimal(factor) if kind == quantity.kind else None
        out.append(Found(m.start(), end, value, unit))
    return out
