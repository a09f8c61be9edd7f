"""The seeds' model shapes: the published config.json sizes of each checkpoint (SHAPES), their seed 000
Table 50 anchors, the model lists a run picks from, and the transformers config and processor of a shape."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TextShape:
    """The language model of a checkpoint (config.json's text part)."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    head_dim: int | None = None  # None: hidden // heads
    tied: bool = False  # the LM head shares the input embeddings
    rope_theta: float | None = None  # None: the tiny builder's (it changes no timing)
    mrope_section: tuple[int, ...] | None = None  # Qwen's M-RoPE split of head_dim / 2

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden // self.heads


@dataclass(frozen=True)
class VisionShape:
    """The vision tower (config.json's vision part) and the connector's merge factor."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    patch: int
    image_size: int | None = None  # SigLIP / Pixtral input side in pixels
    merge: int | None = None  # Qwen spatial_merge_size, Mistral 3 spatial_merge_size
    scale_factor: int | None = None  # Idefics3 / SmolVLM pixel shuffle
    temporal_patch: int | None = None
    window: int | None = None  # Qwen2.5-VL window attention, pixels
    fullatt_blocks: tuple[int, ...] | None = None
    out_hidden: int | None = None  # Qwen: the merger's output width (= the text hidden size)


@dataclass(frozen=True)
class ImageSettings:
    """The released image processor's resolution settings (processor classes stay the tiny builder's)."""

    min_pixels: int | None = None  # Qwen: the 672x672 sheets give 48x48 patches -> 576 tokens
    max_pixels: int | None = None
    longest_edge: int | None = None  # Idefics3 / SmolVLM: whole image; Pixtral: the cap
    tile_edge: int | None = None  # Idefics3 / SmolVLM: the tiles the image is split into


@dataclass(frozen=True)
class ModelShape:
    name: str
    arch: str  # hooks.tiny_models architecture whose builder gives tokenizer, template and processor classes
    checkpoint: str
    text: TextShape
    vision: VisionShape
    image: ImageSettings
    anchor_direct_s: float  # seed 000 Table 50 (A100), seconds per call, direct protocol
    anchor_reason_s: float  # the same, reasoning ("brief") protocol


_QWEN_VISION = dict(layers=32, hidden=1280, intermediate=3420, heads=16, patch=14, merge=2, temporal_patch=2,
                    window=112, fullatt_blocks=(7, 15, 23, 31))
_QWEN_IMAGE = ImageSettings(min_pixels=3136, max_pixels=12845056)
_QWEN_ROPE = dict(rope_theta=1e6, mrope_section=(16, 24, 24))
# SigLIP-SO400M at 384 px / 364 px, as SmolVLM2 and Idefics3 use it.
_SIGLIP = dict(hidden=1152, intermediate=4304, layers=27, heads=16, patch=14)

SHAPES: dict[str, ModelShape] = {s.name: s for s in (
    # Qwen/Qwen2.5-VL-3B-Instruct
    ModelShape("qwen2_5_vl_3b", "qwen2_5_vl", "Qwen/Qwen2.5-VL-3B-Instruct",
               TextShape(2048, 11008, 36, 16, 2, 151936, tied=True, **_QWEN_ROPE),
               VisionShape(**_QWEN_VISION, out_hidden=2048), _QWEN_IMAGE, 0.32, 5.42),
    # Qwen/Qwen2.5-VL-7B-Instruct
    ModelShape("qwen2_5_vl_7b", "qwen2_5_vl", "Qwen/Qwen2.5-VL-7B-Instruct",
               TextShape(3584, 18944, 28, 28, 4, 152064, **_QWEN_ROPE),
               VisionShape(**_QWEN_VISION, out_hidden=3584), _QWEN_IMAGE, 0.37, 8.04),
    # Qwen/Qwen2.5-VL-32B-Instruct
    ModelShape("qwen2_5_vl_32b", "qwen2_5_vl", "Qwen/Qwen2.5-VL-32B-Instruct",
               TextShape(5120, 27648, 64, 40, 8, 152064, **_QWEN_ROPE),
               VisionShape(**_QWEN_VISION, out_hidden=5120), _QWEN_IMAGE, 0.87, 15.74),
    # HuggingFaceTB/SmolVLM2-2.2B-Instruct. Pixel shuffle 3, not 4: a 384 px tile at patch 14 is a
    # 27x27 grid, which only 3 (and 9, 27) divide; 3 gives the checkpoint's 81 tokens per tile.
    ModelShape("smolvlm2_2b", "smolvlm", "HuggingFaceTB/SmolVLM2-2.2B-Instruct",
               TextShape(2048, 8192, 24, 32, 32, 49280),
               VisionShape(**_SIGLIP, image_size=384, scale_factor=3),
               ImageSettings(longest_edge=4 * 384, tile_edge=384), 0.50, 3.31),
    # HuggingFaceM4/Idefics3-8B-Llama3: 364 px tiles, 26x26 patches, pixel shuffle 2 -> 169 tokens
    ModelShape("idefics3_8b", "idefics3", "HuggingFaceM4/Idefics3-8B-Llama3",
               TextShape(4096, 14336, 32, 32, 8, 128259),
               VisionShape(**_SIGLIP, image_size=364, scale_factor=2),
               ImageSettings(longest_edge=4 * 364, tile_edge=364), 0.19, 3.79),
    # mistral-community/pixtral-12b, built as hooks.tiny_models's "mistral3" (Pixtral tower + Mistral LM).
    # Merge 1: Pixtral-12B has no patch merger (one token per 16 px patch), Mistral 3 merges 2x2.
    ModelShape("pixtral_12b", "mistral3", "mistral-community/pixtral-12b",
               TextShape(5120, 14336, 40, 32, 8, 131072, head_dim=128),
               VisionShape(hidden=1024, intermediate=4096, layers=24, heads=16, patch=16, image_size=1024, merge=1),
               ImageSettings(longest_edge=1024), 1.20, 6.01),
)}
GPU_MODELS = ("qwen2_5_vl_7b", "qwen2_5_vl_32b", "qwen2_5_vl_3b", "smolvlm2_2b", "idefics3_8b", "pixtral_12b")
GPU_REQUIRED = 2  # the first two of GPU_MODELS share the budget; the others run while time is left
SMALL_MODELS = ("qwen2_5_vl", "llava")
GOAL_SHAPE, GOAL_S = "qwen2_5_vl_7b", 0.12  # seconds per direct call at the 7B shape
MAX_POSITIONS = 32768  # text positions: Idefics3 tiles of two images reach ~7,000 tokens


def text_fields(t: TextShape, max_positions: int = MAX_POSITIONS) -> dict[str, Any]:
    """transformers text-config keys of a TextShape."""
    out: dict[str, Any] = dict(hidden_size=t.hidden, intermediate_size=t.intermediate, num_hidden_layers=t.layers,
                               num_attention_heads=t.heads, num_key_value_heads=t.kv_heads, vocab_size=t.vocab,
                               head_dim=t.head_size, tie_word_embeddings=t.tied,
                               max_position_embeddings=max_positions)
    return out


def _rope(base: dict[str, Any] | None, t: TextShape) -> dict[str, Any] | None:
    rope = dict(base or {})
    if t.rope_theta is not None:
        rope["rope_theta"] = t.rope_theta
    if t.mrope_section is not None:
        rope["mrope_section"] = list(t.mrope_section)
    return rope or None


def vision_fields(arch: str, v: VisionShape) -> dict[str, Any]:
    """transformers vision-config keys of a VisionShape for `arch`."""
    if arch == "qwen2_5_vl":
        return dict(depth=v.layers, hidden_size=v.hidden, intermediate_size=v.intermediate, num_heads=v.heads,
                    patch_size=v.patch, spatial_merge_size=v.merge, temporal_patch_size=v.temporal_patch,
                    window_size=v.window, fullatt_block_indexes=list(v.fullatt_blocks or ()),
                    out_hidden_size=v.out_hidden)
    out = dict(hidden_size=v.hidden, intermediate_size=v.intermediate, num_hidden_layers=v.layers,
               num_attention_heads=v.heads, patch_size=v.patch, image_size=v.image_size)
    if arch == "mistral3":
        out["head_dim"] = v.hidden // v.heads
    return out


def shaped_config(shape: ModelShape, base: Any) -> Any:
    """The tiny builder's config `base` with the published text and vision shape: same class, same
    token ids, same everything else (to_dict -> edit -> from_dict)."""
    d = base.to_dict()
    text = d["text_config"]
    text.update(text_fields(shape.text))
    text.pop("layer_types", None)  # one entry per layer: rebuilt for the new layer count
    text.pop("max_window_layers", None)
    rope = _rope(text.get("rope_parameters"), shape.text)
    if rope is not None:
        text["rope_parameters"] = rope
    d["vision_config"].update(vision_fields(shape.arch, shape.vision))
    d["tie_word_embeddings"] = shape.text.tied
    if shape.vision.scale_factor is not None:
        d["scale_factor"] = shape.vision.scale_factor
    if shape.arch == "mistral3" and shape.vision.merge is not None:
        d["spatial_merge_size"] = shape.vision.merge
    return type(base).from_dict(d)


def image_seq_len(v: VisionShape) -> int:
    """Tokens per tile after the pixel shuffle (Idefics3 / SmolVLM): (side / patch)^2 / scale^2."""
    side = (v.image_size or 0) // v.patch
    if not v.scale_factor or side % v.scale_factor:
        raise ValueError(f"a {side}x{side} patch grid cannot be pixel-shuffled by {v.scale_factor}")
    return (side // v.scale_factor) ** 2


def shaped_processor(shape: ModelShape, base: Any) -> Any:
    """The tiny builder's processor classes, tokenizer and chat template with the released resolution."""
    image_cls, tok, template = type(base.image_processor), base.tokenizer, base.chat_template
    v, im = shape.vision, shape.image
    if shape.arch == "qwen2_5_vl":
        ip = image_cls(min_pixels=im.min_pixels, max_pixels=im.max_pixels, patch_size=v.patch, merge_size=v.merge,
                       temporal_patch_size=v.temporal_patch)
        return type(base)(ip, tok, chat_template=template)
    if shape.arch in ("idefics3", "smolvlm"):
        ip = image_cls(size={"longest_edge": im.longest_edge}, max_image_size={"longest_edge": im.tile_edge},
                       do_image_splitting=True)
        return type(base)(ip, tok, image_seq_len=image_seq_len(v), chat_template=template)
    if shape.arch == "mistral3":
        ip = image_cls(size={"longest_edge": im.longest_edge}, patch_size={"height": v.patch, "width": v.patch})
        return type(base)(ip, tok, patch_size=v.patch, spatial_merge_size=v.merge or 1, chat_template=template)
    raise ValueError(f"no processor settings for arch {shape.arch!r}")
