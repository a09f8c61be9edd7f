"""Capture the residual stream at named token positions, through nnsight.

What is stored: the raw output of each decoder layer (the residual stream after block i), a
(batch, seq, d_model) tensor. For i < n_layers - 1 this equals transformers'
`output_hidden_states[i + 1]`; for the last layer it is the value BEFORE the final norm
(`hidden_states[-1]` is after it, so the two differ there). The final-normed value is never
stored.

Positions (each reduced to one d_model vector per row and layer, in float32):
    last        the last prompt token (hooks.spans.Spans.last)
    image_mean  mean over the image-feature tokens of all the row's images (Spans.image)
    text_mean   mean over the row's text segment (Spans.text: its marker, or the whole prompt)

The reduction happens inside the trace, right after each layer runs, so only
(batch, n_positions, d_model) per layer leaves the model; the trace stops after the last
layer asked for (no final norm, no LM head). Means are masked with `torch.where` (not
multiplied by a 0/1 mask), so whatever the padded positions hold (even NaN) cannot leak into
a row; left padding never shifts a span because spans are padded-row indices.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from evprobe.hooks.inputs import build_inputs
from evprobe.hooks.spans import Spans, batch_spans

if TYPE_CHECKING:
    import torch
    from PIL import Image

    from evprobe.hooks.handle import Handle

POSITIONS: tuple[str, ...] = ("last", "image_mean", "text_mean")

# One line per position rule, for metadata files.
POSITION_RULES: dict[str, str] = {
    "last": "the last real prompt token (end of the assistant generation prompt; index -1 under left padding)",
    "image_mean": "mean over the image-feature placeholder tokens of all images (the config's image token id; "
    "start/end/break/tile marker tokens excluded)",
    "text_mean": "mean over the tokens overlapping the text marker inside the prompt text (or over every token of "
    "the prompt text when there is no marker); role headers, template, image and special tokens excluded",
}


def check_positions(positions: Sequence[str]) -> list[str]:
    """The position names, validated: known, at least one, no repeats."""
    if isinstance(positions, str):
        raise TypeError("positions must be a list of names, not a string")
    names = list(positions)
    if not names:
        raise ValueError(f"no positions given; choose from {', '.join(POSITIONS)}")
    for name in names:
        if name not in POSITIONS:
            raise ValueError(f"unknown position {name!r}; choose from {', '.join(POSITIONS)}")
    if len(set(names)) != len(names):
        raise ValueError(f"positions {names} repeat a name; give each once")
    return names


def check_layers(layers: Sequence[int], n_layers: int) -> list[int]:
    """Layer indices, validated against the model: ints in [0, n_layers), no repeats."""
    out = list(layers)
    if not out:
        raise ValueError("no layers given; use 'all' or layer indices")
    for layer in out:
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)):
            raise TypeError(f"layer {layer!r} is not an integer")
        if not 0 <= layer < n_layers:
            raise ValueError(f"layer {layer} is out of range: this model has layers 0..{n_layers - 1}")
    if len(set(out)) != len(out):
        raise ValueError(f"layers {out} repeat an index; give each once")
    return [int(x) for x in out]


@dataclass(frozen=True)
class Capture:
    """One batch's capture.

    acts: float32 (rows, len(layers), len(positions), d_model), in the order asked for.
    spans: each row's token spans (hooks.spans).
    n_tokens: each row's prompt length without padding.
    """

    acts: np.ndarray
    spans: list[Spans]
    n_tokens: list[int]


def _span(spans: Spans, position: str) -> tuple[int, ...]:
    if position == "last":
        return (spans.last,)
    if position == "image_mean":
        return spans.image
    return spans.text


def _gather_plan(
    spans: list[Spans], positions: list[str], device: torch.device, first_row: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per position: (index (batch, width) long, valid (batch, width) bool); width = longest span."""
    import torch

    plan = []
    for position in positions:
        rows = [_span(s, position) for s in spans]
        for r, row in enumerate(rows):
            if not row:
                raise ValueError(f"row {first_row + r}: position {position!r} has no tokens (e.g. a row without images "
                                 "asked for image_mean)")
        width = max(len(row) for row in rows)
        index = torch.zeros((len(rows), width), dtype=torch.long)
        valid = torch.zeros((len(rows), width), dtype=torch.bool)
        for r, row in enumerate(rows):
            index[r, : len(row)] = torch.tensor(row, dtype=torch.long)
            valid[r, : len(row)] = True
        plan.append((index.to(device), valid.to(device)))
    return plan


