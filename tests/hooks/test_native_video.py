"""Frames read as one video (core.video.mark_video, hooks.inputs): the tiny LLaVA-NeXT-Video's video path
(PilVideoProcessor: each frame through the PIL image processor, as the stock video processor does) and
the tiny Qwen2.5-VL's (QwenPilVideoProcessor: frames paired into temporal patches), on real forwards. Batched equals one row at a time; each frame has its own tokens, so Frame(k) reads frame k
(repainting frame k leaves the earlier frames' reads exactly as they were); a model without a video path
refuses marked frames in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from evprobe.core.video import mark_video, video_mark, visuals
from evprobe.hooks import build_inputs
from evprobe.hooks.capture import capture_layers
from evprobe.hooks.generation import generate_encoded
from evprobe.hooks.inputs import takes_videos, visual_counts
from evprobe.hooks.positions import Frame
from evprobe.hooks.spans import image_token_ids

from .conftest import tiny_handle

pytestmark = pytest.mark.usefixtures("one_torch_thread")
get = tiny_handle

N = 4  # frames a clip


def clip(seed: int, n: int = N) -> list[Image.Image]:
    out = []
    for k in range(n):  # a block sliding right
        im = Image.new("RGB", (72, 72), (245, 245, 245))
        ImageDraw.Draw(im).rectangle([4 + 10 * k, 20 + seed, 26 + 10 * k, 44 + seed], fill=(60, 90 + 30 * seed, 200))
        out.append(im)
    return out


PROMPTS = ["What moves?", "Describe the motion across all of the frames, from the first to the last."]


def test_marks_group_frames_into_videos_and_a_still_after_a_video_is_refused() -> None:
    a, b = mark_video(clip(1), "a", 2.0), mark_video(clip(2), "b", 4.0)
    still = clip(3, 1)
    row = still + a + b
    assert [(v.kind, len(v.frames), v.fps) for v in visuals(row)] == [("image", 1, None), ("video", N, 2.0),
                                                                     ("video", N, 4.0)]
    assert visual_counts(row) == (1, 2) and video_mark(still[0]) is None and video_mark(a[0]) == ("a", 2.0)
    with pytest.raises(ValueError, match="still images must come before its videos"):
        visual_counts(a + still)
    with pytest.raises(ValueError, match="positive"):
        mark_video(clip(1), "x", 0.0)


def test_a_video_reads_as_one_video_batched_equal_to_single(handles) -> None:
    h = get(handles, "llava_next_video")
    assert takes_videos(h.processor)
    rows = [mark_video(clip(1), "a", 2.0), mark_video(clip(2), "b", 2.0)]
    enc = build_inputs(h, PROMPTS, rows)
    assert tuple(enc["pixel_values_videos"].shape) == (2, N, 3, 56, 56) and "pixel_values" not in enc
    video_id = next(iter(image_token_ids(h).video))
    per_frame = h.model.config.video_seq_length  # 4: each frame's 4x4 patches pooled 2x2
    assert [(enc["input_ids"][r] == video_id).sum().item() for r in range(2)] == [N * per_frame] * 2
    positions = [Frame(0), Frame(-1), "image_mean", "last", "text_mean"]
    got = capture_layers(h, PROMPTS, rows, layers=[0, h.n_layers - 1], positions=positions)
    for r in range(2):
        one = capture_layers(h, PROMPTS[r:r + 1], rows[r:r + 1], layers=[0, h.n_layers - 1], positions=positions)
        np.testing.assert_allclose(got[r], one[0], rtol=1e-4, atol=1e-5)
    # unmarked, the same frames are images: another input, another reading
    as_images = capture_layers(h, PROMPTS, [clip(1), clip(2)], layers=[0], positions=["last"])
    assert np.abs(as_images[:, 0, 0] - got[:, 0, 3]).max() > 1e-4


def test_frame_k_of_a_video_is_frame_k(handles) -> None:
    h = get(handles, "llava_next_video")
    frames = [Frame(k) for k in range(N)]
    before = capture_layers(h, PROMPTS[:1], [mark_video(clip(1), "a", 2.0)], layers=[h.n_layers - 1], positions=frames)
    repainted = clip(1)[:2] + [clip(6)[2]] + clip(1)[3:]
    after = capture_layers(h, PROMPTS[:1], [mark_video(repainted, "a", 2.0)], layers=[h.n_layers - 1], positions=frames)
    np.testing.assert_array_equal(after[0, 0, :2], before[0, 0, :2])
    assert np.abs(after[0, 0, 2] - before[0, 0, 2]).max() > 1e-4


def test_generation_reads_the_video(handles) -> None:
    h = get(handles, "llava_next_video")
    enc = build_inputs(h, PROMPTS, [mark_video(clip(1), "a", 2.0), mark_video(clip(2), "b", 2.0)], position_ids=False,
                       for_generation=True)
    with torch.no_grad():
        out = generate_encoded(h, enc, max_new_tokens=3)
    assert len(out) == 2


def test_qwen_pairs_frames_into_temporal_patches_timed_by_the_rate(handles) -> None:
    h = get(handles, "qwen2_5_vl")
    assert takes_videos(h.processor)
    rows = [mark_video(clip(1), "a", 2.0), mark_video(clip(2), "b", 4.0)]
    enc = build_inputs(h, PROMPTS, rows)
    assert enc["video_grid_thw"].tolist() == [[N // 2, 6, 6], [N // 2, 6, 6]]  # 72 px -> 84 -> 6x6 patches
    # 2 frames a temporal patch: seconds per patch = 2 / fps
    assert enc["second_per_grid_ts"].tolist() == [1.0, 0.5]
    video_id = next(iter(image_token_ids(h).video))
    assert [(enc["input_ids"][r] == video_id).sum().item() for r in range(2)] == [N // 2 * 9] * 2
    got = capture_layers(h, PROMPTS, rows, layers=[0, h.n_layers - 1], positions=["image_mean", "last"])
    for r in range(2):
        one = capture_layers(h, PROMPTS[r:r + 1], rows[r:r + 1], layers=[0, h.n_layers - 1],
                             positions=["image_mean", "last"])
        np.testing.assert_allclose(got[r], one[0], rtol=1e-4, atol=1e-5)
    # known answer: a video of two equal frames is the image path's patches of that frame, exactly
    frame = clip(3, 1)[0]
    video = h.processor.video_processor(videos=[[frame, frame]], return_tensors="pt")
    image = h.processor.image_processor(images=[frame], return_tensors="pt")
    assert torch.equal(video["pixel_values_videos"], image["pixel_values"])
    assert video["video_grid_thw"].tolist() == image["image_grid_thw"].tolist()
    # no token is one frame's: frame:K is refused, naming why
    with pytest.raises(ValueError, match=r"frames share tokens \(2 frames a temporal patch\)"):
        capture_layers(h, PROMPTS[:1], rows[:1], layers=[0], positions=[Frame(0)])


def test_a_model_without_a_video_path_refuses_marked_frames(handles) -> None:
    h = get(handles, "llava")
    assert not takes_videos(h.processor)
    with pytest.raises(ValueError, match="has no video path, so it cannot read frames marked as a video"):
        build_inputs(h, PROMPTS[:1], [mark_video(clip(1), "a", 2.0)])


def test_the_own_model_pages_video_example_runs_as_written(handles, tmp_path, monkeypatch) -> None:
    """docs/howto/own-model.md, "Clips as video": its block on 32 frames written to clip/, with the tiny
    LLaVA-NeXT-Video as `handle`: the 32 frames are one video, and Frame(-1) reads the last frame
    (what Frame(31) reads)."""
    import re
    from pathlib import Path

    import evprobe

    page = (Path(__file__).parents[2] / "docs" / "howto" / "own-model.md").read_text()
    section = page.split("## Clips as video", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "clip").mkdir()
    for k, frame in enumerate(clip(0, 32), start=1):
        frame.save(tmp_path / "clip" / f"{k:02d}.png")
    handle = get(handles, "llava_next_video")
    namespace = {"evprobe": evprobe, "Image": Image, "handle": handle}
    exec(compile(block, "docs/howto/own-model.md", "exec"), namespace)  # noqa: S102 (the repository's own page)
    assert namespace["logp"].shape == (1, 2) and namespace["acts"].shape == (1, 1, 3, handle.d_model)
    assert visuals(namespace["clip"])[0].kind == "video" and len(visuals(namespace["clip"])) == 1
    last = capture_layers(handle, ["Does the block pass the 2 m mark?"], [namespace["clip"]], layers=[2],
                          positions=[Frame(31)])
    np.testing.assert_array_equal(namespace["acts"][:, :, 2], last[:, :, 0])
