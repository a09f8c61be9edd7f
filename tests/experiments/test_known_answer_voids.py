"""The organism's known answer on voids (experiments.known_answer.voids): it abstains on every void and
measures on every occluded selection; each planted fault fails the rows it must."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evprobe.bench.runner import RunConfig, run
from evprobe.experiments.known_answer.checks import known_answer_checks
from evprobe.experiments.known_answer.counts import Expectations
from evprobe.experiments.known_answer.voids import void_checks
from evprobe.experiments.scoring_io import score_run

from tests.bench.edits import rewrite_items

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _run_and_score(out: Path) -> dict:
    run(RunConfig(model="organism", bench=str(out / "bench"), out=str(out / "run"), batch_size=64), progress=False)
    scores, _ = score_run(out / "run", out / "bench", n_boot=200)
    return scores


def _quickstart_like(bench: Path, out: Path) -> Path:
    shutil.copytree(bench, out / "bench")
    (out / "bench" / "checks.json").unlink(missing_ok=True)
    return out


@pytest.fixture(scope="module")
def scored(small_void_bench: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = _quickstart_like(small_void_bench, tmp_path_factory.mktemp("ka_voids"))
    return out, _run_and_score(out)


def _failed(rows: list[dict]) -> set[str]:
    return {r.check for r in rows if r.passed is not True}


def test_the_organism_abstains_on_every_void_and_measures_on_occluded_sheets(scored: tuple[Path, dict]) -> None:
    out, scores = scored
    rows = void_checks(scores, Expectations(out).voids())
    assert len(rows) == 5 and _failed(rows) == set(), rows
    for void in ("occluded", "unstated"):
        assert scores["voids"][void]["abs_rec"]["value"] == 1.0 and scores["voids"][void]["abs_rec"]["n"] == 12
        assert scores["voids"][void]["twin_acc"]["value"] == 1.0
    assert scores["voids"]["occluded"]["select_min_cost"]["value"] == 1.0
    # the same rows join the known-answer table of a folder whose bench has voids
    result = known_answer_checks(out)
    assert {r.check for r in rows} <= {c.check for c in result.checks}


def test_no_void_rows_without_voids(scored: tuple[Path, dict]) -> None:
    out, scores = scored
    assert void_checks(scores, {}) == []
    assert void_checks({k: v for k, v in scores.items() if k != "voids"}, {}) == []


def test_voids_labelled_sufficient_fail_the_selection_row(small_void_bench: Path, tmp_path: Path) -> None:
    out = _quickstart_like(small_void_bench, tmp_path)

    def sufficient(rows: list[dict]) -> None:  # each occluded selection says the sheet settles it: stop
        for r in rows:
            if r.get("void") == "occluded" and r["request"] == "select":
                r.update(reference_action="stop", reference_option=next(k for k, v in r["options"].items() if v == "stop"))

    rewrite_items(out / "bench", sufficient)
    rows = void_checks(_run_and_score(out), Expectations(out).voids())
    assert _failed(rows) == {"measures on occluded sheets (minimum-cost choice)"}


def test_half_the_void_records_missing_fail_every_row_on_its_n(scored: tuple[Path, dict], tmp_path: Path) -> None:
    out, _ = scored
    cut = tmp_path / "cut"
    shutil.copytree(out / "bench", cut / "bench")
    shutil.copytree(out / "run", cut / "run")
    records = cut / "run" / "records.jsonl"
    lines = records.read_text().splitlines()
    families = sorted({json.loads(line)["item_id"].split(".", 1)[0] for line in lines})
    gone = set(families[::2])  # the void records of half the families: a shard never merged

    def kept(line: str) -> bool:
        item = json.loads(line)["item_id"]
        return ".void-" not in item or item.split(".", 1)[0] not in gone

    records.write_text("".join(line + "\n" for line in lines if kept(line)))
    scores, _ = score_run(cut / "run", cut / "bench", n_boot=200)
    rows = void_checks(scores, Expectations(cut).voids())
    assert _failed(rows) == {r.check for r in rows} and all("where n=" in r.measured for r in rows)
