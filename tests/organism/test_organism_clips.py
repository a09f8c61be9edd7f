"""The organism reads clips (bench.clips, as frames) as the sheets their panel frames make
(organism.reader): on a clip benchmark with voids its replies, option log-probabilities and captured
states equal its own on the same benchmark in sheets, so every known answer carries over; frames that
are not whole clips are read as unread evidence, and `frame:K` is refused for it in one line. Read as
videos (`--video-input native`: the organism's video path, organism.processor), clips give the same."""

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
    """As frames, and as videos (`--video-input native`: each clip one video through its video path)."""
    for name, bench, flags in (("sheets", small_void_bench, []), ("clips", clip_void_bench, []),
                               ("videos", clip_void_bench, ["--video-input", "native"])):
        assert main(["run", "--model", "organism", "--bench", str(bench), "--out", str(tmp_path / name),
                     "--option-logprobs", "--quiet", *flags]) == 0
    sheets, clips, videos = (_records(tmp_path / name) for name in ("sheets", "clips", "videos"))
    assert sheets.keys() == clips.keys() == videos.keys() and len(sheets) == 348
    for key, r in sheets.items():
        for c in (clips[key], videos[key]):
            assert (c["reply"], c.get("option_logprobs"), c["n_prompt_tokens"]) == (
                r["reply"], r.get("option_logprobs"), r["n_prompt_tokens"]), key
    assert len({r["choice"] for r in sheets.values()}) > 2  # not one reply everywhere
    voids = [r for r in clips.values() if ".void-" in r["item_id"] and r["request"] != "select"]
    assert voids and all(r["answer"] == "undetermined" for r in voids)  # it abstains on every void answer


def test_captured_states_of_clips_are_their_sheets(small_void_bench: Path, clip_void_bench: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    for name, bench, flags in (("sheets", small_void_bench, []), ("clips", clip_void_bench, []),
                               ("videos", clip_void_bench, ["--video-input", "native"])):
        assert main(["capture", "--model", "organism", "--bench", str(bench), "--out", str(tmp_path / name),
                     "--positions", "last,image_mean", "--quiet", *flags]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "clips" / "acts.npy"), np.load(tmp_path / "sheets" / "acts.npy"))
    np.testing.assert_array_equal(np.load(tmp_path / "videos" / "acts.npy"), np.load(tmp_path / "sheets" / "acts.npy"))
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


def _two_items(bench: Path) -> list:
    """Two answer_after_test items with three clips each whose facts differ."""
    from evprobe.organism.reader import read_facts

    items, facts = [], []
    for it in read_items(bench):
        if it.request == "answer_after_test" and len(it.images) == 3 and ".void-" not in it.item_id:
            got = read_facts(it.prompt, load_item_images(bench, it.images))
            if got not in facts:
                items.append(it)
                facts.append(got)
        if len(items) == 2:
            return items
    raise AssertionError("no two such items")


def test_each_row_reads_its_own_videos_and_a_misrouted_batch_would_show(clip_void_bench: Path) -> None:
    """The organism's processor takes every row's videos in text order, as a stock processor does
    (hooks.inputs passes them flat): a batch reads what each row reads alone, and the same videos
    handed to the other row read differently, so the run and capture equalities above would catch a
    batch whose videos went to the wrong rows."""
    from evprobe.hooks.inputs import user_message
    from evprobe.organism.checkpoint import checkpoint_path
    from evprobe.organism.processor import OrganismProcessor

    proc = OrganismProcessor.from_pretrained(checkpoint_path())
    items = _two_items(clip_void_bench)
    texts = [proc.apply_chat_template(user_message(it.prompt, 0, 3)) for it in items]
    clips = [load_item_images(clip_void_bench, it.images, clips_as_video=True) for it in items]
    videos = [[c[k * 8:(k + 1) * 8] for k in range(3)] for c in clips]  # each clip's 8 frames, one video
    single = [proc(text=[t], videos=v)["input_ids"][0].tolist() for t, v in zip(texts, videos)]
    batch = proc(text=texts, videos=videos[0] + videos[1])
    assert [[i for i, m in zip(row, mask) if m] for row, mask in
            zip(batch["input_ids"].tolist(), batch["attention_mask"].tolist())] == single
    swapped = proc(text=texts, videos=videos[1] + videos[0])
    assert swapped["input_ids"].tolist() != batch["input_ids"].tolist()
    with pytest.raises(ValueError, match="the rows have 6 video placeholders but 5 videos were given"):
        proc(text=texts, videos=videos[0] + videos[1][:2])


def test_a_short_video_leaves_only_its_own_clip_unread(clip_void_bench: Path) -> None:
    """A clip read as a video is one clip: one frame short, it (and only it) is read as unread; as
    frames, which clip lost the frame cannot be known, so all three are (test above)."""
    item = _two_items(clip_void_bench)[0]
    frames = load_item_images(clip_void_bench, item.images, clips_as_video=True)
    videos = [frames[k * 8:(k + 1) * 8] for k in range(3)]
    whole = read_facts(item.prompt, [], videos=videos)
    assert whole == read_facts(item.prompt, load_item_images(clip_void_bench, item.images))
    torn = read_facts(item.prompt, [], videos=[videos[0], videos[1][:-1], videos[2]])
    assert [v is None for _, v in torn.seen] == [False, True, False]
    assert torn.seen[0] == whole.seen[0] and torn.seen[2] == whole.seen[2]
    with pytest.raises(ValueError, match="as images or as videos, not both"):
        read_facts(item.prompt, frames[:8], videos=videos[1:])
