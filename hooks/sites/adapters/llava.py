"""LLaVA, LLaVA-NeXT and LLaVA-NeXT-Video: a CLIP-style vision tower (images, patches, width) and a
two-layer `multi_modal_projector`."""

from evprobe.hooks.sites.adapter import Adapter, register_adapter

ADAPTER = register_adapter(Adapter(
    name="llava",
    model_types=("llava", "llava_next", "llava_next_video", "llava_onevision"),
    decoder_layers="model.language_model.layers",
    attention="self_attn", mlp="mlp", head_input="o_proj",
    vision_blocks="model.vision_tower.encoder.layers", projector="model.multi_modal_projector",
))
