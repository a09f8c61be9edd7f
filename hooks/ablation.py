"""Directional ablation: project a unit direction out of decoder layer outputs.

    with ablate(handle, v, layers="all"):
        gens = generate(handle, prompts, images, max_new_tokens=16)

Each chosen layer's output x (batch, seq, d_model) becomes x - (x . v) v at every
position, on every forward (prompt pass and each decode step), v the unit
direction, through the intervention core (hooks.intervention: Ablate ops); removed on exit,
also when the block raises. `kind=` ablates another layer site (attn_out, mlp_out, ...).

A direction with provenance (probes.directions.Direction: a `vector` and a `provenance` mapping)
is accepted as it is and checked first: one fitted on another model than `handle.model_id` is
refused with the steering's one-line refusal (hooks.fingerprint.check_fitted_on) unless
`allow_other_model=True`. A raw vector is never checked.

A capture (hooks.capture) inside the block reads the ablated values, the ablated layer
included; nnsight's own `.output` of that layer does not (it reads before torch hooks run).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from numbers import Integral
from typing import Any, Literal

from evprobe.hooks.direction_vectors import check_direction_model, provenance_of, unit_direction


def _layer_list(layers: Literal["all"] | int | Sequence[int], n_layers: int) -> list[int]:
    if isinstance(layers, str):
        if layers != "all":
            raise ValueError(f"layers must be 'all', an int or a list of ints, got {layers!r}")
        return list(range(n_layers))
    chosen = [layers] if isinstance(layers, Integral) else list(layers)
    if not chosen:
        raise ValueError("layers is an empty list; use 'all', an int or a non-empty list")
    for layer in chosen:
        if isinstance(layer, bool) or not isinstance(layer, Integral) or not 0 <= layer < n_layers:
            raise ValueError(f"layer {layer!r} is out of range: this model has {n_layers} decoder layers; "
                             f"use 0 .. {n_layers - 1} or 'all'")
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"layers {chosen} repeats a layer; each layer is ablated once")
    return [int(layer) for layer in chosen]


@contextmanager
def ablate(handle: Any, direction: Any, layers: Literal["all"] | int | Sequence[int] = "all", *,
           allow_other_model: bool = False, kind: str = "resid_post") -> Iterator[list[int]]:
    """Project `direction` out of the output of each chosen layer while the block runs.

    handle: a Handle, or anything with `.layers` (decoder ModuleList) and `.d_model`.
    direction: (d_model,) numpy / torch vector, normalised here; zero or wrong
        shape raises ValueError. Or a direction with provenance (probes.directions.Direction):
        its vector, refused on another model than the one it was fitted on.
    layers: "all", one layer index or a list of them.
    allow_other_model: ablate a Direction fitted on another model than handle.model_id.
    kind: the layer site the direction is projected out of (hooks.sites): "resid_post" (the
        layer's output, the default), "resid_pre", "attn_out", "mlp_out" or "vision_block" (then
        `layers` counts the vision tower's blocks and the direction is the tower's width).
    Yields the list of ablated layer indices.
    """
    from evprobe.hooks.intervention import Ablate, intervene
    from evprobe.hooks.intervention.session import site_map_of
    from evprobe.hooks.sites.vocabulary import Site

    if provenance_of(direction) is not None:
        check_direction_model(handle, direction, allow_other_model=allow_other_model)
        direction = direction.vector
    sites = site_map_of(handle)
    vision = kind == "vision_block"
    width = None if vision else handle.d_model
    v64 = unit_direction(direction, d_model=width)  # (width,) float64, read-only
    chosen = _layer_list(layers, sites.n_vision_layers if vision else len(handle.layers))
    with intervene(handle, [Ablate(Site(kind, layer), direction=v64) for layer in chosen]):
        yield chosen


__all__ = ["ablate"]
