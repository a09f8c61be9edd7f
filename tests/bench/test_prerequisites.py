"""Seed 003's prerequisite probe and filter (section 4.3; bench.prerequisites): which families are
verified, the filtered scores beside the unfiltered ones, and the cases that leave nothing to filter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evprobe.bench.generate import GenerateConfig, generate
from evprobe.bench.injection import TARGET_EXCLUSIVE
from evprobe.bench.manifest import read_items
from evprobe.bench.prerequisites import passed
from evprobe.bench.records import Record
from evprobe.bench.runner import RunConfig, run
from evprobe.bench.scoring import score
from evprobe.experiments.scoring_io import score_run


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("prereq") / "bench"
    generate(out, GenerateConfig(families_per_system=3, subset_per_cell=0, injection_levels=(TARGET_EXCLUSIVE, 1)),
             progress=False)
    return out


@pytest.fixture(scope="module")
def exact(bench: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("prereq_run") / "exact"
    run(RunConfig(model="policy:exact-reader", bench=str(bench), out=str(out)), progress=False)
    return out


def _edit(run_dir: Path, tmp_path: Path, edit) -> Path:
    out = tmp_path / "edited"
    out.mkdir()
    for f in run_dir.iterdir():
        if f.is_file():
            (out / f.name).write_bytes(f.read_bytes())
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    edit(rows)
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def test_a_model_that_passes_every_check_keeps_every_family(exact: Path) -> None:
    s, _ = score_run(exact, n_boot=100)
    block = s["injection"]["prerequisites"]
    assert block["families"] == {"verified": 9, "of": 9, "failed_recognition": 0, "failed_knowledge": 0,
                                 "unchecked": 0}
    assert block["replies_passed"] == {"read_ruler": [18, 18], "both_given": [72, 72]}
    levels = block["filtered"]["levels"]
    assert list(levels) == ["-1", "0", "1"]
    assert levels["0"]["min_cost_choice"] == s["min_cost_choice"]  # nothing filtered: the same numbers
    assert levels["1"]["min_cost_choice"] == s["injection"]["levels"]["1"]["min_cost_choice"]


def test_failed_checks_drop_their_families(bench: Path, exact: Path, tmp_path: Path) -> None:
    """Two families misread the ruler (one by an invalid reply) and a third gets a both_given answer
    wrong: 6 of 9 families are verified, and the filtered block is the score of those 6 alone."""
    items = {it.item_id: it for it in read_items(bench)}
    fams = sorted({it.family_id for it in items.values()})
    broken = {fams[0]: "ruler", fams[4]: "invalid", fams[7]: "answer"}

    def edit(rows: list[dict]) -> None:
        done = set()
        for r in rows:
            it = items[r["item_id"]]
            how = broken.get(it.family_id)
            if it.family_id in done or how is None or it.injection:
                continue
            if how in ("ruler", "invalid") and it.request == "read_ruler":
                r.update(value=2 * it.reference_value) if how == "ruler" else r.update(valid=False, value=None)
                done.add(it.family_id)
            elif how == "answer" and it.request == "both_given":
                r["answer"] = "no" if it.reference_answer == "yes" else "yes"
                done.add(it.family_id)
        assert done == set(broken)

    out = _edit(exact, tmp_path, edit)
    s, _ = score_run(out, n_boot=100)
    block = s["injection"]["prerequisites"]
    assert block["families"] == {"verified": 6, "of": 9, "failed_recognition": 2, "failed_knowledge": 1,
                                 "unchecked": 0}
    assert block["replies_passed"] == {"read_ruler": [16, 18], "both_given": [71, 72]}
    filtered = block["filtered"]["levels"]
    assert filtered["0"]["min_cost_choice"]["n"] == filtered["-1"]["min_cost_choice"]["n"] == 24
    assert filtered["0"]["min_cost_choice"]["n_families"] == 6 and s["min_cost_choice"]["n"] == 36
    kept = [it for it in items.values() if it.family_id not in broken and it.request not in ("read_ruler", "both_given")]
    ids = {it.item_id for it in kept}
    records = [Record.from_json(json.loads(line)) for line in (out / "records.jsonl").read_text().splitlines()]
    direct = score(kept, [r for r in records if r.item_id in ids], n_boot=100)
    assert filtered["1"]["resolved_and_correct"] == direct["injection"]["levels"]["1"]["resolved_and_correct"]


def test_nothing_to_filter_is_said(bench: Path, tmp_path: Path) -> None:
    out = tmp_path / "random"
    run(RunConfig(model="policy:random", bench=str(bench), out=str(out)), progress=False)
    block = score_run(out, n_boot=50)[0]["injection"]["prerequisites"]
    assert block["families"]["verified"] == 0 and "filtered" not in block
    assert block["reason"] == "no family passed every prerequisite: nothing left to score"
    selects = tmp_path / "selects"
    run(RunConfig(model="policy:exact-reader", bench=str(bench), out=str(selects), requests=("select",)),
        progress=False)
    block = score_run(selects, n_boot=50)[0]["injection"]["prerequisites"]
    assert block["reason"] == "no read_ruler and both_given records: the prerequisites are not checked"


def test_only_the_probe_items_are_checked(bench: Path) -> None:
    it = next(x for x in read_items(bench) if x.request == "select")
    with pytest.raises(ValueError, match="not a prerequisite"):
        passed(it, Record(item_id=it.item_id, model="policy:x", protocol="direct", regime="standard", request="select",
                          variant=None, family_id=it.family_id, reply="A", valid=True, route="letter", choice="A",
                          action="stop", answer=None, value=None, n_prompt_tokens=None, n_new_tokens=None,
                          seconds=0.0))
