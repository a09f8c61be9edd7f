"""Where a reply refers to an option, and the cues around the references (bench.parse reads them).

`find_spans(item, text)` finds the option references (standalone letters, option names, numbers)
with the negation cues and hedges, the longest span winning an overlap; `negated`, `alternatives`
and `think_or` say whether the references are negated, offered as alternatives ("B or C") or
hedged ("I think B or C"). Every test is linear in the text: look-ups by bisection, no
backtracking pattern (tests/bench/test_parse_linear.py). The rules are bench.parse's docstring.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from evprobe.bench.items import NUMERIC_REQUESTS, Item
from evprobe.bench.systems import get_system
from evprobe.bench.units import has_ambiguous_comma, in_quantity, numerals

ANSWERS = ("yes", "no", "undetermined")
NUMBER_REQUESTS = ("read_ruler", *NUMERIC_REQUESTS)  # replies are one number (with its unit)

# A standalone letter stands between white space or bracket/quote/markdown punctuation; "E.g." is
# an abbreviation, not option E.
_LETTER = re.compile(
    r"""(?:^|(?<=[\s(\[*"'“:/,]))([A-E])(?=$|[\s)\]:,;!?*"'”/]|\.(?![A-Za-z]))""", re.M
)
_EQUALS = re.compile(r"\s*=")  # after a letter: a variable ("E = m g e^2 h")
_NON_FINITE_WORD = re.compile(r"(?<![\w.])[-+]?(?:inf(?:inity)?|nan)\b|∞", re.I)
# A sentence opens before an article (module docstring) when the text before it is
# `(?:\A|[.!?]\s+|\n)` and then only these characters; `_opens_sentence` checks it scanning back.
_OPENERS = frozenset("*_#>\"'“([-")
_ARTICLE_WORD = re.compile(r"[ \t]+([a-z][\w'-]*)")
_NOT_AFTER_ARTICLE = frozenset(
    """yes no stop now then but so because since nor not too plus vs versus than per
    would should could can will may might must shall was were has had does did seems looks
    gives wins fits makes remains works please""".split()
)
_VOWEL_SOUND = re.compile(r"(?!uni|use|usu|uti|one\b|once\b)[aeiou]")

_NEGATION = (
    r"\b(?:not|never|cannot|neither|nor|without|avoid(?:ing)?|skip(?:ping)?|instead of|rather than"
    r"|no need (?:to|for)|no point (?:in|to)|\w+n't|dont|doesnt|didnt|isnt|arent|wasnt|werent"
    r"|wouldnt|shouldnt|couldnt|cant|wont|wrong|incorrect|unnecessary|unneeded|redundant"
    r"|pointless|useless|wasteful)\b"
)
_NEGATION_NO = r"\b(?:no|none)\b"  # only where "no" is not an option
# Cues that also reach back to a subject just before them ("the mass test is not needed").
_POSTPOSED = re.compile(
    r"(?:not|never|\w+n't|\w+nt|wrong|incorrect|unnecessary|unneeded|redundant|pointless|useless"
    r"|wasteful)\Z"
)
_COPULA_GAP = re.compile(
    r"\s+(?:(?:is|are|was|were|be|been|being|would|will|should|could|can|does|do|did|must|may"
    r"|might|seems?|really|also|definitely|certainly|clearly|simply|just)\s+)*\Z",
    re.I,
)
_HEDGE = (
    r"\b(?:maybe|perhaps|probably|possibly|likely|might|could be|not sure|unsure|not certain"
    r"|i guess|hard to say|hard to tell)\b"
)
# "I think ... or" in one sentence, i.e. `\bi think\b[^.!?\n]*\bor\b` (re.I), checked by `think_or`
# without its backtracking (quadratic on a long sentence of "I think"s).
_THINK = re.compile(r"\bi think\b", re.I)
_OR_WORD = re.compile(r"\bor\b", re.I)
_BREAK = re.compile(r"[.!?\n]")
_CLAUSE_END = re.compile(
    r"[!?;:,\n—–→]|\.(?!\d)|->|=>|\b(?:but|so|therefore|hence|thus|because|since|although"
    r"|though|however|whereas|while)\b",
    re.I,
)
_SENTENCE_END = re.compile(r"[!?\n]|\.(?!\d)")
_OR = re.compile(r"\bor\b|/|\bvs\b|\bversus\b", re.I)
_UNDETERMINED = [
    r"\bundetermined\b",
    r"\bindeterminate\b",
    r"\b(?:cannot|can not|can'?t) (?:yet )?(?:be )?(?:determined|decided|known|tell|say|know)\b",
    r"\bnot (?:yet )?(?:be )?(?:determined|determinable|decidable)\b",
    r"\bi (?:do not|don'?t) know\b",
    r"\bnot (?:enough|sufficient) (?:evidence|information|info|data)\b",
    r"\binsufficient (?:evidence|information|data)\b",
    r"\b(?:does not|doesn'?t) settle\b(?: the answer)?",
    r"\b(?:impossible|not possible) to (?:tell|know|say|determine|decide)\b",
    r"\bno way to (?:tell|know)\b",
]
# Seed 002's evasive non-answers (appendix D.2: "neither", "none of the above", "not applicable"
# and close variants), more names of undetermined under its rubric only (bench.parse's docstring).
# "neither" and "none" count where they stand as the answer (before a clause end, or naming the
# options: "neither one", "none of the above"); "neither the mass nor the friction ..." stays a
# negation cue. "I don't know" and "cannot tell" are names of undetermined under both readings.
_STANDS = r"(?=\s*+(?:[.!?;:,\n)\]\"'”—–]|\Z))"  # a clause or the text ends after it
_EVASIVE = [
    r"\bneither\s+(?:a\s+)?(?:yes\s+nor\s+(?:a\s+)?no|no\s+nor\s+(?:a\s+)?yes)\b",
    r"\bneither\s+(?:one|option|answer|choice|of\s+(?:them|these|those|the\s+(?:two|above|options"
    r"|answers|choices)))\b",
    r"\bneither\b" + _STANDS,
    r"\bnone\s+of\s+(?:them|these|those|the\s+(?:above|two|options|answers|choices))\b",
    r"\bnone\b" + _STANDS,
    r"\bnot\s+(?:applicable|answerable)\b",
    r"(?<![\w/])n ?/ ?a(?![\w/])",  # "N/A", "n / a"
    r"\bunanswerable\b",
    r"\b(?:cannot|can not|can'?t) be answered\b",
    r"\b(?:cannot|can not|can'?t|won'?t|will not|refuse to|decline to) answer\b",  # refused to answer
]


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    kind: str  # letter | name | number | negation | hedge
    key: str = ""  # references: the option letter ("?X": a letter not on the menu; read_ruler: "")
    value: float | None = None  # read_ruler: the number read


def is_answer_item(item: Item) -> bool:
    return bool(item.options) and set(item.options.values()) <= set(ANSWERS)  # type: ignore[union-attr]


def _name_patterns(item: Item, evasive: bool = False) -> dict[str, list[str]]:
    """Regexes naming each option's meaning (case-insensitive), keyed by the option's value;
    `evasive`: seed 002's evasive non-answers name undetermined too (answer requests only)."""
    if item.request == "select":
        other = re.escape(get_system(item.system).other)
        contents = rf"(?:\s*(?:the|mass|{other}|tests?|and|of|both|[,&+]))*"
        return {
            "stop": [
                r"\bstop\b",
                r"\banswer (?:the question )?now\b",
                r"\bno (?:further|more) measurements?\b",
            ],
            "test_mass": [r"\bmass test\b", r"\btest(?:ing)? (?:the )?mass\b", r"\bmeasur\w* (?:the )?mass\b"],
            "test_other": [
                rf"\b{other} test\b",
                rf"\btest(?:ing)? (?:the )?{other}\b",
                rf"\bmeasur\w* (?:the )?{other}\b",
            ],
            "free_fall": [r"\bfree[- ]?fall\b"],
            "combined_report": [
                rf"\bcombined report\b(?:\s*\({contents}\s*\)?)?",
                rf"\bcombined report of the mass and {other} tests\b",
                r"\bcombined\b",
                r"\bboth tests\b",
                rf"\b(?:the )?mass and (?:the )?{other} tests\b",
            ],
        }
    if is_answer_item(item):
        return {"yes": [r"\byes\b"], "no": [r"\bno\b"],
                "undetermined": _UNDETERMINED + (_EVASIVE if evasive else [])}
    return {}


def _letter_of(item: Item, value: str) -> str:
    return next(k for k, v in item.options.items() if v == value)  # type: ignore[union-attr]


def _opens_sentence(text: str, pos: int) -> bool:
    """Whether `pos` opens a sentence: the text before it is the text's start, a new line, or
    . ! ? and white space, then only white space, markdown and quote marks (`_OPENERS`)."""
    j = pos
    while j > 0 and (text[j - 1] in _OPENERS or text[j - 1].isspace()):
        j -= 1  # runs end at a non-opener (an "A" is one), so the runs scanned for all letters are disjoint
    if j == 0 or text.find("\n", j, pos) != -1:
        return True
    return text[j - 1] in ".!?" and j < pos and text[j].isspace()


def _is_article(text: str, pos: int) -> bool:
    """Whether the capital A at `pos` is the indefinite article (rules in the module docstring)."""
    if not _opens_sentence(text, pos):
        return False
    m = _ARTICLE_WORD.match(text, pos + 1)
    if not m:
        return False
    word = m.group(1).lower()
    return not _VOWEL_SOUND.match(word) and word not in _NOT_AFTER_ARTICLE


def find_spans(item: Item, text: str, letters: bool = True, evasive: bool = False) -> tuple[list[Span], str | None]:
    """Option references, negation cues and hedges in `text`, in order (`evasive`: seed 002's
    evasive non-answers are names of undetermined, `_EVASIVE`); and for numeric requests
    a misread that overrides the references: "non_finite", "ambiguous_comma", "malformed_number"
    or "wrong_unit" (numbers were written, but each with a unit of another kind), else None."""
    candidates: list[Span] = []
    for value, patterns in _name_patterns(item, evasive).items():
        key = _letter_of(item, value)
        for p in patterns:
            candidates += [Span(m.start(), m.end(), "name", key) for m in re.finditer(p, text, re.I)]
    negation = [_NEGATION] + ([] if is_answer_item(item) else [_NEGATION_NO])
    for kind, patterns in (("negation", negation), ("hedge", [_HEDGE])):
        for p in patterns:
            candidates += [Span(m.start(), m.end(), kind) for m in re.finditer(p, text, re.I)]
    # Overlaps: the longest span wins ("no need to" over "no", "not enough evidence" over "not").
    # `taken` marks the characters of the spans kept (every span holds at least one character), so
    # a span is free when none of its characters is marked: linear in the spans' total length.
    kept: list[Span] = []
    taken = bytearray(len(text))

    def free(start: int, end: int) -> bool:
        return taken.find(1, start, end) == -1

    def keep(s: Span) -> None:
        kept.append(s)
        taken[s.start : s.end] = b"\x01" * (s.end - s.start)

    for s in sorted(candidates, key=lambda s: (s.start - s.end, s.start)):
        if free(s.start, s.end):
            keep(s)

    options = item.options or {}
    misread: str | None = None
    if item.request in NUMBER_REQUESTS:
        from evprobe.bench.numeric import quantity

        found = numerals(text)
        numbers = [in_quantity(n, quantity(item)) for n in found if n.number is not None]
        for f in numbers:
            if f.value is not None:
                x = float(f.value)
                if not math.isfinite(x):
                    misread = "non_finite"
                else:
                    keep(Span(f.start, f.end, "number", "", x))
        if _NON_FINITE_WORD.search(text):
            misread = "non_finite"
        elif misread is None and has_ambiguous_comma(text):
            misread = "ambiguous_comma"
        elif misread is None and any(n.number is None for n in found):
            misread = "malformed_number"
        elif misread is None and numbers and all(f.value is None for f in numbers):
            misread = "wrong_unit"
    elif item.request == "recover_property":
        if _NON_FINITE_WORD.search(text):
            misread = "non_finite"
        malformed = False
        for n in numerals(text):  # the value as written: a candidate is printed without unit
            if n.number is None:
                malformed = True
                continue
            x = float(n.number)
            if not math.isfinite(x):
                misread = "non_finite"
            else:
                key = next((k for k, v in options.items() if math.isclose(x, float(v), rel_tol=1e-9)), None)
                if key is not None:
                    keep(Span(n.start, n.end, "number", key))
        if misread is None and malformed:
            misread = "malformed_number"
    if item.request not in NUMBER_REQUESTS and letters:  # letters=False: a reply to a prompt that showed none
        for m in _LETTER.finditer(text):
            letter, pos = m.group(1), m.start(1)
            if _EQUALS.match(text, m.end()) or not free(pos, m.end()):
                continue  # a variable ("E = m g e^2 h"), or part of a name
            if letter == "A" and _is_article(text, pos):
                continue
            keep(Span(pos, m.end(), "letter", letter if letter in options else f"?{letter}"))
    return sorted(kept, key=lambda s: s.start), misread


class _Refs:
    """References in order of their start, with the look-ups `negated` and `alternatives` make
    for each cue or "or" done by bisection (a scan per cue would be quadratic)."""

    def __init__(self, refs: list[Span]) -> None:
        self.refs = refs
        self.starts = [r.start for r in refs]
        # suffix minima of the ends: non-decreasing, so the last reference ending by x is found by
        # bisection even where spans nest
        self.min_end = [r.end for r in refs]
        for i in range(len(refs) - 2, -1, -1):
            self.min_end[i] = min(self.min_end[i], self.min_end[i + 1])

    def first_from(self, pos: int) -> Span | None:
        """The first reference starting at or after `pos`."""
        i = bisect_left(self.starts, pos)
        return self.refs[i] if i < len(self.refs) else None

    def last_by(self, pos: int) -> Span | None:
        """The last reference (in order) ending at or before `pos`."""
        i = bisect_right(self.min_end, pos) - 1
        return self.refs[i] if i >= 0 else None


def _starts(pattern: re.Pattern[str], text: str) -> list[int]:
    return [m.start() for m in pattern.finditer(text)]


def _next(starts: list[int], pos: int, default: int) -> int:
    """The first of the sorted `starts` at or after `pos`."""
    i = bisect_left(starts, pos)
    return starts[i] if i < len(starts) else default


def negated(text: str, spans: list[Span]) -> bool:
    cues = [s for s in spans if s.kind == "negation"]
    if not cues:
        return False
    refs = _Refs([s for s in spans if s.kind in ("letter", "name", "number")])
    # `_CLAUSE_END.search(text, cue.end)` for every cue at once: a cue ends in a letter and a word
    # boundary, so no clause end found from the text's start spans a cue's end.
    clause_ends = _starts(_CLAUSE_END, text)
    for cue in cues:
        stop = _next(clause_ends, cue.end, len(text))
        after = refs.first_from(cue.end)
        if after is not None and after.start < stop:
            return True  # "do not stop", "not yes", "instead of the mass test"
        before = refs.last_by(cue.start)
        if before is not None and _POSTPOSED.search(text[cue.start : cue.end].lower()):
            if _COPULA_GAP.fullmatch(text, before.end, cue.start):
                return True  # "the mass test is not needed", "B would be wrong"
    return False


def alternatives(text: str, refs: list[Span]) -> bool:
    ordered = _Refs(refs)
    sentence_ends: list[int] | None = None
    for m in _OR.finditer(text):
        a, b = ordered.last_by(m.start()), ordered.first_from(m.end())
        if a is None or b is None or ref_key(a) == ref_key(b):
            continue
        if sentence_ends is None:
            sentence_ends = _starts(_SENTENCE_END, text)
        # `_SENTENCE_END.search(text, a.end, b.start)`: a sentence end between the two, where a "."
        # just before b.start counts whatever follows it (the search ends there)
        if _next(sentence_ends, a.end, len(text)) >= b.start and text[b.start - 1] != ".":
            return True
    return False


def think_or(text: str) -> bool:
    """Whether "I think" is followed by "or" in its sentence (`_THINK`)."""
    ors = _starts(_OR_WORD, text)
    if not ors:
        return False
    breaks = _starts(_BREAK, text)
    for m in _THINK.finditer(text):
        if _next(ors, m.end(), len(text)) < _next(breaks, m.end(), len(text)):
            return True  # an "or" comes before the sentence's end
    return False


def ref_key(ref: Span) -> str | float:
    return ref.value if ref.value is not None else ref.key
