"""Run in the video environment (torchvision; `.ci/run` makes `.venv-video`) by test_stock_video.py:

    python tests/hooks/stock_video_driver.py OUT BENCH

For each of hooks.tiny_video.VIDEO_ARCHS: save the tiny model with its stock processor (OUT/models/
<arch>), load it as a real checkpoint loads, and on the clip benchmark BENCH run `evprobe run` and
`evprobe capture` with `--video-input native` in batches of 3 and of 1, and as frames. Beside it,
the torchvision-free video paths (hooks.tiny_models: Qwen2.5-VL, LLaVA-NeXT-Video) against the stock ones
on the same clips and weights, and Qwen3-VL's stock frame sampling on a clip faster than 2 fps.
Writes OUT/driver.json; test_stock_video.py reads it and the run folders (this file asserts nothing).
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

COMMON = ["--requests", "answer_after_test", "--limit", "3", "--quiet"]


def _cli(args: list[str]) -> tuple[int, str]:
    """experiments.cli.main's exit code and what it wrote to stderr."""
    import contextlib
    import io

    from evprobe.experiments.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(args)
    return code, err.getvalue()


def _rows(bench: Path) -> tuple[list[str], list[list[Any]]]:
    """The prompts and clips (marked as videos) of the first 3 answer_after_test items."""
    from evprobe.bench.manifest import load_item_images, read_items

    items = [it for it in read_items(bench) if it.request == "answer_after_test"][:3]
    return [it.prompt for it in items], [load_item_images(bench, it.images, clips_as_video=True) for it in items]


def _last_logprobs(handle: Any, prompts: list[str], videos: list[list[Any]]) -> Any:
    """(rows, vocab) log-probabilities of the next token after each row (hooks.inputs.build_inputs)."""
    import torch

    from evprobe.hooks.inputs import build_inputs

    enc = build_inputs(handle, prompts, videos)
    with torch.no_grad():
        return torch.log_softmax(handle.model(**enc).logits[:, -1].float(), dim=-1), enc


def _parity(arch: str, folder: Path, bench: Path) -> dict[str, Any]:
    """The torchvision-free path (tiny(arch)) against the stock one (the saved folder), same weights."""
    import torch

    from evprobe.hooks.loading import load

    tiny = importlib.import_module("evprobe.hooks.tiny_models").tiny
    prompts, videos = _rows(bench)
    mine, enc_mine = _last_logprobs(tiny(arch), prompts, videos)
    stock, enc_stock = _last_logprobs(load(str(folder)), prompts, videos)
    same_ids = torch.equal(enc_mine["input_ids"], enc_stock["input_ids"])
    pixels = enc_mine["pixel_values_videos"].float(), enc_stock["pixel_values_videos"].float()
    return {"same_input_ids": bool(same_ids), "n_tokens": int(enc_mine["input_ids"].shape[1]),
            "pixel_shape_equal": pixels[0].shape == pixels[1].shape,
            "pixel_max_abs": float((pixels[0] - pixels[1]).abs().max()) if pixels[0].shape == pixels[1].shape else None,
            "pixel_mean_abs": float((pixels[0] - pixels[1]).abs().mean()) if pixels[0].shape == pixels[1].shape else None,
            "logprob_max_abs": float((mine - stock).abs().max()),
            "argmax_equal": bool(torch.equal(mine.argmax(-1), stock.argmax(-1)))}


