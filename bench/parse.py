"""The reply parser: one reading of a reply, or an honest `invalid` with the reason.

Order (seed 000, B.2, with its misreads fixed): a JSON `final_answer` (json regime), then the last
`ANSWER:` line, then a bare option code (direct replies), then standalone option letters, then
action or answer names. Two rules keep the seed's documented misreads from happening:

- An `ANSWER:` line is final. Its value may be a letter or a name ("ANSWER: STOP" is stop); when
  it cannot be read, the reply is invalid; we never fall back to a letter seen earlier in the
  working (the seed scored "... D ... ANSWER: STOP" as the letter D).
- Fallbacks must be unambiguous: every letter and name found in the reply has to point to the
  same option. A truncated reply that mentions the mass test and the restitution test is invalid,
  not "mass" (the seed's second misread).

Invalid replies are returned as such, never replaced by a guess; they stay in every denominator.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from evprobe.bench.items import Item
from evprobe.bench.systems import get_system

_NUMBER = r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?"
_ANSWER_LINE = re.compile(r"^\s*[*_#>\s]*answer\s*[*_]*\s*[:：]\s*(.*?)\s*$", re.I | re.M)
# A standalone letter stands between white space or bracket/quote/markdown punctuation, so "g�C"
# in garbled output or "D-type" is not an option letter.
_STANDALONE = re.compile(r"""(?:^|(?<=[\s(\[*"'“:]))([A-E])(?=$|[\s).\]:,;!?*"'”])""", re.M)
_JSON_OBJECT = re.compile(r"\{.*\}", re.S)


@dataclass(frozen=True)
class Parsed:
    valid: bool
    route: str  # json | answer_line | direct | letter | name | number, or invalid:<reason>
    choice: str | None = None
    action: str | None = None
    answer: str | None = None
    value: float | None = None


def invalid(reason: str) -> Parsed:
    return Parsed(False, f"invalid:{reason}")


def _name_patterns(item: Item) -> dict[str, list[str]]:
    """Regexes naming each option's meaning, keyed by the option's value."""
    if item.request == "select":
        other = get_system(item.system).other
        return {
            "stop": [r"\bstop\b", r"\banswer (?:the question )?now\b", r"\bno (?:further|more) measurement"],
            "test_mass": [r"\bmass test\b", r"\btest(?:ing)? (?:the )?mass\b", r"\bmeasur\w* (?:the )?mass\b"],
            "test_other": [
                rf"\b{other} test\b",
                rf"\btest(?:ing)? (?:the )?{other}\b",
                rf"\bmeasur\w* (?:the )?{other}\b",
            ],
            "free_fall": [r"\bfree[- ]?fall\b"],
            "combined_report": [r"\bcombined report\b", r"\bcombined\b", r"\bboth tests\b"],
        }
    if item.options and set(item.options.values()) <= {"yes", "no", "undetermined"}:
        return {
            "yes": [r"\byes\b"],
            "no": [r"\bno\b"],
            "undetermined": [
                r"\bundetermined\b",
                r"\bcannot be determined\b",
                r"\bcan'?not (?:be )?(?:determined|known|tell)\b",
                r"\bi don'?t know\b",
                r"\bnot (?:enough|sufficient) (?:evidence|information)\b",
            ],
        }
    if item.options:  # recover_property: the candidate values as printed
        return {v: [rf"(?<![\d.]){re.escape(v)}(?![\d])"] for v in item.options.values()}
    return {}


def _named(text: str, item: Item) -> set[str]:
    lowered = text.lower()
    return {
        value
        for value, patterns in _name_patterns(item).items()
        if any(re.search(p, lowered) for p in patterns)
    }


def _letters(text: str, options: dict[str, str]) -> set[str]:
    found = set()
    for m in _STANDALONE.finditer(text):
        letter = m.group(1)
        after = text[m.end() : m.end() + 2]
        if letter == "A" and re.match(r" [a-z]", after):
            continue  # the article "A block ...", not option A
        if letter in options:
            found.add(letter)
    return found


def _from_value(item: Item, value: str, route: str) -> Parsed:
    """A reading that points at option `value` (an action, answer or candidate value)."""
    letter = next(k for k, v in item.options.items() if v == value)  # type: ignore[union-attr]
    return _from_letter(item, letter, route)


def _from_letter(item: Item, letter: str, route: str) -> Parsed:
    value = item.options[letter]  # type: ignore[index]
    if item.request == "select":
        return Parsed(True, route, choice=letter, action=value)
    if value in ("yes", "no", "undetermined"):
        return Parsed(True, route, choice=letter, answer=value)
    return Parsed(True, route, choice=letter, value=float(value))


def _read_token(item: Item, token: str, route: str) -> Parsed | None:
    """Read a final answer token: a letter, a letter with its label, or one option's name."""
    text = token.strip().strip("\"'`*_.").strip()
    if not text:
        return None
    if item.request == "read_ruler":
        numbers = re.findall(_NUMBER, text)
        return Parsed(True, route, value=float(numbers[0])) if len(numbers) == 1 else None
    options = item.options or {}
    m = re.fullmatch(r"[(\[]?([A-E])[)\]]?", text)
    if m and m.group(1) in options:
        return _from_letter(item, m.group(1), route)
    m = re.match(r"[(\[]?([A-E])(?:[)\].:]|\s+-)\s*(.*)", text, re.S)
    if m and m.group(1) in options:
        named = _named(m.group(2), item)
        if not named or named == {options[m.group(1)]}:
            return _from_letter(item, m.group(1), route)
        return None  # "B. the mass test" where B is not the mass test: no single reading
    named = _named(text, item)
    if len(named) == 1:
        return _from_value(item, named.pop(), route)
    return None


def parse_reply(item: Item, reply: str, regime: str = "standard") -> Parsed:
    """Read one reply to `item`; see the module docstring for the order and the rules."""
    text = reply.strip()
    if not text:
        return invalid("empty")
    if regime == "json":
        m = _JSON_OBJECT.search(text)
        if m:
            try:
                obj = json.loads(m.group(0))
            except json.JSONDecodeError:
                obj = None
            if isinstance(obj, dict) and "final_answer" in obj:
                got = _read_token(item, str(obj["final_answer"]), "json")
                return got if got is not None else invalid("json_final_answer_unreadable")
    lines = _ANSWER_LINE.findall(text)
    if lines:
        got = _read_token(item, lines[-1], "answer_line")
        return got if got is not None else invalid("answer_line_unreadable")
    if item.request == "read_ruler":
        numbers = re.findall(_NUMBER, text)
        if len(numbers) == 1:
            return Parsed(True, "number", value=float(numbers[0]))
        return invalid("no_number" if not numbers else "several_numbers")
    options = item.options or {}
    direct = _read_token(item, text, "direct") if len(text) <= 80 else None
    if direct is not None and direct.route == "direct" and re.match(r"\W*[A-E]\b", text):
        return direct
    letters, named = _letters(text, options), _named(text, item)
    pointed = {options[x] for x in letters} | named
    if len(pointed) > 1:
        return invalid("ambiguous")
    if letters:
        return _from_letter(item, letters.pop(), "letter")
    if named:
        return _from_value(item, named.pop(), "name")
    return invalid("no_option")
