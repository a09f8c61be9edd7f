"""Gemma 3: "sandwich" blocks that normalise each sublayer's output before the residual add, so
what a sublayer adds is its output norm's output (`post_attention_layernorm` is the attention's
OUTPUT norm here, where in Llama-style blocks the same name is the MLP's input norm)."""

from evprobe.hooks.sites.adapter import Adapter, register_adapter

ADAPTER = register_adapter(Adapter(
    name="gemma3",
    model_types=("gemma3",),
    decoder_layers="model.language_model.layers",
    attention="self_attn", mlp="mlp", head_input="o_proj",
    attn_out="post_attention_layernorm", mlp_out="post_feedforward_layernorm",
    vision_blocks="model.vision_tower.encoder.layers", projector="model.multi_modal_projector",
))
