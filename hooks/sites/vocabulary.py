"""The site vocabulary: every place the toolkit reads or edits a model, named once.

    resid_pre.L3        decoder layer 3's input (the residual stream before block 3)
    resid_post.L3       decoder layer 3's output (the residual stream after it; the default site)
    attn_out.L3         what layer 3's attention sublayer adds to the residual stream
    mlp_out.L3          what layer 3's MLP sublayer adds to it
    attn_head.L3.H2     attention head 2 of layer 3: its slice of the input of the attention's output
                        projection (the head's attention-weighted values, head_dim wide; the o_proj of
                        Llama-style blocks), so the head's contribution to attn_out is o_proj's weight
                        columns of that slice times it, and patching every head of a layer is patching
                        attn_out (tests/hooks/test_sites.py checks both on every tiny architecture)
    vision_block.L1     the output of the vision tower's block 1 (its own token axis and width)
    projector_out       the output of the projector that maps vision features into the language
                        model's embedding space (one row per image feature token)

The spelling follows direction names (`resolved.logistic.L8.last`): the kind, then `.L<layer>`,
then `.H<head>`. Which module holds each kind in a given architecture is an adapter's business
(hooks.sites.adapter); whether a site exists for a model is SiteMap's (hooks.sites.resolve).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Scope = Literal["layer", "head", "vision_layer", "model"]
Stream = Literal["text", "vision"]


@dataclass(frozen=True)
class SiteKind:
    """One kind of site: what indexes it (scope), which stream it lies on, and what it is."""

    name: str
    scope: Scope
    stream: Stream
    what: str


SITE_KINDS: dict[str, SiteKind] = {k.name: k for k in (
    SiteKind("resid_pre", "layer", "text", "the decoder layer's input (the residual stream before the block)"),
    SiteKind("resid_post", "layer", "text", "the decoder layer's output (the residual stream after the block)"),
    SiteKind("attn_out", "layer", "text", "what the attention sublayer adds to the residual stream"),
    SiteKind("mlp_out", "layer", "text", "what the MLP sublayer adds to the residual stream"),
    SiteKind("attn_head", "head", "text", "one attention head's output: its slice of the attention output "
             "projection's input (head_dim wide)"),
    SiteKind("vision_block", "vision_layer", "vision", "the output of a block of the vision tower"),
    SiteKind("projector_out", "model", "vision", "the projector's output: vision features in the language "
             "model's embedding space"),
)}
# Kinds read at a decoder layer, in the order the block computes them (resid_pre before its
# sublayers, resid_post after): the order reads of one layer happen in.
LAYER_ORDER: tuple[str, ...] = ("resid_pre", "attn_head", "attn_out", "mlp_out", "resid_post")

_GRAMMAR = ("KIND, KIND.L<layer> or attn_head.L<layer>.H<head> (e.g. resid_post.L3, attn_head.L3.H2, "
            "vision_block.L0, projector_out)")
_PATTERN = re.compile(r"^(?P<kind>[a-z_]+)(?:\.L(?P<layer>\d+))?(?:\.H(?P<head>\d+))?$")


@dataclass(frozen=True, order=True)
class Site:
    """A site: its kind (SITE_KINDS) and, as the kind needs, a layer and a head index."""

    kind: str
    layer: int | None = None
    head: int | None = None

    def __post_init__(self) -> None:
        spec = SITE_KINDS.get(self.kind)
        if spec is None:
            raise ValueError(f"unknown site kind {self.kind!r}; choose from {', '.join(SITE_KINDS)}")
        for name in ("layer", "head"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"site {self.kind}: {name} must be an integer >= 0, got {value!r}")
        wants_layer = spec.scope != "model"
        if wants_layer and self.layer is None:
            raise ValueError(f"site {self.kind} needs a layer ({self.kind}.L<layer>); grammar: {_GRAMMAR}")
        if not wants_layer and self.layer is not None:
            raise ValueError(f"site {self.kind} takes no layer; write {self.kind}")
        if (spec.scope == "head") != (self.head is not None):
            raise ValueError(f"site {self.kind}: " + ("needs a head (attn_head.L<layer>.H<head>)" if spec.scope == "head"
                                                      else "takes no head; only attn_head does"))

    @property
    def spec(self) -> SiteKind:
        return SITE_KINDS[self.kind]

    @property
    def stream(self) -> Stream:
        return self.spec.stream

    def __str__(self) -> str:
        return self.kind + ("" if self.layer is None else f".L{self.layer}") + ("" if self.head is None else f".H{self.head}")

    @classmethod
    def parse(cls, text: str | Site) -> Site:
        """A Site from its spelling (`resid_post.L3`, `attn_head.L3.H2`, `projector_out`); a Site is returned as it is.
        A malformed spelling is one ValueError line giving the grammar."""
        if isinstance(text, Site):
            return text
        if not isinstance(text, str):
            raise TypeError(f"a site is a string such as 'resid_post.L3' or a Site, got {type(text).__name__}")
        found = _PATTERN.match(text.strip())
        if found is None:
            raise ValueError(f"cannot read site {text!r}; write {_GRAMMAR}")
        layer, head = found["layer"], found["head"]
        return cls(found["kind"], None if layer is None else int(layer), None if head is None else int(head))


def site(kind: str, layer: int | None = None, head: int | None = None) -> Site:
    """Site(kind, layer, head), for symmetry with Site.parse."""
    return Site(kind, layer, head)
