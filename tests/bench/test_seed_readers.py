"""Seed 000's reader (appendix B.2, bench.seed_readers): every example the seed gives, as known answers,
with evprobe's reading (bench.parse) beside, and the choices made where the seed is silent."""

from __future__ import annotations

from pathlib import Path

import pytest

from evprobe.bench.items import Item
from evprobe.bench.manifest import read_items
from evprobe.bench.parse import parse_reply
from evprobe.bench.seed_readers import read_seed000


@pytest.fixture(scope="module")
def items(small_bench: Path) -> list[Item]:
    return read_items(small_bench, validate_images=False)


def _item(items: list[Item], request: str, system: str = "sliding") -> Item:
    return next(it for it in items if it.request == request and it.system == system and it.variant is None)


def _letter(item: Item, value: str) -> str:
    return next(k for k, v in (item.options or {}).items() if v == value)


def test_first_misread_an_earlier_standalone_letter_beats_answer_stop(items: list[Item]) -> None:
    """B.2: "a Qwen 7B sliding reply ends in ANSWER: STOP. The parser scores it as a mass measurement
    because it matches an earlier standalone D" (D: the mass test in that menu)."""
    item = _item(items, "select", "sliding")
    d = _letter(item, "test_mass")
    reply = f"The coasting test already fixes the friction, so option {d} is not needed.\nANSWER: STOP"
    seed = read_seed000(item, reply)
    assert (seed.valid, seed.action, seed.route) == (True, "test_mass", "seed000:letter")
    assert parse_reply(item, reply).action == "stop"  # evprobe: the ANSWER line is final


def test_second_misread_a_truncated_reply_naming_two_tests_is_mass(items: list[Item]) -> None:
    """B.2: "Another truncated bounce reply names the test of the second property but is scored as
    mass": with no letter, action names are tried in a fixed order, the mass test before the other."""
    item = _item(items, "select", "bouncing")
    reply = "We already know the mass from the mass test, so the useful experiment is the restitution test, which"
    seed = read_seed000(item, reply)
    assert (seed.valid, seed.action, seed.route) == (True, "test_mass", "seed000:name")
    assert parse_reply(item, reply).route == "invalid:conflicting_options"


def test_final_option_letter_first(items: list[Item]) -> None:
    """B.2: "it first seeks a final option letter" (the brief protocol's ANSWER line), over letters in
    the working."""
    item = _item(items, "select")
    a, b = _letter(item, "stop"), _letter(item, "free_fall")
    reply = f"Option {a} would be wrong here.\nANSWER: {b}"
    assert read_seed000(item, reply).action == "free_fall"
    assert read_seed000(item, reply).route == "seed000:answer_line"


def test_direct_option_code(items: list[Item]) -> None:
    """The direct protocol's option code within 16 tokens, and the answer menus' letters."""
    item = _item(items, "select")
    for letter, action in (item.options or {}).items():
        assert read_seed000(item, letter).action == action
        assert read_seed000(item, f"({letter})").action == action
    answer = _item(items, "answer_after_test")
    for letter, value in (answer.options or {}).items():
        assert read_seed000(answer, f"{letter}.").answer == value


def test_answer_words_fall_back_in_a_fixed_order(items: list[Item]) -> None:
    """B.2: "Answer words ... provide fallbacks"; no negation or conflict rule (yes before no)."""
    item = _item(items, "answer_initial")
    assert read_seed000(item, "yes").answer == "yes"
    assert read_seed000(item, "It cannot be determined from this sheet").answer == "undetermined"
    assert read_seed000(item, "not yes, rather no").answer == "yes"
    assert parse_reply(item, "not yes, rather no").valid is False


def test_letters_off_the_menu_and_glued_capitals_are_no_letters(items: list[Item]) -> None:
    item = _item(items, "answer_initial")  # a three-option menu: A, B, C
    assert read_seed000(item, "D").route == "invalid:no_option"
    assert read_seed000(item, "ABC").route == "invalid:no_option"


def test_article_a_is_a_letter_to_the_seed(items: list[Item]) -> None:
    """No article rule in B.2: "A" standing alone is option A (evprobe reads the article)."""
    item = _item(items, "select")
    reply = "A free fall tells nothing here."
    assert read_seed000(item, reply).choice == "A"
    assert parse_reply(item, reply).action == "free_fall"


def test_ruler_number_from_the_explanation(items: list[Item]) -> None:
    """B.2: a ruler reply cut before its final number: "the recorded numeric parser can then obtain a
    number from the preceding explanation" (the last number; no unit conversion)."""
    item = _item(items, "read_ruler")
    assert read_seed000(item, "The marker is past 0.5 m, at about 0.62 m. ANSWER:").value == 0.62
    assert read_seed000(item, "ANSWER: 0.41").value == 0.41
    assert read_seed000(item, "45 cm").value == 45.0
    assert parse_reply(item, "45 cm").value == 0.45
    assert read_seed000(item, "no idea").route == "invalid:no_number"


def test_recover_property_letter_or_candidate_value(items: list[Item]) -> None:
    item = _item(items, "recover_property")
    (la, va), (lb, vb) = list((item.options or {}).items())
    assert read_seed000(item, lb).choice == lb
    assert read_seed000(item, f"It is {vb}.").choice == lb
    assert read_seed000(item, "It is 12345.").valid is False


def test_other_requests_are_refused(items: list[Item]) -> None:
    import dataclasses

    item = dataclasses.replace(_item(items, "select"), request="estimate_property")
    with pytest.raises(ValueError, match="seed 000 has no request"):
        read_seed000(item, "1.2")
