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

Numbers. Every number the parser reads (read_ruler, recover_property's candidate values and the
estimates) is a token of one grammar, read by `numerals`:

    number    = [sign] mantissa [exponent] [power] [unit]
    sign      = "+" | "-"                          ("−", U+2212, is read as "-")
    mantissa  = digits ["." [digits]] | "." digits  "3", "3.", "3.25", ".25"
    exponent  = ("e" | "E") [sign] digits           "4.5e-1"
    power     = [blank] ("x" | "×" | "*") [blank] "10"
                ("^" [blank] ([sign] digits | "(" [sign] digits ")") | ["⁻" | "⁺"] superscript-digits)
                                                    "4.5 x 10^-1", "4.5 × 10⁻¹"
    unit      = [blank] a key of `UNITS`, any case, not followed by a letter, digit, "/", "^", "²",
                "·", or "*" and a letter or digit   "45 cm", "45cm", "0.3 N/cm", "30%", "**45 cm**"
    digits    = one or more of 0-9 (ASCII only)
    blank     = spaces and tabs

- Start: a number starts where no letter, digit, "_" or "." stands just before it, so "x2", "t0"
  and "v.2" hold no number, nor does a unit ("m/s^2", "N m^-1"). A comma before it does not
  matter ("m,0.5" holds 0.5). A sign counts only when attached to the digits and not preceded by
  a letter, digit or "." ("0.4-0.5" is two numbers, "-0.45" is negative; "- 0.45" is 0.45 after
  a dash).
- Boundary: after the number (and its unit, when it has one) comes no letter, digit or "_", and no
  run of "." followed by a digit.
- Anything else that starts like a number is malformed, never a number: a number glued to what
  follows it ("0x1F", "0b101", "12abc", "1e", "3rd", "1_000", "5²", "45cm2"), more dots ("1.2.3",
  "1..2", "0.4...0.5"), a second sign or another sign character attached before it ("--3", "+-3",
  "±3", "–3" with an en dash), and any Unicode number character other than 0-9 that starts a token:
  other scripts' and full-width digits ("٣", "３"), fractions and superscripts ("½", "²"). A reply
  whose text holds a malformed number is `invalid:malformed_number` (`bench.parse`).
- Values are exact decimals (`Decimal`); a value too large for a float ("1e999", "4.5 x 10^9999")
  is `invalid:non_finite`, like "inf", "infinity", "nan" and "∞" (`bench.parse`). A value too
  small for a float ("1e-999") reads as 0.
- Thousands separators are not read: "1,500" is `invalid:ambiguous_comma` (above), "1 500" is two
  numbers (`invalid:several_numbers`), "1_000" is malformed. A fraction "1/2" is two numbers with
  "/" between them (`invalid:alternatives` or `invalid:several_numbers`), "½" is malformed.

Nothing here returns 0 for a reading it could not make: a misread is an invalid reply with its
reason (`bench.parse`), and invalid replies stay in every denominator. Every pattern here runs in
time linear in the text (possessive quantifiers, no two quantifiers over the same characters).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from decimal import MAX_EMAX, MIN_EMIN, ROUND_HALF_EVEN, Context, Decimal

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
# What may not follow a unit: more of a unit ("m/s", "m^2", "m²", "N·m", "N*m"). A "*" before no
# letter or digit is markdown ("**45 cm**"), not a product: main dropped such units and read 45 m.
_UNIT = re.compile(
    r"[ \t]*+(" + "|".join(re.escape(u) for u in _UNIT_TEXTS) + r")(?![A-Za-z0-9/^²·]|\*[A-Za-z0-9])",
    re.I,
)
# The grammar of the module docstring. Possessive quantifiers: each character is tried once from a
# start, and a start is only where no word character or "." stands before it, so a scan is linear.
_NUMBER = re.compile(
    r"(?<![\w.])(?P<decimal>[-+]?+(?:[0-9]++(?:\.[0-9]*+)?+|\.[0-9]++)(?:[eE][-+]?+[0-9]++)?+)"
    r"(?:[ \t]*+[x×*][ \t]*+10"
    r"(?:\^[ \t]*+(?:\((?P<paren>[-+]?+[0-9]++)\)|(?P<power>[-+]?+[0-9]++))|(?P<sup>[⁻⁺]?+[⁰¹²³⁴⁵⁶⁷⁸⁹]++)))?+"
)
_GLUED = re.compile(r"\w|\.++\d")  # what may not follow a number: it would be part of another numeral
# A non-ASCII character that starts a word: a candidate for a Unicode number character ("٣", "½").
_OTHER_START = re.compile(r"(?<!\w)[^\W\x00-\x7f]")
_SIGNS = frozenset("+-±∓−–—－﹢﹣＋")  # "+", "-" and the characters written as signs
_COMMA_NUMBER = re.compile(r"\d,\d")
_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
# Exact arithmetic that never raises: a Decimal exponent range far beyond any float, and no traps,
# so "1e9999999 cm" is a huge finite Decimal (then a float inf: non_finite), not an Overflow.
# Precision and rounding are decimal's defaults, so every value a float can hold comes out as before.
_CONTEXT = Context(prec=28, rounding=ROUND_HALF_EVEN, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[])
_HUGE_EXPONENT = 10**15  # any exponent beyond this gives a float 0 or inf; it stands in for longer ones


