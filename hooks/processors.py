"""Processor classes that work without torchvision.

Two problems on a CPU machine without torchvision:
- Qwen2.5-VL, Qwen3-VL, SmolVLM and LLaVA-NeXT-Video processors require a video processor, and every
  video processor needs torchvision. The `NoVideo*` subclasses drop that argument
  (images only); their parent's `__init__` still passes `video_processor=None`
  positionally, which `ProcessorMixin.__init__` ignores because `get_attributes()`
  reads our signature (image_processor, tokenizer).
- `PixtralProcessor` (Mistral 3) cannot be imported at all without torchvision.
  `TinyPixtralProcessor` does what it does: resize the image to whole patches
  (PixtralImageProcessorPil) and write one `[IMG]` per merged patch, an
  `[IMG_BREAK]` after each row and `[IMG_END]` in place of the last break.

`PilVideoProcessor` and `QwenPilVideoProcessor` are video paths without torchvision: each frame
through the model's PIL image processor (the tiny LLaVA-NeXT-Video and Qwen2.5-VL read frames marked
as a video through them).

All processor classes here are listed in LOCAL_PROCESSORS so that `load()` can find them by
the `processor_class` name saved in processor_config.json (AutoProcessor cannot).
"""

from __future__ import annotations

import numpy as np
from transformers.models.llava_next_video.processing_llava_next_video import LlavaNextVideoProcessor
from transformers.models.pixtral.image_processing_pil_pixtral import (
    get_resize_output_image_size,
)
from transformers.models.qwen2_5_vl.processing_qwen2_5_vl import Qwen2_5_VLProcessor
from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
from transformers.models.smolvlm.processing_smolvlm import SmolVLMProcessor
from transformers.processing_utils import MultiModalData, ProcessorMixin


class NoVideoQwen2_5_VLProcessor(Qwen2_5_VLProcessor):
    """Qwen2_5_VLProcessor without the stock video processor (it needs torchvision); given
    `video_frames` (QwenPilVideoProcessor), it reads frames marked as a video through it."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, video_frames=None, **kwargs):
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)
        # Not named video_processor: ProcessorMixin would then count it among the saved attributes.
        if video_frames is not None:
            self.video_processor = video_frames


class NoVideoQwen3VLProcessor(Qwen3VLProcessor):
    """Qwen3VLProcessor for images only (no video processor, so no torchvision)."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)


class NoVideoLlavaNextVideoProcessor(LlavaNextVideoProcessor):
    """LlavaNextVideoProcessor for images only (no video processor, so no torchvision).

    The benchmark shows still measurement sheets; LLaVA-NeXT-Video reads them through its
    image path (anyres tiles). Given a `video_frames` (PilVideoProcessor), it reads frames marked as
    a video (hooks.inputs) through its video path too, as the seed 002 replication fed it 32 frames.
    """

    def __init__(
        self,
        image_processor=None,
        tokenizer=None,
        chat_template=None,
        patch_size=None,
        vision_feature_select_strategy=None,
        image_token="<image>",
        video_token="<video>",
        num_additional_image_tokens=0,
        video_frames=None,
        **kwargs,
    ):
        # The parent passes (video_processor, image_processor, tokenizer) positionally, which
        # would not line up with our attributes (image_processor, tokenizer): set its fields
        # here and call ProcessorMixin directly.
        self.patch_size = patch_size
        self.num_additional_image_tokens = num_additional_image_tokens
        self.vision_feature_select_strategy = vision_feature_select_strategy
        self.image_token = getattr(tokenizer, "image_token", None) or image_token
        self.video_token = getattr(tokenizer, "video_token", None) or video_token
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)
        # Not named video_processor: ProcessorMixin would then count it among the saved attributes.
        if video_frames is not None:  # frames marked as a video are read as one (hooks.inputs)
            self.video_processor = video_frames


class NoVideoSmolVLMProcessor(SmolVLMProcessor):
    """SmolVLMProcessor for images only (no video processor, so no torchvision)."""

    def __init__(self, image_processor, tokenizer, image_seq_len: int = 169, chat_template=None, **kwargs):
        super().__init__(
            image_processor, tokenizer, None, image_seq_len=image_seq_len, chat_template=chat_template, **kwargs
        )

    def apply_chat_template(self, conversation, chat_template=None, **kwargs):
        # SmolVLMProcessor's override only adds video defaults read from
        # self.video_processor (absent here); use the generic ProcessorMixin one.
        return ProcessorMixin.apply_chat_template(self, conversation, chat_template, **kwargs)


