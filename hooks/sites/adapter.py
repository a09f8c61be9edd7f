"""Architecture adapters: one small declaration per architecture family says where each site kind
lives in its module tree (the TransformerLens idea, as data instead of code).

    Adapter(name="llava", model_types=("llava", "llava_next"),
            decoder_layers="model.language_model.layers",
            vision_blocks="model.vision_tower.encoder.layers", projector="model.multi_modal_projector")

Paths are dotted: `decoder_layers`, `vision_blocks` and `projector` from the model; `attention`,
`mlp`, `attn_out` and `mlp_out` from a decoder layer; `head_input` from the attention module.
A field left None is found from the model's structure (hooks.sites.auto), which is also the whole
adapter of an architecture nobody registered. SiteMap (hooks.sites.resolve) checks every path it
uses against the loaded model and refuses, in one line, a path that is not there.

Where adapters come from, first match wins: the `adapter=` given to `hooks.load` / `wrap` (an
Adapter, or the name of a registered one); the registry by the config's `model_type`
(`register_adapter`, the built-ins in hooks/sites/adapters/, and entry points in the group
`evprobe.adapters` naming an Adapter as "module:ATTRIBUTE"); the automatic detection.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from importlib import import_module

ENTRY_POINT_GROUP = "evprobe.adapters"
# The built-in adapters, one module each (imported on first lookup; none imports torch).
_BUILTIN_MODULES: tuple[str, ...] = (
    "evprobe.hooks.sites.adapters.llama",
    "evprobe.hooks.sites.adapters.qwen_vl",
    "evprobe.hooks.sites.adapters.llava",
    "evprobe.hooks.sites.adapters.idefics3",
    "evprobe.hooks.sites.adapters.gemma3",
    "evprobe.hooks.sites.adapters.mistral3",
)


@dataclass(frozen=True)
class Adapter:
    """Where the sites of one architecture family live (module docstring: paths and fallbacks).

    name: the adapter's name (registry key, messages).
    model_types: the `config.model_type` values it serves.
    decoder_layers: the ModuleList of the language model's decoder layers.
    attention, mlp: the decoder layer's attention and MLP children.
    attn_out, mlp_out: the child whose output is what the sublayer adds to the residual stream;
        None = `attention` / `mlp` themselves (pre-norm blocks). Sandwich-norm blocks (Gemma) name
        their output norms here.
    head_input: the attention module's output projection, whose input is the heads side by side
        (n_heads x head_dim columns): the attn_head sites.
    vision_blocks: the vision tower's ModuleList of blocks; projector: the vision-to-text projector.
        "" = the architecture has none (a text-only model), None = found automatically.
    """

    name: str
    model_types: tuple[str, ...] = ()
    decoder_layers: str | None = None
    attention: str | None = None
    mlp: str | None = None
    attn_out: str | None = None
    mlp_out: str | None = None
    head_input: str | None = None
    vision_blocks: str | None = None
    projector: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("an Adapter needs a name")
        if isinstance(self.model_types, str):
            raise TypeError(f"adapter {self.name}: model_types must be a tuple of names, not a string")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name not in ("name", "model_types") and value is not None and not isinstance(value, str):
                raise TypeError(f"adapter {self.name}: {f.name} must be a dotted module path (str), got "
                                f"{type(value).__name__}")


_REGISTRY: dict[str, Adapter] = {}       # model_type -> adapter
_BY_NAME: dict[str, Adapter] = {}        # adapter name -> adapter
_entry_points_read = False


def register_adapter(adapter: Adapter, *, replace: bool = False) -> Adapter:
    """Register `adapter` for its model types (returns it, so a module can write
    `ADAPTER = register_adapter(Adapter(...))`). A model type or name already taken by another
    adapter is one ValueError line naming both, unless `replace`."""
    if not isinstance(adapter, Adapter):
        raise TypeError(f"register_adapter takes an Adapter, got {type(adapter).__name__}")
    if not adapter.model_types:
        raise ValueError(f"adapter {adapter.name} serves no model type; give model_types=(config.model_type, ...)")
    if not replace:
        taken = _BY_NAME.get(adapter.name)
        if taken is not None and taken != adapter:
            raise ValueError(f"an adapter named {adapter.name!r} is already registered; choose another name or "
                             "pass replace=True")
        for model_type in adapter.model_types:
            other = _REGISTRY.get(model_type)
            if other is not None and other.name != adapter.name:
                raise ValueError(f"model type {model_type!r} already has the adapter {other.name!r}; pass "
                                 f"replace=True to serve it with {adapter.name!r} instead")
    _BY_NAME[adapter.name] = adapter
    for model_type in adapter.model_types:
        _REGISTRY[model_type] = adapter
    return adapter


def _load_builtins() -> None:
    """Import the built-in adapters (each module registers its own, once) and read the entry points."""
    for module in _BUILTIN_MODULES:
        import_module(module)
    global _entry_points_read
    if _entry_points_read:
        return
    _entry_points_read = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        adapter = ep.load()
        if not isinstance(adapter, Adapter):
            raise TypeError(f"entry point {ep.name} = {ep.value} in {ENTRY_POINT_GROUP} is a "
                            f"{type(adapter).__name__}, not an evprobe Adapter")
        register_adapter(adapter)


def registered_adapters() -> dict[str, Adapter]:
    """model_type -> its registered adapter (built-ins and entry points included)."""
    _load_builtins()
    return dict(_REGISTRY)


def adapter_named(name: str) -> Adapter:
    """The registered adapter called `name` (one ValueError line listing them otherwise)."""
    _load_builtins()
    if name not in _BY_NAME:
        raise ValueError(f"no adapter named {name!r}; registered: {', '.join(sorted(_BY_NAME))}")
    return _BY_NAME[name]


def registered_for(model_type: str | None) -> Adapter | None:
    """The adapter registered for `model_type`, else None (the automatic detection serves it)."""
    _load_builtins()
    return _REGISTRY.get(model_type or "")


def resolve_adapter(given: Adapter | str | None, model_type: str | None) -> Adapter | None:
    """The adapter to use: `given` (an Adapter or a registered name), else the one registered for
    the model type, else None (fully automatic)."""
    if isinstance(given, Adapter):
        return given
    if isinstance(given, str):
        return adapter_named(given)
    if given is not None:
        raise TypeError(f"adapter must be an Adapter or a registered adapter's name, got {type(given).__name__}")
    return registered_for(model_type)
