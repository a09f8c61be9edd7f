"""Evidence in motion (bench.clips; seed 002, sections 3-4.1): what `generate --evidence clip` writes, what
`evprobe check` verifies on it (each clip row failing on the fault it is for), and how clips reach the
readers: the exact reader, the hf backend's frames, the openai backend's frames, the context refusal."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from PIL import Image, ImageChops

from evprobe.bench import oracle
from evprobe.bench.backends.openai_client import _images
from evprobe.bench.calibration import SHEETS, sheet_instants, sheet_spec
from evprobe.bench.clips import (
    ClipSpec,
    encode_clip,
    frame_instants,
    frame_pngs,
    panel_sheet,
    read_frames,
    render_clip,
    sheet_view,
)
from evprobe.bench.family import sample_families, select_subset
from evprobe.bench.generate import GenerateConfig, build, generate
from evprobe.bench.manifest import load_item_images, read_items
from evprobe.bench.render import PANEL, STYLES, render_image
from evprobe.experiments.cli import main

from tests.bench.edits import check_passes, check_rows, copy_bench

CLIP = ClipSpec(frames=8, fps=2.0)
CONFIG = GenerateConfig(families_per_system=2, subset_per_cell=1, clip=CLIP, voids=("occluded", "unstated"))


@pytest.fixture(scope="module")
def clip_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("clips") / "bench"
    generate(out, CONFIG, progress=False)
    return out


# -- the clips ----------------------------------------------------------------------------------------


def test_a_clip_spec_the_sheets_cannot_anchor_is_refused() -> None:
    for frames in (6, 0, 2, 260, True):
        with pytest.raises(ValueError, match="--frames must be a multiple of 4"):
            ClipSpec(frames=frames)
    with pytest.raises(ValueError, match="--fps must lie in"):
        ClipSpec(fps=0.0)
    assert ClipSpec().to_json() == {"frames": 32, "fps": 2.0} and ClipSpec().panel_frames == (8, 16, 24, 32)


def test_panel_frames_are_the_sheets_panels_pixel_for_pixel() -> None:
    families = select_subset(sample_families(1, 2), 1, 1)
    for f in families:
        for sheet in SHEETS:
            for style in ("a", "b"):
                frames = read_frames(render_clip(f.system, f.candidates, f.calibration, sheet, CLIP, style), CLIP)
                drawn = render_image(sheet_spec(f.system, f.candidates, f.calibration, sheet), STYLES[style])
                assert ImageChops.difference(panel_sheet(frames), drawn).getbbox() is None, (f.family_id, sheet)
                # the frames between the panels move: no two consecutive frames are the same picture
                assert all(ImageChops.difference(a, b).getbbox() for a, b in zip(frames, frames[1:]))


@pytest.mark.parametrize("frames", [4, 8, 12, 32, 64])
def test_frame_instants_agree_with_the_independent_oracle(frames: int) -> None:
    for f in sample_families(2, 1):
        for sheet in SHEETS:
            ours = frame_instants(sheet_instants(f.system, f.calibration, sheet), frames)
            theirs = oracle.clip_instants(f.system, f.calibration, sheet, frames)
            assert len(ours) == frames and ours == pytest.approx(theirs, rel=1e-12, abs=1e-15)
            assert all(a < b for a, b in zip(ours, ours[1:]))  # time (or load) runs forward


def test_a_clip_file_round_trips_and_a_wrong_one_is_refused_naming_it(tmp_path: Path) -> None:
    f = sample_families(3, 1)[0]
    data = render_clip(f.system, f.candidates, f.calibration, "mass_0", CLIP)
    assert render_clip(f.system, f.candidates, f.calibration, "mass_0", CLIP) == data  # same bytes again
    frames = read_frames(data, CLIP)
    assert len(frames) == 8 and {fr.size for fr in frames} == {(PANEL, PANEL)}
    path = tmp_path / "short.clip.png"
    path.write_bytes(encode_clip(frames[:7] + frames[:1], CLIP))  # 8 frames, but the last repeats the first
    assert len(read_frames(path, CLIP)) == 8
    path.write_bytes(encode_clip(frames[:4], CLIP))
    with pytest.raises(ValueError, match=f"{path}: 4 frames, but the benchmark's clips have 8"):
        read_frames(path, CLIP)
    path.write_bytes(encode_clip(frames, ClipSpec(8, 4.0)))
    with pytest.raises(ValueError, match="not shown 500 ms each"):
        read_frames(path, CLIP)
    still = io.BytesIO()
    frames[0].save(still, "PNG")
    assert frame_pngs(still.getvalue()) is None
    assert ImageChops.difference(sheet_view(still.getvalue()), frames[0]).getbbox() is None  # a still: itself


# -- generation ---------------------------------------------------------------------------------------


def test_clip_items_are_the_sheet_items_with_clips_and_their_words() -> None:
    sheets, clips = build(GenerateConfig())[1], build(GenerateConfig(clip=ClipSpec()))[1]
    assert len(sheets) == len(clips) == 9216
    for a, b in zip(sheets, clips):
        ja, jb = a.to_json(), b.to_json()
        assert {k for k in ja if ja[k] != jb[k]} <= {"prompt", "images"}, a.item_id
        assert b.images == [rel.removesuffix(".png") + ".clip.png" for rel in a.images]
        if a.images:
            assert "sheet" not in b.prompt and "panel" not in b.prompt and "clip" in b.prompt, a.item_id
        # every number the sheet prompt states, the clip prompt states too
        numbers = {w.strip(".,;:()") for w in a.prompt.split() if any(c.isdigit() for c in w)}
        assert all(n in b.prompt for n in numbers), a.item_id
    tests = next(it for it in clips if it.request == "select").prompt
    assert "Each gives a clip of 32 frames" in tests and "frames 8, 16, 24 and 32 of its clip show" in tests


def test_options_that_need_clips_or_cut_them_wrong_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    base = ["generate", "--out", str(tmp_path / "x"), "--families-per-system", "1", "--quiet"]
    assert main(base + ["--frames", "8"]) == 2
    assert "--frames and --fps cut clips; add --evidence clip" in capsys.readouterr().err
    assert main(base + ["--evidence", "clip", "--frames", "6"]) == 2
    assert "--frames must be a multiple of 4" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()  # the opt-in blocks on clips: tests/bench/test_clip_blocks.py


def test_the_cli_writes_clips_and_bench_json_records_them(tmp_path: Path) -> None:
    out = tmp_path / "b"
    assert main(["generate", "--out", str(out), "--families-per-system", "1", "--subset-per-cell", "0",
                 "--evidence", "clip", "--frames", "4", "--fps", "5", "--quiet"]) == 0
    meta = json.loads((out / "bench.json").read_text())
    assert meta["evidence"] == {"kind": "clip", "frames": 4, "fps": 5.0}
    assert sorted(p.name for p in (out / "images" / "sliding-000").iterdir()) == sorted(f"{s}.clip.png" for s in SHEETS)
    sheets = tmp_path / "s"
    assert main(["generate", "--out", str(sheets), "--families-per-system", "1", "--subset-per-cell", "0", "--quiet"]) == 0
    assert "evidence" not in json.loads((sheets / "bench.json").read_text())


# -- evprobe check --------------------------------------------------------------------------------------

CLIP_ROWS = ("Clips: frames, size and rate", "Clip frames follow the motion")


def test_check_passes_a_clip_benchmark_with_its_rows(clip_bench: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    bench = check_passes(clip_bench, tmp_path, capsys, CLIP_ROWS)
    numbers = json.loads((bench / "checks.json").read_text())
    assert numbers["clips_checked"] == 6 * 5 + 6 * 2 and numbers["clip_frames_read"] == 8 * numbers["clips_checked"]
    assert numbers["occluded_sheets"] == 12 and numbers["identical_occluded"] == [6, 6]  # void rows on clips
    assert main(["check", str(bench), "--rerender"]) == 0
    assert "Images re-rendered byte for byte" in capsys.readouterr().out


def _reverse(bench: Path) -> None:
    path = bench / "images/sliding-000/mass_1.clip.png"
    path.write_bytes(encode_clip(read_frames(path)[::-1], CLIP))  # the motion played backwards


def _drop(bench: Path) -> None:
    path = bench / "images/sliding-000/other_0.clip.png"
    frames = read_frames(path)
    path.write_bytes(encode_clip(frames[:4] + frames[5:], CLIP))


def _other_sheet(bench: Path) -> None:
    folder = bench / "images/bouncing-000"
    shutil.copyfile(folder / "mass_1.clip.png", folder / "mass_0.clip.png")  # the heavier ball shown twice


def _between_frames(bench: Path) -> None:
    path = bench / "images/spring-001/other_1.clip.png"
    frames = read_frames(path)
    frames[2], frames[4] = frames[4], frames[2]  # two in-between frames swapped; the panel frames stay
    path.write_bytes(encode_clip(frames, CLIP))


PLANTED = [
    ("the motion played backwards", _reverse,
     {"Largest error in extracting the marked position", "Outcomes recovered from the sheets",
      "Clip frames follow the motion"}),
    ("a frame dropped", _drop,
     {"Largest error in extracting the marked position", "Clips: frames, size and rate"}),
    ("another sheet's clip", _other_sheet,
     {"Largest error in extracting the marked position", "Outcomes recovered from the sheets",
      "Smallest informative feature separation", "Required separation in implementation",
      "Clip frames follow the motion"}),
    ("two in-between frames swapped", _between_frames, {"Clip frames follow the motion"}),
]


@pytest.mark.parametrize("what, plant, rows", PLANTED, ids=[p[0] for p in PLANTED])
def test_each_planted_fault_fails_its_rows(clip_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                           what: str, plant, rows: set[str]) -> None:
    bench = copy_bench(clip_bench, tmp_path)
    plant(bench)
    code, failed, _ = check_rows(bench, capsys)
    assert code == 1 and failed == rows, what


def test_an_occluded_clip_that_shows_its_marker_in_one_frame_fails_both_void_rows(
        clip_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bench = copy_bench(clip_bench, tmp_path)
    occluded = sorted(bench.glob("images/*/*.occluded.clip.png"))[0]
    frames = read_frames(occluded)
    frames[5] = read_frames(occluded.with_name(occluded.name.replace(".occluded", "")))[5]  # frame 6 uncovered
    occluded.write_bytes(encode_clip(frames, CLIP))
    code, failed, out = check_rows(bench, capsys)
    assert code == 1 and failed == {"Occluded sheets show no marker", "Occluded sheets are identical across histories"}
    assert occluded.relative_to(bench).as_posix() in out


def test_voids_on_clips_are_the_sheet_voids_with_occluded_clips() -> None:
    sheets = build(GenerateConfig(voids=("occluded", "unstated")))[1]
    clips = build(GenerateConfig(voids=("occluded", "unstated"), clip=ClipSpec()))[1]
    assert len(sheets) == len(clips) == 10080
    for a, b in zip(sheets[9216:], clips[9216:]):
        ja, jb = a.to_json(), b.to_json()
        assert {k for k in ja if ja[k] != jb[k]} <= {"prompt", "images"}, a.item_id
        assert b.images == [rel.removesuffix(".png") + ".clip.png" for rel in a.images]


def test_a_bench_json_that_names_other_clips_fails_every_clip(clip_bench: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    bench = copy_bench(clip_bench, tmp_path)
    meta = json.loads((bench / "bench.json").read_text())
    meta["evidence"]["frames"] = 12
    (bench / "bench.json").write_text(json.dumps(meta))
    code, failed, out = check_rows(bench, capsys)
    assert code == 1 and "Clips: frames, size and rate" in failed and "8 frames, but the benchmark's clips have 12" in out
    meta["evidence"]["frames"] = 6
    (bench / "bench.json").write_text(json.dumps(meta))
    assert main(["check", str(bench)]) == 2
    assert "bench.json" in capsys.readouterr().err


# -- reading clips ----------------------------------------------------------------------------------------


def test_the_exact_reader_reads_clips_as_it_reads_sheets(clip_bench: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    assert main(["run", "--model", "policy:exact-reader", "--bench", str(clip_bench), "--out", str(out), "--quiet"]) == 0
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    items = {it.item_id: it for it in read_items(clip_bench)}
    assert len(records) == len(items) and sum(it.void is not None for it in items.values()) == 36
    # every void abstained on (an occluded clip shows no marker in any frame), every twin answered
    for r in records:
        it = items[r["item_id"]]
        if it.reference_option is not None:
            assert r["choice"] == it.reference_option, it.item_id
        if it.request == "read_ruler":
            assert r["value"] == pytest.approx(it.reference_value, rel=0.01)


def test_models_read_a_clip_as_its_frames(clip_bench: Path, tmp_path: Path) -> None:
    item = next(it for it in read_items(clip_bench) if it.request == "answer_after_test" and len(it.images) == 3)
    frames = load_item_images(clip_bench, item.images)
    assert len(frames) == 3 * 8 and {f.size for f in frames} == {(PANEL, PANEL)}
    sent = _images(tuple(clip_bench / rel for rel in item.images))  # the openai backend's request parts
    assert len(sent) == 24 and {mime for _, mime in sent} == {"image/png"}
    for (png, _), frame in zip(sent, frames):
        assert ImageChops.difference(Image.open(io.BytesIO(png)).convert("RGB"), frame).getbbox() is None


def test_a_tiny_model_runs_on_clips_and_a_prompt_past_its_context_is_refused_first(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    bench = tmp_path / "b"
    generate(bench, GenerateConfig(families_per_system=1, subset_per_cell=0, clip=ClipSpec(4)), progress=False)
    out = tmp_path / "run"
    assert main(["run", "--model", "tiny:qwen2_5_vl", "--bench", str(bench), "--out", str(out), "--requests",
                 "answer_after_test", "--limit", "6", "--batch-size", "3", "--quiet"]) == 0
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 6 and all(r["n_prompt_tokens"] > 16 * 4 * 2 for r in records)  # 2-3 clips of 4 frames
    long = tmp_path / "long"
    generate(long, GenerateConfig(families_per_system=1, subset_per_cell=0, clip=ClipSpec(64)), progress=False)
    assert main(["run", "--model", "tiny:qwen2_5_vl", "--bench", str(long), "--out", str(tmp_path / "r2"),
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "beyond the 4096-token context of --model tiny:qwen2_5_vl; lower the budget" in err
    assert "generate clips with fewer --frames" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "r2").exists()


def test_a_video_model_reads_clips_as_videos_and_the_refusals_come_first(
        clip_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    base = ["run", "--model", "tiny:llava_next_video", "--bench", str(clip_bench), "--requests", "answer_after_test",
            "--limit", "6", "--quiet"]
    assert main(base + ["--out", str(tmp_path / "v4"), "--video-input", "native", "--batch-size", "3"]) == 0
    assert main(base + ["--out", str(tmp_path / "v1"), "--video-input", "native", "--batch-size", "1"]) == 0
    assert main(base + ["--out", str(tmp_path / "f"), "--batch-size", "3"]) == 0
    read = {name: [json.loads(line) for line in (tmp_path / name / "records.jsonl").read_text().splitlines()]
            for name in ("v4", "v1", "f")}
    assert [r["reply"] for r in read["v4"]] == [r["reply"] for r in read["v1"]]  # batched = single
    # a clip of 8 frames: 8 x 4 pooled video tokens, against 8 anyres images as frames
    assert all(v["n_prompt_tokens"] < f["n_prompt_tokens"] for v, f in zip(read["v4"], read["f"]))
    assert json.loads((tmp_path / "v4" / "run.json").read_text())["video_input"] == "native"
    assert json.loads((tmp_path / "f" / "run.json").read_text())["video_input"] is None
    capsys.readouterr()
    refusals = [
        (["--model", "tiny:llava"], "--model tiny:llava has no video path"),
        (["--backend", "openai", "--base-url", "http://127.0.0.1:9/v1"], "built for the hf backend"),
    ]
    for flags, words in refusals:
        out = tmp_path / "refused"
        assert main(base + ["--out", str(out), "--video-input", "native"] + flags) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1 and not out.exists()
    sheets = tmp_path / "sheets"
    generate(sheets, GenerateConfig(families_per_system=1, subset_per_cell=0), progress=False)
    assert main(["run", "--model", "tiny:llava_next_video", "--bench", str(sheets), "--out", str(tmp_path / "s"),
                 "--video-input", "native", "--quiet"]) == 2
    assert "shows sheets, not clips" in capsys.readouterr().err


def test_capture_reads_clips_as_videos_batched_equal_to_single(
        clip_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """`evprobe capture --video-input native`: each clip one video (the tiny LLaVA-NeXT-Video's video
    path), frame:K its K-th frame's tokens; a batch of 3 reads what 3 single rows read; pinned in
    meta.json; the refusals come before any model call."""
    import numpy as np

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    base = ["capture", "--model", "tiny:llava_next_video", "--bench", str(clip_bench), "--requests", "answer_after_test",
            "--limit", "3", "--layers", "0,1", "--positions", "last,image_mean,frame:1", "--quiet"]
    assert main(base + ["--out", str(tmp_path / "v3"), "--video-input", "native", "--batch-size", "3"]) == 0
    assert main(base + ["--out", str(tmp_path / "v1"), "--video-input", "native", "--batch-size", "1"]) == 0
    assert main(base + ["--out", str(tmp_path / "f"), "--batch-size", "3"]) == 0
    acts = {name: np.load(tmp_path / name / "acts.npy") for name in ("v3", "v1", "f")}
    assert acts["v3"].shape == (3, 2, 3, acts["v3"].shape[-1])
    np.testing.assert_allclose(acts["v3"].astype(np.float32), acts["v1"].astype(np.float32), rtol=1e-2, atol=1e-2)
    assert not np.allclose(acts["v3"][:, 1], acts["f"][:, 1])  # a video is not the frames as images
    index = [json.loads(line) for line in (tmp_path / "v3" / "index.jsonl").read_text().splitlines()]
    framed = [json.loads(line) for line in (tmp_path / "f" / "index.jsonl").read_text().splitlines()]
    assert all(v["n_tokens"] < f["n_tokens"] for v, f in zip(index, framed))  # 4 pooled tokens a frame
    assert json.loads((tmp_path / "v3" / "meta.json").read_text())["video_input"] == "native"
    assert json.loads((tmp_path / "f" / "meta.json").read_text())["video_input"] is None
    capsys.readouterr()
    out = tmp_path / "refused"
    assert main(base + ["--out", str(out), "--video-input", "native", "--model", "tiny:llava"]) == 2
    err = capsys.readouterr().err
    assert "tiny:llava has no video path" in err and len(err.strip().splitlines()) == 1 and not (out / "acts.npy").exists()
    sheets = tmp_path / "sheets"
    generate(sheets, GenerateConfig(families_per_system=1, subset_per_cell=0), progress=False)
    assert main(["capture", "--model", "tiny:llava_next_video", "--bench", str(sheets), "--out", str(out),
                 "--video-input", "native", "--quiet"]) == 2
    assert "shows sheets, not clips" in capsys.readouterr().err
