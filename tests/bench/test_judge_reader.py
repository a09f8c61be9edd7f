"""The strict reader of judge replies (bench.judge_reader): one label in a canonical form or no
decision. Property tests: a reply naming two different labels as standalone words never decides,
and a reply that is exactly one canonical form always does (its own label)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evprobe.bench.judge_reader import WORDS_CHARS, check_options, judge_words, read_label
from evprobe.bench.judges import JUDGE_OPTIONS, judge_decision

LABELS = tuple(JUDGE_OPTIONS)
WORD = re.compile(r"[^\W_]+")


@pytest.mark.parametrize("reply", ["A or B", "A is wrong; the answer is C", "A, B", "(A) (B)", "A. It answers no.",
                                   "A. B.", "Absolutely", "A1", "C: it abstains, so A", "answer: A", "**A", "(A]",
                                   "[A)", "A.)", "a b", "yes", "ANSWER: A", "D. It hedges.", "A\nB"])
def test_two_labels_or_other_words_are_no_decision(reply: str) -> None:
    assert read_label(reply, JUDGE_OPTIONS) is None


@pytest.mark.parametrize("reply, label", [("A", "A"), (" b ", "B"), ("(C)", "C"), ("[d]", "D"), ("A.", "A"),
                                          ("B)", "B"), ("C:", "C"), ("**A**", "A"), ("`B`", "B"),
                                          ("A. It answers yes.", "A"), ("b) it answers NO", "B"),
                                          ("C. It says the answer cannot be determined from the evidence", "C"),
                                          ("D. None of these clearly.", "D"), ("**(A). It answers yes.**", "A")])
def test_one_canonical_form_is_its_label(reply: str, label: str) -> None:
    assert read_label(reply, JUDGE_OPTIONS) == label


def test_the_judges_options_name_no_other_label_and_a_clash_is_refused() -> None:
    check_options(JUDGE_OPTIONS)
    with pytest.raises(ValueError, match="hold the label 'a'"):
        check_options({"A": "It answers yes.", "B": "It is a no."})
    with pytest.raises(ValueError, match="distinct words"):
        read_label("A", {"A": "", "a": ""})
    # the reader takes any labels (issue 55's two-decision form): words work as letters do
    two = {"SUFFICIENT": "The evidence settles it.", "INSUFFICIENT": "It does not."}
    assert read_label("INSUFFICIENT.", two) == "INSUFFICIENT" and read_label("sufficient or insufficient", two) is None


def _labels_in(reply: str) -> set[str]:
    return {w.casefold() for w in WORD.findall(reply)} & {k.casefold() for k in LABELS}


# what a hostile or careless judge writes: letters, their words, punctuation, brackets, other text,
# each fragment set apart by a blank or a mark (so a letter stays a word of its own)
FRAGMENTS = st.one_of(st.sampled_from([*LABELS, *(k.lower() for k in LABELS), *JUDGE_OPTIONS.values(), "or",
                                       "is wrong; the answer is", "The answer is", "not", "yes", "no", "(", ")", "**"]),
                      st.text(max_size=6))
SEPARATORS = st.sampled_from([" ", ". ", ": ", ", ", "; ", "\n", " (", ") ", "**", " / "])


def _joined(parts: list[str], seps: list[str]) -> str:
    return "".join(p + s for p, s in zip(parts, [*seps[: len(parts) - 1], ""]))


@st.composite
def two_labels(draw: st.DrawFn) -> str:
    """Fragments around two different labels (any case), every piece set apart."""
    first, second = draw(st.lists(st.sampled_from(LABELS), min_size=2, max_size=2, unique=True))
    parts = [*draw(st.lists(FRAGMENTS, max_size=2)), draw(st.sampled_from([first, first.lower()])),
             *draw(st.lists(FRAGMENTS, max_size=3)), draw(st.sampled_from([second, second.lower()])),
             *draw(st.lists(FRAGMENTS, max_size=2))]
    return _joined(parts, draw(st.lists(SEPARATORS, min_size=len(parts) - 1, max_size=len(parts) - 1)))


@settings(max_examples=150, deadline=None)
@given(two_labels())
def test_a_reply_naming_two_labels_never_decides(reply: str) -> None:
    assert len(_labels_in(reply)) >= 2, reply  # the generator's promise
    assert read_label(reply, JUDGE_OPTIONS) is None
    assert judge_decision(reply) is None


@settings(max_examples=150, deadline=None)
@given(st.lists(FRAGMENTS, min_size=1, max_size=6), st.lists(SEPARATORS, min_size=5, max_size=5))
def test_any_reply_decides_only_for_the_one_label_it_names(parts: list[str], seps: list[str]) -> None:
    reply = _joined(parts, seps)
    label = read_label(reply, JUDGE_OPTIONS)
    assert label is None or _labels_in(reply) == {label.casefold()}, reply


def _short(words: str) -> str:
    return re.sub(r"\s*\([^()]*\)\.?$", "", words)


# the label alone: any case, bracketed or not, a period or colon, wrapped in emphasis, blanks around
CANONICAL = st.builds(
    lambda label, lower, brackets, stop, wrap, blank: (label, blank + wrap.replace(
        "X", brackets.replace("X", label.lower() if lower else label) + stop) + blank),
    st.sampled_from(LABELS), st.booleans(), st.sampled_from(["X", "(X)", "[X]", "X)"]),
    st.sampled_from(["", ".", ":"]), st.sampled_from(["X", "**X**", "*X*", "`X`"]),
    st.sampled_from(["", " ", "\n", "  \t"]))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_reply_that_is_one_canonical_form_always_decides(data: st.DataObject) -> None:
    label, reply = data.draw(CANONICAL)
    assert read_label(reply, JUDGE_OPTIONS) == label
    words = data.draw(st.sampled_from([JUDGE_OPTIONS[label], _short(JUDGE_OPTIONS[label]),
                                       _short(JUDGE_OPTIONS[label]).rstrip(".")]))
    spaced = data.draw(st.sampled_from([" ", "  ", "\n"])).join(words.split())
    for form in (f"{label}. {spaced}", f"({label.lower()}) {spaced.upper()}", f"**{label}: {spaced}**"):
        assert read_label(form, JUDGE_OPTIONS) == label, form


def test_a_judges_words_are_cut_and_escaped() -> None:
    assert judge_words("\x1b[31mred\x1b[0m \u202eevil\x00") == "\\x1b[31mred\\x1b[0m \\u202eevil\\x00"
    long = "x" * (WORDS_CHARS + 50)
    assert judge_words(long) == "x" * WORDS_CHARS + f"... ({WORDS_CHARS + 50} characters in all)"


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=WORDS_CHARS + 20))
def test_kept_words_hold_no_control_character(text: str) -> None:
    from evprobe.core.errors import printable

    shown = judge_words(text)
    assert printable(shown) == shown and "\x1b" not in shown and "\u202e" not in shown
    assert len(shown) <= 10 * WORDS_CHARS + 40
