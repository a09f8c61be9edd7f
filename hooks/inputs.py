"""Turn prompts + images into model inputs: one chat turn (or one raw string) per row, one processor call.

With `Handle.prompt_format == "chat"` (a model with a chat template) every row is a single user
message whose content is its images (in order) then its text, rendered with the processor's chat
template and an assistant generation prompt. With "raw" (a base model, or asked for) the row's
text is the prompt string itself, after one image placeholder per image (the processor's
`image_token`) when it has images. Either way, for readouts of the answer, the handle's answer
prefix follows (Handle.answer_prefix). Images are optional: `images=None` is no image on any row.
Video: frames marked as one video (`core.video.mark_video`) are read as ONE video by a processor with a
video path (a video placeholder in the turn, the frames in the processor's `videos=`), after the row's
still images; a processor without one refuses them in one line (`takes_videos`). Unmarked frames are
images.
All rows go through ONE processor call with left padding,
so row i of every tensor belongs to prompt i and the last position of every row
is its last real token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from PIL import Image
    from transformers import BatchFeature

    from evprobe.core.video import Visual
    from evprobe.hooks.handle import Handle


def user_message(prompt: str, n_images: int, n_videos: int = 0) -> list[dict]:
    """A one-turn conversation: images first, then videos, then the text."""
    content = ([{"type": "image"} for _ in range(n_images)] + [{"type": "video"} for _ in range(n_videos)]
               + [{"type": "text", "text": prompt}])
    return [{"role": "user", "content": content}]


def visual_counts(row: Sequence[Any]) -> tuple[int, int]:
    """(images, videos) of a row as the model reads it (`core.video.visuals`: a run of frames marked as
    one video is one video); a still image after a video is refused, since the turn puts images first."""
    from evprobe.core.video import visuals

    kinds = [v.kind for v in visuals(row)]
    if "video" in kinds and "image" in kinds[kinds.index("video"):]:
        raise ValueError("a row's still images must come before its videos (the turn shows images, then videos)")
    return kinds.count("image"), kinds.count("video")


def render_prompts(handle: Handle, prompts: Sequence[str], images: Sequence[Sequence[Image.Image]], *,
                   for_generation: bool = False, processor: Any = None) -> list[str]:
    """Chat-template text of each row (image placeholders not yet expanded), then the handle's
    answer prefix unless for_generation. processor: whose chat template (default the handle's)."""
    processor = handle.processor if processor is None else processor
    tail = "" if for_generation else handle.answer_prefix
    counts = [visual_counts(imgs) for imgs in images]
    if getattr(handle, "prompt_format", "chat") == "raw":
        return [raw_text(processor, p, n, v) + tail for p, (n, v) in zip(prompts, counts, strict=True)]
    extra = template_kwargs(getattr(handle, "thinking", None))  # the thinking switch, when set (Handle.thinking)
    return [processor.apply_chat_template(user_message(p, n, v), add_generation_prompt=True, tokenize=False, **extra)
            + tail for p, (n, v) in zip(prompts, counts, strict=True)]


THINKING: tuple[str, ...] = ("on", "off")  # Handle.thinking's values (None: the template's default)
THINKING_SWITCH = "enable_thinking"  # the template variable Qwen3's chat templates read


def template_kwargs(thinking: str | None) -> dict[str, bool]:
    """What the chat template is given beyond the turn: `enable_thinking` when the switch is set."""
    return {} if thinking is None else {THINKING_SWITCH: thinking == "on"}


def raw_text(processor: Any, prompt: str, n_images: int, n_videos: int = 0) -> str:
    """A raw row: one image placeholder per image (the processor's `image_token`), one video placeholder
    per video (`video_token`), then the prompt. No role header, no generation prompt: a base model
    continues the string."""
    out = ""
    for kind, n in (("image", n_images), ("video", n_videos)):
        if n == 0:
            continue
        token = getattr(processor, f"{kind}_token", None) or getattr(getattr(processor, "tokenizer", None),
                                                                     f"{kind}_token", None)
        if not token:
            raise ValueError(f"prompt_format='raw' with {kind}s needs the processor's {kind} placeholder "
                             f"(`{kind}_token`), which {type(processor).__name__} lacks; use prompt_format='chat'")
        out += token * n
    return out + prompt


def image_rows(prompts: Sequence[str], images: Sequence[Sequence[Image.Image]] | None) -> Sequence[Sequence]:
    """`images`, or one empty image list per prompt when None (a text-only call)."""
    if images is None:
        if isinstance(prompts, str):
            raise TypeError("prompts must be a list of strings, not a string")
        return [[] for _ in prompts]
    return images


def _check(prompts: Sequence[str], images: Sequence[Sequence[Image.Image]] | None) -> Sequence[Sequence]:
    """The checked image rows (`image_rows`: one empty list per prompt for None)."""
    images = image_rows(prompts, images)
    if isinstance(prompts, str):
        raise TypeError("prompts must be a list of strings, not a string")
    if len(prompts) == 0:
        raise ValueError("no prompts given")
    if len(images) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(images)} image lists (give one list per prompt)")
    for i, imgs in enumerate(images):
        if not isinstance(imgs, (list, tuple)):
            raise TypeError(f"images[{i}] must be a list of PIL images (use [] for none), got {type(imgs).__name__}")
    return images


