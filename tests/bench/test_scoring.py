"""Scoring a run on the full main set: scripted record sets with known answers (seed 000, 002)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import replace

import numpy as np
import pytest

from evprobe.bench.generate import GenerateConfig, build
from evprobe.bench.items import Item
from evprobe.bench.records import Record
from evprobe.bench.score_report import compare_markdown, scores_markdown
from evprobe.bench.scoring import HEADLINE, Tally, score
from evprobe.core.bootstrap import FamilyBootstrap
from evprobe.core.estimate_text import estimate_text

REQUIRED = (
    "min_cost_choice",
    "stop_if_enough",
    "test_if_needed",
    "both_correct_image_pairs",
    "both_correct_threshold_pairs",
    "same_choice_image_pairs",
    "same_choice_threshold_pairs",
    "enough_evidence",
    "resolved_and_correct",
    "mean_cost",
    "validity_select",
    "pecs",  # a perfect run: also its reason for having no interval (bench.pecs)
)
ANSWERS = ("answer_initial", "answer_after_test", "both_given")


# -- records made directly from items --------------------------------------------------------------


def letter(item: Item, value: str) -> str:
    return next(k for k, v in item.options.items() if v == value)


def record(
    item: Item,
    *,
    action: str | None = None,
    answer: str | None = None,
    value: float | None = None,
    choice: str | None = None,
    valid: bool = True,
) -> Record:
    """A record for `item`; the option letter follows from the action or answer."""
    if valid and choice is None:
        if action is not None:
            choice = letter(item, action)
        elif answer is not None:
            choice = letter(item, answer)
    return Record(
        item_id=item.item_id,
        model="policy:test",
        protocol="direct",
        regime="standard",
        request=item.request,
        variant=item.variant,
        family_id=item.family_id,
        reply=choice or "",
        valid=valid,
        route="letter" if valid else "invalid:test",
        choice=choice if valid else None,
        action=action if valid else None,
        answer=answer if valid else None,
        value=value if valid else None,
        n_prompt_tokens=None,
        n_new_tokens=None,
        seconds=0.0,
    )


def invalid(item: Item) -> Record:
    return record(item, valid=False)


def reference(item: Item) -> Record:
    """What the exact reference replies."""
    if item.request == "select":
        return record(item, action=item.reference_action)
    if item.request in ANSWERS:
        return record(item, answer=item.reference_answer)
    if item.request == "read_ruler":
        return record(item, value=item.reference_value)
    return record(item, choice=item.reference_option, value=item.reference_value)


def run(
    items: Iterable[Item],
    select: Callable[[Item], str] | None = None,
    answer: Callable[[Item], str] | None = None,
) -> list[Record]:
    """Reference records, with base selections and/or answers replaced by a rule."""
    out = []
    for it in items:
        if select is not None and it.request == "select" and it.variant is None:
            out.append(record(it, action=select(it)))
        elif answer is not None and it.request in ("answer_initial", "answer_after_test"):
            out.append(record(it, answer=answer(it)))
        else:
            out.append(reference(it))
    return out


def repeat_test(item: Item) -> str:
    return "test_mass" if item.initial_property == "mass" else "test_other"


def missing_test(item: Item) -> str:
    return "test_other" if item.initial_property == "mass" else "test_mass"


def value(scores: dict, *path: str) -> float | None:
    node = scores
    for key in path:
        node = node[key]
    return node["value"]


@pytest.fixture(scope="module")
def items() -> list[Item]:
    return build(GenerateConfig())[1]  # the full main set, in memory


@pytest.fixture(scope="module")
def ref_scores(items: list[Item]) -> dict:
    return score(items, [reference(it) for it in items])


# -- the reference and simple selection rules ------------------------------------------------------


def test_reference_scores_perfectly(ref_scores: dict) -> None:
    s = ref_scores
    for key in REQUIRED:
        assert set(s[key]) - {"reason"} == {"value", "ci", "n", "n_families"}, key
        assert s[key]["n_families"] == 144, key  # every measure's interval rests on the 144 families
    for key in (
        "min_cost_choice",
        "stop_if_enough",
        "test_if_needed",
        "both_correct_image_pairs",
        "both_correct_threshold_pairs",
        "enough_evidence",
        "useful_test_supplied",
        "resolved_and_correct",
        "pecs_acc",
        "pecs_abs_rec",
    ):
        # a proportion at 100% has an interval that reaches below 1 (core.proportion), not [1, 1]
        lo, hi = s[key]["ci"]
        assert s[key]["value"] == 1.0 and hi == 1.0 and 0.8 < lo < 1.0, key
    # 576/576 over 144 families of 4: every family one unit, Clopper-Pearson 144/144
    assert s["min_cost_choice"]["ci"][0] == pytest.approx(0.025 ** (1 / 144), abs=1e-12)
    # a product of rates at their bounds, 1 x (1 - 0) on every resample: no interval, and why (bench.pecs)
    assert s["pecs"] == {"value": 1.0, "ci": [None, None], "n": 5184, "n_families": 144,
                         "reason": "the same on every family resample"}
    assert s["same_choice_image_pairs"]["value"] == 0.0  # the reference always switches
    # a cost mean is bounded (0 to the dearest price): never a point, even where every family agrees
    assert s["mean_cost"]["value"] == 0.5 and s["mean_cost"]["n"] == 576
    assert s["mean_cost"]["ci"][0] < 0.5 < s["mean_cost"]["ci"][1]
    assert s["min_cost_choice"]["n"] == 576 and s["both_correct_image_pairs"]["n"] == 288
    assert s["stop_if_enough"]["n"] == s["test_if_needed"]["n"] == 288
    assert s["useful_test_supplied"]["n"] == 1152
    assert s["validity_select"]["value"] == 1.0
    assert all(v["value"] == 1.0 for v in s["validity"].values())
    assert len(s["validity"]) == 12
    assert all(c["fraction"] == 1.0 for c in s["coverage"].values())
    assert s["controls"]["read_ruler"]["value"] == s["controls"]["both_given"]["value"] == 1.0
    assert s["meta"]["n_boot"] == 2000 and s["meta"]["seed"] == 20260905


def test_reference_policies_are_analytic(ref_scores: dict) -> None:
    """With perfect answers a rule succeeds exactly when its evidence settles the question. A rule
    that reads no replies has its cost from the design alone, the same in every family: fixed by
    design (core.bootstrap), so no interval."""
    p = ref_scores["policies"]
    expected = {
        "always_stop": (0.5, 0.0),  # only the resolved half
        "repeat_known": (0.5, 1.0),
        "free_fall": (0.5, 1.0),
        "test_missing": (1.0, 1.0),
        "complete_report": (1.0, 2.0),
        "random_test": (0.75, 1.25),  # (1 + 1/2) / 2 over the four tests
        "min_cost": (1.0, 0.5),
        "model": (1.0, 0.5),
        "model_exact_reader": (1.0, 0.5),
    }
    assert list(p) == list(expected)
    for rule, (correct, cost) in expected.items():
        assert p[rule]["correct"]["value"] == correct, rule
        assert p[rule]["mean_cost"]["value"] == cost, rule
        reads_replies = rule in ("model", "model_exact_reader")
        assert p[rule]["mean_cost"].get("fixed_by_design", False) == (not reads_replies), rule


def test_always_stop(items: list[Item]) -> None:
    s = score(items, run(items, select=lambda it: "stop"))
    assert s["min_cost_choice"]["value"] == 0.5
    assert s["same_choice_image_pairs"]["value"] == 1.0
    assert s["same_choice_threshold_pairs"]["value"] == 1.0
    assert s["both_correct_image_pairs"]["value"] == 0.0
    assert s["mean_cost"]["value"] == 0.0 and s["mean_cost"]["ci"][0] == 0.0 < s["mean_cost"]["ci"][1]
    assert s["errors"]["early_stop"]["value"] == 1.0
    assert s["choices"]["unresolved_counts"]["stop"] == 288
    assert s["repeats"]["repeat_known_all"] == {"value": None, "ci": [None, None], "n": 0}
    assert s["resolved_and_correct"]["value"] == s["policies"]["always_stop"]["correct"]["value"]


def test_fixed_test_costs(items: list[Item]) -> None:
    missing = score(items, run(items, select=missing_test), n_boot=200)
    assert missing["mean_cost"]["value"] == 1.0
    assert missing["test_if_needed"]["value"] == 1.0 and missing["stop_if_enough"]["value"] == 0.0
    assert missing["errors"]["unneeded_test"]["value"] == 1.0
    # 0/576 over 144 families of 4: the interval reaches 1 - 0.025^(1/144), not [0, 0]
    repeats = missing["repeats"]["repeat_known_all"]
    assert repeats["value"] == 0.0 and repeats["n"] == 576 and repeats["ci"][0] == 0.0
    assert repeats["ci"][1] == pytest.approx(1 - 0.025 ** (1 / 144), abs=1e-12)
    report = score(items, run(items, select=lambda it: "combined_report"), n_boot=200)
    assert report["mean_cost"]["value"] == 2.0
    assert report["choices"]["resolved"]["both"]["value"] == 1.0
    repeat = score(items, run(items, select=repeat_test), n_boot=200)
    assert repeat["repeats"]["repeat_known_unresolved"]["value"] == 1.0
    assert repeat["errors"]["useless_test"]["value"] == 1.0
    assert repeat["enough_evidence"]["value"] == 0.5  # a repeat settles only the resolved half


def test_enough_evidence_uses_labels_even_without_answer_records(items: list[Item]) -> None:
    selections = [record(it, action=missing_test(it)) for it in items if it.request == "select"]
    s = score(items, selections, n_boot=100)
    assert s["enough_evidence"]["value"] == 1.0  # every decision is settled by the missing test
    assert s["resolved_and_correct"]["value"] is None
    assert s["resolved_and_correct"]["reason"] == "no answer_initial records"


# -- invalid replies and partial runs --------------------------------------------------------------


def test_invalid_replies_stay_in_the_denominators(items: list[Item]) -> None:
    base_select = [it for it in items if it.request == "select" and it.variant is None]
    broken = {it.item_id for it in base_select[::8]}  # 72 of 576 selections
    wrong_answers = {
        it.item_id for it in items if it.request == "answer_initial" and not it.resolved
    }
    wrong_answers = set(sorted(wrong_answers)[:36])
    records = []
    for it in items:
        if it.item_id in broken or it.item_id in wrong_answers:
            records.append(invalid(it))
        else:
            records.append(reference(it))
    s = score(items, records)
    assert s["min_cost_choice"]["n"] == 576
    assert s["min_cost_choice"]["value"] == pytest.approx(504 / 576)
    assert s["validity_select"]["value"] == pytest.approx(504 / 576)
    assert s["both_correct_image_pairs"]["n"] == 288
    n_invalid = (
        s["choices"]["resolved_counts"]["invalid"] + s["choices"]["unresolved_counts"]["invalid"]
    )
    assert n_invalid == 72
    costs = sum(
        1.0 for it in base_select if it.item_id not in broken and it.reference_action != "stop"
    )
    assert s["mean_cost"]["value"] == pytest.approx(costs / 576)  # an invalid reply costs 0
    # an invalid answer is neither correct nor an abstention
    unknown = s["answers"]["unknown_answer"]
    assert unknown["value"] == pytest.approx(252 / 288) and unknown["n"] == 288
    assert s["pecs_abs_rec"]["value"] == pytest.approx((1440 - 36) / 1440)
    assert s["pecs_abs_rec"]["n"] == 1440
    # an invalid selection never settles anything and never stops
    assert s["enough_evidence"]["value"] == pytest.approx(504 / 576)


def test_two_invalid_replies_count_as_the_same_choice(items: list[Item]) -> None:
    records = [
        invalid(it) if it.request == "select" and it.variant is None else reference(it)
        for it in items
    ]
    s = score(items, records, n_boot=100)
    assert s["same_choice_image_pairs"]["value"] == 1.0
    assert s["both_correct_image_pairs"]["value"] == 0.0
    assert s["mean_cost"]["value"] == 0.0 and s["validity_select"]["value"] == 0.0
    assert s["answers"]["action_agreement"]["value"] == 0.0


def test_partial_run_reports_coverage_and_never_invents(items: list[Item]) -> None:
    selections = [
        record(it, action="stop") for it in items if it.request == "select" and it.variant is None
    ]
    s = score(items, selections[:300], n_boot=100)
    assert s["coverage"]["select"] == {"records": 300, "items": 576, "fraction": 300 / 576}
    assert s["coverage"]["answer_initial"]["records"] == 0
    assert s["min_cost_choice"]["n"] == 300
    for key in ("pecs", "useful_test_supplied", "resolved_and_correct"):
        assert s[key]["value"] is None and s[key]["n"] == 0 and s[key]["reason"], key
    assert s["answers"]["known_answer"]["reason"] == "no answer_initial records"
    assert s["controls"]["read_ruler"]["reason"] == "no read_ruler records"
    assert s["policies"]["always_stop"]["mean_cost"]["value"] == 0.0  # needs no records
    assert s["policies"]["always_stop"]["correct"]["value"] is None
    assert "NA (no answer_initial records)" in scores_markdown(s, "partial")


def test_unknown_and_duplicate_records_are_errors(items: list[Item]) -> None:
    good = reference(items[0])
    with pytest.raises(ValueError, match=re.escape("nowhere-001.select.h0.low")):
        score(items, [good, replace(good, item_id="nowhere-001.select.h0.low")])
    with pytest.raises(ValueError, match="two records"):
        score(items, [good, good])
    with pytest.raises(ValueError, match="action"):
        score(items, [replace(good, action="dance", choice=None)])


# -- the bootstrap inside score --------------------------------------------------------------------


def random_letters(items: list[Item], seed: int) -> list[Record]:
    """A uniform random letter for every lettered request (seeded)."""
    rng = np.random.default_rng(seed)
    out = []
    for it in items:
        if it.options is None:
            out.append(reference(it))
            continue
        pick = str(rng.choice(sorted(it.options)))
        if it.request == "select":
            out.append(record(it, action=it.options[pick]))
        elif it.request in ANSWERS:
            out.append(record(it, answer=it.options[pick]))
        else:
            out.append(record(it, choice=pick, value=float(it.options[pick])))
    return out


@pytest.fixture(scope="module")
def random_run(items: list[Item]) -> list[Record]:
    return random_letters(items, seed=5)


def test_random_letters_land_near_one_fifth(items: list[Item], random_run: list[Record]) -> None:
    s = score(items, random_run)
    lo, hi = s["min_cost_choice"]["ci"]
    assert lo <= 0.2 <= hi
    lo, hi = s["variants"]["variant_base"]["min_cost_choice"]["ci"]
    assert lo <= 0.2 <= hi
    for key in HEADLINE:
        est = s[key]
        assert est["ci"][0] <= est["value"] <= est["ci"][1], key


def test_seeds_reproduce_and_change_intervals(items: list[Item], random_run: list[Record]) -> None:
    a = score(items, random_run, n_boot=300, seed=11)
    b = score(items, random_run, n_boot=300, seed=11)
    c = score(items, random_run, n_boot=300, seed=12)
    assert a == b
    assert a["min_cost_choice"]["value"] == c["min_cost_choice"]["value"]
    # a product's interval is the percentiles of the resamples, so another seed moves it (a rate's,
    # and a cost's, may be its seed-free cluster interval when that is the wider one)
    assert a["pecs"]["value"] == c["pecs"]["value"] is not None
    assert a["pecs"]["ci"] != c["pecs"]["ci"]
    assert c["meta"]["seed"] == 12 and c["meta"]["n_boot"] == 300


# -- answers ---------------------------------------------------------------------------------------


def test_hidden_alternatives_average_exactly_one_half(items: list[Item]) -> None:
    s = score(items, run(items, answer=lambda it: "yes"), n_boot=200)
    hidden = s["hidden_alternatives"]
    assert hidden["pairs"] == 576
    assert hidden["definite_correct"]["value"] == 0.5 and hidden["definite_correct"]["n"] == 1152
    assert hidden["identical_response_rate"]["value"] == 1.0
    assert s["answers"]["unknown_answer"]["value"] == 0.0


PECS_STRATEGIES: dict[str, Callable[[Item, int], str]] = {
    "always abstain": lambda it, k: "undetermined",
    "never abstain": lambda it, k: "yes",
    "random 50%": lambda it, k: "undetermined" if k % 2 else "no",
    "perfect answerer": lambda it, k: it.reference_answer if it.resolved else "no",
    "inverse oracle": lambda it, k: "undetermined" if it.resolved else "yes",
}


@pytest.mark.parametrize("name", list(PECS_STRATEGIES))
def test_degenerate_strategies_score_zero_pecs(items: list[Item], name: str) -> None:
    """Seed 002, appendix M: PECS is 0 when Acc = 0 or AbsRec <= FalseAbs. The random strategy
    abstains on every other item of each group (controls, voids), so both rates are exactly 1/2."""
    rule = PECS_STRATEGIES[name]
    position = {True: 0, False: 0}
    records = []
    for it in items:
        if it.request in ("answer_initial", "answer_after_test"):
            k = position[bool(it.resolved)]
            position[bool(it.resolved)] += 1
            records.append(record(it, answer=rule(it, k)))
    s = score(items, records, n_boot=200)
    assert s["pecs"]["value"] == 0.0 and s["pecs"]["n"] == 5184


def test_confidence_noise_scores_about_zero_pecs(items: list[Item]) -> None:
    rng = np.random.default_rng(3)
    records = [
        record(it, answer=str(rng.choice(["yes", "no", "undetermined"])))
        for it in items
        if it.request in ("answer_initial", "answer_after_test")
    ]
    s = score(items, records, n_boot=500)
    assert s["pecs"]["value"] < 0.03 and s["pecs"]["ci"][0] == 0.0
    assert abs(s["pecs_abs_rec"]["value"] - s["pecs_false_abs"]["value"]) < 0.06


# -- repricing, variants, systems ------------------------------------------------------------------


def test_repricing_credits_the_report_at_price_one(items: list[Item]) -> None:
    s = score(items, run(items, select=lambda it: "stop" if it.resolved else "combined_report"))
    r = s["repricing"]
    assert r["1"]["choice_accuracy"]["value"] == 1.0
    for price in ("2", "3", "5"):
        assert r[price]["choice_accuracy"]["value"] == 0.5
    assert [r[p]["mean_cost"]["value"] for p in ("1", "2", "3", "5")] == [0.5, 1.0, 1.5, 2.5]
    assert r["2"]["choice_accuracy"] == s["min_cost_choice"]


def test_variant_differences_are_paired(items: list[Item]) -> None:
    s = score(items, run(items, select=lambda it: "stop"))
    v = s["variants"]
    assert v["families"] == 72
    # every family is exactly 2/4 correct: every resample gives 0.5, which used to print [0.5, 0.5];
    # the rate's interval is now Clopper-Pearson 144/288 (no family-level variance: n_eff = n)
    base = v["variant_base"]["min_cost_choice"]
    assert base["value"] == 0.5 and base["n"] == 288
    assert base["ci"] == pytest.approx([0.440_0, 0.560_0], abs=1e-4)
    # every variant is answered like the reference: +50 points in every resample, which printed
    # +50 [+50, +50]; the variant is at 100%, so the MOVER interval widens it (bench.level_differences)
    diff = v["text_readings"]["difference"]
    assert diff["value"] == 0.5 and diff["n"] == 288 and diff["ci"][0] < 0.5 < diff["ci"][1]
    assert v["no_initial_test"]["min_cost_choice"]["value"] == 1.0


def test_every_interval_says_how_many_families_it_rests_on(ref_scores: dict) -> None:
    """Issue 52 item 5: a per-system row rests on its system's families, a variant and its paired
    difference on the 72 subset families, PECS on every family holding its parts; a value fixed by
    design has no interval and no count. scores.md prints each beside n."""
    s = ref_scores
    systems = s["by_system"]
    assert len(systems) >= 2
    assert sum(row["min_cost_choice"]["n_families"] for row in systems.values()) == 144
    assert all(row["min_cost_choice"]["n_families"] < 144 for row in systems.values())
    v = s["variants"]
    assert v["variant_base"]["min_cost_choice"]["n_families"] == 72
    assert v["text_readings"]["difference"]["n_families"] == 72
    assert s["pecs_acc"]["n_families"] == 144
    fixed = s["policies"]["always_stop"]["mean_cost"]
    assert fixed.get("fixed_by_design") and "n_families" not in fixed
    system, row = next(iter(systems.items()))
    text = scores_markdown(s, "reference")
    assert f"(n={row['min_cost_choice']['n']} in {row['min_cost_choice']['n_families']} families)" in text
    assert "(n=288 in 72 families)" in text  # the variants table


def test_variant_repeat_uses_the_matched_base_test(items: list[Item]) -> None:
    records = [
        record(it, action=repeat_test(it)) if it.variant is not None else reference(it)
        for it in items
    ]
    v = score(items, records, n_boot=200)["variants"]
    for name in ("text_readings", "no_initial_test", "reworded"):
        assert v[name]["repeat"]["value"] == 1.0 and v[name]["repeat"]["n"] == 288
        assert v[name]["min_cost_choice"]["value"] == 0.0  # repeating is never the cheapest


def test_by_system(ref_scores: dict) -> None:
    systems = ref_scores["by_system"]
    assert set(systems) == {"sliding", "bouncing", "spring"}
    for block in systems.values():
        est = block["min_cost_choice"]  # 192/192 over 48 families: Clopper-Pearson 48/48
        assert est["value"] == 1.0 and est["n"] == 192
        assert est["ci"] == pytest.approx([0.025 ** (1 / 48), 1.0], abs=1e-12)
        assert block["both_correct_image_pairs"]["n"] == 96
        assert block["resolved_and_correct"]["value"] == 1.0


# -- reports ---------------------------------------------------------------------------------------


def test_markdown_prints_percentages_with_intervals_and_n(
    ref_scores: dict, items: list[Item]
) -> None:
    text = scores_markdown(ref_scores, "reference")
    assert text.startswith("# reference")
    assert "| Minimum cost choice | 100.0 [97.5, 100.0] (n=576 in 144 families) |" in text
    assert "| Mean cost | 0.50 [0.4" in text and "[0.50, 0.50]" not in text  # a bounded mean: never a point
    for section in ("Pairs", "Policy comparison", "Repricing", "Variants", "Per system", "PECS"):
        assert f"## {section}" in text
    stop = score(items, run(items, select=lambda it: "stop"), n_boot=100)
    table = compare_markdown([("reference", ref_scores), ("stop", stop)])
    headline, pecs_block = table.strip().split("\n\n", 1)  # the headline table, then PECS per dataset
    header, _rule, *rows = headline.splitlines()
    assert header == "| measure | reference | stop |" and len(rows) == len(HEADLINE)
    assert pecs_block.startswith("PECS per dataset") and "| PECS: equal-weight mean |" in pecs_block
    assert re.search(r"\| Mean cost \| 0\.50 \[0\.4\d, 0\.5\d\] \(n=576 in 144 families\) \| 0\.00 .*\|", table)


# -- rates and means -------------------------------------------------------------------------------


def test_a_rate_takes_shares_and_a_mean_takes_costs() -> None:
    tally = Tally(FamilyBootstrap(["a", "b"], n_boot=50, seed=1))
    with pytest.raises(ValueError, match="not a share"):
        tally.rate(("cost_as_rate",), [(0, 2.0), (1, 0.0)])
    tally.rate(("rate",), [(0, True), (0, True), (1, True), (1, True)])
    tally.mean(("same",), [(0, 2.0), (1, 2.0)])
    tally.mean(("varies",), [(0, 2.0), (1, 3.0)])
    _, est = tally.resolve()
    assert est[("rate",)].value == 1.0 and est[("rate",)].ci == pytest.approx((0.025**0.5, 1.0))
    # a mean whose every unit is the same value has no interval: marked, never printed as [2, 2]
    assert est[("same",)].identical and est[("same",)].to_json()["identical_units"] is True
    assert estimate_text(est[("same",)]) == "2.000 (identical in all 2 units)"
    assert not est[("varies",)].identical and est[("varies",)].ci[0] < est[("varies",)].ci[1]


def estimates(tree: dict, path: tuple[str, ...] = ()):
    """(key, estimate) of every estimate in a scored run."""
    for k, v in tree.items():
        if isinstance(v, dict) and set(v) >= {"value", "ci", "n"}:
            yield (*path, k), v
        elif isinstance(v, dict):
            yield from estimates(v, (*path, k))


POINT = r"\[([-+]?\d+(?:\.\d+)?), \1\]"  # an interval printed as `[x, x]`
FIXED = {("policies", rule, "mean_cost") for rule in
         ("always_stop", "repeat_known", "free_fall", "test_missing", "complete_report", "random_test", "min_cost")}


def test_no_interval_of_a_perfect_run_is_a_point_unless_fixed_by_design(ref_scores: dict) -> None:
    """Every zero-width interval of the reference run is a value fixed by design (core.bootstrap):
    the costs of the rules that read no replies. The numeric block's mean log error, 0 in every
    reply when every estimate is exact, is marked identical in every unit and prints no interval
    (bench.tally). PECS and its per-dataset parts (products and differences of rates at 1 x (1 - 0))
    print no interval and say why (bench.pecs)."""
    fixed, points, identical = set(), set(), set()
    for key, est in estimates(ref_scores):
        if est["value"] is None:
            continue
        if est.get("fixed_by_design"):
            fixed.add(key)
        elif est.get("identical_units"):
            identical.add(key)
        elif est["ci"][0] is None:
            assert est["reason"], key  # no interval only with why (bench.pecs)
        elif est["ci"][1] <= est["ci"][0]:
            points.add(key)
    assert fixed == FIXED
    assert not points, points
    assert identical and all(key[-1] == "mean_log_error" for key in identical), identical
    text = scores_markdown(ref_scores, "reference")
    assert "| Random test | 75.0 [" in text and "1.25 (fixed by design, n=576)" in text
    assert "[1.25, 1.25]" not in text and "[0.00, 0.00]" not in text and "[2.00, 2.00]" not in text
    assert not list(re.finditer(POINT, text))
    assert "| 0.000 (identical in all 288 replies) (left out: none) |" in text  # the mean log error
    assert "1.000 (the same on every family resample, n=5184)" in text


def test_no_interval_of_an_imperfect_run_is_a_point(items: list[Item], random_run: list[Record]) -> None:
    """A run of random letters and ruler readings off by a few percent: no interval in scores.json
    or scores.md is a point, except the values fixed by design, which print without an interval."""
    rng = np.random.default_rng(6)
    records = [replace(r, value=r.value * float(np.exp(0.05 * rng.standard_normal())))
               if r.request == "read_ruler" else r for r in random_run]
    s = score(items, records, n_boot=300)
    for key, est in estimates(s):
        if est["value"] is not None and not est.get("fixed_by_design"):
            assert est["ci"][1] > est["ci"][0] if est["ci"][0] is not None else est["reason"], key
    assert {key for key, est in estimates(s) if est.get("fixed_by_design")} == FIXED
    text = scores_markdown(s, "random")
    assert re.search(POINT, text) is None and "(fixed by design, n=576)" in text


def test_a_design_value_is_the_same_on_every_family_resample() -> None:
    """Its "coverage": a value fixed by design is reproduced exactly by every resample, and is only
    marked fixed when every family shares it; a design value that differs between families (here a
    family of dearer decisions) is resampled as any cost and gets an interval."""
    boot = FamilyBootstrap([f"f{i:03d}" for i in range(144)], n_boot=500, seed=3)
    tally = Tally(boot)
    tally.design_mean(("random",), [(f, 1.25) for f in range(144) for _ in range(4)], 0.0, 2.0)
    tally.design_mean(("mix",), [(f, c) for f in range(144) for c in (0.0, 0.0, 1.0, 1.0)], 0.0, 2.0)
    tally.design_mean(("uneven",), [(f, 2.0 if f == 0 else 1.0) for f in range(144) for _ in range(4)], 0.0, 2.0)
    resampled, est = tally.resolve()
    for key, value in ((("random",), 1.25), (("mix",), 0.5)):
        assert est[key].fixed and est[key].value == value and est[key].n == 576
        assert np.all(resampled[key].draws == value)  # every one of the 500 resamples
        assert est[key].to_json() == {"value": value, "ci": [value, value], "n": 576, "fixed_by_design": True}
    uneven = est[("uneven",)]
    assert not uneven.fixed and uneven.ci[0] < uneven.value < uneven.ci[1]
    assert "fixed_by_design" not in uneven.to_json()
