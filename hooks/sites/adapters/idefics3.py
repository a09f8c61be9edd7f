"""Idefics3 and SmolVLM(2): a SigLIP-style `vision_model` and the pixel-shuffle `connector` as the projector."""

from evprobe.hooks.sites.adapter import Adapter, register_adapter

ADAPTER = register_adapter(Adapter(
    name="idefics3",
    model_types=("idefics3", "smolvlm"),
    decoder_layers="model.text_model.layers",
    attention="self_attn", mlp="mlp", head_input="o_proj",
    vision_blocks="model.vision_model.encoder.layers", projector="model.connector",
))
