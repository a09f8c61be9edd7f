"""Directional ablation: project a unit direction out of decoder layer outputs.

    with ablate(handle, v, layers="all"):
        gens = generate(handle, prompts, images, max_new_tokens=16)

Each chosen layer's output x (batch, seq, d_model) becomes x - (x . v) v at every
position, on every forward (prompt pass and each decode step), v the unit
direction. Plain torch forward hooks, for the reasons in hooks.steer's docstring
(nnsight interventions do not persist around later direct calls of
`handle.model`); removed on exit, also when the block raises.

A direction with provenance (probes.directions.Direction: a `vector` and a `provenance` mapping)
is accepted as it is and checked first: one fitted on another model than `handle.model_id` is
refused with the steering's one-line refusal (hooks.fingerprint.check_fitted_on) unless
`allow_other_model=True`. A raw vector is never checked.

Pitfall: an nnsight capture of an ablated layer's own `.output` shows the value
before the projection (nnsight reads inside the module's forward, before torch
forward hooks); the next layer's `.input` shows the ablated value.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from numbers import Integral
from typing import Any, Literal

from evprobe.hooks.steer import check_direction_model, hidden_of, provenance_of, replace_hidden, unit_direction


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


def _ablation_hook(v64):
    cache: dict[tuple[Any, Any], Any] = {}

    def hook(module, args, output):
        import torch

        hidden = hidden_of(output)  # (batch, seq, d_model)
        key = (hidden.dtype, hidden.device)
        if key not in cache:
            cache[key] = torch.tensor(v64, device=hidden.device, dtype=hidden.dtype)  # (d_model,), copied
        v = cache[key]
        coeff = hidden @ v  # (batch, seq)
        return replace_hidden(output, hidden - coeff.unsqueeze(-1) * v)

    return hook


@contextmanager
def ablate(handle: Any, direction: Any, layers: Literal["all"] | int | Sequence[int] = "all", *,
           allow_other_model: bool = False) -> Iterator[list[int]]:
    """Project `direction` out of the output of each chosen layer while the block runs.

    handle: a Handle, or anything with `.layers` (decoder ModuleList) and `.d_model`.
    direction: (d_model,) numpy / torch vector, normalised here; zero or wrong
        shape raises ValueError. Or a direction with provenance (probes.directions.Direction):
        its vector, refused on another model than the one it was fitted on.
    layers: "all", one layer index or a list of them.
    allow_other_model: ablate a Direction fitted on another model than handle.model_id.
    Yields the list of ablated layer indices.
    """
    if provenance_of(direction) is not None:
        check_direction_model(handle, direction, allow_other_model=allow_other_model)
        direction = direction.vector
    v64 = unit_direction(direction, d_model=handle.d_model)  # (d_model,) float64, read-only
    chosen = _layer_list(layers, len(handle.layers))
    removers = []
    try:
        for layer in chosen:
            removers.append(handle.layers[layer].register_forward_hook(_ablation_hook(v64)))
        yield chosen
    finally:
        for r in reversed(removers):
            r.remove()


__all__ = ["ablate"]
