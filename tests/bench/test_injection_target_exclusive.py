"""The target-exclusive level (-1, seed 003 sections 4.1 and 4.4): each prompt is level 0's less the
one clause that names the ruler and the marker dot; its pairs hold; `evprobe check` passes it and
fails a prompt that names a reference; the main items are unchanged by asking for it; the scripted
policies and the organism reply to it as to level 0 (they read the images), so its known answer
is level 0's values."""

from __future__ import annotations

import json
import re
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from tests.bench.edits import rewrite_items

from evprobe.bench.clips import ClipSpec
from evprobe.bench.family import Family
from evprobe.bench.generate import GenerateConfig, build, generate
from evprobe.bench.injection import (
    INJECTED_REQUESTS,
    TARGET_EXCLUSIVE,
    level_prompt,
    parse_level,
    target_exclusive_prompt,
)
from evprobe.bench.items import Item
from evprobe.bench.runner import RunConfig, run
from evprobe.experiments.cli import main
from evprobe.experiments.scoring_io import score_run

TE = TARGET_EXCLUSIVE
# Words that point at the evidence's reference objects or a panel's place (seed 003: "no textual
# references to background reference objects such as coins, environmental markers, or relative positions").
POINTERS = re.compile(r"\bruler\b|\bdot\b|\bmarker\b|\bmarked\b|magenta|last (?:panel|frame)|bottom right|Where to look",
                      re.I)


@pytest.fixture(scope="module", params=[None, 8], ids=["sheets", "clips"])
def te_items(request: pytest.FixtureRequest) -> tuple[list[Family], list[Item]]:
    clip = None if request.param is None else ClipSpec(frames=request.param)
    return build(GenerateConfig(families_per_system=2, subset_per_cell=1, injection_levels=(TE, 1), numeric=True,
                                clip=clip))


def test_each_prompt_is_level_0_less_the_reference_clause(te_items) -> None:
    _, items = te_items
    by_id = {it.item_id: it for it in items}
    seen: defaultdict[str, int] = defaultdict(int)
    for it in items:
        if it.injection != TE:
            continue
        base = by_id[it.item_id.removesuffix(".L-1")]
        assert base.injection == 0 and base.images == it.images and base.options == it.options
        assert POINTERS.search(base.prompt)  # level 0 names the ruler and the dot ...
        assert not POINTERS.search(it.prompt), it.item_id  # ... the target-exclusive level names none
        changed = [(a, b) for a, b in zip(base.prompt.split("\n"), it.prompt.split("\n"), strict=True) if a != b]
        assert len(changed) == 1  # one line, and in it only the clause
        a, b = changed[0]
        head = b.removesuffix(".")
        assert a.startswith(head) and "ruler in metres" in a[len(head):], (a, b)
        assert it.decision_id == (None if base.decision_id is None else base.decision_id + ".L-1")
        seen[it.request] += 1
    assert set(seen) == set(INJECTED_REQUESTS)


def test_the_target_and_the_measurements_stay(te_items) -> None:
    """What is asked and what each option buys are untouched: the question, the tests' lines."""
    _, items = te_items
    it = next(x for x in items if x.injection == TE and x.request == "select")
    lines = it.prompt.split("\n")
    assert any(x.startswith("Question: ") for x in lines)
    assert sum(1 for x in lines if x.startswith("- ") and " test: " in x) == 3


def test_pairs_hold(te_items) -> None:
    _, items = te_items
    image, threshold, estimates = defaultdict(list), defaultdict(list), defaultdict(list)
    for it in items:
        if it.injection != TE:
            continue
        if it.decision_id is not None:
            image[it.image_pair_id].append(it)
            threshold[it.threshold_pair_id].append(it)
        elif it.image_pair_id:
            estimates[it.image_pair_id].append(it)
    assert image and all(len(v) == 2 for v in image.values())
    for a, b in image.values():
        assert a.history != b.history and a.images != b.images and a.prompt == b.prompt
    for a, b in threshold.values():
        qa, qb = (f"{x.threshold:.6g}" for x in (a, b))
        assert a.threshold != b.threshold and a.prompt.replace(qa, "{q}") == b.prompt.replace(qb, "{q}")
    assert estimates and all(len({x.prompt for x in v}) == 1 and len(v) >= 2 for v in estimates.values())


def test_asking_for_the_level_leaves_the_main_items_alone() -> None:
    config = dict(families_per_system=2, subset_per_cell=1, numeric=True)
    _, main_items = build(GenerateConfig(**config))
    _, with_te = build(GenerateConfig(**config, injection_levels=(TE,)))
    assert [it for it in with_te if it.injection == 0] == main_items


def test_a_prompt_without_the_clause_once_is_refused(te_items) -> None:
    _, items = te_items
    it = next(x for x in items if x.injection == 0 and x.request == "select")
    assert target_exclusive_prompt(it.prompt) != it.prompt
    with pytest.raises(ValueError, match="holds it 0 times"):
        target_exclusive_prompt(target_exclusive_prompt(it.prompt))
    clause = re.search(r"; every .*? position\.", it.prompt).group(0)
    with pytest.raises(ValueError, match="holds it 2 times"):
        target_exclusive_prompt(it.prompt + clause)
    with pytest.raises(ValueError, match="no injection level 7"):
        level_prompt(None, it, 7)  # type: ignore[arg-type]


def test_the_command_line_names_the_level() -> None:
    assert parse_level("te") == parse_level(" TE ") == parse_level("-1") == TE
    assert parse_level("2") == 2
    with pytest.raises(ValueError):
        parse_level("t")


@pytest.fixture(scope="module")
def te_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("te") / "bench"
    main(["generate", "--out", str(out), "--families-per-system", "2", "--subset-per-cell", "0",
          "--injection", "te,1", "--quiet"])
    return out


