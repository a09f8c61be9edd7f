"""Find the language model's decoder layers in a vision-language model, and their components.

Layers are found from the model's structure, not from a per-architecture table:
first `model.get_decoder().layers` (transformers' own pointer to the language
model), then a search of `named_modules()` for the ModuleList of decoder-like
blocks outside the vision tower.

Components of decoder layer i that capture can read (`COMPONENTS`), each (batch, seq, d_model):
    resid_post  the layer's output: the residual stream after the block (the layer module itself)
    attn_out    what the attention sublayer adds to the residual stream
    mlp_out     what the MLP sublayer adds to the residual stream
so resid_post[i] == resid_post[i - 1] + attn_out[i] + mlp_out[i] (tests/hooks/test_positions.py
checks this identity on every tiny architecture). One exception: Qwen3-VL adds its "deepstack"
visual features to the stream at the image tokens BETWEEN decoder layers (after layers
0..len(deepstack_visual_indexes)-1, in the text model's loop, not inside a layer), so there layer
i + 1's input is resid_post[i] plus that injection; resid_post is the layer's own output, before it. Which child module gives the sum's terms is
read from the block's children, not from a table:
  - pre-norm blocks (Llama, Mistral, Qwen2/2.5/3, Idefics3/SmolVLM text, LLaVA(-NeXT) text):
    attn_out = output of the attention child (`self_attn`, else `self_attention`, `attention`,
    `attn`; the first element when it returns a tuple with the attention weights), mlp_out =
    output of the MLP child (`mlp`, else `feed_forward`, `ffn`, `block_sparse_moe`);
  - "sandwich" blocks that also normalise each sublayer's output before the residual add
    (Gemma 2/3, OLMo 2), recognised by a `post_feedforward_layernorm` child: attn_out = output
    of `post_attention_layernorm`, mlp_out = output of `post_feedforward_layernorm` (there
    `post_attention_layernorm` is the attention's OUTPUT norm; in Llama-style blocks the same
    name is the MLP's input norm, which is why the rule looks for the second norm).
Available on all nine tiny architectures (hooks.tiny); a block without such children (e.g. a
parallel-attention or cross-attention-only layer) gets a one-line ValueError naming what was
looked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where used: hooks.capture imports COMPONENTS before any model
    from torch import nn

# Path fragments of vision towers / projectors; their block lists are not the decoder.
_VISION_HINTS = ("vision", "visual", "image", "patch", "mm_projector", "multi_modal_projector", "connector")
COMPONENTS: tuple[str, ...] = ("resid_post", "attn_out", "mlp_out")
_ATTN_CHILDREN = ("self_attn", "self_attention", "attention", "attn")
_MLP_CHILDREN = ("mlp", "feed_forward", "ffn", "block_sparse_moe")
# Path fragments of the language model inside a VLM.
_TEXT_HINTS = ("language_model", "text_model", "llm", "decoder")


def _text_layer_count(model: nn.Module) -> int | None:
    config = getattr(model, "config", None)
    if config is None:
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return getattr(text, "num_hidden_layers", None)


def _looks_like_decoder_layer(block: nn.Module) -> bool:
    """A transformer block with self-attention and an MLP (names vary by family)."""
    names = {name for name, _ in block.named_children()}
    has_attn = any("attn" in n or "attention" in n for n in names)
    has_mlp = any(n in ("mlp", "feed_forward", "ffn", "block_sparse_moe") or "mlp" in n for n in names)
    return has_attn and has_mlp


def find_decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The ModuleList of the language model's decoder layers, in execution order.

    Raises ValueError (naming the model class) when no plausible list is found.
    """
    from torch import nn

    expected = _text_layer_count(model)

    # 1. transformers' own pointer: get_decoder() is the language model in VLMs.
    get_decoder = getattr(model, "get_decoder", None)
    if callable(get_decoder):
        try:
            decoder = get_decoder()
        except (AttributeError, NotImplementedError, TypeError):
            decoder = None
        layers = getattr(decoder, "layers", None)
        if (
            isinstance(layers, nn.ModuleList)
            and len(layers) > 0
            and (expected is None or len(layers) == expected)
            and all(_looks_like_decoder_layer(b) for b in layers)
        ):
            return layers

    # 2. Structural search: ModuleLists of decoder-like blocks, not in a vision tower.
    candidates: list[tuple[str, nn.ModuleList]] = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) == 0:
            continue
        lowered = name.lower()
        if any(h in lowered for h in _VISION_HINTS):
            continue
        if all(_looks_like_decoder_layer(b) for b in module):
            candidates.append((name, module))
    if expected is not None:
        exact = [c for c in candidates if len(c[1]) == expected]
        if exact:
            candidates = exact
    if candidates:
        # Prefer lists under the language/text model, then the longest.
        candidates.sort(key=lambda c: (any(h in c[0].lower() for h in _TEXT_HINTS), len(c[1])), reverse=True)
        return candidates[0][1]

    raise ValueError(
        f"could not find the decoder layers of {type(model).__name__}: get_decoder().layers is missing or "
        f"does not match num_hidden_layers={expected}, and no ModuleList of attention+MLP blocks outside the "
        "vision tower was found"
    )


def component_child(block: nn.Module, component: str) -> str:
    """Name of the child of decoder layer `block` whose output is `component` ("" = the block).

    Raises ValueError (one line) for an unknown component or a block without the child."""
    if component not in COMPONENTS:
        raise ValueError(f"unknown component {component!r}; choose from {', '.join(COMPONENTS)}")
    if component == "resid_post":
        return ""
    children = dict(block.named_children())
    names = _ATTN_CHILDREN if component == "attn_out" else _MLP_CHILDREN
    found = next((n for n in names if n in children), None)
    if found is None:
        raise ValueError(f"{component} is not available for {type(block).__name__}: it has no child named "
                         f"{' / '.join(names)} (children: {', '.join(children) or 'none'})")
    if "post_feedforward_layernorm" in children:  # sandwich norm: the sublayer's output norm is the summand
        norm = "post_attention_layernorm" if component == "attn_out" else "post_feedforward_layernorm"
        if norm not in children:
            raise ValueError(f"{component} is not available for {type(block).__name__}: it has "
                             f"post_feedforward_layernorm but no {norm}")
        return norm
    return found
