"""The opt-in blocks on clips (bench.clips, bench.numeric, bench.injection): a clip benchmark's numeric
estimates and injection levels are the sheet benchmark's with clips and the clip's words; `evprobe check`
passes them and fails its clip-words and level rows on planted faults; the exact reader scores them as it
scores the sheets."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from evprobe.bench.checks_clips import SHEET_WORDS
from evprobe.bench.clips import ClipSpec
from evprobe.bench.generate import GenerateConfig, build, generate
from evprobe.bench.injection import level_prompt
from evprobe.bench.runner import RunConfig, run
from evprobe.bench.void_scoring import SECTION as VOIDS
from evprobe.experiments.scoring_io import score_run

from tests.bench.edits import check_passes, check_rows, copy_bench, rewrite_items, wrong_last_reading

CLIP = ClipSpec(frames=8, fps=2.0)
BLOCKS = dict(families_per_system=2, subset_per_cell=1, numeric=True, injection_levels=(1, 2, 3))
ESTIMATES = ("estimate_property", "estimate_outcome")


@pytest.fixture(scope="module")
def both() -> tuple[list, list, list]:
    families, sheets = build(GenerateConfig(**BLOCKS))
    return families, sheets, build(GenerateConfig(**BLOCKS, clip=CLIP))[1]


def test_blocks_on_clips_are_the_sheet_blocks_with_clips_and_their_words(both) -> None:
    _, sheets, clips = both
    assert len(sheets) == len(clips)
    seen = set()
    for a, b in zip(sheets, clips):
        ja, jb = a.to_json(), b.to_json()
        assert {k for k in ja if ja[k] != jb[k]} <= {"prompt", "images"}, a.item_id
        assert b.images == [rel.removesuffix(".png") + ".clip.png" for rel in a.images]
        if a.images:
            assert not SHEET_WORDS.search(b.prompt) and "clip" in b.prompt, a.item_id
        # every number the sheet prompt states, but the panels' numbers (a clip names its frames)
        numbers = {w.strip(".,;:()") for w in re.sub(r"- panel \d", "", a.prompt).split() if any(c.isdigit() for c in w)}
        assert all(n in b.prompt for n in numbers), a.item_id
        if a.injection or a.request in ESTIMATES:
            seen.add((a.request, a.injection))
            frames = [line for line in b.prompt.split("\n") if line.startswith("- frame ")]
            assert len(frames) == (4 * len(b.images) if b.injection == 3 else 0), b.item_id
            assert all(re.match(r"- frame [2468] \(", line) for line in frames)  # the panel frames, N/4 .. N
            if b.injection:
                assert "last frame (frame 8)" in b.prompt, b.item_id
    assert {(r, level) for r in ESTIMATES for level in (0, 1, 2, 3)} <= seen
    assert {(r, level) for r in ("select", "answer_initial", "answer_after_test") for level in (1, 2, 3)} <= seen


def test_a_level_asked_in_the_other_evidence_is_refused_naming_the_item(both) -> None:
    families, sheets, clips = both
    f = families[0]
    clip_base = next(it for it in clips if it.family_id == f.family_id and it.request == "select" and not it.injection
                     and it.variant is None)
    sheet_base = next(it for it in sheets if it.item_id == clip_base.item_id)
    with pytest.raises(ValueError, match=rf"{re.escape(clip_base.item_id)} shows clips but clip_frames is None"):
        level_prompt(f, clip_base, 2)
    with pytest.raises(ValueError, match=rf"{re.escape(sheet_base.item_id)} shows sheets but clip_frames is 8"):
        level_prompt(f, sheet_base, 2, CLIP.frames)


# -- evprobe check and the exact reader ---------------------------------------------------------------------

BLOCK_ROWS = ("Clip prompts name no sheet or panel", "Level prompts are level 0's plus the level's text",
              "Level 3 readings are the oracle's", "Level estimate groups share every prompt byte but the sheets",
              "Numeric prompt groups share every byte", "Numeric prompts do not state their answer")


EVERY_BLOCK = GenerateConfig(**{**BLOCKS, "subset_per_cell": 0}, voids=("occluded", "unstated"))


@pytest.fixture(scope="module")
def clip_blocks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("clip-blocks") / "bench"
    generate(out, replace(EVERY_BLOCK, clip=CLIP), progress=False)
    return out


def test_check_passes_the_blocks_on_clips(clip_blocks: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    check_passes(clip_blocks, tmp_path, capsys, BLOCK_ROWS)


def _in_sheet_words(rows: list[dict]) -> None:
    """A whole numeric group at every level (so the group and level rows hold) left in the sheet's words."""
    for r in rows:
        if r["item_id"].startswith("sliding-000.estimate_outcome."):  # every level, so the level rows hold
            r["prompt"] = r["prompt"].replace("attached clip", "attached sheet")


def _wrong_frame_reading(rows: list[dict]) -> None:
    """A wrong last-frame reading in both members of a level-3 threshold pair."""
    wrong_last_reading(rows, "- frame 8")


def _readings_dropped(rows: list[dict]) -> None:
    """Level 3's frame readings left out of one estimate group (every member, so the group row holds)."""
    for r in rows:
        if r["item_id"].startswith("spring-001.estimate_property.mass_") and r.get("injection") == 3:
            r["prompt"] = "\n".join(x for x in r["prompt"].split("\n") if not x.startswith("- frame "))


PLANTED = [
    ("a numeric group in the sheet's words", _in_sheet_words, {"Clip prompts name no sheet or panel"}),
    ("a wrong frame reading at level 3", _wrong_frame_reading, {"Level 3 readings are the oracle's"}),
    ("level 3 without its frame readings", _readings_dropped,
     {"Level prompts are level 0's plus the level's text", "Level 3 readings are the oracle's"}),
]


@pytest.mark.parametrize("what, plant, rows", PLANTED, ids=[p[0] for p in PLANTED])
def test_each_planted_fault_fails_its_rows(clip_blocks: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                           what: str, plant, rows: set[str]) -> None:
    bench = copy_bench(clip_blocks, tmp_path)
    rewrite_items(bench, plant)
    code, failed, _ = check_rows(bench, capsys)
    assert code == 1 and failed == rows, what


def test_the_exact_reader_scores_the_blocks_on_clips_as_on_sheets(clip_blocks: Path, tmp_path: Path) -> None:
    """Every block at once (levels, numeric estimates and voids: scoring them together once failed on
    the estimates, which the void section decoded as answers)."""
    sheets = tmp_path / "sheets"
    generate(sheets, EVERY_BLOCK, progress=False)
    scores = {}
    for name, bench in (("sheets", sheets), ("clips", clip_blocks)):
        out = tmp_path / f"run-{name}"
        run(RunConfig(model="policy:exact-reader", bench=str(bench), out=str(out)), progress=False)
        scores[name], _ = score_run(out, n_boot=50)
    for key in ("min_cost_choice", "resolved_and_correct"):
        assert scores["clips"][key] == scores["sheets"][key]
    assert scores["clips"]["injection"]["levels"] == scores["sheets"]["injection"]["levels"]
    assert json.dumps(scores["clips"]["numeric"], sort_keys=True) == json.dumps(scores["sheets"]["numeric"], sort_keys=True)
    assert scores["clips"]["numeric"]["estimate_property"]["acc_5"]["value"] == 1.0
    assert scores["clips"][VOIDS] == scores["sheets"][VOIDS]
    assert {scores["clips"][VOIDS][v]["abs_rec"]["value"] for v in ("occluded", "unstated")} == {1.0}
