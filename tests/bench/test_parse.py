"""The reply parser, including the two misreads documented in seed 000, appendix B.2, and a table
of adversarial replies with their expected reading (`READINGS`)."""

from __future__ import annotations

import math
import re

import pytest

from evprobe.bench.generate import GenerateConfig, build
from evprobe.bench.items import Item
from evprobe.bench.numbers import fmt
from evprobe.bench.parse import RULER_MAX, parse_reply


@pytest.fixture(scope="module")
def items() -> dict[str, Item]:
    """A small real benchmark: 3 families per system (the third sliding family is the first whose
    menu puts stop at E) and 1 subset family per cell, so the selection variants are there too."""
    _, its = build(GenerateConfig(families_per_system=3, subset_per_cell=1))
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
    assert p.route == "invalid:conflicting_options"
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
    assert parse_reply(it, "yes or no, hard to say").route == "invalid:alternatives"
    assert parse_reply(it, "").route == "invalid:empty"
    assert parse_reply(it, "The block is heavy").route == "invalid:no_option"


def test_article_a_is_not_option_a(items: dict[str, Item]) -> None:
    it = _select(items, "sliding")
    p = parse_reply(it, f"A quick look says {_letter(it, 'free_fall')}")
    assert p.valid and p.action == "free_fall"


def test_a_letter_contradicted_by_a_name_is_ambiguous(items: dict[str, Item]) -> None:
    it = _select(items, "sliding")
    stop, fall = _letter(it, "stop"), _letter(it, "free_fall")
    assert parse_reply(it, f"I pick {stop}, the free-fall test").route == "invalid:conflicting_options"
    assert parse_reply(it, f"{fall}. Perform the mass test").route == "invalid:conflicting_options"


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