def build_inputs(
    handle: Handle,
    prompts: Sequence[str],
    images: Sequence[Sequence[Image.Image]] | None = None,
    *,
    position_ids: bool = True,
    for_generation: bool = False,
) -> BatchFeature:
    """Model inputs for a batch of (prompt, images) rows, on the model's device.

    prompts: one string per row.
    images: one list of PIL images per row (may be empty); None = no images on any row. Frames
        marked as one video (`core.video.mark_video`) are read as a video (module docstring).
    position_ids: also return the position ids generation would use, derived
        from the attention mask (so a plain forward or trace on left-padded rows
        sees the same positions as the same row alone; Qwen's 3D M-RoPE ids
        included). Set False to get the processor's output only.
    for_generation: end each row at the generation prompt (the model writes its reply, the
        answer prefix included). Otherwise (every readout of the answer) the handle's
        `answer_prefix` follows it, so the last position predicts the answer's first token.

    Returns the processor's BatchFeature: input_ids and attention_mask
    (batch, seq), the arch's image tensors (pixel_values, image_grid_thw, ...),
    plus position_ids ((batch, seq), or (4, batch, seq) for Qwen-VL).
    """
    enc = to_model(handle, encode_inputs(handle, prompts, images, for_generation=for_generation))
    if position_ids and "position_ids" not in enc:
        pos = generation_position_ids(handle, enc)
        if pos is not None:
            enc["position_ids"] = pos
    return enc


def encode_inputs(
    handle: Handle,
    prompts: Sequence[str],
    images: Sequence[Sequence[Image.Image]] | None = None,
    *,
    for_generation: bool = False,
    processor: Any = None,
) -> BatchFeature:
    """The processor's output for a batch of rows, on the CPU (`build_inputs` without the move to
    the model and the position ids): the part a thread can prepare while the model runs.

    processor: the processor to call (default the handle's). A thread preparing inputs passes its
    own copy (`copy.deepcopy(handle.processor)`), so no tokenizer object is used by two threads."""
    images = _check(prompts, images)
    processor = handle.processor if processor is None else processor
    # Images as one sub-list per row (empty for a text-only row). All eight tiny
    # archs accept this layout; Gemma 3 refuses a flat list (it reads all the
    # images as one row's).
    from evprobe.core.video import visuals

    grouped = [visuals(imgs) for imgs in images]
    rows = [[v.frames[0] for v in row if v.kind == "image"] for row in grouped]
    videos = [list(v.frames) for row in grouped for v in row if v.kind == "video"]
    if (any(rows) or videos) and not takes_images(processor):  # a tokenizer would drop them without a word
        raise ValueError(f"this model's processor ({type(processor).__name__}) is a tokenizer and takes no images; "
                         "give every row an empty image list (or images=None), or load a vision-language model")
    if videos and not takes_videos(processor):
        raise ValueError(f"this model's processor ({type(processor).__name__}) has no video path, so it cannot read "
                         "frames marked as a video; pass the frames unmarked (as images)")
    texts = render_prompts(handle, prompts, images, for_generation=for_generation, processor=processor)
    tokenizer = getattr(processor, "tokenizer", processor)
    tokenizer.padding_side = "left"
    kwargs = dict(text=texts, padding=True, padding_side="left", return_tensors="pt")
    if any(rows):
        kwargs["images"] = rows
    if videos:
        kwargs["videos"] = videos  # every row's videos in order: the processor fills placeholders in text order
        # Each video's rate, length and frame indices: Qwen-VL times its temporal positions by the rate,
        # SmolVLM writes each frame's timestamp (index / rate) into the prompt.
        kwargs["video_metadata"] = [video_metadata(v) for row in grouped for v in row if v.kind == "video"]
        # Every frame given is read: a stock video processor that samples by rate (Qwen3-VL's, at 2 fps)
        # would otherwise drop frames of a faster clip, possibly the decisive last one.
        kwargs["do_sample_frames"] = False
    return processor(**kwargs)


