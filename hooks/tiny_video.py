"""Tiny video-capable models saved with their STOCK processors: the video path a real checkpoint takes.

`hooks.tiny_models` builds its processors without torchvision (the PIL image processors, and for
Qwen2.5-VL and LLaVA-NeXT-Video a PIL video path: hooks.processors). A real Qwen2.5-VL, Qwen3-VL,
SmolVLM2 or LLaVA-NeXT-Video checkpoint loads instead through AutoProcessor with transformers' own
video processor, which needs torchvision. `save_tiny_video_model(folder, arch)` saves the tiny model
of `arch` (the weights of `tiny(arch, seed=seed)`) with that stock processor, sized as the tiny
image path is, so `evprobe.load(folder)` takes the same route a real checkpoint does:

| arch             | stock video processor        | what one video becomes                                       |
|------------------|------------------------------|--------------------------------------------------------------|
| qwen2_5_vl       | Qwen2VLVideoProcessor        | frames paired into temporal patches, one run of video pads   |
| qwen3_vl         | Qwen3VLVideoProcessor        | as qwen2_5_vl, each pair after its `<t seconds>` timestamp   |
| smolvlm          | SmolVLMVideoProcessor        | each frame one image (4 tokens), after `Frame from mm:ss:`   |
| llava_next_video | LlavaNextVideoVideoProcessor | each frame 56x56, pooled to 4 `<video>` tokens               |

Image and video settings share the image processor's size, mean and std. Everything else is the
stock class's default. Needs torchvision: without it, this refuses in one line, and `load()` reads
such a folder with hooks.processors' image-only stand-ins (no video path).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

VIDEO_ARCHS: tuple[str, ...] = ("qwen2_5_vl", "qwen3_vl", "smolvlm", "llava_next_video")


def stock_processor(arch: str, processor: Any) -> Any:
    """The stock processor class of `arch`, with its stock video processor, built from the tiny
    `processor`'s image processor, tokenizer and chat template (a video placeholder added where the
    tiny template has none)."""
    from transformers import (
        LlavaNextVideoProcessor,
        LlavaNextVideoVideoProcessor,
        Qwen2_5_VLProcessor,
        Qwen2VLVideoProcessor,
        Qwen3VLProcessor,
        SmolVLMProcessor,
        SmolVLMVideoProcessor,
    )
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    image, tok, template = processor.image_processor, processor.tokenizer, processor.chat_template
    colours = dict(image_mean=list(image.image_mean), image_std=list(image.image_std))
    if arch in ("qwen2_5_vl", "qwen3_vl"):
        video_cls, cls = ((Qwen2VLVideoProcessor, Qwen2_5_VLProcessor) if arch == "qwen2_5_vl"
                          else (Qwen3VLVideoProcessor, Qwen3VLProcessor))
        video = video_cls(size=dict(image.size), patch_size=image.patch_size, merge_size=image.merge_size,
                          temporal_patch_size=image.temporal_patch_size, **colours)
        return cls(image, tok, video, chat_template=template)
    if arch == "smolvlm":
        from evprobe.hooks.tiny_models import SMOLVLM_VIDEO_TEMPLATE

        # Each frame resized to one tile (no splitting), as SmolVLM2's video processor reads frames.
        tile = dict(image.max_image_size)
        video = SmolVLMVideoProcessor(size=tile, max_image_size=tile, **colours)
        return SmolVLMProcessor(image, tok, video, image_seq_len=processor.image_seq_len,
                                chat_template=SMOLVLM_VIDEO_TEMPLATE)
    if arch == "llava_next_video":
        side = int(image.crop_size["height"])
        video = LlavaNextVideoVideoProcessor(size={"shortest_edge": side}, crop_size={"height": side, "width": side},
                                             **colours)
        return LlavaNextVideoProcessor(video, image, tok, chat_template=template, patch_size=processor.patch_size,
                                       vision_feature_select_strategy=processor.vision_feature_select_strategy,
                                       num_additional_image_tokens=processor.num_additional_image_tokens)
    raise ValueError(f"no stock video processor for tiny architecture {arch!r}; valid names: {', '.join(VIDEO_ARCHS)}")


def save_tiny_video_model(folder: str | Path, arch: str, *, seed: int = 0) -> Path:
    """Save the tiny `arch` model (the weights of `hooks.tiny_models.tiny(arch, seed=seed)`) with its stock
    processor and video processor in `folder` (created; float32 safetensors). Returns the folder."""
    from transformers.utils import is_torchvision_available

    if arch not in VIDEO_ARCHS:
        raise ValueError(f"no stock video processor for tiny architecture {arch!r}; valid names: "
                         f"{', '.join(VIDEO_ARCHS)}")
    if not is_torchvision_available():
        raise RuntimeError("save_tiny_video_model needs torchvision (transformers' video processors import it); "
                           "install a torchvision built for this torch, or use hooks.tiny_models's torchvision-free models")
    from evprobe.hooks.tiny_models import tiny

    handle = tiny(arch, seed=seed)
    processor = stock_processor(arch, handle.processor)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    handle.model.save_pretrained(folder, safe_serialization=True)
    processor.save_pretrained(folder)
    return folder


__all__ = ["VIDEO_ARCHS", "save_tiny_video_model", "stock_processor"]
