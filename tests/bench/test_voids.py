"""Voids as matched pairs (bench.voids; seed 002, sections 3.2 and 5.2): what is generated, what
`evprobe check` verifies (each check failing on the fault it is for), how the exact reader answers,
and what the scorer reports, on planted behaviour with known answers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evprobe.bench.generate import GenerateConfig, build, generate
from evprobe.bench.items import Item
from evprobe.bench.manifest import read_items
from evprobe.bench.records import Record
from evprobe.bench.runner import select_items
from evprobe.bench.schema import ItemRow, item_problem
from evprobe.bench.scoring import score
from evprobe.bench.score_report import scores_markdown
from evprobe.bench.voids import VOID_TYPES, check_voids
from evprobe.core.errors import InputError
from evprobe.experiments.cli import main

from tests.bench.edits import check_passes, check_rows, copy_bench, rewrite_items
from tests.bench.test_scoring import invalid, record

CONFIG = GenerateConfig(families_per_system=2, subset_per_cell=0, voids=("occluded", "unstated"))


@pytest.fixture(scope="module")
def void_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("voids") / "bench"
    generate(out, CONFIG, progress=False)
    return out


@pytest.fixture(scope="module")
def items() -> list[Item]:
    return build(GenerateConfig(voids=("occluded", "unstated")))[1]  # the main set with voids, in memory


# -- generation ---------------------------------------------------------------------------------------


def test_voids_are_appended_and_leave_the_main_items_byte_for_byte(items: list[Item]) -> None:
    main_items = build(GenerateConfig())[1]
    assert [it.to_json() for it in items[: len(main_items)]] == [it.to_json() for it in main_items]
    voids = items[len(main_items):]
    assert all(it.void in VOID_TYPES for it in voids)
    # per family: 2 sufficient decisions x (occluded select, occluded answer, unstated answer)
    assert len(voids) == 144 * 6 == 864
    assert sum(it.void == "occluded" for it in voids) == 576 and sum(it.void == "unstated" for it in voids) == 288
    by_id = {it.item_id: it for it in items}
    for it in voids:
        twin = by_id[it.twin_id]
        assert twin.void is None and twin.resolved is True and twin.request == it.request
        assert it.item_id == f"{twin.item_id}.void-{it.void}" and it.decision_id == f"{twin.decision_id}.void-{it.void}"
        assert it.resolved is False and it.reference_answer == "undetermined"
        assert it.image_pair_id is None and it.threshold_pair_id is None
        if it.void == "occluded":
            assert it.prompt == twin.prompt and it.images == [f"images/{it.family_id}/{twin.images[0].split('/')[-1][:-4]}.occluded.png"]
            # nothing known: at the default prices the combined report is the one settling action
            assert it.reference_action == "combined_report" and it.threshold == twin.threshold
        else:
            assert it.images == twin.images and it.threshold is None and it.reference_action is None
            assert " more than q " in it.prompt and f"{twin.threshold:g}"[:4] not in it.prompt.split("Question: ")[1].split("\n")[0]
    # without --voids: no void field in any row, so items.jsonl is the main set's
    assert all("void" not in it.to_json() and "twin_id" not in it.to_json() for it in main_items)


def test_a_void_type_that_these_worlds_cannot_make_is_refused_with_why() -> None:
    with pytest.raises(InputError, match="sensitivity: not built for these worlds: these worlds are discrete"):
        build(GenerateConfig(families_per_system=1, subset_per_cell=0, voids=("sensitivity",)))
    with pytest.raises(InputError, match="--voids takes void types among occluded, unstated, false_premise, unobservable, got .blur."):
        build(GenerateConfig(families_per_system=1, subset_per_cell=0, voids=("blur",)))
    with pytest.raises(ValueError, match="twice"):
        check_voids(("occluded", "occluded"))
    assert check_voids(("unstated", "occluded")) == ("occluded", "unstated")  # one order, whatever the flag's


def test_the_cli_writes_the_block_and_bench_json_records_it(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "b"
    assert main(["generate", "--out", str(out), "--families-per-system", "1", "--subset-per-cell", "0",
                 "--voids", "unstated", "--quiet"]) == 0
    meta = json.loads((out / "bench.json").read_text())
    assert meta["voids"] == ["unstated"] and not list(out.glob("images/*/*.occluded.png"))
    assert main(["generate", "--out", str(tmp_path / "c"), "--families-per-system", "1", "--voids", "sensitivity",
                 "--quiet"]) == 2
    assert "not built for these worlds" in capsys.readouterr().err
    # one parser of the flag (bench.voids.parse_voids, quickstart's too): either order, one benchmark
    for name, flag in (("d", "unstated, occluded"), ("e", "occluded,unstated")):
        assert main(["generate", "--out", str(tmp_path / name), "--families-per-system", "1", "--subset-per-cell", "0",
                     "--voids", flag, "--quiet"]) == 0
    assert (tmp_path / "d" / "items.jsonl").read_bytes() == (tmp_path / "e" / "items.jsonl").read_bytes()
    assert json.loads((tmp_path / "d" / "bench.json").read_text())["voids"] == ["occluded", "unstated"]
    assert main(["generate", "--out", str(tmp_path / "f"), "--families-per-system", "1", "--voids", "occluded,occluded",
                 "--quiet"]) == 2
    assert "names a void type twice" in capsys.readouterr().err


# -- evprobe check --------------------------------------------------------------------------------------

VOID_ROWS = ("Voids name a sufficient twin of the main set", "Visual voids differ from their twin only in the image",
             "Textual voids differ from their twin only in the threshold", "Occluded sheets show no marker",
             "Occluded sheets are identical across histories")


def test_check_passes_the_void_block_with_its_rows(void_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bench = check_passes(void_bench, tmp_path, capsys, VOID_ROWS)
    checks = json.loads((bench / "checks.json").read_text())
    assert checks["void_items"] == 36 and checks["identical_occluded"] == [6, 6]


def _edit(bench: Path, pick, **changes: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def edit(rows: list[dict[str, Any]]) -> None:
        row = next(r for r in rows if pick(r))
        row.update(changes)
        found.update(row)

    rewrite_items(bench, edit)
    return found


def _occluded_answer(r: dict[str, Any]) -> bool:
    return r.get("void") == "occluded" and r["request"] == "answer_initial"


def _label_sufficient(bench: Path) -> None:
    def edit(rows: list[dict[str, Any]]) -> None:
        row = next(r for r in rows if _occluded_answer(r))
        row.update(resolved=True, reference_answer="yes",
                   reference_option=next(k for k, v in row["options"].items() if v == "yes"))

    rewrite_items(bench, edit)


PLANTED = [
    # (what is planted, the edit, the rows that must fail)
    ("a void labelled sufficient", lambda b: _label_sufficient(b),
     {"Oracle sufficiency R(H, q) (resolved)", "Oracle answers (reference_answer, reference_option)"}),
    ("a visual void whose prompt is not its twin's",
     lambda b: _edit(b, _occluded_answer, prompt=next(
         r for r in (json.loads(x) for x in (b / "items.jsonl").read_text().splitlines())
         if _occluded_answer(r))["prompt"] + "\n\nLook closely."),
     {"Visual voids differ from their twin only in the image"}),
    ("a textual void that still states its threshold",
     lambda b: _edit(b, lambda r: r.get("void") == "unstated", prompt=next(
         r for r in (json.loads(x) for x in (b / "items.jsonl").read_text().splitlines())
         if r.get("void") == "unstated")["prompt"].replace(" q ", " 0.5 ")),
     {"Textual voids differ from their twin only in the threshold"}),
    ("a twin whose evidence does not settle the question",
     lambda b: _edit(b, _occluded_answer, twin_id=next(
         r for r in (json.loads(x) for x in (b / "items.jsonl").read_text().splitlines())
         if r["request"] == "answer_initial" and r["resolved"] is False and r.get("void") is None)["item_id"]),
     {"Voids name a sufficient twin of the main set", "Items recomputed from families"}),
]


@pytest.mark.parametrize("what, plant, rows", PLANTED, ids=[p[0] for p in PLANTED])
def test_each_planted_fault_fails_its_rows(void_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                           what: str, plant, rows: set[str]) -> None:
    bench = copy_bench(void_bench, tmp_path)
    plant(bench)
    code, failed, _ = check_rows(bench, capsys)
    assert code == 1 and failed == rows, what


def test_an_occluded_sheet_that_shows_its_marker_fails_both_pixel_rows(void_bench: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    bench = copy_bench(void_bench, tmp_path)
    occluded = sorted(bench.glob("images/*/*.occluded.png"))[0]
    shutil.copyfile(occluded.with_name(occluded.name.replace(".occluded", "")), occluded)  # the sheet uncovered
    code, failed, out = check_rows(bench, capsys)
    assert code == 1 and failed == {"Occluded sheets show no marker", "Occluded sheets are identical across histories"}
    assert occluded.relative_to(bench).as_posix() in out


# -- reading them ----------------------------------------------------------------------------------------


def test_void_items_are_selected_only_by_name(void_bench: Path) -> None:
    every = read_items(void_bench)
    assert not any(it.void for it in select_items(every, ("select", "answer_initial"), None))
    assert {it.void for it in select_items(every, ("voids",), None)} == {"occluded", "unstated"}
    assert {it.void for it in select_items(every, ("void-unstated",), None)} == {"unstated"}
    assert len(select_items(every, None, None, None)) == len(every)  # `evprobe run`'s default: everything


def test_the_schema_refuses_a_half_void_row_in_one_line(items: list[Item]) -> None:
    void = next(it for it in items if it.void == "unstated").to_json()
    assert item_problem(ItemRow.model_validate(void)) is None
    assert "set together" in item_problem(ItemRow.model_validate({**void, "twin_id": None}))
    assert "must be null for an unstated-threshold void" in item_problem(ItemRow.model_validate({**void, "threshold": 0.5}))
    select = next(it for it in items if it.request == "select" and it.void is None).to_json()
    bad = {**select, "void": "unstated", "twin_id": select["item_id"]}
    assert "applies to base answer_initial items only" in item_problem(ItemRow.model_validate(bad))


def test_the_exact_reader_abstains_on_every_void_and_answers_every_twin(void_bench: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert main(["run", "--model", "policy:exact-reader", "--bench", str(void_bench), "--out", str(run)]) == 0
    assert main(["score", str(run)]) == 0
    voids = json.loads((run / "scores.json").read_text())["voids"]
    for void in CONFIG.voids:
        assert voids[void]["abs_rec"]["value"] == 1.0 and voids[void]["twin_acc"]["value"] == 1.0
        assert voids[void]["twin_false_abs"]["value"] == 0.0
    assert voids["occluded"]["select_min_cost"]["value"] == 1.0 and voids["occluded"]["select_stop"]["value"] == 0.0
    assert len(voids["by_sub_scenario"]) == 6 and all(  # appendix K: every sub-scenario's AR and AR_ill
        cell[v]["abs_rec"]["value"] == 1.0 and cell[v]["abs_rec"]["n"] == 2  # 1 family: its 2 voids
        for cell in voids["by_sub_scenario"].values() for v in CONFIG.voids)
    assert "## Voids (seed 002, sections 3.2 and 5.2)" in (run / "scores.md").read_text()


# -- scoring ----------------------------------------------------------------------------------------------


def planted(items: list[Item], rng: np.random.Generator) -> list[Record]:
    """Replies with known void behaviour: every main item answered by its reference; on textual
    voids the model abstains, on visual voids it copies its twin's answer (it ignores the occluder),
    except one reply in 10 that is unreadable (invalid: kept in the denominators)."""
    by_id = {it.item_id: it for it in items}
    out = []
    for it in items:
        if it.request not in ("select", "answer_initial"):
            continue
        if it.void is None:
            out.append(record(it, action=it.reference_action) if it.request == "select" else
                       record(it, answer=it.reference_answer))
        elif it.void == "unstated":
            out.append(record(it, answer="undetermined"))
        elif rng.random() < 0.1:
            out.append(invalid(it))
        else:
            twin = by_id[it.twin_id]
            out.append(record(it, action="stop") if it.request == "select" else record(it, answer=twin.reference_answer))
    return out


def test_planted_void_behaviour_is_scored_with_its_known_answers(items: list[Item]) -> None:
    recs = planted(items, np.random.default_rng(0))
    scores = score(items, recs, n_boot=500)
    main_only = score([it for it in items if it.void is None], [r for r in recs if ".void-" not in r.item_id],
                      n_boot=500)
    assert {k: v for k, v in scores.items() if k != "voids"} == main_only  # the main measures are untouched
    v = scores["voids"]
    n = 288
    assert v["unstated"]["abs_rec"] == {"value": 1.0, "ci": v["unstated"]["abs_rec"]["ci"], "n": n, "n_families": 144}
    assert v["unstated"]["abs_rec"]["ci"][0] < 1.0  # a proportion's interval: never a point
    assert v["occluded"]["abs_rec"]["value"] == 0.0 and v["occluded"]["abs_rec"]["n"] == n  # invalid: in the denominator
    assert v["occluded"]["select_stop"]["value"] == pytest.approx(
        sum(r.item_id.endswith("void-occluded") and r.valid and r.action == "stop" for r in recs) / n)
    gap = v["gap"]["textual_minus_visual"]
    assert gap["value"] == 1.0 and gap["ci"][0] > 0.9 and gap["ci"][1] == 1.0 and "ratio_of_points" not in v["gap"]
    # PECS per (system, void type): the occluded datasets sit at the zero boundary, the unstated at 1
    datasets = v["pecs"]["datasets"]
    assert set(datasets) == {f"{s} {t}" for s in ("sliding", "bouncing", "spring") for t in CONFIG.voids}
    assert all(datasets[f"{s} occluded"]["pecs"]["value"] == 0.0 for s in ("sliding", "bouncing", "spring"))
    assert all(datasets[f"{s} unstated"]["pecs"]["value"] == 1.0 for s in ("sliding", "bouncing", "spring"))
    assert v["pecs"]["zero_boundary"]["count"] == 3 and v["pecs"]["equal_weight_mean"]["pecs"]["value"] == 0.5
    text = scores_markdown(scores, "planted")
    assert "Textual minus visual AbsRec, in percentage points: +100.0 [" in text
    # seed 002, appendix K: per sub-scenario, the textual AR_ill is 1 and the visual AR 0 (the invalid
    # occluded replies stay in its denominator), over its 24 families' 48 voids of each type
    subs = v["by_sub_scenario"]
    assert list(subs) == list(scores["by_sub_scenario"])  # the main score's six sub-scenarios, in its order
    for cell in subs.values():
        assert cell["unstated"]["abs_rec"]["value"] == 1.0 and cell["unstated"]["abs_rec"]["ci"][0] < 1.0
        assert cell["occluded"]["abs_rec"]["value"] == 0.0 and cell["occluded"]["abs_rec"]["ci"][1] > 0.0
        assert cell["occluded"]["abs_rec"]["n"] == 48 and cell["occluded"]["abs_rec"]["n_families"] == 24
        assert cell["occluded"]["twin_acc"]["value"] == 1.0 and cell["gap"]["textual_minus_visual"]["value"] == 1.0
    assert sum(c["occluded"]["abs_rec"]["n"] for c in subs.values()) == n
    assert "| sliding, mass first | 0.0 [" in text and "Per sub-scenario (seed 002, appendix K;" in text


def test_a_void_without_its_twins_record_is_left_out_and_no_records_say_why(items: list[Item]) -> None:
    voids = [it for it in items if it.void is not None][:6]
    twins = [it for it in items if it.item_id in {v.twin_id for v in voids}]
    main_items = [it for it in items if it.void is None]
    recs = [record(it, answer="undetermined") for it in voids if it.request == "answer_initial"]
    scores = score(main_items + voids, recs, n_boot=200)  # no twin answered: no pair to score
    assert scores["voids"]["occluded"]["abs_rec"]["reason"] == "no void answer records"
    recs += [record(t, answer=t.reference_answer) for t in twins if t.request == "answer_initial"]
    scores = score(main_items + voids, recs, n_boot=200)
    assert scores["voids"]["occluded"]["abs_rec"]["n"] == 2
