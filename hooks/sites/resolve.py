"""SiteMap: one model's sites, resolved to the modules and ports the intervention core hooks.

    sites = handle.sites                     # SiteMap of the loaded model (its adapter, completed)
    sites.point("attn_head.L3.H2")           # HookPoint(module=o_proj of layer 3, port="input", columns=32:48)
    sites.all("attn_head")                   # every head of every layer, in execution order
    sites.check("attn_head.L9.H0")           # ValueError, one line listing the valid sites

A HookPoint is where a value is read or written: a module's output (a forward hook) or its first
input (a forward pre-hook), and for a head the columns of that input that belong to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from evprobe.hooks.sites.adapter import Adapter
from evprobe.hooks.sites.vocabulary import LAYER_ORDER, SITE_KINDS, Site

if TYPE_CHECKING:
    from torch import nn

Port = Literal["output", "input"]


@dataclass(frozen=True, eq=False)
class HookPoint:
    """Where a site's value is: `module`'s output or first input (`port`), the columns
    `columns` of its last axis when the site is a slice of it (an attention head), on the text
    stream (batch, seq, width) or the vision stream (the tower's own layout)."""

    site: Site
    module: Any  # nn.Module
    path: str
    port: Port
    columns: slice | None
    stream: str

    @property
    def key(self) -> tuple[int, Port]:
        """Hook points sharing a module and port share one hook."""
        return (id(self.module), self.port)


def _width(module: Any) -> int | None:
    """The input width of a linear layer (torch Linear, or GPT-2's Conv1D), else None."""
    if hasattr(module, "in_features"):
        return int(module.in_features)
    weight = getattr(module, "weight", None)
    if type(module).__name__ == "Conv1D" and weight is not None:
        return int(weight.shape[0])
    return None


class SiteMap:
    """The sites of one model, from its (completed) adapter; every path checked on construction.

    layers: the decoder layers (ModuleList); n_layers, d_model; n_heads, head_dim (None when the
    attention's output projection is not found); n_vision_layers (0 = no vision tower);
    has_projector. A site kind the model lacks is refused by `check`, naming the adapter field.
    """

    def __init__(self, model: Any, adapter: Adapter) -> None:
        from torch import nn

        self.model, self.adapter = model, adapter
        label = f"{type(model).__name__} (adapter {adapter.name})"
        self.label = label
        self.layers = _module(model, adapter.decoder_layers, "decoder_layers", label)
        if not isinstance(self.layers, nn.ModuleList) or len(self.layers) == 0:
            raise ValueError(f"{label}: decoder_layers={adapter.decoder_layers!r} is not a non-empty ModuleList")
        self.layers_path = adapter.decoder_layers or ""
        config = getattr(model, "config", None)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        self.d_model = getattr(text, "hidden_size", None)
        block = self.layers[0]
        self._children = {}
        for field in ("attention", "mlp", "attn_out", "mlp_out"):
            path = getattr(adapter, field)
            if path:
                _module(block, path, field, f"{label} decoder layer")  # a wrong path fails here, named
            self._children[field] = path or ""
        self.n_heads = self.head_dim = None
        self._head_problem = "the adapter names no head_input (the attention's output projection)"
        if adapter.head_input and self._children["attention"]:
            proj = _module(block.get_submodule(self._children["attention"]), adapter.head_input, "head_input",
                           f"{label} attention")
            n_heads = getattr(text, "num_attention_heads", None)
            head_dim = getattr(text, "head_dim", None) or (self.d_model // n_heads if n_heads and self.d_model else None)
            width = _width(proj)
            if n_heads and head_dim and width == n_heads * head_dim:
                self.n_heads, self.head_dim = int(n_heads), int(head_dim)
            else:
                self._head_problem = (f"{adapter.head_input} takes {width} columns, not num_attention_heads "
                                      f"({n_heads}) x head_dim ({head_dim})")
        self.vision_blocks = (_module(model, adapter.vision_blocks, "vision_blocks", label)
                              if adapter.vision_blocks else None)
        self.n_vision_layers = len(self.vision_blocks) if self.vision_blocks is not None else 0
        self.projector = _module(model, adapter.projector, "projector", label) if adapter.projector else None

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def has_projector(self) -> bool:
        return self.projector is not None

    # -- what exists

    def kinds(self) -> list[str]:
        """The site kinds this model has."""
        out = ["resid_pre", "resid_post"]
        out += [k for k, field in (("attn_out", "attn_out"), ("mlp_out", "mlp_out")) if self._children[field]]
        if self.n_heads:
            out.append("attn_head")
        if self.n_vision_layers:
            out.append("vision_block")
        if self.has_projector:
            out.append("projector_out")
        return out

    def valid(self) -> str:
        """The valid sites in one phrase: `resid_pre, resid_post, attn_out, mlp_out .L0-3; attn_head.L0-3.H0-3; ...`."""
        kinds = self.kinds()
        layer_kinds = [k for k in kinds if SITE_KINDS[k].scope == "layer"]
        parts = [f"{'/'.join(layer_kinds)}.L0-{self.n_layers - 1}"]
        if "attn_head" in kinds:
            parts.append(f"attn_head.L0-{self.n_layers - 1}.H0-{self.n_heads - 1}")
        if "vision_block" in kinds:
            parts.append(f"vision_block.L0-{self.n_vision_layers - 1}")
        if "projector_out" in kinds:
            parts.append("projector_out")
        return "; ".join(parts)

    def check(self, site: str | Site) -> Site:
        """`site` parsed and checked against this model; one ValueError line listing the valid sites otherwise."""
        try:
            s = Site.parse(site)
        except ValueError as err:
            raise ValueError(f"{err}; valid sites of {self.label}: {self.valid()}") from None
        problem = self._problem(s)
        if problem:
            raise ValueError(f"site {s}: {problem}; valid sites of {self.label}: {self.valid()}")
        return s

    def _problem(self, s: Site) -> str | None:
        if s.kind in ("attn_out", "mlp_out") and not self._children[s.kind]:
            return f"this architecture has no {s.kind} module (set the adapter's {s.kind})"
        if s.kind == "attn_head" and not self.n_heads:
            return f"no head sites: {self._head_problem}"
        if s.kind == "vision_block" and not self.n_vision_layers:
            return "this model has no vision tower blocks (set the adapter's vision_blocks)"
        if s.kind == "projector_out" and not self.has_projector:
            return "this model has no projector (set the adapter's projector)"
        if s.spec.scope in ("layer", "head") and s.layer >= self.n_layers:
            return f"layer {s.layer} is out of range (decoder layers 0..{self.n_layers - 1})"
        if s.kind == "vision_block" and s.layer >= self.n_vision_layers:
            return f"vision layer {s.layer} is out of range (vision blocks 0..{self.n_vision_layers - 1})"
        if s.kind == "attn_head" and s.head >= self.n_heads:
            return f"head {s.head} is out of range (heads 0..{self.n_heads - 1})"
        return None

    def all(self, kind: str, layers: Sequence[int] | None = None) -> list[Site]:
        """Every site of `kind` (of `layers` when given), in execution order."""
        if kind not in self.kinds():
            self.check(Site(kind, 0 if SITE_KINDS[kind].scope != "model" else None,
                            0 if kind == "attn_head" else None))  # raises, naming why
        scope = SITE_KINDS[kind].scope
        if scope == "model":
            return [Site(kind)]
        if scope == "vision_layer":
            chosen = range(self.n_vision_layers) if layers is None else layers
            return [self.check(Site(kind, int(i))) for i in chosen]
        chosen = range(self.n_layers) if layers is None else layers
        if scope == "head":
            return [self.check(Site(kind, int(i), h)) for i in chosen for h in range(self.n_heads)]
        return [self.check(Site(kind, int(i))) for i in chosen]

    def width(self, site: str | Site) -> int | None:
        """The width of the site's vectors: head_dim for a head, d_model on the text stream,
        None where only the module knows (vision blocks, the projector)."""
        s = self.check(site)
        if s.kind == "attn_head":
            return self.head_dim
        return self.d_model if s.stream == "text" else None

    # -- where it is

    def point(self, site: str | Site) -> HookPoint:
        """The HookPoint of a (checked) site."""
        s = self.check(site)
        stream = s.stream
        if s.kind == "vision_block":
            module, path = self.vision_blocks[s.layer], f"{self.adapter.vision_blocks}.{s.layer}"
            return HookPoint(s, module, path, "output", None, stream)
        if s.kind == "projector_out":
            return HookPoint(s, self.projector, self.adapter.projector, "output", None, stream)
        block, base = self.layers[s.layer], f"{self.layers_path}.{s.layer}"
        if s.kind == "resid_pre":
            return HookPoint(s, block, base, "input", None, stream)
        if s.kind == "resid_post":
            return HookPoint(s, block, base, "output", None, stream)
        if s.kind == "attn_head":
            path = f"{self._children['attention']}.{self.adapter.head_input}"
            cols = slice(s.head * self.head_dim, (s.head + 1) * self.head_dim)
            return HookPoint(s, block.get_submodule(path), f"{base}.{path}", "input", cols, stream)
        child = self._children[s.kind]
        return HookPoint(s, block.get_submodule(child), f"{base}.{child}", "output", None, stream)

    def order_key(self, site: str | Site) -> tuple:
        """Sort key of execution order: the vision tower, the projector, then the decoder layer by
        layer (resid_pre, heads, attn_out, mlp_out, resid_post within one)."""
        s = Site.parse(site)
        if s.kind == "vision_block":
            return (0, s.layer, 0, 0)
        if s.kind == "projector_out":
            return (1, 0, 0, 0)
        return (2, s.layer, LAYER_ORDER.index(s.kind), s.head or 0)


def _module(root: Any, path: str | None, field: str, label: str) -> nn.Module:
    """The module at dotted `path` under `root`; one ValueError line naming the field, the first
    missing step and the children that are there otherwise."""
    if not path:
        raise ValueError(f"{label}: the adapter's {field} is empty")
    module = root
    for step in path.split("."):
        children = dict(module.named_children())
        if step not in children:
            there = ", ".join(children) or "none"
            raise ValueError(f"{label}: the adapter's {field}={path!r} is not a module: {type(module).__name__} has "
                             f"no child {step!r} (its children: {there})")
        module = children[step]
    return module


def site_map(model: Any, adapter: Adapter | str | None = None) -> SiteMap:
    """The SiteMap of `model`: its adapter (given, registered for its model_type, else automatic),
    with every field left None found from the structure (hooks.sites.auto)."""
    from evprobe.hooks.sites.adapter import resolve_adapter
    from evprobe.hooks.sites.auto import complete

    model_type = getattr(getattr(model, "config", None), "model_type", None)
    return SiteMap(model, complete(resolve_adapter(adapter, model_type), model))


class LayerSites(SiteMap):
    """The sites of a bare decoder ModuleList (no model around it): resid_pre and resid_post only.
    What the intervention core uses for a handle-like object with `.layers` and `.d_model`."""

    def __init__(self, layers: Any, d_model: int | None) -> None:  # noqa: D107 - no super().__init__: no model
        self.model, self.layers, self.layers_path, self.d_model = None, layers, "layers", d_model
        self.adapter = Adapter(name="layers", decoder_layers="layers", attention="", mlp="", attn_out="", mlp_out="",
                               head_input="", vision_blocks="", projector="")
        self.label = f"{type(layers).__name__} of {len(layers)} layers"
        self._children = {"attention": "", "mlp": "", "attn_out": "", "mlp_out": ""}
        self.n_heads = self.head_dim = None
        self._head_problem = "a bare layer list has no attention paths"
        self.vision_blocks, self.n_vision_layers, self.projector = None, 0, None
