"""Seed 000's reply reader (appendix B.2), as the seed describes it, for `evprobe score --as seed000`.

evprobe's own reader (`bench.parse`) starts from B.2 and fixes its misreads; this module reads a reply
the way the seed's saved analysis parser did, so a published table can be reproduced beside evprobe's.
It never replaces `bench.parse`: a run's records keep evprobe's reading, and this reader is applied to
their raw `reply` text only in the seed mode (`bench.seed_scoring`).

What B.2 says, and how each sentence is read here:

- "For reasoning, it first seeks a final option letter": the last `ANSWER:` line of the reply, if it
  holds a standalone option letter of the item's menu, gives that letter (the last one on the line).
- "then tries standalone option letters in the response": otherwise the last standalone menu letter
  anywhere in the reply. A standalone letter is a capital A-E of the item's menu with no letter or
  digit on either side, so the article "A" and a variable "E = m g e^2 h" count as letters: the seed
  parser had no rule against them. So "... D ... ANSWER: STOP" reads D, the seed's first misread.
  The seed does not say which letter wins when several stand in the reply; the last one does here
  (the one nearest the final line, as the first rule looks for the final letter).
- "Answer words and explicit action names provide fallbacks": with no letter, the select requests
  read action names and the answer requests (and both_given) answer words. The seed names no order;
  here the options are tried in a fixed order (stop, mass test, other-property test, free fall,
  combined report; yes, no, undetermined) and the first one named anywhere in the reply wins, which
  is how a truncated reply naming both the mass and the second property's test is "scored as mass",
  the seed's second misread. Negation, hedges and conflicts are not looked at (B.2 names no such
  rule): "not the mass test" is the mass test.
- recover_property (two candidate values as options): letters as above; then the first candidate, in
  menu order, whose value appears as a number in the reply.
- "The recorded numeric parser can then obtain a number from the preceding explanation": read_ruler
  takes the last number on the last `ANSWER:` line, else the last number in the reply, in metres as
  written (the seed names no unit handling, so "45 cm" reads 45). A number that is not finite reads
  nothing.
- Everything else is invalid with the reason `no_option` (`no_number` for read_ruler); invalid replies
  stay in every denominator, as in evprobe. A `<think>` block is not set apart (seed 000 ran no
  thinking models), and the json regime and the free protocol have no reading here: seed 000 had
  neither (`bench.seed_scoring` refuses such runs).

The seed's own examples are tests (tests/bench/test_seed_readers.py), with evprobe's reading beside.
"""

from __future__ import annotations

import math
import re

from evprobe.bench.items import Item
from evprobe.bench.parse import Parsed, invalid
from evprobe.bench.reference import ANSWERS
from evprobe.bench.systems import get_system

SEED000_REQUESTS: tuple[str, ...] = (
    "select", "answer_initial", "answer_after_test", "both_given", "read_ruler", "recover_property",
)  # the requests of seed 000 (Table 10); other records keep evprobe's reading
ROUTE = "seed000"  # routes read `seed000:answer_line`, `seed000:letter`, `seed000:name`, `seed000:number`

_ANSWER_LINE = re.compile(r"^[ \t*_#>]*answer[ \t*_]*[:：](.*)$", re.I | re.M)
_LETTER = re.compile(r"(?<![A-Za-z0-9])[A-E](?![A-Za-z0-9])")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_UNDETERMINED = (r"\bundetermined\b", r"\bindeterminate\b", r"\b(?:cannot|can ?not|can'?t) be determined\b",
                 r"\bnot (?:enough|sufficient) (?:evidence|information)\b")


def _final_line(text: str) -> str | None:
    """The text after the colon of the reply's last `ANSWER:` line, or None."""
    found = None
    for m in _ANSWER_LINE.finditer(text):
        found = m.group(1)
    return found


def _last_letter(text: str, menu: dict[str, str]) -> str | None:
    letters = [m.group() for m in _LETTER.finditer(text) if m.group() in menu]
    return letters[-1] if letters else None


def _action_names(item: Item) -> dict[str, tuple[str, ...]]:
    other = re.escape(get_system(item.system).other)
    return {
        "stop": (r"\bstop\b", r"\banswer now\b"),
        "test_mass": (r"\bmass test\b", r"\btest(?:ing)? (?:the )?mass\b", r"\bmeasur\w* (?:the )?mass\b"),
        "test_other": (rf"\b{other} test\b", rf"\btest(?:ing)? (?:the )?{other}\b", rf"\bmeasur\w* (?:the )?{other}\b"),
        "free_fall": (r"\bfree[- ]?fall\b",),
        "combined_report": (r"\bcombined report\b", r"\bboth tests\b"),
    }


def _named(item: Item, text: str) -> str | None:
    """The first option, in the fixed order, that the reply names anywhere (module docstring)."""
    assert item.options is not None
    if item.request == "select":
        names = _action_names(item)
    else:
        names = {"yes": (r"\byes\b",), "no": (r"\bno\b",), "undetermined": _UNDETERMINED}
    order = [value for value in names if value in item.options.values()]
    for value in order:
        if any(re.search(pattern, text, re.I) for pattern in names[value]):
            return next(letter for letter, v in item.options.items() if v == value)
    return None


def _candidate(item: Item, text: str) -> str | None:
    """recover_property: the first candidate, in menu order, whose value is a number in the reply."""
    assert item.options is not None
    numbers = {float(m.group()) for m in _NUMBER.finditer(text)}
    return next((letter for letter, v in item.options.items() if float(v) in numbers), None)


def _number(text: str) -> float | None:
    numbers = [float(m.group()) for m in _NUMBER.finditer(text)]
    return numbers[-1] if numbers and math.isfinite(numbers[-1]) else None


def _option(item: Item, letter: str, route: str) -> Parsed:
    assert item.options is not None
    value = item.options[letter]
    if item.request == "select":
        return Parsed(True, route, choice=letter, action=value)
    if value in ANSWERS:
        return Parsed(True, route, choice=letter, answer=value)
    return Parsed(True, route, choice=letter, value=float(value))


def read_seed000(item: Item, reply: str) -> Parsed:
    """Read `reply` to `item` as seed 000's parser did (module docstring); a ValueError for a request
    seed 000 does not have (`SEED000_REQUESTS`)."""
    if item.request not in SEED000_REQUESTS:
        raise ValueError(f"seed 000 has no request {item.request!r}; its reader reads {', '.join(SEED000_REQUESTS)}")
    line = _final_line(reply)
    if item.request == "read_ruler":
        for text, route in ((line, "answer_line"), (reply, "number")):
            value = _number(text) if text is not None else None
            if value is not None:
                return Parsed(True, f"{ROUTE}:{route}", value=value)
        return invalid("no_number")
    assert item.options is not None
    letter = _last_letter(line, item.options) if line is not None else None
    if letter is not None:
        return _option(item, letter, f"{ROUTE}:answer_line")
    letter = _last_letter(reply, item.options)
    if letter is not None:
        return _option(item, letter, f"{ROUTE}:letter")
    letter = _candidate(item, reply) if item.request == "recover_property" else _named(item, reply)
    if letter is not None:
        return _option(item, letter, f"{ROUTE}:name")
    return invalid("no_option")


__all__ = ["ROUTE", "SEED000_REQUESTS", "read_seed000"]
