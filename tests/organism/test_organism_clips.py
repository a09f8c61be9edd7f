"""The organism reads clips (bench.clips, as frames) as the sheets their panel frames make
(organism.reader): on a clip benchmark with voids its replies, option log-probabilities and captured
states equal its own on the same benchmark in sheets, so every known answer carries over; frames that
are not whole clips are read as unread evidence, and `frame:K` is refused for it in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evprobe.bench.clips import ClipSpec
from evprobe.bench.generate import GenerateConfig, generate
from evprobe.bench.manifest import load_item_images, read_items
from evprobe.experiments.cli import main
from evprobe.organism.reader import read_facts


@pytest.fixture(scope="module")
def clip_void_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """small_void_bench's families and items, its sheets as clips of 8 frames."""
    out = tmp_path_factory.mktemp("clip_voids") / "bench"
    generate(out, GenerateConfig(families_per_system=2, subset_per_cell=0, voids=("occluded", "unstated"),
                                 clip=ClipSpec(frames=8)), progress=False)
    return out


def _records(folder: Path) -> dict[str, dict]:
    return {r["item_id"]: r for r in map(json.loads, (folder / "records.jsonl").read_text().splitlines())}


def test_the_organism_answers_clips_as_it_answers_their_sheets(small_void_bench: Path, clip_void_bench: Path,
                                                               tmp_path: Path) -> None:
    for name, bench in (("sheets", small_void_bench), ("clips", clip_void_bench)):
        assert main(["run", "--model", "organism", "--bench", str(bench), "--out", str(tmp_path / name),
                     "--option-logprobs", "--quiet"]) == 0
    sheets, clips = _records(tmp_path / "sheets"), _records(tmp_path / "clips")
    assert sheets.keys() == clips.keys() and len(sheets) == 348
    for key, r in sheets.items():
        c = clips[key]
        assert (c["reply"], c.get("option_logprobs"), c["n_prompt_tokens"]) == (
            r["reply"], r.get("option_logprobs"), r["n_prompt_tokens"]), key
    assert len({r["choice"] for r in sheets.values()}) > 2  # not one reply everywhere
    voids = [r for r in clips.values() if ".void-" in r["item_id"] and r["request"] != "select"]
    assert voids and all(r["answer"] == "undetermined" for r in voids)  # it abstains on every void answer


def test_captured_states_of_clips_are_their_sheets(small_void_bench: Path, clip_void_bench: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    for name, bench in (("sheets", small_void_bench), ("clips", clip_void_bench)):
        assert main(["capture", "--model", "organism", "--bench", str(bench), "--out", str(tmp_path / name),
                     "--positions", "last,image_mean", "--quiet"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "clips" / "acts.npy"), np.load(tmp_path / "sheets" / "acts.npy"))
    capsys.readouterr()
    assert main(["capture", "--model", "organism", "--bench", str(clip_void_bench), "--out", str(tmp_path / "frame"),
                 "--positions", "frame:2", "--quiet"]) == 2  # its two reading tokens are the clip's, not a frame's
    assert "do not split evenly among its 8 images" in capsys.readouterr().err


def test_frames_that_are_not_whole_clips_are_read_as_unread(small_void_bench: Path, clip_void_bench: Path) -> None:
    clip_items = {it.item_id: it for it in read_items(clip_void_bench)}
    for it in read_items(small_void_bench):
        if it.request == "answer_after_test" and len(it.images) == 3:
            break
    c = clip_items[it.item_id]
    sheet_facts = read_facts(it.prompt, load_item_images(small_void_bench, it.images))
    frames = load_item_images(clip_void_bench, c.images)
    assert len(frames) == 24 and read_facts(c.prompt, frames) == sheet_facts
    assert all(value is not None for _, value in sheet_facts.seen)
    torn = read_facts(c.prompt, frames[:-1])  # one frame short: which clip lost it cannot be known
    assert [v is None for _, v in torn.seen] == [True, True, True]  # so every clip is unread, none guessed
