"""Native video through transformers' own (torchvision) video processors, as real checkpoints load.

The video environment (`video_python`: torchvision beside its torch; `.ci/run` makes `.venv-video`)
runs tests/hooks/stock_video_driver.py once: each tiny video model saved with its stock processor
(hooks.tiny_video), `evprobe run` and `evprobe capture --video-input native` on a clip benchmark in
batches of 3 and of 1, the torchvision-free video paths against the stock ones, and Qwen3-VL's frame
sampling. This module reads what it wrote, and loads the same folders here, without torchvision.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from evprobe.experiments.cli import main
from evprobe.hooks.tiny_video import VIDEO_ARCHS, save_tiny_video_model

DRIVER = Path(__file__).with_name("stock_video_driver.py")
STOCK = {"qwen2_5_vl": ("Qwen2_5_VLProcessor", "Qwen2VLVideoProcessor"),
         "qwen3_vl": ("Qwen3VLProcessor", "Qwen3VLVideoProcessor"),
         "smolvlm": ("SmolVLMProcessor", "SmolVLMVideoProcessor"),
         "llava_next_video": ("LlavaNextVideoProcessor", "LlavaNextVideoVideoProcessor")}
# Pixels after normalization: PIL's and torchvision's bicubic resizes may round a channel to the next
# 8-bit level (one level is 1 / 255 / std, std >= 0.26 here); measured: at most one level, on a few
# pixels (LLaVA-NeXT-Video, mean difference 1.6e-5), and 2.4e-7 for Qwen2.5-VL, whose frames are
# resized by the same PIL call on both paths before the torch tensors take over.
ONE_LEVEL = 1 / 255 / 0.26
# Next-token log-probabilities over the whole vocabulary; measured: at most 1.2e-5.
LOGPROB_TOLERANCE = 1e-4


def _records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "records.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from evprobe.bench.clips import ClipSpec
    from evprobe.bench.generate import GenerateConfig, generate

    out = tmp_path_factory.mktemp("stock_video") / "bench"
    generate(out, GenerateConfig(families_per_system=1, subset_per_cell=0, clip=ClipSpec(frames=8, fps=2.0)),
             progress=False)
    return out


@pytest.fixture(scope="module")
def driven(video_python: Path, clips: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("stock_video_out")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([str(video_python), str(DRIVER), str(out), str(clips)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
    return out, json.loads((out / "driver.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("arch", VIDEO_ARCHS)
def test_a_checkpoint_loads_with_its_stock_video_processor(driven: tuple[Path, dict], arch: str) -> None:
    info = driven[1]["archs"][arch]
    assert (info["processor"], info["video_processor"]) == STOCK[arch] and info["takes_videos"]


@pytest.mark.parametrize("arch", VIDEO_ARCHS)
def test_native_video_runs_through_the_stock_processor_batched_equal_to_single(
        driven: tuple[Path, dict], arch: str) -> None:
    out, result = driven
    info = result["archs"][arch]
    for name in ("run_v3", "run_v1", "run_f"):
        assert info[name]["code"] == 0, info[name]["stderr"]
    v3, v1, frames = (_records(out / "run" / arch / name) for name in ("v3", "v1", "f"))
    assert len(v3) == 3 and [r["reply"] for r in v3] == [r["reply"] for r in v1]
    assert [r["n_prompt_tokens"] for r in v3] == [r["n_prompt_tokens"] for r in v1]
    # one video of 8 frames costs fewer tokens than the 8 frames as images (tiles, anyres views)
    assert all(v["n_prompt_tokens"] < f["n_prompt_tokens"] for v, f in zip(v3, frames))
    assert json.loads((out / "run" / arch / "v3" / "run.json").read_text())["video_input"] == "native"


@pytest.mark.parametrize("arch", VIDEO_ARCHS)
def test_capture_reads_stock_video_batched_equal_to_single(driven: tuple[Path, dict], arch: str) -> None:
    out, result = driven
    info = result["archs"][arch]
    for name in ("capture_v3", "capture_v1", "capture_f"):
        assert info[name]["code"] == 0, info[name]["stderr"]
    acts = {name: np.load(out / "capture" / arch / name / "acts.npy").astype(np.float32) for name in ("v3", "v1", "f")}
    n_positions = 3 if arch in ("smolvlm", "llava_next_video") else 2  # frame:1 where a token is one frame's
    assert acts["v3"].shape[:3] == (3, 2, n_positions)
    np.testing.assert_allclose(acts["v3"], acts["v1"], rtol=1e-2, atol=1e-2)
    assert not np.allclose(acts["v3"][:, :, 1], acts["f"][:, :, 1])  # a video is not its frames as images


def test_frame_k_reads_the_tokens_smolvlm_wrote_for_frame_k(driven: tuple[Path, dict]) -> None:
    """SmolVLM2's processor writes each frame as its own run of image tokens: `frame:K` (an equal share
    of the row's image tokens) is exactly the K-th run, for every frame of a row of two clips."""
    runs = driven[1]["archs"]["smolvlm"]["frame_runs"]
    assert len(runs["runs"]) == 16 and runs["frames"] == runs["runs"]


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "qwen3_vl"])
def test_a_frame_position_on_temporal_patches_is_refused_in_one_line(driven: tuple[Path, dict], arch: str) -> None:
    refused = driven[1]["archs"][arch]["frame_refused"]
    last = refused["stderr"].strip().splitlines()[-1]
    assert refused["code"] == 2 and not refused["wrote"]
    assert "its video's frames share tokens (2 frames a temporal patch)" in last and last.startswith("evprobe: error:")


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "llava_next_video"])
def test_the_torchvision_free_video_paths_read_what_the_stock_ones_read(driven: tuple[Path, dict], arch: str) -> None:
    """hooks.tiny_models's PIL video paths (QwenPilVideoProcessor, PilVideoProcessor) against transformers' own on
    the same clips and weights: the same tokens, pixels within one 8-bit level, the same next token."""
    parity = driven[1]["archs"][arch]["parity"]
    print(arch, parity)
    assert parity["same_input_ids"] and parity["pixel_shape_equal"] and parity["argmax_equal"]
    assert parity["pixel_max_abs"] <= ONE_LEVEL
    assert parity["logprob_max_abs"] <= LOGPROB_TOLERANCE


