"""Text-only Llama-style decoders (Llama, Mistral, Qwen2/3): the model organism and tiny text models."""

from evprobe.hooks.sites.adapter import Adapter, register_adapter

ADAPTER = register_adapter(Adapter(
    name="llama",
    model_types=("llama", "mistral", "qwen2", "qwen3"),
    decoder_layers="model.layers",
    attention="self_attn", mlp="mlp", head_input="o_proj",
    vision_blocks="", projector="",  # text only
))
