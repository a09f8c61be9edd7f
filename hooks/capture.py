"""Capture decoder-layer components at token positions, through the intervention core (Reads).

What is stored, per decoder layer i and component (COMPONENTS, sites of hooks.sites), a (batch,
seq, d_model) tensor reduced to one vector per position:
    resid_post  the raw output of decoder layer i (the residual stream after block i), the
                default. For i < n_layers - 1 this equals transformers' `output_hidden_states[i + 1]`;
                for the last layer it is the value BEFORE the final norm (`hidden_states[-1]` is
                after it, so the two differ there). The final-normed value is never stored.
    attn_out    what layer i's attention sublayer adds to the residual stream
    mlp_out     what layer i's MLP sublayer adds to it (resid_post[i] = resid_post[i-1] + both)
    resid_pre   layer i's input (= resid_post[i - 1], except at Qwen3-VL's DeepStack injections)
An architecture's adapter (hooks.sites) says which module gives each. Attention heads, the vision
tower and the projector are read by hooks.site_capture.capture_sites.

Positions (hooks.positions, the vocabulary steering and patching share; each reduced to one
d_model vector per row, layer and component, in float32):
    last        the last token: the prompt's, or the answer prefix's when the handle has one
                (Handle.answer_prefix; hooks.spans.Spans.last)
    image_mean  mean over the image-feature tokens of all the row's images (Spans.image; the
                mean over the position "image", which capture also accepts)
    text_mean   mean over the row's text segment (Spans.text: its marker, or the whole prompt;
                the mean over "text")
    all         mean over every real token of the row
    Token(i), i the i-th real token of the row (negative from its end; padding not counted)
    Marker(s, reduce)  mean / first / last token of substring s of the prompt text
Every token without reduction: `capture_tokens` (hooks.token_capture), one array per row.

API: `capture_layers(..., component=)` one component -> (rows, layers, positions, d_model);
`capture_components(..., components=)` several from ONE forward -> {component: that array};
`capture_batch` is one batch of either (the CLI job's unit).

Reads go through the intervention core (hooks.intervention: one Read per site). The reduction
happens inside the forward, right after each module runs, so only (batch, n_positions, d_model)
per layer and component leaves the model; the forward stops after the last layer asked for (no
final norm, no LM head). Means are
masked with `torch.where` (not multiplied by a 0/1 mask), so whatever the padded positions hold
(even NaN) cannot leak into a row; left padding never shifts a span because spans are
padded-row indices, and token indices count real tokens only.

Under `hooks.steering` / `hooks.ablation` / `hooks.intervention.intervene`, capture reads the edited
values, the edited site included: its Reads are hooks registered after the edits, and hooks run in
registration order (tests/hooks/test_steer_nnsight.py). nnsight's own `.output` of an edited
module is read before torch hooks run, so it shows the unedited value; `trace_sites_nnsight`
(tests/hooks/nnsight_twins.py) is the nnsight capture, kept beside the tests as the cross-check
(equal bit for bit without edits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from evprobe.hooks.inputs import build_inputs, image_rows
from evprobe.hooks.positions import REDUCED as POSITIONS  # noqa: F401  capture's named reductions, re-exported
from evprobe.hooks.positions import RULES as POSITION_RULES  # noqa: F401  meta.json's position rules, re-exported
from evprobe.hooks.positions import Position, row_indices, span_indices
from evprobe.hooks.positions import check_positions as check_any_positions
from evprobe.hooks.spans import Spans, batch_spans

if TYPE_CHECKING:
    import torch
    from PIL import Image

    from evprobe.hooks.handle import Handle

# The layer sites capture reads as "components" (hooks.sites.vocabulary): the residual stream after
# the block (the default), before it, and what each sublayer adds. Heads, the vision tower and
# the projector are read with capture_sites.
COMPONENTS: tuple[str, ...] = ("resid_post", "resid_pre", "attn_out", "mlp_out")


def _check_names(values: Sequence[str], known: Sequence[str], what: str, string_hint: str = "") -> list[str]:
    """Names validated against `known`: a list (not a string), at least one, each known, no repeats.
    what: the plural ("positions"); messages name one as the singular."""
    if isinstance(values, str):
        raise TypeError(f"{what} must be a list of names, not a string{string_hint}")
    names = list(values)
    if not names:
        raise ValueError(f"no {what} given; choose from {', '.join(known)}")
    for name in names:
        if name not in known:
            raise ValueError(f"unknown {what[:-1]} {name!r}; choose from {', '.join(known)}")
    if len(set(names)) != len(names):
        raise ValueError(f"{what} {names} repeat a name; give each once")
    return names


def check_positions(positions: Sequence[str]) -> list[str]:
    """Position specs as text, validated: at least one, no repeats, each a name (hooks.positions.NAMED),
    `token:I`, `frame:K` or `marker:TEXT[:first|last|mean]` (hooks.positions.parse_position).

    The CLI capture job stores these strings (acts.npy's position axis, meta.json's rules); the
    library API takes Token / Marker objects too (hooks.positions.check_positions)."""
    from evprobe.hooks.positions import NAMED, parse_position

    if isinstance(positions, str):
        raise TypeError("positions must be a list of names, not a string")
    names = list(positions)
    if not names:
        raise ValueError(f"no positions given; choose from {', '.join(NAMED)}, token:I, frame:K or marker:TEXT")
    parsed = [parse_position(name) for name in names]  # a bad spec fails here, naming it
    if len(set(parsed)) != len(parsed):
        raise ValueError(f"positions {names} repeat one; give each once")
    return names


def check_components(components: Sequence[str]) -> list[str]:
    """Component names, validated: known (COMPONENTS), at least one, no repeats."""
    return _check_names(components, COMPONENTS, "components", " (use component= for one)")


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

    acts: float32 (rows, len(layers), len(positions), d_model), in the order asked for, of
        the first component asked for (capture_batch's `component`).
    spans: each row's token spans (hooks.spans).
    n_tokens: each row's prompt length without padding.
    by_component: every component asked for -> its (rows, layers, positions, d_model) array
        (`acts` is one of them).
    """

    acts: np.ndarray
    spans: list[Spans]
    n_tokens: list[int]
    by_component: dict[str, np.ndarray] | None = None