def test_every_frame_is_read_where_the_stock_processor_would_sample(driven: tuple[Path, dict]) -> None:
    """Qwen3-VL's video processor samples frames at 2 fps by default; evprobe asks for every frame
    (hooks.inputs: do_sample_frames=False), so a 16-frame clip at 4 fps is 8 temporal patches of 2,
    where the stock default would keep half the frames (the last one possibly among those dropped)."""
    sampling = driven[1]["archs"]["qwen3_vl"]["sampling"]
    assert sampling["grid_t"] * sampling["temporal_patch"] == sampling["frames"] == 16
    assert sampling["grid_t_stock_default"] < sampling["grid_t"]


@pytest.mark.parametrize("arch", VIDEO_ARCHS)
def test_without_torchvision_the_folder_reads_frames_and_refuses_native_video(
        driven: tuple[Path, dict], clips: Path, arch: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """This environment has no torchvision: the stock folder loads with the image-only stand-in
    (hooks.processors), reads clips as frames exactly as the video environment's stock processor
    does, and `--video-input native` is refused in one line before any item is read."""
    from transformers.utils import is_torchvision_available

    if is_torchvision_available():
        pytest.skip("this environment has torchvision: the stock processor loads")
    from evprobe.hooks.loading import load

    out, result = driven
    folder = result["archs"][arch]["folder"]
    assert type(load(folder).processor).__name__ == "NoVideo" + STOCK[arch][0]
    base = ["run", "--model", folder, "--bench", str(clips), "--requests", "answer_after_test", "--limit", "3", "--quiet"]
    assert main(base + ["--out", str(tmp_path / "f"), "--batch-size", "3"]) == 0
    here, there = _records(tmp_path / "f"), _records(out / "run" / arch / "f")
    assert [(r["reply"], r["n_prompt_tokens"]) for r in here] == [(r["reply"], r["n_prompt_tokens"]) for r in there]
    capsys.readouterr()
    assert main(base + ["--out", str(tmp_path / "v"), "--video-input", "native"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"evprobe: error: --video-input native: --model {folder} has no video path (an image-only "
                       "model, or a video processor that needs torchvision, which is not installed); use "
                       "--video-input frames")
    assert not (tmp_path / "v").exists()


def test_the_stock_saver_refuses_an_unknown_arch_and_a_missing_torchvision(tmp_path: Path) -> None:
    from transformers.utils import is_torchvision_available

    with pytest.raises(ValueError, match="valid names: qwen2_5_vl, qwen3_vl, smolvlm, llava_next_video"):
        save_tiny_video_model(tmp_path / "m", "llava")
    if not is_torchvision_available():
        with pytest.raises(RuntimeError, match="needs torchvision"):
            save_tiny_video_model(tmp_path / "m", "smolvlm")
    assert not (tmp_path / "m").exists()


def test_a_video_is_described_as_all_its_frames_at_its_rate() -> None:
    from evprobe.core.video import Visual
    from evprobe.hooks.inputs import video_metadata

    meta = video_metadata(Visual("video", tuple(range(6)), 2.0))
    assert meta == {"fps": 2.0, "total_num_frames": 6, "frames_indices": [0, 1, 2, 3, 4, 5], "duration": 3.0}
