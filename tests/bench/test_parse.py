"""The reply parser, including the two misreads documented in seed 000, appendix B.2."""

from __future__ import annotations

import pytest

from evprobe.bench.generate import GenerateConfig, build
from evprobe.bench.items import Item
from evprobe.bench.parse import parse_reply


@pytest.fixture(scope="module")
def items() -> dict[str, Item]:
    _, its = build(GenerateConfig(families_per_system=2, subset_per_cell=0))
    return {it.item_id: it for it in its}


def _select(items: dict[str, Item], system: str) -> Item:
    return next(it for it in items.values() if it.request == "select" and it.system == system)


def _letter(item: Item, value: str) -> str:
    return next(k for k, v in item.options.items() if v == value)


def test_direct_letter_variants(items: dict[str, Item]) -> None:
    it = _select(items, "sliding")
    for reply in ("B", " B ", "B.", "(B)", "**B**", "B) ", f"B. {_label(it, 'B')}"):
        p = parse_reply(it, reply)
        assert p.valid and p.choice == "B" and p.action == it.options["B"], reply
        assert p.route == "direct"


def _label(it: Item, letter: str) -> str:
    return {"stop": "Stop and answer the question now", "test_mass": "Perform the mass test",
            "free_fall": "Perform the free-fall test", "combined_report": "Get the combined report",
            "test_other": "Perform the friction test"}[it.options[letter]]


def test_answer_stop_is_stop_not_an_earlier_letter(items: dict[str, Item]) -> None:
    """Seed B.2 misread 1: a reply ending in ANSWER: STOP was scored as the letter D seen earlier."""
    it = _select(items, "sliding")
    d = _letter(it, "test_mass")
    reply = f"The sheet already fixes the mass, so option {d} would repeat it. The answer is known.\nANSWER: STOP"
    p = parse_reply(it, reply)
    assert p.valid and p.action == "stop" and p.route == "answer_line"
    assert p.choice == _letter(it, "stop")


def test_truncated_reply_naming_the_second_property_is_not_mass(items: dict[str, Item]) -> None:
    """Seed B.2 misread 2: a truncated reply naming the second property's test scored as mass."""
    it = next(i for i in items.values() if i.request == "select" and i.system == "bouncing"
              and i.initial_property == "mass")
    reply = ("The mass test already shows which mass the ball has, so the remaining unknown is the "
             "restitution; the cheapest useful choice is the restitution test, which is option")
    p = parse_reply(it, reply)
    assert not (p.valid and p.action == "test_mass")
    assert p.route == "invalid:ambiguous"
    only_other = "We need the restitution test to settle it"
    q = parse_reply(it, only_other)
    assert q.valid and q.action == "test_other" and q.route == "name"


def test_unreadable_answer_line_is_invalid_not_a_guess(items: dict[str, Item]) -> None:
    it = _select(items, "spring")
    p = parse_reply(it, "Option A looks right.\nANSWER: maybe")
    assert not p.valid and p.route == "invalid:answer_line_unreadable"


def test_answer_line_letter_and_name(items: dict[str, Item]) -> None:
    it = _select(items, "spring")
    assert parse_reply(it, "Working.\nANSWER: C").choice == "C"
    assert parse_reply(it, "Working.\nANSWER: (C)").choice == "C"
    assert parse_reply(it, "Working.\n**ANSWER:** C").choice == "C"
    p = parse_reply(it, "Working.\nANSWER: free fall")
    assert p.action == "free_fall" and p.route == "answer_line"


def test_json_regime(items: dict[str, Item]) -> None:
    it = next(i for i in items.values() if i.request == "answer_initial")
    letter = _letter(it, "undetermined")
    p = parse_reply(it, f'{{"reason": "two worlds remain", "final_answer": "{letter}"}}', regime="json")
    assert p.valid and p.answer == "undetermined" and p.route == "json"
    bad = parse_reply(it, '{"reason": "x", "final_answer": "perhaps"}', regime="json")
    assert not bad.valid and bad.route == "invalid:json_final_answer_unreadable"


def test_answer_names_and_ambiguity(items: dict[str, Item]) -> None:
    it = next(i for i in items.values() if i.request == "answer_after_test")
    assert parse_reply(it, "yes").answer == "yes"
    assert parse_reply(it, "It cannot be determined.").answer == "undetermined"
    assert parse_reply(it, "I don't know").answer == "undetermined"
    assert parse_reply(it, "yes or no, hard to say").route == "invalid:ambiguous"
    assert parse_reply(it, "").route == "invalid:empty"
    assert parse_reply(it, "The block is heavy").route == "invalid:no_option"


def test_article_a_is_not_option_a(items: dict[str, Item]) -> None:
    it = _select(items, "sliding")
    p = parse_reply(it, f"A quick look says {_letter(it, 'free_fall')}")
    assert p.valid and p.action == "free_fall"


def test_a_letter_contradicted_by_a_name_is_ambiguous(items: dict[str, Item]) -> None:
    it = _select(items, "sliding")
    stop, fall = _letter(it, "stop"), _letter(it, "free_fall")
    assert parse_reply(it, f"I pick {stop}, the free-fall test").route == "invalid:ambiguous"
    assert parse_reply(it, f"{fall}. Perform the mass test").route == "invalid:ambiguous"


def test_ruler_numbers(items: dict[str, Item]) -> None:
    it = next(i for i in items.values() if i.request == "read_ruler")
    assert parse_reply(it, "0.45").value == pytest.approx(0.45)
    assert parse_reply(it, "0.45 m").route == "number"
    assert parse_reply(it, "Between 0.4 and 0.5\nANSWER: 0.45").value == pytest.approx(0.45)
    assert parse_reply(it, "between 0.4 and 0.5").route == "invalid:several_numbers"
    assert parse_reply(it, "ANSWER:").route == "invalid:answer_line_unreadable"


def test_recover_property_values(items: dict[str, Item]) -> None:
    it = next(i for i in items.values() if i.request == "recover_property")
    letter, value = next(iter(it.options.items()))
    assert parse_reply(it, letter).value == pytest.approx(float(value))
    assert parse_reply(it, f"It shows {value}").choice == letter


def test_letters_glued_to_garbage_are_not_options(items: dict[str, Item]) -> None:
    """Untrained models emit byte soup; a capital glued to other characters is no option code."""
    it = _select(items, "sliding")
    assert parse_reply(it, "bj\x0ckeectsu/ictcen g\ufffdC spict enough").route == "invalid:no_option"
    assert parse_reply(it, "the D-type sensor").route == "invalid:no_option"