def gather_plan(
    spans: list[Spans], positions: list[str], device: torch.device, first_row: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`position_plan` of the named positions (POSITIONS) of `spans`."""
    rows = [[span_indices(s, p) for s in spans] for p in positions]
    for position, per_row in zip(positions, rows, strict=True):
        for r, row in enumerate(per_row):
            if not row:
                raise ValueError(f"row {first_row + r}: position {position!r} has no tokens (e.g. a row without images "
                                 "asked for image_mean)")
    return position_plan(rows, device)


def position_plan(indices: list[list[tuple[int, ...]]], device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per position: (index (batch, width) long, valid (batch, width) bool); width = longest span.

    indices: per position, per row, the non-empty padded-row indices to average."""
    import torch

    plan = []
    for rows in indices:
        width = max(len(row) for row in rows)
        index = torch.zeros((len(rows), width), dtype=torch.long)
        valid = torch.zeros((len(rows), width), dtype=torch.bool)
        for r, row in enumerate(rows):
            index[r, : len(row)] = torch.tensor(row, dtype=torch.long)
            valid[r, : len(row)] = True
        plan.append((index.to(device), valid.to(device)))
    return plan


def reduce_at(out: torch.Tensor, plan: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
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


def sites(handle: Handle, layers: Sequence[int], components: Sequence[str]) -> list[tuple[int, str, str]]:
    """(layer, component, module path) in execution order: layers ascending, and within a layer
    resid_pre, attn_out, mlp_out, resid_post. Raises the SiteMap's one-line ValueError (naming the
    valid sites) when the architecture lacks a component."""
    from evprobe.hooks.intervention.session import site_map_of
    from evprobe.hooks.sites.vocabulary import LAYER_ORDER, Site

    site_map = site_map_of(handle)
    order = [c for c in LAYER_ORDER if c in components]
    out = []
    for i in sorted(layers):
        for c in order:
            try:
                out.append((i, c, site_map.point(Site(c, i)).path))
            except ValueError as err:
                raise ValueError(f"{handle.model_id} ({handle.arch}) layer {i}: {err}") from None
    return out


def _value(output):
    """A module's output as one (batch, seq, d_model) tensor (attention returns (out, weights))."""
    return output[0] if isinstance(output, tuple) else output


def no_cache_kwargs(handle: Handle, enc) -> dict:
    kwargs = dict(enc)
    if "use_cache" in _forward_params(handle):
        kwargs["use_cache"] = False
    return kwargs


def trace_sites(handle: Handle, enc, layers: Sequence[int], components: Sequence[str], read) -> dict:
    """Run one forward over `enc`, apply `read` to each (layer, component) value as the model
    computes it, and return {(layer, component): read(value)}; the forward stops after the last
    site read (no later layer, no final norm, no LM head). Through the intervention core
    (hooks.intervention): under an active `steer` / `ablate` / `intervene`, an edited site is
    read edited.

    read: (batch, seq, d_model) tensor -> what to keep (e.g. span means, or the whole tensor)."""
    import torch

    from evprobe.hooks.intervention import Read, intervene
    from evprobe.hooks.sites.vocabulary import Site

    plan = sites(handle, layers, components)
    ops = [Read(Site(c, i), reduce=read) for i, c, _ in plan]
    with torch.no_grad(), intervene(handle, ops, stop_after_reads=True) as run:
        run.forward(handle.model, no_cache_kwargs(handle, enc))
    return {(i, c): run.value(k) for k, (i, c, _) in enumerate(plan)}


def capture_batch(
    handle: Handle,
    prompts: Sequence[str],
    images: Sequence[Sequence[Image.Image]] | None = None,
    *,
    layers: Sequence[int],
    positions: Sequence[Position | int],
    text_markers: Sequence[str | None] | None = None,
    first_row: int = 0,
    component: str = "resid_post",
    components: Sequence[str] | None = None,
) -> Capture:
    """Run the rows as ONE batch (one processor call, left padding) and capture them.

    component: what `acts` holds; components: all to read in this forward (default: just
        `component`; `by_component` holds each).
    first_row: the caller's index of row 0, used in error messages only.
    """
    images = image_rows(prompts, images)
    import torch

    positions = check_any_positions(positions)
    layers = check_layers(layers, handle.n_layers)
    components = check_components([component] if components is None else components)
    if component not in components:
        raise ValueError(f"component {component!r} is not among components {components}")
    sites(handle, layers, components)  # an unavailable component fails before any work
    enc = build_inputs(handle, list(prompts), list(images))
    n_images = [len(i) for i in images]
    spans = batch_spans(handle, enc, list(prompts), n_images, text_markers, first_row=first_row)
    indices = row_indices(handle, enc, list(prompts), n_images, spans, positions, first_row=first_row,
                          image_sizes=[[im.size for im in row] for row in images])
    plan = position_plan(indices, handle.device)
    got = trace_sites(handle, enc, layers, components, lambda out: reduce_at(out, plan))  # each (batch, n_pos, d)
    # Each layer's means to the CPU first: under a device_map the layers may sit on different GPUs.
    by_component = {c: torch.stack([got[i, c].cpu() for i in layers], 1).numpy()  # (batch, n_layers, n_pos, d)
                    for c in components}
    n_tokens = [int(n) for n in enc["attention_mask"].sum(1).tolist()]
    return Capture(acts=by_component[component], spans=spans, n_tokens=n_tokens, by_component=by_component)


def _forward_params(handle: Handle) -> set[str]:
    import inspect

    return set(inspect.signature(handle.model.forward).parameters)


def check_rows(prompts, images, text_markers, batch_size) -> int:
    """Validate the row arguments shared by the capture functions; the rows per forward."""
    if isinstance(prompts, str):
        raise TypeError("prompts must be a list of strings, not a string")
    if len(images) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(images)} image lists (give one list per prompt)")
    if text_markers is not None and len(text_markers) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(text_markers)} text markers")
    step = batch_size or len(prompts)
    if step < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return step