# ---- the table of adversarial replies ------------------------------------------------------------
# Each row: (item selector, reply template, expected reading[, regime]).
# Selector: a request, then `system=`, `initial=` and `LETTER=value` conditions on the item's menu;
# the first real item that meets them is used. Template fields: {L[value]} the letter of an option
# value, {V[letter]} the value of a letter as printed, {ref} the ruler reading as printed.
# Expected: "invalid:<reason>", or "<route>:<value>" (the action, the answer, the candidate value as
# printed, or the ruler reading in metres).
READINGS = [
    # The reviewer's misreads on main, each now invalid.
    ("select B=free_fall", "B stop", "invalid:conflicting_options"),
    ("answer_initial A=yes", "A no", "invalid:conflicting_options"),
    ("select E=stop", "E then the mass test", "invalid:conflicting_options"),
    ("select", "A or B", "invalid:alternatives"),
    ("select", "Either A or E", "invalid:alternatives"),
    ("select", "Do not stop.", "invalid:negated"),
    ("answer_after_test", "The answer is not yes", "invalid:negated"),
    ("read_ruler", "1e999", "invalid:non_finite"),
    # Seed 000, B.2: ANSWER: STOP after an earlier D; a truncated reply naming two tests.
    ("select system=sliding D=test_mass",
     "The sheet already fixes the mass, so option D would repeat it. The answer is known.\nANSWER: STOP",
     "answer_line:stop"),
    ("select system=bouncing initial=mass",
     "The mass test already shows which mass the ball has, so the remaining unknown is the "
     "restitution; the cheapest useful choice is the restitution test, which is option",
     "invalid:conflicting_options"),
    # Good selections: letters, letters with their printed labels, names.
    ("select", "{L[free_fall]}", "direct:free_fall"),
    ("select", "({L[test_mass]})", "direct:test_mass"),
    ("select", "**{L[combined_report]}**", "direct:combined_report"),
    ("select", "{L[stop]}.", "direct:stop"),
    ("select system=sliding", "{L[test_other]}. Perform the friction test (cost 1)", "direct:test_other"),
    ("select system=sliding", "{L[combined_report]}. Get the combined report (mass test and friction test)",
     "direct:combined_report"),
    ("select system=sliding", "{L[combined_report]}. Get the combined report (mass test and",
     "direct:combined_report"),  # cut at the 16-token limit
    ("select", "{L[stop]}. Answer now, with no further measurement", "direct:stop"),
    ("select", "{L[test_mass]} {L[test_mass]}", "direct:test_mass"),
    ("select", "Stop.", "name:stop"),
    ("select", "STOP", "name:stop"),
    ("select", "Stop and answer the question now", "name:stop"),
    ("select", "Perform the free-fall test", "name:free_fall"),
    ("select system=bouncing", "We need the restitution test to settle it", "name:test_other"),
    ("select system=spring", "Buy the combined report of the mass and stiffness tests", "name:combined_report"),
    ("select", "Stop or measure? The evidence settles it: stop", "name:stop"),
    ("select system=bouncing E=combined_report", "E = m g e^2 h, so the mass test", "name:test_mass"),
    # The article "A": both readings.
    ("select A=test_other", "A mass test is enough.", "name:test_mass"),
    ("select A=test_other system=sliding", "The mass is known. A friction test settles it.", "name:test_other"),
    ("select A=test_other", "A quick look says {L[free_fall]}", "letter:free_fall"),
    ("select A=test_other", "A, the mass test", "invalid:conflicting_options"),
    ("select A=test_mass", "A. mass test", "direct:test_mass"),
    ("select A=test_other", "A", "direct:test_other"),
    ("select A=test_other", "A is the cheapest", "direct:test_other"),
    ("select A=test_other", "Option A", "letter:test_other"),
    ("select A=test_other", "A stop", "invalid:conflicting_options"),
    ("answer_initial A=yes", "A yes", "direct:yes"),
    ("answer_initial A=yes", "A undetermined", "invalid:conflicting_options"),
    # Negation.
    ("select", "Don't stop, take the mass test", "invalid:negated"),
    ("select", "No need to test the mass; stop", "invalid:negated"),
    ("select", "The mass test instead of the free-fall test", "invalid:negated"),
    ("select", "The combined report rather than the mass test", "invalid:negated"),
    ("select", "Never stop here", "invalid:negated"),
    ("select", "The mass test is not needed", "invalid:negated"),
    ("select", "{L[free_fall]} would be wrong", "invalid:negated"),
    ("select", "No free-fall test", "invalid:negated"),
    ("select", "Rather than stopping, take the mass test", "name:test_mass"),
    ("answer_after_test", "not no", "invalid:negated"),
    ("answer_after_test", "It is not undetermined", "invalid:negated"),
    ("answer_after_test", "ANSWER: not {L[yes]}", "invalid:negated"),
    # Answers, where "no" is an option.
    ("answer_after_test", "no", "name:no"),
    ("answer_after_test", "No.", "name:no"),
    ("answer_after_test", "No, it will not slide that far.", "name:no"),
    ("answer_after_test", "It will not go past the threshold, so no", "name:no"),
    ("answer_initial", "Yes", "name:yes"),
    ("answer_initial", "{L[no]}", "direct:no"),
    ("answer_initial", "I don't know", "name:undetermined"),
    ("answer_initial", "It cannot be determined.", "name:undetermined"),
    ("answer_initial", "Not enough evidence to decide", "name:undetermined"),
    ("answer_initial", "The evidence does not settle the answer", "name:undetermined"),
    ("answer_initial", "{L[undetermined]}. undetermined: the evidence does not settle the answer",
     "direct:undetermined"),
    ("both_given", "{L[yes]}", "direct:yes"),
    ("both_given", "{L[no]}. no", "direct:no"),
    ("both_given", "{L[no]}. yes", "invalid:conflicting_options"),
    ("answer_initial", "D", "invalid:no_option"),  # answer menus stop at C
    ("answer_initial", "{L[yes]} or D", "invalid:alternatives"),
    # Alternatives.
    ("answer_after_test", "yes or no", "invalid:alternatives"),
    ("answer_after_test", "yes/no", "invalid:alternatives"),
    ("select", "{L[test_mass]}/{L[free_fall]}", "invalid:alternatives"),
    ("select system=sliding", "the mass test or the friction test", "invalid:alternatives"),
    ("select", "{L[stop]}, then {L[test_mass]}", "invalid:conflicting_options"),
    # Hedges, and a clean ANSWER line after hedged working.
    ("select", "Maybe {L[stop]}", "invalid:hedged"),
    ("select", "Probably the mass test", "invalid:hedged"),
    ("answer_initial", "Perhaps yes", "invalid:hedged"),
    ("answer_initial", "I'm not sure, yes", "invalid:hedged"),
    ("select", "I think {L[stop]} or", "invalid:hedged"),
    ("select", "It might be {L[free_fall]}", "invalid:hedged"),
    ("select", "Maybe.", "invalid:no_option"),
    ("select", "Maybe the mass test, perhaps not.\nANSWER: {L[test_mass]}", "answer_line:test_mass"),
    ("select", "The mass test or the free-fall test?\nANSWER: free fall", "answer_line:free_fall"),
    ("select", "ANSWER: probably {L[stop]}", "invalid:hedged"),
    # ANSWER lines and JSON.
    ("select", "Working.\n**ANSWER:** {L[free_fall]}", "answer_line:free_fall"),
    ("select", "Option A looks right.\nANSWER: maybe", "invalid:answer_line_unreadable"),
    ("select", "Working.\nANSWER: {L[stop]} or {L[test_mass]}", "invalid:alternatives"),
    ("select", "ANSWER: {L[free_fall]}. Perform the mass test", "invalid:conflicting_options"),
    ("answer_initial", '{{"reason": "it may be yes", "final_answer": "{L[undetermined]}"}}',
     "json:undetermined", "json"),
    ("answer_initial", '{{"reason": "x", "final_answer": "yes or no"}}', "invalid:alternatives", "json"),
    ("read_ruler", '{{"reason": "x", "final_answer": Infinity}}', "invalid:non_finite", "json"),
    # Garbage.
    ("select system=sliding", "bj\x0ckeectsu/ictcen g\ufffdC spict enough", "invalid:no_option"),
    ("select", "the D-type sensor", "invalid:no_option"),
    ("select", "E.g. a test", "invalid:no_option"),
    ("select", "", "invalid:empty"),
    # Ruler readings.
    ("read_ruler", "{ref}", "number:{ref}"),
    ("read_ruler", "{ref} m", "number:{ref}"),
    ("read_ruler", "About 0.45 m", "number:0.45"),
    ("read_ruler", "0", "number:0"),
    ("read_ruler", "450", "number:450"),  # millimetres by mistake: valid, and scored wrong
    ("read_ruler", "Between 0.4 and 0.5\nANSWER: 0.45", "answer_line:0.45"),
    ("read_ruler", "between 0.4 and 0.5", "invalid:several_numbers"),
    ("read_ruler", "0.4-0.5", "invalid:several_numbers"),
    ("read_ruler", "0.4 or 0.5", "invalid:alternatives"),
    ("read_ruler", "not 0.45", "invalid:negated"),
    ("read_ruler", "maybe 0.45", "invalid:hedged"),
    ("read_ruler", "-0.45", "invalid:out_of_range"),
    ("read_ruler", "\u22120.45 m", "invalid:out_of_range"),
    ("read_ruler", "2500", "invalid:out_of_range"),
    ("read_ruler", "inf", "invalid:non_finite"),
    ("read_ruler", "NaN", "invalid:non_finite"),
    ("read_ruler", "-1e999 m", "invalid:non_finite"),
    ("read_ruler", "ANSWER: 1e999", "invalid:non_finite"),
    ("read_ruler", "ANSWER:", "invalid:answer_line_unreadable"),
    ("read_ruler", "the marker", "invalid:no_number"),
    # Property recovery: letters and the printed candidate values.
    ("recover_property", "A", "direct:{V[A]}"),
    ("recover_property", "B. {V[B]}", "direct:{V[B]}"),
    ("recover_property", "It shows {V[B]}", "name:{V[B]}"),
    ("recover_property", "{V[A]} kg", "name:{V[A]}"),
    ("recover_property", "A. {V[B]}", "invalid:conflicting_options"),
    ("recover_property", "{V[A]} or {V[B]}", "invalid:alternatives"),
    ("recover_property", "not {V[A]}", "invalid:negated"),
    ("recover_property", "1e999", "invalid:non_finite"),
    ("recover_property", "7.77777", "invalid:no_option"),
]


