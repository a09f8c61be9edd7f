"""Mistral 3 (Pixtral vision): the Pixtral tower concatenates every image's patches on one axis
((1, patches, width)) and `multi_modal_projector` merges them into text width."""

from evprobe.hooks.sites.adapter import Adapter, register_adapter

ADAPTER = register_adapter(Adapter(
    name="mistral3",
    model_types=("mistral3",),
    decoder_layers="model.language_model.layers",
    attention="self_attn", mlp="mlp", head_input="o_proj",
    vision_blocks="model.vision_tower.transformer.layers", projector="model.multi_modal_projector",
))