@dataclass(frozen=True)
class Quantity:
    """What a numeric request asks for: its kind and the unit the prompt names."""

    kind: str  # length | mass | dimensionless | stiffness | energy | time
    unit: str  # as the prompt writes it ("m", "kg", "N/m", ...; "" without unit)


@dataclass(frozen=True)
class Numeral:
    """One token of a text that starts like a number: a number of the grammar (its value as written,
    before any unit) or a malformed one (`number` None)."""

    start: int
    end: int  # past the number, before its unit
    number: Decimal | None
    unit: str  # as written ("" for a bare number)
    unit_end: int  # past the unit (`end` for a bare number)


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


def _exponent(written: str) -> int:
    """An exponent as written ("-12", "+3", "007"); a longer one than any float needs stands as
    +-_HUGE_EXPONENT (int() refuses over 4,300 digits)."""
    digits = written.lstrip("+-").lstrip("0") or "0"
    size = int(digits) if len(digits) <= 15 else _HUGE_EXPONENT
    return -size if written.startswith("-") else size


def _decimal(m: re.Match[str]) -> Decimal:
    """The exact value of one match of `_NUMBER`."""
    written = m.group("decimal")
    mantissa, e, exponent = written.replace("E", "e").partition("e")
    value = Decimal(f"{mantissa}e{_exponent(exponent)}" if e else mantissa)
    sup = m.group("sup")
    power = m.group("paren") or m.group("power") or (sup.translate(_SUPERSCRIPT) if sup else None)
    if power is not None:
        value = value.scaleb(_exponent(power), _CONTEXT)
    return value


def _sign_before(text: str, start: int) -> bool:
    """Whether a sign character stands attached before `start` in a sign's place (not after a word
    character or "."): "--3", "+-3", "±3"; the "-" of "0.4-0.5" is a dash between two numbers."""
    q = start - 1
    if q < 0 or text[q] not in _SIGNS:
        return False
    return q == 0 or not (text[q - 1].isalnum() or text[q - 1] in "_.")


def numerals(text: str) -> list[Numeral]:
    """Every token of `text` that starts like a number, in order: numbers of the grammar (module
    docstring) with their units, and malformed ones."""
    text = text.replace("−", "-")  # the minus sign is a sign (same length: spans hold)
    out: list[Numeral] = []
    for m in _NUMBER.finditer(text):
        start, end = m.start(), m.end()
        if out and start < out[-1].unit_end:
            continue  # the digits of the previous number's unit ("m/s^2", "N m^-1"): no number
        u = _UNIT.match(text, end)
        unit, unit_end = (u.group(1), u.end()) if u else ("", end)
        if _GLUED.match(text, unit_end) or _sign_before(text, start):
            out.append(Numeral(start, end, None, unit, unit_end))
        else:
            out.append(Numeral(start, end, _decimal(m), unit, unit_end))
    # Number characters outside 0-9 ("٣", "３", "½") that start a token; those inside a number
    # ("10⁻¹") or glued after one ("1٣", already malformed) are not tokens of their own.
    others = [
        m.start() for m in _OTHER_START.finditer(text)
        if m.group(0).isnumeric() and not m.group(0).isalpha()
    ]
    if others:
        spans = [(n.start, n.unit_end) for n in out]
        for pos in others:
            i = bisect_right(spans, (pos, len(text) + 1)) - 1
            if i < 0 or not spans[i][0] <= pos < spans[i][1]:
                out.append(Numeral(pos, pos + 1, None, "", pos + 1))
        out.sort(key=lambda n: n.start)
    return out


def in_quantity(n: Numeral, quantity: Quantity) -> Found:
    """A number of the grammar in `quantity`'s SI unit: exact for a unit of its kind or a bare
    number, None for a unit of another kind."""
    assert n.number is not None, "a malformed numeral has no value"
    value: Decimal | None = n.number
    if n.unit:
        kind, factor = UNITS[n.unit.lower()]
        value = _CONTEXT.multiply(n.number, Decimal(factor)) if kind == quantity.kind else None
    return Found(n.start, n.unit_end, value, n.unit)


def find_numbers(text: str, quantity: Quantity) -> list[Found]:
    """Every number of the grammar in `text`, converted to `quantity`'s SI unit where its unit
    allows; malformed ones are left out (`has_malformed_number` says whether there are any)."""
    return [in_quantity(n, quantity) for n in numerals(text) if n.number is not None]


def has_malformed_number(text: str) -> bool:
    return any(n.number is None for n in numerals(text))
