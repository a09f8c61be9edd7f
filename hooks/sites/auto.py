"""Finding sites from a model's structure: the fallback for every adapter field left None, and the
whole adapter of an architecture nobody registered.

- decoder layers: transformers' own pointer `get_decoder().layers` (checked against the text
  config's `num_hidden_layers` and the attention + MLP shape of its blocks), else a search of
  `named_modules()` for the ModuleList of such blocks outside the vision tower;
- attention / MLP children by name (`self_attn`, `self_attention`, `attention`, `attn`; `mlp`,
  `feed_forward`, `ffn`, `block_sparse_moe`); in "sandwich" blocks, recognised by a
  `post_feedforward_layernorm` child, the sublayers' output norms are what they add;
- the heads' output projection by name inside the attention (`o_proj`, `out_proj`, `dense`,
  `c_proj`, `wo`);
- the vision tower's blocks: the longest ModuleList under a vision path (`vision`, `visual`) that
  is not the decoder; the projector: the first module named `multi_modal_projector`, `connector`,
  `merger`, `mm_projector` or `projector` outside the decoder.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from evprobe.hooks.sites.adapter import Adapter

if TYPE_CHECKING:
    from torch import nn

# Path fragments of vision towers / projectors; their block lists are not the decoder.
VISION_HINTS = ("vision", "visual", "image", "patch", "mm_projector", "multi_modal_projector", "connector")
ATTN_CHILDREN = ("self_attn", "self_attention", "attention", "attn")
MLP_CHILDREN = ("mlp", "feed_forward", "ffn", "block_sparse_moe")
HEAD_INPUTS = ("o_proj", "out_proj", "dense", "c_proj", "wo")
PROJECTORS = ("multi_modal_projector", "connector", "merger", "mm_projector", "projector")
_TOWER_HINTS = ("vision", "visual")
# Path fragments of the language model inside a VLM.
_TEXT_HINTS = ("language_model", "text_model", "llm", "decoder")


def text_layer_count(model: nn.Module) -> int | None:
    config = getattr(model, "config", None)
    if config is None:
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return getattr(text, "num_hidden_layers", None)


def looks_like_decoder_layer(block: nn.Module) -> bool:
    """A transformer block with self-attention and an MLP (names vary by family)."""
    names = {name for name, _ in block.named_children()}
    has_attn = any("attn" in n or "attention" in n for n in names)
    has_mlp = any(n in MLP_CHILDREN or "mlp" in n for n in names)
    return has_attn and has_mlp


def find_decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The ModuleList of the language model's decoder layers, in execution order.

    Raises ValueError (naming the model class) when no plausible list is found.
    """
    from torch import nn

    expected = text_layer_count(model)
    get_decoder = getattr(model, "get_decoder", None)
    if callable(get_decoder):
        try:
            decoder = get_decoder()
        except (AttributeError, NotImplementedError, TypeError):
            decoder = None
        layers = getattr(decoder, "layers", None)
        if (isinstance(layers, nn.ModuleList) and len(layers) > 0 and (expected is None or len(layers) == expected)
                and all(looks_like_decoder_layer(b) for b in layers)):
            return layers
    candidates: list[tuple[str, nn.ModuleList]] = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) == 0:
            continue
        if any(h in name.lower() for h in VISION_HINTS):
            continue
        if all(looks_like_decoder_layer(b) for b in module):
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
        "vision tower was found; pass an Adapter(decoder_layers=...) to hooks.load / wrap (see hooks.sites.adapter)"
    )


def module_path(root: nn.Module, target: nn.Module) -> str:
    for name, module in root.named_modules():
        if module is target:
            return name
    raise ValueError(f"{type(target).__name__} is not a submodule of {type(root).__name__}")


def _first_child(block: nn.Module, names: tuple[str, ...]) -> str | None:
    children = dict(block.named_children())
    return next((n for n in names if n in children), None)


def _vision_blocks(model: nn.Module, decoder_path: str) -> str:
    from torch import nn

    found = [(name, len(m)) for name, m in model.named_modules()
             if isinstance(m, nn.ModuleList) and len(m) > 0 and name != decoder_path
             and not name.startswith(decoder_path + ".")
             and any(h in name.lower() for h in _TOWER_HINTS)
             and not any(p in name.lower() for p in PROJECTORS)]
    found.sort(key=lambda c: c[1], reverse=True)
    return found[0][0] if found else ""


def _projector(model: nn.Module, decoder_path: str) -> str:
    for name, _ in model.named_modules():
        if name.startswith(decoder_path):
            continue
        if name.rsplit(".", 1)[-1] in PROJECTORS:
            return name
    return ""


def complete(adapter: Adapter | None, model: nn.Module) -> Adapter:
    """`adapter` with every None field found from `model` (module docstring); None = a fully
    automatic adapter named `auto:<model_type>`. A field that cannot be found stays "" (absent):
    the sites needing it are then refused by SiteMap, naming the field to set."""
    if adapter is None:
        model_type = getattr(getattr(model, "config", None), "model_type", None) or type(model).__name__
        adapter = Adapter(name=f"auto:{model_type}")
    layers_path = adapter.decoder_layers
    if layers_path is None:
        layers_path = module_path(model, find_decoder_layers(model))
    try:  # a wrong path is left for SiteMap to refuse in one line, naming the field
        block = model.get_submodule(layers_path)[0] if layers_path else None
    except (AttributeError, IndexError, TypeError):
        block = None
    attention, mlp = adapter.attention, adapter.mlp
    if attention is None:
        attention = (_first_child(block, ATTN_CHILDREN) if block is not None else None) or ""
    if attention and block is not None and not hasattr(block, attention.split(".")[0]):
        block = None  # a wrong attention path: SiteMap names it
    if mlp is None:
        mlp = (_first_child(block, MLP_CHILDREN) if block is not None else None) or ""
    attn_out, mlp_out = adapter.attn_out, adapter.mlp_out
    children = dict(block.named_children()) if block is not None else {}
    sandwich = "post_feedforward_layernorm" in children
    if attn_out is None:
        attn_out = ("post_attention_layernorm" if sandwich and "post_attention_layernorm" in children
                    else "" if sandwich else attention)
    if mlp_out is None:
        mlp_out = "post_feedforward_layernorm" if sandwich else mlp
    head_input = adapter.head_input
    if head_input is None:
        attn_module = block.get_submodule(attention) if block is not None and attention else None
        head_input = (_first_child(attn_module, HEAD_INPUTS) if attn_module is not None else None) or ""
    vision = adapter.vision_blocks if adapter.vision_blocks is not None else _vision_blocks(model, layers_path)
    projector = adapter.projector if adapter.projector is not None else _projector(model, layers_path)
    return replace(adapter, decoder_layers=layers_path, attention=attention, mlp=mlp, attn_out=attn_out,
                   mlp_out=mlp_out, head_input=head_input, vision_blocks=vision, projector=projector)