class TinyPixtralProcessor(ProcessorMixin):
    """The text/image expansion of transformers' PixtralProcessor, importable without torchvision.

    Uses PixtralImageProcessorPil. `patch_size` is the vision tower's patch size and
    `spatial_merge_size` the Mistral 3 projector's merge factor: one `[IMG]` token
    stands for a (patch_size * spatial_merge_size)^2 pixel block.
    """

    def __init__(
        self,
        image_processor=None,
        tokenizer=None,
        patch_size: int = 16,
        spatial_merge_size: int = 1,
        chat_template=None,
        image_token: str = "[IMG]",
        image_break_token: str = "[IMG_BREAK]",
        image_end_token: str = "[IMG_END]",
        **kwargs,
    ):
        super().__init__(image_processor, tokenizer, chat_template=chat_template)
        self.patch_size = patch_size
        self.spatial_merge_size = spatial_merge_size
        self.image_token = image_token
        self.image_break_token = image_break_token
        self.image_end_token = image_end_token
        self.image_token_id = tokenizer.convert_tokens_to_ids(image_token)
        self.image_break_token_id = tokenizer.convert_tokens_to_ids(image_break_token)
        self.image_end_token_id = tokenizer.convert_tokens_to_ids(image_end_token)

    @property
    def image_token_ids(self) -> list[int]:
        return [self.image_token_id, self.image_break_token_id, self.image_end_token_id]

    def _process_images(self, images, **images_kwargs):
        # The image processor must pad/resize to whole merged blocks.
        images_kwargs["patch_size"] = self.patch_size * self.spatial_merge_size
        return super()._process_images(images, **images_kwargs)

    def replace_image_token(self, image_inputs: dict, image_idx: int, **kwargs) -> str:
        block = self.patch_size * self.spatial_merge_size
        height, width = (int(v) for v in image_inputs["image_sizes"][image_idx])
        rows, cols = height // block, width // block
        tokens = ([self.image_token] * cols + [self.image_break_token]) * rows
        tokens[-1] = self.image_end_token
        return "".join(tokens)

    def _get_num_multimodal_tokens(self, image_sizes=None, **kwargs):
        vision_data = {}
        if image_sizes is not None:
            images_kwargs = self._merge_kwargs(**kwargs)["images_kwargs"]
            size = images_kwargs.get("size", None) or self.image_processor.size
            block = self.patch_size * self.spatial_merge_size
            num_image_tokens = []
            for height, width in image_sizes:
                h, w = get_resize_output_image_size(
                    np.zeros((height, width, 3)),
                    size=(size["longest_edge"], size["longest_edge"]),
                    patch_size=(block, block),
                )
                num_image_tokens.append((w // block + 1) * (h // block))
            vision_data.update({"num_image_tokens": num_image_tokens, "num_image_patches": [1] * len(image_sizes)})
        return MultiModalData(**vision_data)

    @property
    def model_input_names(self):
        return self.tokenizer.model_input_names + self.image_processor.model_input_names + ["image_sizes"]


class PilVideoProcessor:
    """A video processor without torchvision: every frame of every video through a PIL image processor
    (resize, centre crop, rescale, normalize: what LLaVA-NeXT-Video's video processor does to each
    frame), stacked as `pixel_values_videos` (videos, frames, channels, height, width). Videos of one
    call must have one frame count (they are stacked). Not saved with the processor (it is not one of
    its attributes): a processor loaded from disk has no video path unless it is given one again."""

    def __init__(self, image_processor) -> None:
        self.image_processor = image_processor

    def __call__(self, videos, return_tensors=None, **kwargs):
        from transformers.feature_extraction_utils import BatchFeature
        from transformers.video_utils import make_batched_videos

        stacked = [self.image_processor(images=list(frames), return_tensors="np")["pixel_values"]  # (frames, C, H, W)
                   for frames in make_batched_videos(videos)]
        if len({v.shape for v in stacked}) > 1:
            raise ValueError(f"videos of one call must have one frame count and size, got {sorted({v.shape for v in stacked})}")
        return BatchFeature({"pixel_values_videos": np.stack(stacked)}, tensor_type=return_tensors)


class QwenPilVideoProcessor:
    """Qwen2-VL's video processing without torchvision: every frame resized, rescaled and normalized by
    the model's PIL image processor (its `size`, mean and std), then each pair of consecutive frames
    made one temporal patch (`temporal_patch_size` 2; an odd count repeats the last frame), laid out as
    Qwen2VLVideoProcessor.patchify lays them out: `pixel_values_videos` (patches, C * 2 * P * P),
    `video_grid_thw` (videos, 3) and `video_metadata` (each video's rate, for the temporal positions).
    A video of two equal frames gives exactly the image path's patches of that frame (tested). Not
    saved with the processor (see PilVideoProcessor)."""

    def __init__(self, image_processor) -> None:
        self.image_processor = image_processor
        self.patch_size = int(image_processor.patch_size)
        self.merge_size = int(image_processor.merge_size)
        self.temporal_patch_size = int(image_processor.temporal_patch_size)

    def __call__(self, videos, return_tensors=None, video_metadata=None, **kwargs):
        from transformers.feature_extraction_utils import BatchFeature
        from transformers.video_utils import VideoMetadata, make_batched_videos

        batched = make_batched_videos(videos)
        metadata = list(video_metadata) if video_metadata is not None else [None] * len(batched)
        flat, grids, metas = [], [], []
        for frames, meta in zip(batched, metadata, strict=True):
            frames = list(frames)
            frames += frames[-1:] * (-len(frames) % self.temporal_patch_size)
            # each frame alone: (grid_h * grid_w, C * 1 * P * P), rows in the merge order, and its grid
            one = self.image_processor(images=frames, temporal_patch_size=1, return_tensors="np")
            grid = one["image_grid_thw"]  # (frames, 3): 1, grid_h, grid_w each
            if len({tuple(g) for g in grid.tolist()}) > 1:
                raise ValueError("a video's frames must have one size")
            _, grid_h, grid_w = (int(v) for v in grid[0])
            n, c, p, tp = grid_h * grid_w, 3, self.patch_size, self.temporal_patch_size
            per_frame = one["pixel_values"].reshape(len(frames), n, c, 1, p, p)
            grid_t = len(frames) // tp
            # (grid_t, tp, n, C, 1, P, P) -> (grid_t, n, C, tp, P, P): a patch's channels, then its frames
            pairs = per_frame.reshape(grid_t, tp, n, c, p, p).transpose(0, 2, 3, 1, 4, 5)
            flat.append(pairs.reshape(grid_t * n, c * tp * p * p))
            grids.append([grid_t, grid_h, grid_w])
            fps = None if meta is None else (meta.get("fps") if isinstance(meta, dict) else meta.fps)
            metas.append(VideoMetadata(total_num_frames=len(frames), fps=fps))
        data = {"pixel_values_videos": np.concatenate(flat), "video_grid_thw": np.array(grids, dtype=np.int64)}
        out = BatchFeature(data, tensor_type=return_tensors)
        out["video_metadata"] = metas
        return out


# processor_class name (as saved in processor_config.json) -> class.
LOCAL_PROCESSORS: dict[str, type[ProcessorMixin]] = {
    cls.__name__: cls
    for cls in (
        NoVideoQwen2_5_VLProcessor,
        NoVideoQwen3VLProcessor,
        NoVideoSmolVLMProcessor,
        NoVideoLlavaNextVideoProcessor,
        TinyPixtralProcessor,
    )
}

# Stock processor class -> our torchvision-free stand-in, for real checkpoints on
# machines without torchvision.
TORCHVISION_FREE: dict[str, type[ProcessorMixin]] = {
    "Qwen2_5_VLProcessor": NoVideoQwen2_5_VLProcessor,
    "Qwen3VLProcessor": NoVideoQwen3VLProcessor,
    "SmolVLMProcessor": NoVideoSmolVLMProcessor,
    "LlavaNextVideoProcessor": NoVideoLlavaNextVideoProcessor,
    "PixtralProcessor": TinyPixtralProcessor,
}