def _pick(items: dict[str, Item], selector: str) -> Item:
    request, *conditions = selector.split()
    want = dict(c.split("=") for c in conditions)
    system, initial = want.pop("system", None), want.pop("initial", None)
    for it in items.values():
        if it.request != request or it.variant is not None:
            continue
        if system not in (None, it.system) or initial not in (None, it.initial_property):
            continue
        if all((it.options or {}).get(k) == v for k, v in want.items()):
            return it
    raise LookupError(f"no item for {selector!r}")


def _fill(template: str, it: Item) -> str:
    options = it.options or {}
    ref = fmt(it.reference_value) if it.reference_value is not None else ""
    return template.format(L={v: k for k, v in options.items()}, V=options, ref=ref)


@pytest.mark.parametrize("row", READINGS, ids=[f"{i:03d}-{r[0].split()[0]}" for i, r in enumerate(READINGS)])
def test_reading_table(items: dict[str, Item], row: tuple[str, ...]) -> None:
    selector, template, expected, *rest = row
    it = _pick(items, selector)
    reply, want = _fill(template, it), _fill(expected, it)
    p = parse_reply(it, reply, *rest)
    if want.startswith("invalid:"):
        assert (p.valid, p.route) == (False, want), reply
        assert (p.choice, p.action, p.answer, p.value) == (None, None, None, None)
        return
    route, _, value = want.partition(":")
    assert p.valid and p.route == route, (reply, p)
    if it.request == "read_ruler":
        assert p.value is not None and math.isfinite(p.value) and p.value == pytest.approx(float(value))
        return
    assert p.choice is not None and it.options[p.choice] == value, (reply, p)
    if it.request == "select":
        assert p.action == value
    elif it.request == "recover_property":
        assert p.value == float(value)
    else:
        assert p.answer == value


