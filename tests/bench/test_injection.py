"""The information-injection ladder (seed 003, section 4.6): each level's prompts diffed against
level 0, its relation to the text_readings variant, its pairs, the policies' analytic values at
every level, and the check rows failing on a broken level."""

from __future__ import annotations

import difflib
import json
import shutil
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from tests.bench.edits import rewrite_items, wrong_last_reading

from evprobe.bench.clips import ClipSpec
from evprobe.bench.family import Family
from evprobe.bench.generate import GenerateConfig, build, generate
from evprobe.bench.injection import GUIDANCE_OPENING, INJECTED_REQUESTS
from evprobe.bench.items import Item
from evprobe.bench.prompts import PromptBuilder, readings_text
from evprobe.bench.calibration import sheet_spec
from evprobe.bench.runner import RunConfig, run
from evprobe.experiments.cli import main
from evprobe.experiments.scoring_io import score_run


@pytest.fixture(scope="module")
def ladder() -> tuple[list[Family], list[Item]]:
    return build(GenerateConfig(families_per_system=4, subset_per_cell=1, injection_levels=(1, 2, 3), numeric=True))


def _added_lines(base: str, level: str) -> list[str]:
    """The lines `level` adds to `base`; asserts it removes and changes none."""
    diff = list(difflib.ndiff(base.split("\n"), level.split("\n")))
    assert not [d for d in diff if d.startswith("- ")], "a level removed or changed a level-0 line"
    return [d[2:] for d in diff if d.startswith("+ ")]


def test_each_level_renders_as_level_0_plus_its_own_lines(ladder) -> None:
    _, items = ladder
    by_id = {it.item_id: it for it in items}
    seen = defaultdict(int)
    for it in items:
        if not it.injection:
            continue
        base = by_id[it.item_id.removesuffix(f".L{it.injection}")]
        added = _added_lines(base.prompt, it.prompt)
        sheets = len(it.images)
        guidance = [a for a in added if a.startswith(GUIDANCE_OPENING)]
        reads = [a for a in added if a.startswith("What to read:")]
        numbers = [a for a in added if a.startswith("- panel ")]
        headers = [a for a in added if a.startswith("Readings from the ")]
        assert len(guidance) == 1  # every level points to the sheet's last panel and ruler
        assert "last panel (bottom right)" in guidance[0]
        assert len(reads) == (sheets if it.injection >= 2 else 0)  # level 2 names what to read
        assert len(numbers) == (4 * sheets if it.injection == 3 else 0)  # level 3 gives the readings
        assert len(headers) == (sheets if it.injection == 3 else 0)
        assert len(added) == len(guidance) + len(reads) + len(numbers) + len(headers) + 1  # + a blank line
        assert added[-1] == "" or "" in added
        seen[(it.request, it.injection)] += 1
    assert set(seen) == {(r, level) for r in INJECTED_REQUESTS for level in (1, 2, 3)}


@pytest.mark.parametrize("clip_frames", [None, 8], ids=["sheets", "clips"])
def test_level_3_is_the_text_readings_variant_plus_the_pointer(ladder, clip_frames: int | None) -> None:
    """On clips too (bench.clips): the variant's frame readings, the pointer to the last frame."""
    families, items = ladder if clip_frames is None else build(
        GenerateConfig(families_per_system=4, subset_per_cell=1, injection_levels=(3,), clip=ClipSpec(frames=clip_frames)))
    variant = {it.item_id.removesuffix(".text_readings"): it for it in items if it.variant == "text_readings"}
    checked = 0
    for it in items:
        if it.injection == 3 and it.request == "select" and it.item_id.removesuffix(".L3") in variant:
            without = "\n\n".join(p for p in it.prompt.split("\n\n") if not p.startswith(GUIDANCE_OPENING))
            assert without == variant[it.item_id.removesuffix(".L3")].prompt
            checked += 1
    assert checked == 4 * sum(f.in_subset for f in families) > 0
    f = next(f for f in families if not f.in_subset)  # and the same block for families outside the subset
    it = next(i for i in items if i.family_id == f.family_id and i.injection == 3 and i.request == "select")
    spec = sheet_spec(f.system, f.candidates, f.calibration, f"{f.initial}_{it.history}")
    block = readings_text(f.system, f.calibration, spec.readings, spec.kind, clip_frames)
    expected = PromptBuilder(f, clip_frames=clip_frames).select(it.threshold_level, variant="text_readings",
                                                                readings_text=block)
    assert "\n\n".join(p for p in it.prompt.split("\n\n") if not p.startswith(GUIDANCE_OPENING)) == expected


