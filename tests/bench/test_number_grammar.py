"""The one number grammar of `bench.units` (issue 29, item 4): property tests with hypothesis and
the misreads it closes.

- Round trip: every string the grammar produces reads back as exactly the value it encodes (exact
  fractions here, independent of the parser's decimals), alone and inside a sentence, and
  `parse_reply` gives that value, or the reason it may not (out of range, wrong unit).
- Soundness: a one-token string that the grammar does not produce is never a valid reading (a
  reference regex written here from the grammar decides membership); one it does produce is one
  well-formed number.
- Boundary: letters or hex digits glued after a number make it malformed, never the number it
  starts with.

Every property runs derandomized with a bounded number of examples and no example database.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from evprobe.bench.generate import GenerateConfig, build
from evprobe.bench.items import Item
from evprobe.bench.numeric import quantity
from evprobe.bench.parse import RULER_MAX, parse_reply
from evprobe.bench.units import UNITS, numerals

PROPERTY = settings(derandomize=True, database=None, deadline=None, max_examples=400,
                    suppress_health_check=[HealthCheck.too_slow])
SUPERSCRIPTS = "⁰¹²³⁴⁵⁶⁷⁸⁹"

# The grammar of `bench.units`' docstring, written again here as one regex over a whole token.
_UNIT_ALTERNATIVES = "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
REFERENCE = re.compile(
    r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
    rf"(?:[ \t]*[x×*][ \t]*10(?:\^[ \t]*(?:[-+]?[0-9]+|\([-+]?[0-9]+\))|[⁻⁺]?[{SUPERSCRIPTS}]+))?"
    rf"(?:[ \t]*(?:{_UNIT_ALTERNATIVES}))?",
    re.I,
)


@pytest.fixture(scope="module")
def items() -> dict[str, Item]:
    _, its = build(GenerateConfig(families_per_system=1, subset_per_cell=0, numeric=True))
    out = {r: next(it for it in its if it.request == r and it.variant is None)
           for r in ("read_ruler", "recover_property")}
    out["estimate_property"] = next(it for it in its if it.request == "estimate_property" and it.test == "test_mass")
    out["estimate_property spring"] = next(it for it in its if it.request == "estimate_property"
                                           and it.system == "spring" and it.test == "test_other")  # N/m
    return out


# ---- generating the grammar ------------------------------------------------------------------------


@st.composite
def grammar_numbers(draw: st.DrawFn, unit: bool = True) -> tuple[str, Fraction, str]:
    """A string of the grammar, the exact value its number encodes (before the unit), and its
    unit as written ("" for none). Digits stay few enough that every conversion is exact."""
    digits = st.text("0123456789", min_size=1, max_size=6)
    sign = draw(st.sampled_from(["", "+", "-"]))
    whole, frac = draw(digits), draw(digits)
    shape = draw(st.sampled_from(["int", "point", "decimal", "fraction"]))
    mantissa = {"int": whole, "point": whole + ".", "decimal": f"{whole}.{frac}", "fraction": "." + frac}[shape]
    value = Fraction(whole if shape != "fraction" else 0) + (Fraction(int(frac), 10 ** len(frac))
                                                            if shape in ("decimal", "fraction") else 0)
    text = sign + mantissa
    if draw(st.booleans()):
        e = draw(st.integers(-12, 12))
        text += draw(st.sampled_from("eE")) + draw(st.sampled_from(["", "+"] if e >= 0 else [""])) + str(e)
        value *= Fraction(10) ** e
    if draw(st.booleans()):
        p = draw(st.integers(-9, 9))
        blank = draw(st.sampled_from(["", " ", "\t"]))
        times = draw(st.sampled_from("x×*"))
        if draw(st.booleans()):
            exp = draw(st.sampled_from([str(p), f"({p})"] + ([f"+{p}"] if p >= 0 else [])))
            text += f"{blank}{times}{blank}10^{draw(st.sampled_from(['', ' ']))}{exp}"
        else:
            sup = str(abs(p)).translate(str.maketrans("0123456789", SUPERSCRIPTS))
            text += f"{blank}{times}{blank}10{'⁻' if p < 0 else ''}{sup}"
        value *= Fraction(10) ** p
    written = ""
    if unit and draw(st.booleans()):
        written = draw(st.sampled_from(sorted(UNITS)))
        written = draw(st.sampled_from([written, written.upper()]))
        text += draw(st.sampled_from(["", " ", "\t"])) + written
    return text, -value if sign == "-" else value, written


def _si(value: Fraction, unit: str) -> tuple[str, Fraction]:
    kind, factor = UNITS[unit.lower()] if unit else ("", "1")
    return kind, value * Fraction(factor)


@PROPERTY
@given(number=grammar_numbers())
@example(number=("4.5 x 10^-1", Fraction(45, 100), ""))
@example(number=("4.5 × 10⁻¹", Fraction(45, 100), ""))
@example(number=("3.", Fraction(3), ""))
@example(number=(".5", Fraction(1, 2), ""))
def test_every_grammar_string_reads_back_as_its_value(number: tuple[str, Fraction, str]) -> None:
    text, value, unit = number
    for context in ("{}", "The reading is {} here.", "({})", "**{}**", "*{}*", "ANSWER: {}\n", "{}, so"):
        reply = context.format(text)
        found = numerals(reply)
        assert len(found) == 1, (reply, found)
        n = found[0]
        assert n.number is not None and Fraction(n.number) == value, (reply, n)
        assert reply[n.start : n.unit_end] == text and n.unit.lower() == unit.lower(), (reply, n)


@PROPERTY
@given(number=grammar_numbers())
def test_parse_reply_reads_the_value_or_says_why_not(items: dict[str, Item], number: tuple[str, Fraction, str]) -> None:
    text, value, unit = number
    for request in ("read_ruler", "estimate_property"):
        it = items[request]
        kind, si = _si(value, unit)
        p = parse_reply(it, text)
        if unit and kind != quantity(it).kind:
            want = "invalid:wrong_unit"
        elif si < 0 or (request == "read_ruler" and si > RULER_MAX):
            want = "invalid:out_of_range"
        else:
            want = f"number:{float(si)!r}"
        got = f"number:{p.value!r}" if p.valid and p.route == "number" else p.route
        assert got == want, f"{request}: {text!r}"


# ---- what the grammar does not produce -------------------------------------------------------------

# One-token strings: characters of numbers, letters (hex digits, unit letters, "x", "e"), "_", "."
# and number characters outside 0-9. No separator ("-", "/", "^", blank, ","), since those split
# a text into several tokens, each read on its own ("0.4-0.5" is two numbers), and no "." before a
# letter: after a unit that is a sentence's end without its space ("0.45 m.The").
TOKEN_CHARS = "0123456789.eExXabcdfghkmnosABCDF_٣３½²¹"
tokens = st.builds(
    lambda sign, body: sign + body,
    st.sampled_from(["", "", "+", "-", "--", "+-", "±", "–"]),
    st.text(TOKEN_CHARS, min_size=1, max_size=10),
)


def _in_grammar(token: str) -> bool:
    # trailing dots are punctuation ("It is 3.." reads 3), so they are left out of the token
    return REFERENCE.fullmatch(token.rstrip(".")) is not None


@PROPERTY
@given(token=tokens)
@example(token="0x1F")
@example(token="12abc")
@example(token="1.2.3")
@example(token="1e")
@example(token="0b101")
@example(token="٣")
@example(token="３")
@example(token="½")
@example(token="--3")
@example(token="+-3")
@example(token="1_000")
@example(token="5²")
def test_strings_outside_the_grammar_never_read_as_valid(items: dict[str, Item], token: str) -> None:
    assume(any(c in "0123456789٣３½²¹" for c in token))  # a lone letter is an option of recover_property
    assume(not re.search(r"\.[A-Za-z]", token))
    if _in_grammar(token):
        if REFERENCE.fullmatch(token):  # and one in it is one number, the whole token
            found = numerals(token)
            assert len(found) == 1 and found[0].number is not None and found[0].unit_end == len(token), found
        return
    for request in ("read_ruler", "estimate_property", "recover_property"):
        p = parse_reply(items[request], token)
        assert not p.valid, f"{request}: {token!r} read as {p}"


# Glued after a number: a letter that starts no unit and is no exponent, then hex digits.
GLUE_FIRST = "abcdfhilopqrtuvwxyzABCDFHILOPQRTUVWXYZ"


@PROPERTY
@given(number=grammar_numbers(unit=False), first=st.sampled_from(GLUE_FIRST),
       rest=st.text("0123456789abcdefABCDEF", max_size=4))
@example(number=("0", Fraction(0), ""), first="x", rest="1F")
@example(number=("0", Fraction(0), ""), first="b", rest="101")
@example(number=("12", Fraction(12), ""), first="a", rest="bc")
def test_letters_glued_after_a_number_make_it_malformed(
    items: dict[str, Item], number: tuple[str, Fraction, str], first: str, rest: str
) -> None:
    token = number[0] + first + rest
    assert any(n.number is None for n in numerals(token)), token
    for request in ("read_ruler", "estimate_property", "recover_property"):
        p = parse_reply(items[request], token)
        assert p.route == "invalid:malformed_number", f"{request}: {token!r} read as {p}"


# ---- the misreads on main, one by one --------------------------------------------------------------

MISREADS = [
    # (reply, read_ruler reading on main, reading now)
    ("0x1F", "number:0", "invalid:malformed_number"),
    ("12abc", "number:12", "invalid:malformed_number"),
    ("1.2.3", "number:1.2", "invalid:malformed_number"),
    ("0.45...0.5", "number:0.45", "invalid:malformed_number"),
    ("1e", "number:1", "invalid:malformed_number"),
    ("0b101", "number:0", "invalid:malformed_number"),
    ("1_000", "number:1", "invalid:malformed_number"),
    ("3rd", "number:3", "invalid:malformed_number"),
    ("٣", "number:3", "invalid:malformed_number"),
    ("０.４５", "number:0.45", "invalid:malformed_number"),
    ("1٣", "number:13", "invalid:malformed_number"),
    ("½", "invalid:no_number", "invalid:malformed_number"),
    ("--3", "invalid:out_of_range", "invalid:malformed_number"),
    ("+-3", "invalid:out_of_range", "invalid:malformed_number"),
    ("\u20130.45", "number:0.45", "invalid:malformed_number"),  # an en dash as a minus
    ("0.45 m,0.5 m", "number:0.45", "invalid:several_numbers"),  # the number after the comma was skipped
    ("1,5", "invalid:ambiguous_comma", "invalid:ambiguous_comma"),
    ("1,500", "invalid:ambiguous_comma", "invalid:ambiguous_comma"),
    ("1/2", "invalid:alternatives", "invalid:alternatives"),
    ("1e999", "invalid:non_finite", "invalid:non_finite"),
    ("4.5 x 10^99999999", "invalid:no_number", "invalid:non_finite"),
    ("4.5e" + "9" * 5000, "invalid:no_number", "invalid:non_finite"),
    ("nan", "invalid:non_finite", "invalid:non_finite"),
    ("infinity", "invalid:non_finite", "invalid:non_finite"),
    ("3.", "number:3", "number:3"),
    (".5", "number:0.5", "number:0.5"),
    ("1e-999", "number:0", "number:0"),  # below the smallest float: 0, as on main
]


@pytest.mark.parametrize(("reply", "main", "now"), MISREADS, ids=[repr(r[0][:12]) for r in MISREADS])
def test_misreads_of_main(items: dict[str, Item], reply: str, main: str, now: str) -> None:
    p = parse_reply(items["read_ruler"], reply)
    if now.startswith("invalid:"):
        assert (p.valid, p.route, p.value) == (False, now, None), p
    else:
        assert p.valid and p.value == float(now.partition(":")[2]), p


def test_a_huge_exponent_with_a_unit_does_not_raise(items: dict[str, Item]) -> None:
    """On main, "1e9999999 cm" raised decimal.Overflow out of parse_reply (the unit's factor
    multiplied in a context that traps overflow), and "4.5 x 10^99999999 g" was skipped."""
    for request, unit in (("read_ruler", "cm"), ("estimate_property", "g")):
        assert parse_reply(items[request], f"1e9999999 {unit}").route == "invalid:non_finite"
        assert parse_reply(items[request], f"4.5 x 10^99999999 {unit}").route == "invalid:non_finite"
        assert parse_reply(items[request], f"0.5 {unit}, 4.5 x 10^99999999 {unit}").route == "invalid:non_finite"


def test_recover_property_reads_the_grammar_too(items: dict[str, Item]) -> None:
    it = items["recover_property"]
    letter, value = next(iter(it.options.items()))
    assert parse_reply(it, f"It shows {value}").choice == letter
    assert parse_reply(it, f"It shows {value}abc").route == "invalid:malformed_number"
    assert parse_reply(it, f"{letter}. 0x1F").route == "invalid:malformed_number"
    # "v x 10^-1" is a tenth of v, not v (main read the candidate v)
    assert parse_reply(it, f"{value} x 10^-1").route == "invalid:no_option"
    scaled = parse_reply(it, f"{Decimal(value).scaleb(1)} x 10^-1")
    assert scaled.valid and scaled.choice == letter, scaled


def test_the_estimates_read_a_number_after_a_comma(items: dict[str, Item]) -> None:
    """On main a number right after a comma (not a digit's) was skipped, so ",1e-3" read 3."""
    p = parse_reply(items["estimate_property"], "mass:,1e-3")
    assert p.valid and math.isclose(p.value, 0.001), p


@pytest.mark.parametrize(
    ("request_", "reply", "main", "now"),
    [
        # markdown around a unit: main dropped the unit ("*" was read as a product) and read 45 m
        ("read_ruler", "**45 cm**", 45.0, 0.45),
        ("read_ruler", "ANSWER: *45 cm*", 45.0, 0.45),
        ("estimate_property", "**1200 g**", 1200.0, 1.2),
        # the digits of a unit were read as a number of their own ("m/s^2" -> 2 m, "N m^-1" -> -1)
        ("read_ruler", "g = 9.8 m/s^2", 2.0, "invalid:wrong_unit"),
        ("read_ruler", "a = 2 m/s^2, so 0.45 m", "invalid:several_numbers", 0.45),
        ("estimate_property spring", "k = 30 N m^-1", "invalid:several_numbers", 30.0),
        ("read_ruler", "4.5 x 10^(-1) m", 0.45, 0.45),
        ("read_ruler", "4.5 x 10^(-1 m", 0.45, "invalid:several_numbers"),  # an unclosed "(" is no power
    ],
)
def test_units_beside_markdown_and_digits(
    items: dict[str, Item], request_: str, reply: str, main: object, now: object
) -> None:
    p = parse_reply(items[request_], reply)
    if isinstance(now, str):
        assert (p.valid, p.route) == (False, now), p
    else:
        assert p.valid and p.value == pytest.approx(now, rel=1e-12), p
