"""How a judge's reply is read (`bench.judges`): one label or no decision, and the judge's words kept.

`read_label(reply, options)` takes the allowed labels with each one's option words (the text the
judge's menu gives after the label) and returns the one label the reply gives, or None. A reply
gives a label only in a canonical form, the whole reply being:

- the label alone: `A`, `(A)`, `[A]`, `A.`, `A)`, `A:` (any case; surrounding blanks ignored), or
- the label followed by its own option words: `A. It answers yes.` (blanks and case free; the
  words' trailing period and a trailing parenthetical remark optional),

optionally wrapped in one pair of Markdown emphasis (`**A**`) or backticks. Anything else is no
decision: a second label ("A or B", "A is wrong; the answer is C"), other words ("D. It hedges.",
"The reply says yes"), another label's words after a label, a label glued to a word ("Absolutely").
The old reader took the first letter, so "A or B" read as A. Labels compare without case, so no
option words may hold another label as a word of their own (checked: `ValueError`), which makes a
reply naming two labels as standalone words never a decision (tests/bench/test_judge_reader.py,
a property test).

`judge_words(text)` is a reply as judgments.jsonl keeps it when it gives no label: cut to
WORDS_CHARS, every control character (terminal escapes, bidi overrides, NUL) escaped
(`core.errors.printable`, as every error line the CLI prints).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache

from evprobe.core.errors import printable

WORDS_CHARS = 300  # a judge's words kept in judgments.jsonl when its reply gives no label
_WRAP = re.compile(r"(\*\*|\*|`)(.*)\1", re.S)
_PAIRS = {"(": ")", "[": "]"}
_WORD = re.compile(r"[^\W_]+")


def read_label(reply: str, options: Mapping[str, str]) -> str | None:
    """The one label of `options` (label -> its option words) that `reply` gives, else None."""
    form = _form(tuple(options))
    longest = max((len(w) for w in options.values()), default=0)
    text = reply.strip()
    if len(text) > longest + 40:  # longer than any canonical form: never read (and never scanned)
        return None
    wrapped = _WRAP.fullmatch(text)
    text = wrapped.group(2).strip() if wrapped else text
    m = form.fullmatch(text)
    if m is None:
        return None
    opened, closed = m.group("open"), m.group("close")
    if (_PAIRS[opened] != closed) if opened else closed not in (None, ")"):
        return None
    label = {k.casefold(): k for k in options}.get(m.group("label").casefold())  # None: a letter re.I alone matched
    if label is None:
        return None
    return label if _plain(m.group("words")) in ("", *_forms(options[label])) else None


@lru_cache(maxsize=16)
def _form(labels: tuple[str, ...]) -> re.Pattern[str]:
    folded = [k.casefold() for k in labels]
    if not labels or len(set(folded)) != len(folded) or any(not _WORD.fullmatch(k) for k in labels):
        raise ValueError(f"labels must be distinct words (letters or digits), got {labels!r}")
    alternatives = "|".join(re.escape(k) for k in sorted(labels, key=len, reverse=True))
    # the label must end at a word's end: "Absolutely" is no A
    return re.compile(rf"(?P<open>[(\[])?\s*(?P<label>{alternatives})(?![^\W_])\s*(?P<close>[)\]])?\s*[.:]?"
                      rf"\s*(?P<words>.*)", re.I | re.S)


def check_options(options: Mapping[str, str]) -> None:
    """Refuse option words that hold a label as a word of their own (ValueError): a reply with
    those words would name two labels."""
    _form(tuple(options))
    labels = {k.casefold() for k in options}
    for label, words in options.items():
        clash = labels & {w.casefold() for w in _WORD.findall(words)}
        if clash:
            raise ValueError(f"option {label!r}'s words {words!r} hold the label {sorted(clash)[0]!r} as a word")


def _plain(words: str) -> str:
    """Option words compared without case, runs of blanks or a trailing period."""
    return " ".join(words.casefold().split()).rstrip(".").rstrip()


def _forms(words: str) -> tuple[str, ...]:
    """The words in full, and without a trailing parenthetical remark ("... clearly (it hedges)")."""
    full = _plain(words)
    short = _plain(re.sub(r"\s*\([^()]*\)\s*\.?\s*$", "", words))
    return tuple(w for w in {full, short} if w)


def judge_words(text: str, limit: int = WORDS_CHARS) -> str:
    """`text` cut to `limit` characters, control characters escaped (\\x1b, \\u202e)."""
    shown = printable(text[:limit])
    return shown if len(text) <= limit else f"{shown}... ({len(text)} characters in all)"


__all__ = ["WORDS_CHARS", "check_options", "judge_words", "read_label"]