def test_pairs_hold_at_every_level(ladder) -> None:
    _, items = ladder
    for level in (0, 1, 2, 3):
        image, threshold = defaultdict(list), defaultdict(list)
        for it in items:
            # decision pairs here; the numeric estimates' groups are tests/bench/test_numeric.py's
            if it.injection == level and it.variant is None and it.request in INJECTED_REQUESTS \
                    and it.decision_id is not None:
                image[it.image_pair_id].append(it)
                threshold[it.threshold_pair_id].append(it)
        assert image and all(len(v) == 2 for v in image.values())
        for a, b in image.values():
            assert a.history != b.history and a.images != b.images
            if level < 3:
                assert a.prompt == b.prompt  # every prompt byte shared
            else:  # only the readings, the history written as numbers, differ
                strip = lambda p: [x for x in p.split("\n") if not x.startswith("- panel ")]  # noqa: E731
                assert strip(a.prompt) == strip(b.prompt) and a.prompt != b.prompt
        for a, b in threshold.values():
            assert a.threshold != b.threshold and a.images == b.images and a.options == b.options
            qa, qb = (f"{x.threshold:.6g}" for x in (a, b))
            assert a.prompt.replace(qa, "{q}") == b.prompt.replace(qb, "{q}")


@pytest.fixture(scope="module")
def ladder_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ladder") / "bench"
    generate(out, GenerateConfig(families_per_system=2, subset_per_cell=0, injection_levels=(1, 2, 3)), progress=False)
    return out


# Analytic values on this construction (half the decisions are resolved; the reference needs the
# missing test on the other half): (min cost choice, stop if enough, test if needed, resolved and correct).
ANALYTIC = {
    "reference": (1.0, 1.0, 1.0, 1.0),
    "exact-reader": (1.0, 1.0, 1.0, 1.0),
    "always-stop": (0.5, 1.0, 0.0, 0.5),
    "test-missing": (0.5, 0.0, 1.0, 1.0),  # the missing property settles every decision
    "complete-report": (0.0, 0.0, 0.0, 1.0),
}


@pytest.mark.parametrize("policy", sorted(ANALYTIC))
def test_scripted_policies_give_their_analytic_values_at_every_level(ladder_bench: Path, tmp_path: Path, policy: str) -> None:
    out = tmp_path / policy
    run(RunConfig(model=f"policy:{policy}", bench=str(ladder_bench), out=str(out)), progress=False)
    scores, _ = score_run(out, n_boot=50)
    names = ("min_cost_choice", "stop_if_enough", "test_if_needed", "resolved_and_correct")
    blocks = {"0": scores, **scores["injection"]["levels"]}
    assert set(blocks) == {"0", "1", "2", "3"}
    for level, block in blocks.items():
        got = tuple(block[n]["value"] for n in names)
        assert got == pytest.approx(ANALYTIC[policy]), (level, got)
        assert block["min_cost_choice"]["n"] == 24


def _failed(bench: Path, capsys) -> set[str]:
    main(["check", str(bench)])
    capsys.readouterr()
    return {c["check"] for c in json.loads((bench / "checks.json").read_text())["checks"] if not c["passed"]}