def _reduce(out: torch.Tensor, plan: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """(batch, seq, d_model) layer output -> (batch, n_positions, d_model) float32 span means."""
    import torch

    d = out.shape[-1]
    means = []
    for index, valid in plan:  # index, valid: (batch, width)
        index, valid = index.to(out.device), valid.to(out.device)  # layers may sit on several GPUs
        picked = out.gather(1, index.unsqueeze(-1).expand(-1, -1, d)).float()  # (batch, width, d)
        picked = torch.where(valid.unsqueeze(-1), picked, torch.zeros((), dtype=picked.dtype, device=picked.device))
        means.append(picked.sum(1) / valid.sum(1, keepdim=True))  # (batch, d)
    return torch.stack(means, 1)  # (batch, n_positions, d)


def capture_batch(
    handle: Handle,
    prompts: Sequence[str],
    images: Sequence[Sequence[Image.Image]],
    *,
    layers: Sequence[int],
    positions: Sequence[str],
    text_markers: Sequence[str | None] | None = None,
    first_row: int = 0,
) -> Capture:
    """Run the rows as ONE batch (one processor call, left padding) and capture them.

    first_row: the caller's index of row 0, used in error messages only.
    """
    import nnsight
    import torch

    positions = check_positions(positions)
    layers = check_layers(layers, handle.n_layers)
    enc = build_inputs(handle, list(prompts), list(images))
    spans = batch_spans(handle, enc, list(prompts), [len(i) for i in images], text_markers, first_row=first_row)
    plan = _gather_plan(spans, positions, handle.device, first_row)
    order = sorted(layers)  # nnsight reads modules in execution order only
    envoys = handle.nn_layers
    kwargs = dict(enc)
    if "use_cache" in _forward_params(handle):
        kwargs["use_cache"] = False
    with torch.no_grad(), handle.nn.trace(**kwargs) as tracer:
        saved = nnsight.save([_reduce(envoys[i].output, plan) for i in order])  # each (batch, n_pos, d)
        tracer.stop()  # nothing after the last asked-for layer is needed
    by_layer = dict(zip(order, saved, strict=True))
    # Each layer's means to the CPU first: under a device_map the layers may sit on different GPUs.
    acts = torch.stack([by_layer[i].cpu() for i in layers], 1).numpy()  # (batch, n_layers, n_pos, d)
    n_tokens = [int(n) for n in enc["attention_mask"].sum(1).tolist()]
    # A finished nnsight trace leaves reference cycles that keep this batch's tensors alive until
    # Python's cyclic GC happens to run; left alone, resident memory drifts up and down by
    # hundreds of MB on long runs. A young-generation collection (about 1 ms) frees them now.
    del tracer, saved, by_layer, enc, kwargs
    gc.collect(1)
    return Capture(acts=acts, spans=spans, n_tokens=n_tokens)


def _forward_params(handle: Handle) -> set[str]:
    import inspect

    return set(inspect.signature(handle.model.forward).parameters)


def capture_layers(
    handle: Handle,
    prompts: Sequence[str],
    images: Sequence[Sequence[Image.Image]],
    *,
    layers: Sequence[int],
    positions: Sequence[str],
    text_markers: Sequence[str | None] | None = None,
    batch_size: int | None = None,
) -> np.ndarray:
    """Residual stream of `layers` at `positions` for each (prompt, images) row.

    layers: decoder layer indices (any order; the output keeps it).
    positions: names from POSITIONS.
    text_markers: per row, the substring of its prompt that `text_mean` averages over (None =
        the whole prompt text); None = no markers for any row.
    batch_size: rows per forward pass; None = all rows at once. A row gives the same values
        (within float32 reduction-order noise) batched or alone.
    Returns float32 (rows, len(layers), len(positions), d_model). A row whose span for an
    asked position is empty is a ValueError naming the row and the position.
    """
    if isinstance(prompts, str):
        raise TypeError("prompts must be a list of strings, not a string")
    if len(images) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(images)} image lists (give one list per prompt)")
    if text_markers is not None and len(text_markers) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(text_markers)} text markers")
    step = batch_size or len(prompts)
    if step < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    out = []
    for start in range(0, len(prompts), step):
        rows = slice(start, start + step)
        markers = None if text_markers is None else list(text_markers[rows])
        cap = capture_batch(handle, list(prompts[rows]), list(images[rows]), layers=layers,
                            positions=positions, text_markers=markers, first_row=start)
        out.append(cap.acts)
    return np.concatenate(out, axis=0)