def test_table_covers_every_request_and_reason() -> None:
    assert len(READINGS) >= 60
    requests = {row[0].split()[0] for row in READINGS}
    assert requests == {"select", "answer_initial", "answer_after_test", "both_given", "read_ruler",
                        "recover_property"}
    reasons = {row[2] for row in READINGS if row[2].startswith("invalid:")}
    for reason in ("conflicting_options", "negated", "alternatives", "hedged", "non_finite", "out_of_range"):
        assert f"invalid:{reason}" in reasons


def test_every_printed_menu_line_reads_as_its_option(items: dict[str, Item]) -> None:
    """A reply that copies a menu line of its own prompt ("B. Run the mass test (cost 1)", the
    reworded variant included) or gives the bare letter is that option, for every item."""
    for it in items.values():
        if not it.options:
            continue
        lines = dict(re.findall(r"^([A-E])\. (.+)$", it.prompt, re.M))
        assert set(lines) == set(it.options), it.item_id
        for letter in it.options:
            for reply in (letter, f"{letter}. {lines[letter]}"):
                p = parse_reply(it, reply)
                assert p.valid and p.route == "direct" and p.choice == letter, (it.item_id, reply, p)


def test_reference_replies_read_exactly(items: dict[str, Item]) -> None:
    """The replies of the scripted `reference` policy (a letter, or the reading at six significant
    digits) read back as the reference, and every ruler reading stays within RULER_MAX."""
    for it in items.values():
        if it.request == "read_ruler":
            p = parse_reply(it, fmt(it.reference_value, 6))
            assert p.valid and p.route == "number" and p.value == pytest.approx(it.reference_value)
            assert 0 < p.value <= RULER_MAX
        else:
            p = parse_reply(it, it.reference_option)
            assert p.valid and p.choice == it.reference_option