class VideoMetadata(TypedDict):
    """transformers' VideoMetadata fields, as a video processor takes them (one dict per video)."""

    fps: float
    total_num_frames: int
    frames_indices: list[int]
    duration: float


def video_metadata(video: Visual) -> VideoMetadata:
    """What a video processor is told of one video (`core.video.Visual`): its frames are the whole
    video, played at its rate (transformers' VideoMetadata fields)."""
    n = len(video.frames)
    return {"fps": video.fps, "total_num_frames": n, "frames_indices": list(range(n)), "duration": n / video.fps}


def takes_videos(processor: Any) -> bool:
    """Whether the processor has a video path: a video processor and a video placeholder token."""
    return getattr(processor, "video_processor", None) is not None and bool(getattr(processor, "video_token", None))


def takes_images(processor: Any) -> bool:
    """False for a plain tokenizer (a text-only model), True for any other processor."""
    from transformers import PreTrainedTokenizerBase

    return not isinstance(processor, PreTrainedTokenizerBase)


def context_length(model: Any) -> int | None:
    """The language model's context in tokens (its config's `max_position_embeddings`, of the text
    config for a vision-language model), or None when the config does not say."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    value = getattr(text, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


def to_model(handle: Handle, enc: BatchFeature) -> BatchFeature:
    """Move tensors to the model device; floating tensors (pixels) to the model dtype."""
    import torch

    device, dtype = handle.device, handle.dtype
    for key, value in list(enc.items()):
        if isinstance(value, torch.Tensor):
            enc[key] = value.to(device=device, dtype=dtype if value.is_floating_point() else None)
    return enc


def generation_position_ids(handle: Handle, enc: BatchFeature):
    """Position ids exactly as `model.generate` would build them for `enc`.

    Uses the model's own `_prepare_position_ids_for_generation` (mask cumsum for
    1D RoPE models, 3D M-RoPE for Qwen-VL) so forward passes and generation agree.
    Returns None for models whose forward takes no position_ids.
    """
    import inspect

    model = handle.model
    if "position_ids" not in inspect.signature(model.forward).parameters:
        return None
    prepare = getattr(model, "_prepare_position_ids_for_generation", None)
    kwargs = {k: v for k, v in enc.items()}
    if prepare is not None:
        return prepare(enc["input_ids"], kwargs)
    mask = enc["attention_mask"]
    return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)  # (batch, seq)


def repeat_rows(enc: Any, n: int, k: int) -> Any | None:
    """enc with every row-major tensor repeated k times (direction-major: k blocks of the n rows),
    or None when some tensor is not row-major (pixel patches of several images, Qwen's 3D ids)."""
    import torch

    out = {}
    for key, value in enc.items():
        if isinstance(value, torch.Tensor):
            if value.ndim == 0 or value.shape[0] != n:
                return None
            out[key] = value.repeat((k,) + (1,) * (value.ndim - 1))
        else:
            return None
    return out