def _qwen3_sampling(folder: Path) -> dict[str, Any]:
    """A 16-frame clip at 4 fps through the stock Qwen3-VL processor: as evprobe calls it (every frame
    read) and with the stock default (sampled to 2 fps)."""
    import numpy as np
    from PIL import Image

    from evprobe.core.video import mark_video, visuals
    from evprobe.hooks.inputs import build_inputs, video_metadata
    from evprobe.hooks.loading import load

    handle = load(str(folder))
    rng = np.random.default_rng(0)
    frames = mark_video([Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)) for _ in range(16)],
                        "clip", 4.0)
    ours = build_inputs(handle, ["what?"], [frames])
    text = handle.processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "what?"}]}],
        add_generation_prompt=True, tokenize=False)
    default = handle.processor(text=[text], videos=[list(frames)], video_metadata=[video_metadata(visuals(frames)[0])],
                               return_tensors="pt")
    return {"frames": 16, "grid_t": int(ours["video_grid_thw"][0, 0]),
            "grid_t_stock_default": int(default["video_grid_thw"][0, 0]),
            "temporal_patch": int(handle.processor.video_processor.temporal_patch_size)}


def _frame_runs(folder: Path, bench: Path) -> dict[str, Any]:
    """SmolVLM2 writes each frame as its own run of image tokens (after "Frame from mm:ss:"): the
    positions `frame:K` reads (hooks.positions: the K-th equal share of the row's image tokens) beside
    those runs, on the first row (the answer_after_test item's two clips)."""
    from evprobe.hooks.inputs import build_inputs
    from evprobe.hooks.loading import load
    from evprobe.hooks.positions import Frame, row_indices
    from evprobe.hooks.spans import batch_spans

    handle = load(str(folder))
    prompts, videos = _rows(bench)
    enc = build_inputs(handle, prompts[:1], videos[:1])
    n = [len(videos[0])]
    spans = batch_spans(handle, enc, prompts[:1], n)
    frames = [list(row_indices(handle, enc, prompts[:1], n, spans, [Frame(k)])[0][0]) for k in range(n[0])]
    runs: list[list[int]] = []
    for i in spans[0].image:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return {"frames": frames, "runs": runs}


def main(out: Path, bench: Path) -> None:
    from evprobe.hooks.inputs import takes_videos
    from evprobe.hooks.loading import load
    from evprobe.hooks.tiny_video import VIDEO_ARCHS, save_tiny_video_model

    result: dict[str, Any] = {"archs": {}}
    for arch in VIDEO_ARCHS:
        folder = save_tiny_video_model(out / "models" / arch, arch)
        handle = load(str(folder))
        info: dict[str, Any] = {"processor": type(handle.processor).__name__,
                                "video_processor": type(handle.processor.video_processor).__name__,
                                "takes_videos": takes_videos(handle.processor), "folder": str(folder)}
        frame = arch in ("smolvlm", "llava_next_video")  # Qwen's frames share temporal patches
        positions = "last,image_mean" + (",frame:1" if frame else "")
        for command, extra in (("run", []), ("capture", ["--layers", "0,2", "--positions", positions])):
            base = [command, "--model", str(folder), "--bench", str(bench), *COMMON, *extra]
            for name, flags in (("v3", ["--video-input", "native", "--batch-size", "3"]),
                                ("v1", ["--video-input", "native", "--batch-size", "1"]),
                                ("f", ["--batch-size", "3"])):
                code, err = _cli(base + ["--out", str(out / command / arch / name), *flags])
                info[f"{command}_{name}"] = {"code": code, "stderr": err[-2000:]}
        if not frame:
            refused = out / "capture" / arch / "frame"
            code, err = _cli(["capture", "--model", str(folder), "--bench", str(bench), *COMMON, "--layers", "0",
                              "--positions", "frame:1", "--video-input", "native", "--out", str(refused)])
            info["frame_refused"] = {"code": code, "stderr": err, "wrote": refused.exists() and any(refused.iterdir())}
        if arch in ("qwen2_5_vl", "llava_next_video"):
            info["parity"] = _parity(arch, folder, bench)
        if arch == "qwen3_vl":
            info["sampling"] = _qwen3_sampling(folder)
        if arch == "smolvlm":
            info["frame_runs"] = _frame_runs(folder, bench)
        result["archs"][arch] = info
    import torch
    import torchvision

    result["versions"] = {"torch": torch.__version__, "torchvision": torchvision.__version__}
    (out / "driver.json").write_text(json.dumps(result, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
