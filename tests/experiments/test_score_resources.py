"""`evprobe score` reports what the run spent: run.json's `resources` as a short table in scores.md
and as is in scores.json; a policy run, which calls no model, says so instead of a table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evprobe.bench.runner import RunConfig, run
from evprobe.experiments.scoring_io import score_run

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _section(markdown: str) -> str:
    return markdown[markdown.index("## Resources"):]


def test_a_model_run_s_resources_are_a_table_in_its_scores(small_bench, tiny_text_folder, tmp_path) -> None:
    out = tmp_path / "run"
    run(RunConfig(model=str(tiny_text_folder), bench=str(small_bench), out=str(out), requests=("both_given",), limit=4,
                  batch_size=2), progress=False)
    res = json.loads((out / "run.json").read_text())["resources"]
    scores, markdown = score_run(out, n_boot=20)
    assert scores["resources"] == res and json.loads((out / "scores.json").read_text())["resources"] == res
    section = _section(markdown)
    assert section == _section((out / "scores.md").read_text())
    header, _, row = section.strip().splitlines()[-3:]
    cells = dict(zip([c.strip() for c in header.strip("|").split("|")], [c.strip() for c in row.strip("|").split("|")]))
    assert cells["backend"] == "hf" and cells["calls"] == "2" == str(res["calls"])
    assert cells["prompt tokens"] == str(res["prompt_tokens"]) and cells["generated tokens"] == str(res["generated_tokens"])
    assert float(cells["seconds in calls"]) == res["seconds"] > 0
    assert float(cells["generated tokens/s"]) == res["generated_tokens_per_s"]
    assert cells["peak memory"] == "NA (not measured)"  # the CPU
    # a run.json written before runs recorded resources: said, no table
    meta = json.loads((out / "run.json").read_text())
    del meta["resources"]
    (out / "run.json").write_text(json.dumps(meta))
    scores, markdown = score_run(out, n_boot=20)
    assert scores["resources"] is None and "No resources: run.json records none" in _section(markdown)


def test_a_policy_run_says_it_has_no_resources(small_bench, tmp_path) -> None:
    out = tmp_path / "policy"
    run(RunConfig(model="policy:reference", bench=str(small_bench), out=str(out), limit=20), progress=False)
    scores, markdown = score_run(out, n_boot=20)
    assert scores["resources"] is None
    section = _section(markdown)
    assert "No resources: a scripted policy makes no model calls." in section and "|" not in section
