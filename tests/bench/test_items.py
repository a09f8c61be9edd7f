"""The request inventory, pairs and labels (seed 000, section 3.2, Table 10, appendices D and G)."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from evprobe.bench.family import sample_families
from evprobe.bench.generate import GenerateConfig, build
from evprobe.bench.items import Item
from evprobe.bench.worlds import parse_world


@pytest.fixture(scope="module")
def main_set() -> tuple[list, list[Item]]:
    return build(GenerateConfig())  # the full main set, without rendering (about 1 s)


def test_main_inventory_matches_table_10(main_set: tuple[list, list[Item]]) -> None:
    families, items = main_set
    assert len(families) == 144 and len(items) == 9216
    counts = Counter(it.request for it in items if it.variant is None)
    assert counts == {
        "select": 576,
        "answer_initial": 576,
        "answer_after_test": 4608,
        "both_given": 1152,
        "read_ruler": 288,
        "recover_property": 288,
    }
    variants = Counter(it.variant for it in items if it.variant is not None)
    assert sum(variants.values()) == 1728 and set(variants.values()) == {288}
    assert len({it.item_id for it in items}) == len(items)


def test_main_set_composition(main_set: tuple[list, list[Item]]) -> None:
    families, _ = main_set
    cells = Counter((f.system, f.initial) for f in families)
    assert cells == {(s, i): 24 for s in ("sliding", "bouncing", "spring") for i in ("mass", "other")}
    subset = Counter((f.system, f.initial) for f in families if f.in_subset)
    assert subset == {(s, i): 12 for s in ("sliding", "bouncing", "spring") for i in ("mass", "other")}


def test_families_are_stable_when_the_count_changes() -> None:
    small = {f.family_id: f.candidates for f in sample_families(20260905, 4)}
    large = {f.family_id: f.candidates for f in sample_families(20260905, 48)}
    assert all(large[k] == v for k, v in small.items())


def test_pairs_hold_what_the_construction_says(main_set: tuple[list, list[Item]]) -> None:
    _, items = main_set
    for request in ("select", "answer_initial"):
        base = [it for it in items if it.request == request and it.variant is None]
        image_pairs, threshold_pairs = defaultdict(list), defaultdict(list)
        for it in base:
            image_pairs[it.image_pair_id].append(it)
            threshold_pairs[it.threshold_pair_id].append(it)
        assert len(image_pairs) == len(threshold_pairs) == 288
        for a, b in image_pairs.values():
            assert a.prompt == b.prompt and a.options == b.options  # every prompt byte shared
            assert a.images != b.images and a.history != b.history
            assert a.resolved != b.resolved and a.reference_option != b.reference_option
        for a, b in threshold_pairs.values():
            assert a.images == b.images and a.options == b.options  # same image and ordering
            assert a.threshold_level != b.threshold_level and a.resolved != b.resolved


def test_option_order_is_shared_across_a_familys_decisions(main_set: tuple[list, list[Item]]) -> None:
    _, items = main_set
    menus = defaultdict(set)
    for it in items:
        if it.request == "select" and it.variant in (None, "text_readings", "given_equations"):
            menus[it.family_id].add(tuple(it.options.items()))
    assert all(len(m) == 1 for m in menus.values())
    reworded = {it.family_id: tuple(it.options.items()) for it in items if it.variant == "reworded"}
    assert all(reworded[f] not in menus[f] for f in reworded)


def test_hidden_alternatives_average_one_half(main_set: tuple[list, list[Item]]) -> None:
    """Appendix D: after an uninformative test on an unresolved decision the two hidden worlds
    show identical inputs with opposite true answers, so any yes/no rule scores exactly 50%."""
    families, items = main_set
    outcomes = {f.family_id: f.outcomes() for f in families}
    groups = defaultdict(list)
    for it in items:
        if it.request == "answer_after_test":
            groups[(it.decision_id, it.test)].append(it)
    n = 0
    for a, b in groups.values():
        if a.images == b.images and not a.resolved:
            n += 1
            assert a.prompt == b.prompt and a.reference_answer == b.reference_answer == "undetermined"
            truths = {
                outcomes[it.family_id][parse_world(it.hidden_world)] > it.threshold for it in (a, b)
            }
            assert truths == {True, False}
    assert n == 576


def test_informative_answers_and_both_given_are_balanced(main_set: tuple[list, list[Item]]) -> None:
    _, items = main_set
    select = {it.decision_id: it for it in items if it.request == "select" and it.variant is None}
    informative = [  # appendix D: missing-property test and combined report on unresolved cases
        it
        for it in items
        if it.request == "answer_after_test"
        and not select[it.decision_id].resolved
        and it.test in ("combined_report", select[it.decision_id].reference_action)
    ]
    assert len(informative) == 1152 and all(it.resolved for it in informative)
    assert Counter(it.reference_answer for it in informative) == {"yes": 576, "no": 576}
    both = Counter(it.reference_answer for it in items if it.request == "both_given")
    assert both == {"yes": 576, "no": 576}  # appendix G: balanced true answers


def test_no_initial_test_needs_the_combined_report(main_set: tuple[list, list[Item]]) -> None:
    _, items = main_set
    none = [it for it in items if it.variant == "no_initial_test"]
    assert len(none) == 288 and not any(it.images for it in none)
    assert {it.reference_action for it in none} == {"combined_report"}
    assert not any(it.resolved for it in none)


def test_changed_rendering_uses_style_b_images(main_set: tuple[list, list[Item]]) -> None:
    _, items = main_set
    changed = [it for it in items if it.variant == "changed_rendering"]
    assert all(it.style == "b" and it.images[0].endswith(".b.png") for it in changed)
    assert all("orange" in it.prompt or "magenta" not in it.prompt for it in changed)


def test_probe_requests_carry_their_reference_values(main_set: tuple[list, list[Item]]) -> None:
    families, items = main_set
    fam = {f.family_id: f for f in families}
    for it in items:
        if it.request == "recover_property":
            f = fam[it.family_id]
            prop = "mass" if f.initial == "mass" else f.other
            assert it.reference_value == f.candidates[prop][it.history]
            assert float(it.options[it.reference_option]) == pytest.approx(it.reference_value)
        if it.request == "read_ruler":
            assert 0 < it.reference_value <= 2.0
