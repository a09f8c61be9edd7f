"""The question-side voids (seed 002, Table 6: the ill-posed questions): `false_premise` (an invalid
entity, the seed's own triangle) and `unobservable` (a detail no sheet or sentence shows), opt-in items
of bench.voids checked by bench.checks_voids, with known answers from the scripted policies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evprobe.bench.generate import GenerateConfig, build, generate
from evprobe.bench.schema import ItemRow, item_problem
from evprobe.bench.voids import FALSE_ENTITY
from evprobe.experiments.cli import main

from tests.bench.edits import check_passes, check_rows, copy_bench, rewrite_items

QUESTION_VOIDS = ("false_premise", "unobservable")
ROWS = ("False-premise voids differ from their twin only in the question's subject, an entity the prompt never "
        "introduces",
        "Unobservable-detail voids differ from their twin only in what the question asks, a detail no sentence states")


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("question_voids") / "bench"
    generate(out, GenerateConfig(families_per_system=2, subset_per_cell=0, voids=("occluded", *QUESTION_VOIDS)),
             progress=False)
    return out


def _question(prompt: str) -> str:
    return next(p for p in prompt.split("\n\n") if p.startswith("Question: "))


def test_question_voids_are_their_twins_with_another_question() -> None:
    config = GenerateConfig(families_per_system=2, subset_per_cell=0)
    main_items = build(config)[1]
    items = build(GenerateConfig(families_per_system=2, subset_per_cell=0, voids=QUESTION_VOIDS))[1]
    assert [it.to_json() for it in items[: len(main_items)]] == [it.to_json() for it in main_items]  # appended only
    by_id = {it.item_id: it for it in items}
    voids = items[len(main_items):]
    assert [sum(it.void == v for it in voids) for v in QUESTION_VOIDS] == [12, 12]  # 2 a family, 6 families
    assert not any(FALSE_ENTITY in it.prompt.lower() for it in main_items)  # no prompt of the set has a triangle
    for it in voids:
        twin = by_id[it.twin_id]
        assert it.request == twin.request == "answer_initial" and it.resolved is False
        assert it.reference_answer == "undetermined" and it.options[it.reference_option] == "undetermined"
        assert it.reference_action is None and it.images == twin.images and it.options == twin.options
        before, after = twin.prompt.split(_question(twin.prompt))
        assert it.prompt.startswith(before) and it.prompt.endswith(after)  # only the question differs
        if it.void == "false_premise":  # the seed's example entity, the threshold still printed
            assert _question(it.prompt).startswith("Question: The triangle ") and it.threshold == twin.threshold
            assert _question(it.prompt).split(" ", 3)[3] == _question(twin.prompt).split(" ", 3)[3]
        else:
            assert _question(it.prompt).endswith("painted red?") and it.threshold is None
            assert not any(c.isdigit() for c in _question(it.prompt).rpartition(". ")[2])


def test_check_passes_them_with_their_rows(bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    checked = check_passes(bench, tmp_path, capsys, ROWS)
    rows = {c["check"]: c for c in json.loads((checked / "checks.json").read_text())["checks"]}
    assert all(rows[r]["result"] == "12/12" for r in ROWS)


def _set_prompt(bench: Path, void: str, prompt_of) -> None:
    def edit(rows: list[dict[str, Any]]) -> None:
        twins = {r["item_id"]: r for r in rows}
        row = next(r for r in rows if r.get("void") == void)
        row["prompt"] = prompt_of(row, twins[row["twin_id"]])

    rewrite_items(bench, edit)


PLANTED = [
    ("a false premise that names the twin's own object", "false_premise", lambda r, t: t["prompt"], ROWS[0]),
    ("a false premise whose entity the prompt introduces", "false_premise",
     lambda r, t: r["prompt"].replace("Ideal assumptions:", "A triangle lies beside it. Ideal assumptions:"), ROWS[0]),
    ("an unobservable detail that asks the twin's threshold question", "unobservable", lambda r, t: t["prompt"],
     ROWS[1]),
    ("an unobservable detail the prompt states", "unobservable",
     lambda r, t: r["prompt"].replace("Ideal assumptions:", "Every face is painted red. Ideal assumptions:"), ROWS[1]),
]


@pytest.mark.parametrize("what, void, prompt_of, row", PLANTED, ids=[p[0] for p in PLANTED])
def test_each_planted_fault_fails_its_row(bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture, what: str,
                                          void: str, prompt_of, row: str) -> None:
    copy = copy_bench(bench, tmp_path)
    _set_prompt(copy, void, prompt_of)
    code, failed, _ = check_rows(copy, capsys)
    assert code == 1 and failed == {row}, what


def test_the_schema_refuses_a_settling_field_on_them() -> None:
    items = build(GenerateConfig(families_per_system=1, subset_per_cell=0, voids=QUESTION_VOIDS))[1]
    premise = next(it for it in items if it.void == "false_premise").to_json()
    unobserved = next(it for it in items if it.void == "unobservable").to_json()
    assert item_problem(ItemRow.model_validate(premise)) is None
    assert item_problem(ItemRow.model_validate(unobserved)) is None
    assert "must be null for a false_premise void item" in item_problem(
        ItemRow.model_validate({**premise, "reference_action": "stop"}))
    assert "must be null for a unobservable void item" in item_problem(
        ItemRow.model_validate({**unobserved, "threshold": 0.5}))


@pytest.mark.parametrize("policy, false_premise", [("exact-reader", 0.0), ("reference", 1.0)])
def test_scripted_policies_give_their_known_answers(bench: Path, tmp_path: Path, policy: str,
                                                    false_premise: float) -> None:
    """The exact reader answers from the pixels and the printed threshold: no threshold is asked of an
    unobservable detail, so it abstains on every one; a false premise still prints its threshold and the
    reader checks numbers, not premises, so it answers every one as the twin (AbsRec 0). The reference
    policy replies each item's label: it abstains on both."""
    run = tmp_path / "run"
    assert main(["run", "--model", f"policy:{policy}", "--bench", str(bench), "--out", str(run),
                 "--requests", "answer_initial,voids"]) == 0
    assert main(["score", str(run)]) == 0
    voids = json.loads((run / "scores.json").read_text())["voids"]
    assert voids["types"] == {"occluded": "visual", "false_premise": "textual", "unobservable": "textual"}
    assert voids["unobservable"]["abs_rec"]["value"] == 1.0 and voids["unobservable"]["abs_rec"]["n"] == 12
    assert voids["false_premise"]["abs_rec"]["value"] == false_premise
    assert voids["false_premise"]["abs_rec"]["ci"][0] < voids["false_premise"]["abs_rec"]["ci"][1]  # never a point
    for void in QUESTION_VOIDS:
        assert voids[void]["twin_acc"]["value"] == 1.0 and voids[void]["twin_false_abs"]["value"] == 0.0
    # the ill-posed vs visual contrast, paired: the exact reader abstains on every occluded answer too
    gap = voids["gap"]
    assert gap["false_premise_minus_visual"]["value"] == false_premise - 1.0
    assert gap["unobservable_minus_visual"]["value"] == 0.0 and gap["unobservable_minus_visual"]["ci"][0] < 0.0
    assert "reason" in gap["textual_minus_visual"]  # no unstated voids in this bench
    assert f"false_premise minus visual: {100 * (false_premise - 1.0):+.1f} [" in (run / "scores.md").read_text()
    subs = voids["by_sub_scenario"]  # appendix K per sub-scenario, every question-side type
    assert len(subs) == 6 and all(c["false_premise"]["abs_rec"]["value"] == false_premise for c in subs.values())