def test_check_passes_the_levels_and_catches_a_history_leak(ladder_bench: Path, tmp_path: Path, capsys) -> None:
    ok = tmp_path / "ok"
    shutil.copytree(ladder_bench, ok)
    assert _failed(ok, capsys) == set()
    bad = tmp_path / "bad"
    shutil.copytree(ladder_bench, bad)

    def leak(rows: list[dict]) -> None:  # one level-1 selection tells which history it shows
        row = next(r for r in rows if r.get("injection") == 1 and r["request"] == "select" and r["history"] == 1)
        row["prompt"] = row["prompt"].replace(GUIDANCE_OPENING, "The sheet shows the higher value. " + GUIDANCE_OPENING)

    rewrite_items(bad, leak)
    assert _failed(bad, capsys) == {
        "Level prompts are level 0's plus the level's text",
        "Level image pairs share every prompt byte but the history",
        "Level threshold pairs differ only in the threshold",
    }


def test_check_catches_wrong_level_3_readings(ladder_bench: Path, tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(ladder_bench, bad)

    rewrite_items(bad, lambda rows: wrong_last_reading(rows, "- panel 4"))
    failed = _failed(bad, capsys)
    assert "Level 3 readings are the oracle's" in failed


def _level_1_as_level_0(run_dir: Path, bench_dir: Path, flip: int) -> None:
    """Rewrite a run's level-1 select replies to level 0's for the same decision, then make
    `flip` of them (where level 0 missed) choose the reference action."""
    from evprobe.bench.manifest import read_items

    items = {it.item_id: it for it in read_items(bench_dir)}
    rows = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    level0 = {r["item_id"]: r for r in rows if items[r["item_id"]].injection == 0}
    flipped = 0
    for r in rows:
        it = items[r["item_id"]]
        if it.injection != 1 or it.request != "select":
            continue
        base = level0[r["item_id"].removesuffix(".L1")]
        assert it.options == items[base["item_id"]].options
        r.update({k: base[k] for k in ("reply", "valid", "route", "choice", "action")})
        if flipped < flip and r["action"] != it.reference_action:
            letter = next(k for k, v in it.options.items() if v == it.reference_action)
            r.update(reply=letter, choice=letter, action=it.reference_action)
            flipped += 1
    assert flipped == flip
    (run_dir / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_level_differences_are_paired_on_the_same_family_resamples(ladder_bench: Path, tmp_path: Path) -> None:
    """Level 1's replies copied from level 0 give a difference of exactly 0 whose interval is
    not a point (every resample's difference is 0; the MOVER interval stands in); with 3 of 24
    decisions fixed the difference is +3/24 and its paired interval is far narrower than one that
    ignored the pairing (MOVER from the two levels' own intervals), which is what an unpaired
    implementation (another seed per level) would print."""
    out = tmp_path / "run"
    run(RunConfig(model="policy:random", bench=str(ladder_bench), out=str(out), requests=("select",),
                  injection=(0, 1)), progress=False)
    _level_1_as_level_0(out, ladder_bench, flip=0)
    scores, _ = score_run(out, n_boot=400)
    same = scores["injection"]["differences"]["1"]["min_cost_choice"]
    assert same["value"] == 0.0 and same["n"] == 24
    assert same["ci"][0] < 0.0 < same["ci"][1]

    _level_1_as_level_0(out, ladder_bench, flip=3)
    scores, _ = score_run(out, n_boot=400)
    diff = scores["injection"]["differences"]["1"]["min_cost_choice"]
    p0, p1 = scores["min_cost_choice"], scores["injection"]["levels"]["1"]["min_cost_choice"]
    assert diff["value"] == pytest.approx(3 / 24) == pytest.approx(p1["value"] - p0["value"])
    assert diff["ci"][0] <= diff["value"] <= diff["ci"][1]
    mover = (np.hypot(p1["value"] - p1["ci"][0], p0["ci"][1] - p0["value"])
             + np.hypot(p1["ci"][1] - p1["value"], p0["value"] - p0["ci"][0]))
    assert diff["ci"][1] - diff["ci"][0] < 0.5 * mover
    assert "paired on the same family resamples" in (out / "scores.md").read_text()
