"""Find the language model's decoder layers in a vision-language model.

Layers are found from the model's structure, not from a per-architecture table:
first `model.get_decoder().layers` (transformers' own pointer to the language
model), then a search of `named_modules()` for the ModuleList of decoder-like
blocks outside the vision tower.
"""

from __future__ import annotations

from torch import nn

# Path fragments of vision towers / projectors; their block lists are not the decoder.
_VISION_HINTS = ("vision", "visual", "image", "patch", "mm_projector", "multi_modal_projector", "connector")
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