def _failed(bench: Path, capsys) -> set[str]:
    main(["check", str(bench)])
    capsys.readouterr()
    return {c["check"] for c in json.loads((bench / "checks.json").read_text())["checks"] if not c["passed"]}


def test_check_passes_the_level_and_catches_a_named_reference(te_bench: Path, tmp_path: Path, capsys) -> None:
    assert json.loads((te_bench / "bench.json").read_text())["injection_levels"] == [TE, 1]
    ok = tmp_path / "ok"
    shutil.copytree(te_bench, ok)
    assert _failed(ok, capsys) == set()
    rows = json.loads((ok / "checks.json").read_text())["checks"]
    assert any(r["check"] == "Target-exclusive prompts are level 0's less the reference objects" for r in rows)

    bad = tmp_path / "bad"
    shutil.copytree(te_bench, bad)

    def name_the_ruler(rows: list[dict]) -> None:  # one target-exclusive selection points at the ruler
        row = next(r for r in rows if r.get("injection") == TE and r["request"] == "select" and r["history"] == 1)
        row["prompt"] = row["prompt"].replace("Options:", "Read the ruler in the last panel.\n\nOptions:")

    rewrite_items(bad, name_the_ruler)
    assert _failed(bad, capsys) == {
        "Target-exclusive prompts are level 0's less the reference objects",
        "Level image pairs share every prompt byte but the history",
        "Level threshold pairs differ only in the threshold",
    }


def test_a_level_0_prompt_under_the_level_fails_the_check(te_bench: Path, tmp_path: Path, capsys) -> None:
    """The level's prompt left as level 0's (the clause not removed) is caught, pairs intact."""
    bad = tmp_path / "bad"
    shutil.copytree(te_bench, bad)

    def restore(rows: list[dict]) -> None:
        base = {r["item_id"]: r for r in rows if not r.get("injection")}
        for r in rows:
            if r.get("injection") == TE:
                r["prompt"] = base[r["item_id"].removesuffix(".L-1")]["prompt"]

    rewrite_items(bad, restore)
    assert _failed(bad, capsys) == {"Target-exclusive prompts are level 0's less the reference objects"}


@pytest.mark.parametrize("policy", ["exact-reader", "always-stop", "complete-report"])
def test_scripted_policies_score_the_level_as_level_0(te_bench: Path, tmp_path: Path, policy: str) -> None:
    """Known answer: a scripted policy reads the images, never the pointer, so level -1 scores as
    level 0 and their paired difference is exactly 0 (with an interval that is not a point)."""
    out = tmp_path / policy
    run(RunConfig(model=f"policy:{policy}", bench=str(te_bench), out=str(out)), progress=False)
    scores, _ = score_run(out, n_boot=100)
    te = scores["injection"]["levels"][str(TE)]
    for name in ("min_cost_choice", "stop_if_enough", "test_if_needed", "resolved_and_correct"):
        assert te[name]["value"] == scores[name]["value"] and te[name]["n"] == scores[name]["n"]
    assert te["min_cost_choice"]["n"] == 24
    diff = scores["injection"]["differences"][str(TE)]["min_cost_choice"]
    assert diff["value"] == 0.0 and diff["ci"][0] < 0.0 < diff["ci"][1]


def test_the_organism_reads_no_sheet_at_the_level(te_bench: Path) -> None:
    """Known answer on the organism: its eye looks for the dot the prompt names (organism.reader:
    the marker's colour picks the drawing style), so at level -1, where no dot is named, it sees
    every sheet but reads no value, and every other fact is level 0's. The organism has the seed's
    deficit by construction: it uses only the evidence it is pointed to."""
    from dataclasses import replace

    from evprobe.bench.manifest import load_item_images, read_items
    from evprobe.organism.reader import read_facts

    items = read_items(te_bench)
    by_id = {it.item_id: it for it in items}
    chosen = [it for it in items if it.injection == TE and it.request in ("select", "answer_initial")][::3]
    for it in chosen:
        images = load_item_images(te_bench, it.images)
        te, base = read_facts(it.prompt, images), read_facts(by_id[it.item_id.removesuffix(".L-1")].prompt, images)
        assert te is not None and base is not None
        assert all(value is not None for _, value in base.seen) and all(value is None for _, value in te.seen)
        assert replace(te, seen=base.seen) == base
    assert len(chosen) >= 8


def test_the_commands_run_and_report_the_level(te_bench: Path, tmp_path: Path, capsys) -> None:
    """`evprobe run --injection=-1,0` selects the level; `evprobe score` prints the V-IRD tables
    (bench.ladder_report) under the injection section, and a run of the main items alone prints none."""
    out = tmp_path / "run"
    main(["run", "--model", "policy:exact-reader", "--bench", str(te_bench), "--out", str(out),
          "--injection=-1,0", "--requests", "select"])
    ids = [json.loads(line)["item_id"] for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(ids) == 48 and sum(i.endswith(".L-1") for i in ids) == 24
    main(["score", str(out)])
    md = (out / "scores.md").read_text()
    for title in ("Level minus level -1 (target-exclusive", "Mean over tasks (seed 003", "Prerequisite filter",
                  "Failure stages (seed 003"):
        assert title in md, title
    main_bench, main_only = tmp_path / "main_bench", tmp_path / "main"
    main(["generate", "--out", str(main_bench), "--families-per-system", "1", "--subset-per-cell", "0", "--quiet"])
    main(["run", "--model", "policy:exact-reader", "--bench", str(main_bench), "--out", str(main_only),
          "--requests", "select"])
    main(["score", str(main_only)])
    capsys.readouterr()
    text = (main_only / "scores.md").read_text()
    assert "Mean over tasks" not in text and "injection" not in json.loads((main_only / "scores.json").read_text())
