"""Qwen2.5-VL and Qwen3-VL: the vision tower `visual` packs every image's patches on one axis
((patches, width), no batch axis), and its `merger` is the projector."""

from evprobe.hooks.sites.adapter import Adapter, register_adapter

ADAPTER = register_adapter(Adapter(
    name="qwen_vl",
    model_types=("qwen2_5_vl", "qwen2_vl", "qwen3_vl"),
    decoder_layers="model.language_model.layers",
    attention="self_attn", mlp="mlp", head_input="o_proj",
    vision_blocks="model.visual.blocks", projector="model.visual.merger",
))
