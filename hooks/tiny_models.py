"""Tiny randomly initialised vision-language models, built offline.

`tiny(arch)` returns a Handle on a model of the named architecture with random
(seeded) weights, a tokenizer built locally (hooks.tiny_tokenizer) and the
architecture's own image processor (the PIL variant: no torchvision) set to shrink
every image to a few patches. They exist to test the plumbing (inputs, batching,
capture, steering) on the real transformers code paths in well under a second
per forward on CPU; their outputs are meaningless.

Common sizes: language model with 4 decoder layers, hidden 64, 4 heads (2 KV
heads, head_dim 16), MLP 128; vision towers with 2 layers, hidden 32.

Image sizes used by the tiny processors (any input size is resized down):
| arch        | pixels seen by the tower              | image tokens per image        |
|-------------|---------------------------------------|-------------------------------|
| qwen2_5_vl  | up to 112x112 (patch 14, merge 2)     | 16 for a square image         |
| qwen3_vl    | up to 128x128 (patch 16, merge 2)     | 16 for a square image         |
| idefics3    | 64x64 split in 2x2 tiles of 32 + a 32x32 global view (patch 8, pixel shuffle 2) | 5 x 4 (+ tile markers) |
| smolvlm     | as idefics3                           | as idefics3                   |
| llava       | 56x56 centre crop (patch 14)          | 16                            |
| llava_next  | 56x56 base + anyres tiles of 56 on pinpoints up to 112x112 | 16 + up to 64 + row newlines |
| gemma3      | 56x56 (patch 14, pooled to 2x2)       | 4 (+ boi/eoi and newlines)    |
| mistral3    | longest edge 64 (patch 8, merge 2)    | 16 + row breaks for a square  |
| llava_next_video | as llava_next; a video's frames: 56x56 centre crops (PilVideoProcessor) | as llava_next; 4 a video frame (pooled 2x2) |

Frames marked as a video (core.video) are read as one by llava_next_video (above) and qwen2_5_vl
(QwenPilVideoProcessor: frames sized as images, paired into temporal patches: 16 tokens per two
frames of a square clip); the other archs have no video path and refuse them. The same models saved
with transformers' own video processors (Qwen3-VL and SmolVLM2 among them; torchvision needed):
hooks.tiny_video.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from evprobe.hooks.chat_templates import chat_template

if TYPE_CHECKING:
    from evprobe.hooks.handle import Handle

# Architectures `tiny()` can build, by the name used in "tiny:<arch>".
TINY_ARCHS: tuple[str, ...] = (
    "qwen2_5_vl",
    "qwen3_vl",
    "idefics3",
    "llava",
    "llava_next",
    "gemma3",
    "mistral3",
    "smolvlm",
    "llava_next_video",
)

# Language model shape shared by all tiny archs.
N_LAYERS = 4
D_MODEL = 64
N_HEADS = 4
N_KV_HEADS = 2
HEAD_DIM = D_MODEL // N_HEADS  # 16
D_MLP = 128
# Vision tower shape shared by all tiny archs.
V_LAYERS = 2
V_HIDDEN = 32
V_MLP = 64
V_HEADS = 2


def _llama_like_text(vocab_size: int, tok, **extra: Any) -> dict[str, Any]:
    """Keyword arguments for a small Llama/Mistral/Qwen-style language model config."""
    return dict(
        vocab_size=vocab_size,
        hidden_size=D_MODEL,
        intermediate_size=D_MLP,
        num_hidden_layers=N_LAYERS,
        num_attention_heads=N_HEADS,
        num_key_value_heads=N_KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=4096,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
        **extra,
    )


# ---------------------------------------------------------------- Qwen2.5-VL / Qwen3-VL

_QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                  "<|image_pad|>", "<|video_pad|>"]
_QWEN_TEMPLATE = chat_template(
    bos="", user="<|im_start|>user\n", user_end="<|im_end|>\n", system="<|im_start|>system\n",
    assistant="<|im_start|>assistant\n", assistant_end="<|im_end|>\n",
    image="<|vision_start|><|image_pad|><|vision_end|>", video="<|vision_start|><|video_pad|><|vision_end|>",
)


def _qwen_tokenizer():
    from evprobe.hooks.tiny_tokenizer import build_tokenizer

    return build_tokenizer(
        special_tokens=_QWEN_SPECIALS,
        named=dict(eos_token="<|im_end|>", pad_token="<|endoftext|>"),
        extra_named=dict(image_token="<|image_pad|>", video_token="<|video_pad|>",
                         vision_start_token="<|vision_start|>", vision_end_token="<|vision_end|>"),
    )


def _qwen_token_ids(tok) -> dict[str, int]:
    ids = tok.convert_tokens_to_ids
    return dict(image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
                vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"))


def _build_qwen2_5_vl():
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    from evprobe.hooks.processors import NoVideoQwen2_5_VLProcessor, QwenPilVideoProcessor

    tok = _qwen_tokenizer()
    # M-RoPE splits head_dim / 2 = 8 rotary frequencies over (time, height, width).
    text = _llama_like_text(len(tok), tok, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                            "mrope_section": [2, 3, 3]})
    vision = dict(depth=V_LAYERS, hidden_size=V_HIDDEN, intermediate_size=V_MLP, num_heads=V_HEADS,
                  patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=56,
                  out_hidden_size=D_MODEL, fullatt_block_indexes=[V_LAYERS - 1])
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False,
                              **_qwen_token_ids(tok))
    image_processor = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=112 * 112, patch_size=14,
                                               merge_size=2, temporal_patch_size=2)
    # Its video path: each frame as the image path sizes it, consecutive frames paired into temporal
    # patches, as the stock Qwen2VLVideoProcessor does (that one needs torchvision).
    processor = NoVideoQwen2_5_VLProcessor(image_processor, tok, chat_template=_QWEN_TEMPLATE,
                                           video_frames=QwenPilVideoProcessor(image_processor))
    return Qwen2_5_VLForConditionalGeneration, config, processor


def _build_qwen3_vl():
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    from evprobe.hooks.processors import NoVideoQwen3VLProcessor

    tok = _qwen_tokenizer()
    text = _llama_like_text(len(tok), tok, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                            "mrope_section": [2, 3, 3],
                                                            "mrope_interleaved": True})
    # 64 learned position embeddings = an 8x8 grid, interpolated to each image's grid.
    vision = dict(depth=V_LAYERS, hidden_size=V_HIDDEN, intermediate_size=V_MLP, num_heads=V_HEADS,
                  patch_size=16, spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=D_MODEL,
                  num_position_embeddings=64, deepstack_visual_indexes=[0])
    config = Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False,
                           **_qwen_token_ids(tok))
    image_processor = Qwen2VLImageProcessorPil(min_pixels=64 * 64, max_pixels=128 * 128, patch_size=16,
                                               merge_size=2, temporal_patch_size=2)
    processor = NoVideoQwen3VLProcessor(image_processor, tok, chat_template=_QWEN_TEMPLATE)
    return Qwen3VLForConditionalGeneration, config, processor


# ---------------------------------------------------------------- Idefics3 / SmolVLM

_ROW_COL = [f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)]
_IDEFICS_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<pad>", "<fake_token_around_image>", "<image>",
                     "<global-img>", "<end_of_utterance>", *_ROW_COL]
_IDEFICS_TEMPLATE = chat_template(
    bos="<|begin_of_text|>", user="User:", user_end="<end_of_utterance>\n", system="System:",
    assistant="Assistant:", assistant_end="<end_of_utterance>\n", image="<image>",
)
# The same turn with SmolVLM's video placeholder (hooks.tiny_video: the stock processor's video path).
SMOLVLM_VIDEO_TEMPLATE = chat_template(
    bos="<|begin_of_text|>", user="User:", user_end="<end_of_utterance>\n", system="System:",
    assistant="Assistant:", assistant_end="<end_of_utterance>\n", image="<image>", video="<video>",
)
# Vision tile 32x32 px, patch 8 -> 4x4 patches, pixel shuffle 2 -> 2x2 = 4 tokens per tile.
_IDEFICS_TILE = 32
_IDEFICS_PATCH = 8
_IDEFICS_SCALE = 2
_IDEFICS_SEQ = (_IDEFICS_TILE // _IDEFICS_PATCH) ** 2 // _IDEFICS_SCALE**2  # 4


def _idefics_parts():
    from evprobe.hooks.tiny_tokenizer import build_tokenizer

    tok = build_tokenizer(
        special_tokens=_IDEFICS_SPECIALS,
        named=dict(bos_token="<|begin_of_text|>", eos_token="<end_of_utterance>", pad_token="<pad>"),
        extra_named=dict(image_token="<image>", fake_image_token="<fake_token_around_image>",
                         global_image_token="<global-img>", end_of_utterance_token="<end_of_utterance>"),
    )
    text = _llama_like_text(len(tok), tok)
    vision = dict(hidden_size=V_HIDDEN, intermediate_size=V_MLP, num_hidden_layers=V_LAYERS,
                  num_attention_heads=V_HEADS, image_size=_IDEFICS_TILE, patch_size=_IDEFICS_PATCH)
    config_kwargs = dict(text_config=text, vision_config=vision, scale_factor=_IDEFICS_SCALE,
                         image_token_id=tok.convert_tokens_to_ids("<image>"), tie_word_embeddings=False,
                         pad_token_id=tok.pad_token_id)
    # Whole image resized to longest edge 64, split into 32 px tiles plus a 32 px global view.
    image_kwargs = dict(size={"longest_edge": 2 * _IDEFICS_TILE}, max_image_size={"longest_edge": _IDEFICS_TILE},
                        do_image_splitting=True)
    return tok, config_kwargs, image_kwargs


def _build_idefics3():
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3Processor,
    )
    from transformers.models.idefics3.image_processing_pil_idefics3 import (
        Idefics3ImageProcessorPil,
    )

    tok, config_kwargs, image_kwargs = _idefics_parts()
    config = Idefics3Config(**config_kwargs)
    processor = Idefics3Processor(Idefics3ImageProcessorPil(**image_kwargs), tok, image_seq_len=_IDEFICS_SEQ,
                                  chat_template=_IDEFICS_TEMPLATE)
    return Idefics3ForConditionalGeneration, config, processor


def _build_smolvlm():
    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration
    from transformers.models.smolvlm.image_processing_pil_smolvlm import (
        SmolVLMImageProcessorPil,
    )

    from evprobe.hooks.processors import NoVideoSmolVLMProcessor

    tok, config_kwargs, image_kwargs = _idefics_parts()
    config = SmolVLMConfig(**config_kwargs)
    processor = NoVideoSmolVLMProcessor(SmolVLMImageProcessorPil(**image_kwargs), tok, image_seq_len=_IDEFICS_SEQ,
                                        chat_template=_IDEFICS_TEMPLATE)
    return SmolVLMForConditionalGeneration, config, processor


# ---------------------------------------------------------------- LLaVA / LLaVA-NeXT

_LLAVA_SPECIALS = ["<unk>", "<s>", "</s>", "<pad>", "<image>"]
_LLAVA_TEMPLATE = chat_template(
    bos="<s>", user="USER: ", user_end=" ", system="", assistant="ASSISTANT:", assistant_end="</s>",
    image="<image>\n",
)
_LLAVA_VIDEO_TEMPLATE = chat_template(
    bos="<s>", user="USER: ", user_end=" ", system="", assistant="ASSISTANT:", assistant_end="</s>",
    image="<image>\n", video="<video>\n",
)
_LLAVA_IMAGE = 56  # CLIP tower input, patch 14 -> 4x4 = 16 patches (+ CLS)
_LLAVA_PATCH = 14


def _llava_parts(video: bool = False):
    from evprobe.hooks.tiny_tokenizer import build_tokenizer

    tok = build_tokenizer(
        special_tokens=_LLAVA_SPECIALS + (["<video>"] if video else []),
        named=dict(unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"),
        extra_named=dict(image_token="<image>", **({"video_token": "<video>"} if video else {})),
    )
    text = _llama_like_text(len(tok), tok)
    # vision_feature_layer=-2 needs at least 2 layers; the CLS token is dropped ("default").
    vision = dict(hidden_size=V_HIDDEN, intermediate_size=V_MLP, projection_dim=V_HIDDEN,
                  num_hidden_layers=V_LAYERS, num_attention_heads=V_HEADS, image_size=_LLAVA_IMAGE,
                  patch_size=_LLAVA_PATCH)
    config_kwargs = dict(text_config=text, vision_config=vision, image_token_index=tok.convert_tokens_to_ids("<image>"),
                         vision_feature_layer=-2, vision_feature_select_strategy="default",
                         image_seq_length=(_LLAVA_IMAGE // _LLAVA_PATCH) ** 2, tie_word_embeddings=False)
    processor_kwargs = dict(patch_size=_LLAVA_PATCH, vision_feature_select_strategy="default",
                            num_additional_image_tokens=1,
                            chat_template=_LLAVA_VIDEO_TEMPLATE if video else _LLAVA_TEMPLATE)
    return tok, config_kwargs, processor_kwargs


def _build_llava():
    from transformers import LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor
    from transformers.models.llava.image_processing_pil_llava import (
        LlavaImageProcessorPil,
    )

    tok, config_kwargs, processor_kwargs = _llava_parts()
    config = LlavaConfig(**config_kwargs)
    image_processor = LlavaImageProcessorPil(size={"shortest_edge": _LLAVA_IMAGE},
                                             crop_size={"height": _LLAVA_IMAGE, "width": _LLAVA_IMAGE})
    return LlavaForConditionalGeneration, config, LlavaProcessor(image_processor, tok, **processor_kwargs)


def _build_llava_next():
    from transformers import (
        LlavaNextConfig,
        LlavaNextForConditionalGeneration,
        LlavaNextProcessor,
    )
    from transformers.models.llava_next.image_processing_pil_llava_next import (
        LlavaNextImageProcessorPil,
    )

    tok, config_kwargs, processor_kwargs = _llava_parts()
    s = _LLAVA_IMAGE
    pinpoints = [[s, s], [s, 2 * s], [2 * s, s], [2 * s, 2 * s]]
    config = LlavaNextConfig(**config_kwargs, image_grid_pinpoints=pinpoints)
    image_processor = LlavaNextImageProcessorPil(size={"shortest_edge": s}, crop_size={"height": s, "width": s},
                                                 image_grid_pinpoints=pinpoints)
    return LlavaNextForConditionalGeneration, config, LlavaNextProcessor(image_processor, tok, **processor_kwargs)


def _build_llava_next_video():
    from transformers import LlavaNextVideoConfig, LlavaNextVideoForConditionalGeneration
    from transformers.models.llava_next.image_processing_pil_llava_next import (
        LlavaNextImageProcessorPil,
    )

    from transformers.models.llava.image_processing_pil_llava import LlavaImageProcessorPil

    from evprobe.hooks.processors import NoVideoLlavaNextVideoProcessor, PilVideoProcessor

    tok, config_kwargs, processor_kwargs = _llava_parts(video=True)
    s = _LLAVA_IMAGE
    pinpoints = [[s, s], [s, 2 * s], [2 * s, s], [2 * s, 2 * s]]
    config = LlavaNextVideoConfig(
        **config_kwargs,
        image_grid_pinpoints=pinpoints,
        video_token_index=tok.convert_tokens_to_ids("<video>"),
        video_seq_length=(s // _LLAVA_PATCH) ** 2 // 4,  # frames are average-pooled 2x2
    )
    image_processor = LlavaNextImageProcessorPil(size={"shortest_edge": s}, crop_size={"height": s, "width": s},
                                                 image_grid_pinpoints=pinpoints)
    # Its video path: each frame resized and centre-cropped to the tower's input, as the stock
    # LlavaNextVideoVideoProcessor does (that one needs torchvision).
    video_processor = PilVideoProcessor(LlavaImageProcessorPil(size={"shortest_edge": s}, crop_size={"height": s, "width": s}))
    processor = NoVideoLlavaNextVideoProcessor(image_processor, tok, video_frames=video_processor,
                                               **processor_kwargs)
    return LlavaNextVideoForConditionalGeneration, config, processor


# ---------------------------------------------------------------- Gemma 3

_GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
                   "<end_of_image>", "<image_soft_token>"]
_GEMMA_TEMPLATE = chat_template(
    bos="<bos>", user="<start_of_turn>user\n", user_end="<end_of_turn>\n", system="<start_of_turn>user\n",
    assistant="<start_of_turn>model\n", assistant_end="<end_of_turn>\n", image="<start_of_image>",
)
_GEMMA_IMAGE = 56  # SigLIP input, patch 14 -> 4x4 patches, average-pooled to 2x2 = 4 tokens
_GEMMA_PATCH = 14
_GEMMA_TOKENS = 4


def _build_gemma3():
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3Processor,
    )
    from transformers.models.gemma3.image_processing_pil_gemma3 import (
        Gemma3ImageProcessorPil,
    )

    from evprobe.hooks.tiny_tokenizer import build_tokenizer

    tok = build_tokenizer(
        special_tokens=_GEMMA_SPECIALS,
        named=dict(pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="<unk>"),
        extra_named=dict(boi_token="<start_of_image>", eoi_token="<end_of_image>", image_token="<image_soft_token>"),
    )
    ids = tok.convert_tokens_to_ids
    # Gemma 3 ties the LM head to the embeddings (as the real checkpoints do).
    text = _llama_like_text(len(tok), tok, query_pre_attn_scalar=HEAD_DIM, sliding_window=512,
                            layer_types=["sliding_attention"] * (N_LAYERS - 1) + ["full_attention"])
    text["tie_word_embeddings"] = True
    vision = dict(hidden_size=V_HIDDEN, intermediate_size=V_MLP, num_hidden_layers=V_LAYERS,
                  num_attention_heads=V_HEADS, image_size=_GEMMA_IMAGE, patch_size=_GEMMA_PATCH)
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=_GEMMA_TOKENS,
                          boi_token_index=ids("<start_of_image>"), eoi_token_index=ids("<end_of_image>"),
                          image_token_index=ids("<image_soft_token>"), tie_word_embeddings=True)
    image_processor = Gemma3ImageProcessorPil(size={"height": _GEMMA_IMAGE, "width": _GEMMA_IMAGE},
                                              do_pan_and_scan=False)
    processor = Gemma3Processor(image_processor, tok, image_seq_length=_GEMMA_TOKENS, chat_template=_GEMMA_TEMPLATE)
    return Gemma3ForConditionalGeneration, config, processor


# ---------------------------------------------------------------- Mistral 3 (Pixtral vision)

_MISTRAL_SPECIALS = ["<unk>", "<s>", "</s>", "<pad>", "[INST]", "[/INST]", "[IMG]", "[IMG_BREAK]", "[IMG_END]"]
_MISTRAL_TEMPLATE = chat_template(
    bos="<s>", user="[INST]", user_end="[/INST]", system="[INST]", assistant="", assistant_end="</s>",
    image="[IMG]",
)
_MISTRAL_PATCH = 8
_MISTRAL_MERGE = 2
_MISTRAL_EDGE = 64  # longest image edge in pixels -> up to 4x4 merged tokens


def _build_mistral3():
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration
    from transformers.models.pixtral.image_processing_pil_pixtral import (
        PixtralImageProcessorPil,
    )

    from evprobe.hooks.processors import TinyPixtralProcessor
    from evprobe.hooks.tiny_tokenizer import build_tokenizer

    tok = build_tokenizer(
        special_tokens=_MISTRAL_SPECIALS,
        named=dict(unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"),
        extra_named=dict(image_token="[IMG]", image_break_token="[IMG_BREAK]", image_end_token="[IMG_END]"),
    )
    text = _llama_like_text(len(tok), tok, sliding_window=None)
    # image_size bounds the 2D rope table of the Pixtral tower (max patches per side).
    vision = dict(hidden_size=V_HIDDEN, intermediate_size=V_MLP, num_hidden_layers=V_LAYERS,
                  num_attention_heads=V_HEADS, head_dim=V_HIDDEN // V_HEADS, image_size=_MISTRAL_EDGE,
                  patch_size=_MISTRAL_PATCH)
    config = Mistral3Config(text_config=text, vision_config=vision, spatial_merge_size=_MISTRAL_MERGE,
                            image_token_index=tok.convert_tokens_to_ids("[IMG]"), vision_feature_layer=-1,
                            tie_word_embeddings=False)
    image_processor = PixtralImageProcessorPil(size={"longest_edge": _MISTRAL_EDGE},
                                               patch_size={"height": _MISTRAL_PATCH, "width": _MISTRAL_PATCH})
    processor = TinyPixtralProcessor(image_processor, tok, patch_size=_MISTRAL_PATCH,
                                     spatial_merge_size=_MISTRAL_MERGE, chat_template=_MISTRAL_TEMPLATE)
    return Mistral3ForConditionalGeneration, config, processor


_BUILDERS: dict[str, Callable[[], tuple[type, Any, Any]]] = {
    "qwen2_5_vl": _build_qwen2_5_vl,
    "qwen3_vl": _build_qwen3_vl,
    "idefics3": _build_idefics3,
    "llava": _build_llava,
    "llava_next": _build_llava_next,
    "gemma3": _build_gemma3,
    "mistral3": _build_mistral3,
    "smolvlm": _build_smolvlm,
    "llava_next_video": _build_llava_next_video,
}
assert tuple(_BUILDERS) == TINY_ARCHS


def tiny(arch: str, *, seed: int = 0) -> Handle:
    """Build a tiny random `arch` model (see TINY_ARCHS) with its processor, offline.

    Weights depend only on `seed` (torch.manual_seed right before construction).
    The model is float32, on CPU, in eval mode.
    """
    if arch not in _BUILDERS:
        raise ValueError(f"unknown tiny architecture {arch!r}; valid names: {', '.join(TINY_ARCHS)}")
    import torch

    from evprobe.hooks.handle import Handle

    model_cls, config, processor = _BUILDERS[arch]()
    tok = processor.tokenizer
    _check_token_ids(arch, config, tok)
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    _fill_zero_matrices(model, std=getattr(config, "initializer_range", None) or 0.02)
    gen = model.generation_config
    gen.pad_token_id = tok.pad_token_id
    eos = [tok.eos_token_id] + [tok.convert_tokens_to_ids(t) for t in _EXTRA_EOS.get(arch, ())]
    gen.eos_token_id = eos[0] if len(eos) == 1 else eos
    gen.bos_token_id = tok.bos_token_id
    return Handle.from_parts(model, processor, model_id=f"tiny:{arch}")


# End-of-turn tokens that also end generation (besides tokenizer.eos_token).
_EXTRA_EOS: dict[str, tuple[str, ...]] = {"gemma3": ("<end_of_turn>",)}


def _fill_zero_matrices(model, *, std: float) -> None:
    """Give zero-initialised weight matrices random values.

    Some projections start at zero for fine-tuning (Gemma 3's
    mm_input_projection_weight), which would make a random tiny model ignore
    its images. Drawn from the seeded generator, so still deterministic.
    """
    import torch

    with torch.no_grad():
        for param in model.parameters():
            if param.ndim >= 2 and not param.any():
                param.normal_(0.0, std)


def _check_token_ids(arch: str, config, tok) -> None:
    """The config's image token id must be the tokenizer's (else features land nowhere)."""
    image_id = getattr(config, "image_token_id", None)
    if image_id is None:
        image_id = getattr(config, "image_token_index", None)
    if image_id != tok.convert_tokens_to_ids(tok.image_token):
        raise RuntimeError(f"tiny {arch}: config image token id {image_id} != tokenizer's "
                           f"{tok.convert_tokens_to_ids(tok.image_token)} ({tok.image_token})")
    if config.get_text_config().vocab_size != len(tok):
        raise RuntimeError(f"tiny {arch}: vocab size {config.get_text_config().vocab_size} != {len(tok)}")
