"""Linear-time parsing (issue 29, item 4): every public reader of replies takes time linear in the
reply, on 100 KB adversarial replies (blank lines, white space, markdown, repeated ANSWER
prefixes, digits and dots, cues, letters, braces).

On main, `"A" + "\\n" * 2000 + "B"` took 15 s (cubic: the ANSWER-line pattern's three quantifiers
over the same white space under re.M) and 5,000 newlines did not finish in 120 s. Two checks,
written for a loaded 2-core machine:

- a generous absolute budget per call (`BUDGET_S`; the slowest input takes about 0.35 s here),
  retried up to three times before it fails, so one stall does not fail the test;
- a scaling ratio: the best of several runs at 100 KB over the best at 10 KB stays below
  `MAX_RATIO`. Linear time gives about 10; quadratic would give about 100, cubic 1,000.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import pytest

from evprobe.bench.generate import GenerateConfig, build
from evprobe.bench.items import Item
from evprobe.bench.parse import parse_reply
from evprobe.bench.units import Quantity, find_numbers, has_ambiguous_comma, has_malformed_number, in_quantity, numerals

SIZE = 100_000  # characters
BUDGET_S = 2.0
MAX_RATIO = 30.0
REQUESTS = ("select", "answer_after_test", "both_given", "read_ruler", "recover_property",
            "estimate_property", "estimate_outcome")


def _fill(unit: str, size: int, head: str = "", tail: str = "") -> str:
    """`head`, then `unit` repeated (the last copy cut) to `size` characters in all, then `tail`."""
    room = max(len(unit), size - len(head) - len(tail))
    return head + (unit * (room // len(unit) + 1))[:room] + tail


# name -> the reply at a given size. Each targets a pattern that was (or could be) super-linear.
ADVERSARIAL: dict[str, Callable[[int], str]] = {
    "newlines": lambda n: _fill("\n", n, "A", "B"),  # the ANSWER-line pattern: cubic on main
    "spaces": lambda n: _fill(" ", n, "A", "B"),
    "tabs_newlines": lambda n: _fill("\t\n", n, "x", "y"),
    "markdown": lambda n: _fill("** # > - ` \n", n, "x", "y"),
    "answer_prefixes": lambda n: _fill("ANSWER: ", n),
    "answer_blank_lines": lambda n: _fill("ANSWER:\n", n),
    "answer_then_spaces": lambda n: _fill(" ", n, "ANSWER: a", "b"),  # `(.*?)\s*$`: quadratic
    "answer_space_newline": lambda n: _fill(" \n", n, "ANSWER:", "x"),
    "answer_lines": lambda n: _fill("ANSWER: B\n", n),
    "indented_answers": lambda n: _fill("answer", n, " " * (n // 2)),
    "markup_answers": lambda n: _fill("**Answer**: > # ", n),
    "digits": lambda n: "1" * n,
    "digits_dots": lambda n: _fill("1.", n),
    "dots_digits": lambda n: _fill(".1", n),
    "numbers": lambda n: _fill("1 ", n),
    "signs": lambda n: _fill("-", n, "", "1"),
    "long_exponent": lambda n: _fill("9", n, "1e"),
    "long_power": lambda n: _fill("9", n, "4.5 x 10^"),
    "unicode_digits": lambda n: _fill("٣ ", n),
    "letters": lambda n: _fill("A ", n),  # the overlap checks per letter: quadratic on main
    "article_lines": lambda n: _fill("\nA", n),
    "blank_then_article": lambda n: _fill("\n", n, "x", "A quick look"),  # (the reply is stripped)
    "not": lambda n: _fill("not ", n, "A "),  # a clause-end search per cue: quadratic on main
    "postposed": lambda n: _fill(" is not", n, "the mass test"),
    "or_same": lambda n: _fill(" or A", n, "A"),
    "or_apart": lambda n: _fill(" or", n, "A", " B"),
    "i_think": lambda n: _fill("I think ", n, "A "),
    "braces": lambda n: "{" * n,  # json regime: `\{.*\}` from every "{"
    "combined_report": lambda n: _fill(" ", n, "combined report (", "x"),
    "long_word": lambda n: _fill("a", n, "", "n't"),
    "equals": lambda n: _fill(" ", n, "A", "="),
    "mixed": lambda n: _fill("**ANSWER**:  \n> - `1.2.3` 0x1F  \t# not A or B maybe\n\n", n),
    # seed 002's evasive words (the free protocol's reading): "neither"/"none" and the white space after them
    "neither_spaces": lambda n: _fill("neither" + " " * 50, n),
    "neither_nor": lambda n: _fill("neither yes nor ", n, "", "no"),
    "none_of": lambda n: _fill("none of ", n, "", "the above"),
    "n_a": lambda n: _fill("n/a/", n),
}


@pytest.fixture(scope="module")
def items() -> dict[str, Item]:
    """One item of each request kind (the numeric estimates included)."""
    _, its = build(GenerateConfig(families_per_system=1, subset_per_cell=0, numeric=True))
    return {r: next(it for it in its if it.request == r and it.variant is None) for r in REQUESTS}


def _best(call: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return min(times)


def _within_budget(call: Callable[[], object]) -> float:
    """The time of `call`, retried up to three times while over the budget (a stall, not a trend)."""
    t = math.inf
    for _ in range(3):
        t = min(t, _best(call, 1))
        if t < BUDGET_S:
            break
    return t

LENGTH = Quantity("length", "m")


def _readers(items: dict[str, Item], text: str) -> dict[str, Callable[[], object]]:
    """Every public reader of reply text, bound to `text`."""
    calls: dict[str, Callable[[], object]] = {
        f"parse_reply[{r}]": (lambda it=it: parse_reply(it, text)) for r, it in items.items()
    }
    calls["parse_reply[answer_after_test, free]"] = lambda: parse_reply(items["answer_after_test"], text,
                                                                         letters=False)  # rubric seed002
    calls["parse_reply[select, json]"] = lambda: parse_reply(items["select"], text, "json")
    calls["parse_reply[read_ruler, json]"] = lambda: parse_reply(items["read_ruler"], text, "json")
    calls["numerals"] = lambda: numerals(text)
    calls["find_numbers"] = lambda: find_numbers(text, LENGTH)
    calls["in_quantity"] = lambda: [in_quantity(n, LENGTH) for n in numerals(text) if n.number is not None]
    calls["has_ambiguous_comma"] = lambda: has_ambiguous_comma(text)
    calls["has_malformed_number"] = lambda: has_malformed_number(text)
    return calls


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_every_reader_is_fast_on_100kb_adversarial_replies(items: dict[str, Item], name: str) -> None:
    text = ADVERSARIAL[name](SIZE)
    assert len(text) == SIZE
    slow = {}
    for reader, call in _readers(items, text).items():
        t = _within_budget(call)
        if t >= BUDGET_S:
            slow[reader] = round(t, 2)
    assert not slow, f"{name}: over {BUDGET_S} s at {len(text)} characters: {slow}"


# The inputs that were cubic or quadratic on main, and the request kinds that read them.
SCALING = ("newlines", "answer_then_spaces", "indented_answers", "letters", "article_lines", "not", "postposed",
           "or_same", "or_apart", "i_think", "braces", "markdown", "digits_dots", "numbers")


@pytest.mark.parametrize("name", SCALING)
def test_time_grows_linearly(items: dict[str, Item], name: str) -> None:
    small, large = ADVERSARIAL[name](SIZE // 10), ADVERSARIAL[name](SIZE)
    for request in ("select", "read_ruler", "recover_property"):
        it = items[request]
        regime = "json" if name == "braces" else "standard"
        t_small = _best(lambda: parse_reply(it, small, regime), 7)
        t_large = _best(lambda: parse_reply(it, large, regime), 3)
        # a floor of 1 ms on the small run: below it the ratio measures timer noise, not growth
        ratio = t_large / max(t_small, 1e-3)
        assert ratio < MAX_RATIO, f"{name}, {request}: {t_small:.4f} s at 10 KB, {t_large:.4f} s at 100 KB"


@pytest.mark.parametrize("newlines", [2000, 5000])
def test_the_reported_blank_line_replies(items: dict[str, Item], newlines: int) -> None:
    """The issue's cases: 15 s and more than 120 s on main."""
    reply = "A" + "\n" * newlines + "B"
    t = _within_budget(lambda: parse_reply(items["select"], reply))
    assert t < BUDGET_S
    assert parse_reply(items["select"], reply).route == "invalid:conflicting_options"