def capture_components(
    handle: Handle,
    prompts: Sequence[str],
    images: Sequence[Sequence[Image.Image]] | None = None,
    *,
    layers: Sequence[int],
    positions: Sequence[Position | int],
    components: Sequence[str] = ("resid_post",),
    text_markers: Sequence[str | None] | None = None,
    batch_size: int | None = None,
) -> dict[str, np.ndarray]:
    """`capture_layers` of several components from one forward per batch: {component: array}."""
    images = image_rows(prompts, images)
    step = check_rows(prompts, images, text_markers, batch_size)
    components = check_components(components)
    out: dict[str, list[np.ndarray]] = {c: [] for c in components}
    for start in range(0, len(prompts), step):
        rows = slice(start, start + step)
        markers = None if text_markers is None else list(text_markers[rows])
        cap = capture_batch(handle, list(prompts[rows]), list(images[rows]), layers=layers, positions=positions,
                            text_markers=markers, first_row=start, component=components[0], components=components)
        for c in components:
            out[c].append(cap.by_component[c])
    return {c: np.concatenate(v, axis=0) for c, v in out.items()}


def capture_layers(
    handle: Handle,
    prompts: Sequence[str],
    images: Sequence[Sequence[Image.Image]] | None = None,
    *,
    layers: Sequence[int],
    positions: Sequence[Position | int],
    text_markers: Sequence[str | None] | None = None,
    batch_size: int | None = None,
    component: str = "resid_post",
) -> np.ndarray:
    """One component of `layers` at `positions` for each (prompt, images) row.

    layers: decoder layer indices (any order; the output keeps it).
    positions: names from hooks.positions.NAMED (last, all, image, text, image_mean, text_mean), token indices (int or Token; negative from the row's end,
        padding not counted), Marker(text, "mean" | "first" | "last") and Frame(k) (the k-th image's
        tokens: a clip's frame), in any mix and order.
    text_markers: per row, the substring of its prompt that `text_mean` (and Marker(None, ...))
        uses (None = the whole prompt text); None = no markers for any row.
    batch_size: rows per forward pass; None = all rows at once. A row gives the same values
        (within float32 reduction-order noise) batched or alone.
    component: "resid_post" (default), "attn_out" or "mlp_out" (hooks.sites).
    Returns float32 (rows, len(layers), len(positions), d_model). A row whose span for an
    asked position is empty is a ValueError naming the row and the position.
    """
    return capture_components(handle, prompts, images, layers=layers, positions=positions, components=[component],
                              text_markers=text_markers, batch_size=batch_size)[component]
