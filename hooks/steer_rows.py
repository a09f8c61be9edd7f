"""Many steering vectors at once: a different raw vector per batch row (`steer_rows`), the
option-letter log-probabilities of K directions x n prompts in a few large forwards
(`option_logprobs_rows`, what the dose-response's 50-direction random null runs on), and the
residual norm measured at exactly the positions an edit touches (`residual_norms_at`, the unit of
`Steering.from_norm_units`). The single-vector steering and its conventions (positions,
schedule, prompt pass vs decode step) are in hooks.steering.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from evprobe.hooks.inputs import image_rows
from evprobe.hooks.intervention.ops import image_mask
from evprobe.hooks.positions import image_ids
from evprobe.hooks.intervention.ops import SCHEDULES, Positions, Schedule
from evprobe.hooks.intervention.ops import check_positions as check_steer_positions
from evprobe.hooks.steering import SteeringLog

if TYPE_CHECKING:
    from PIL import Image

    from evprobe.hooks.handle import Handle


@contextmanager
def steer_rows(handle: Any, layer: int, deltas: Any, *, positions: Positions = "all",
               schedule: Schedule = "every-step") -> Iterator[SteeringLog]:
    """Add deltas[r] (raw, already scaled) to row r of layer `layer`'s output inside the block.

    deltas: (rows, d_model); every forward inside must have exactly `rows` rows (call the
    readouts with batch_size = rows). Positions and schedule as in Steering. Yields a
    SteeringLog (index 0 for every call). Through the intervention core (an Add of one vector
    per row)."""

    d = np.asarray(deltas, dtype=np.float64)
    if d.ndim != 2 or d.shape[1] != handle.d_model:
        raise ValueError(f"deltas must have shape (rows, {handle.d_model}), got {d.shape}")
    if not np.isfinite(d).all():
        raise ValueError("deltas contain NaN or inf")
    if isinstance(layer, bool) or not 0 <= int(layer) < len(handle.layers):
        raise ValueError(f"layer {layer!r} is out of range: this model has {len(handle.layers)} decoder layers")
    positions = check_steer_positions(positions)
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    from evprobe.hooks.intervention import Add, intervene
    from evprobe.hooks.sites.vocabulary import Site

    with intervene(handle, [Add(Site("resid_post", int(layer)), d, positions=positions, schedule=schedule)]) as run:
        yield SteeringLog(calls=run.log)


def option_logprobs_rows(
    handle: Handle,
    prompts: Sequence[str],
    images: Sequence[Sequence[Image.Image]] | None,
    letters: Sequence[str],
    layer: int,
    deltas: Any,
    *,
    positions: Positions = "all",
    max_rows: int = 256,
    enc: Any = None,
) -> np.ndarray:
    """Option-letter log-probs of n prompts under each of K raw vectors added at `layer`.

    deltas: (K, d_model) raw vectors (alpha already applied). Returns (K, n, len(letters))
    float64, the same numbers as K calls of option_logprobs with one Steering each (a test checks
    it). Rows per forward: at most max(max_rows, n), whole directions per forward. enc: the
    prompts' build_inputs output when the caller already has it (encoding can cost more than a
    small model's forward)."""
    images = image_rows(prompts, images)
    from evprobe.hooks.generation import answer_logprobs, candidate_token_ids
    from evprobe.hooks.inputs import build_inputs, repeat_rows

    D = np.asarray(deltas, dtype=np.float64)  # (K, d_model)
    if D.ndim != 2:
        raise ValueError(f"deltas must be (K, d_model), got shape {D.shape}")
    n, K = len(prompts), D.shape[0]
    cand = candidate_token_ids(handle, list(letters))
    per = max(1, max_rows // max(n, 1))  # directions per forward
    if enc is None:  # a caller reading several conditions of one batch passes build_inputs' output once
        enc = build_inputs(handle, list(prompts), list(images))
    out = np.empty((K, n, len(cand)))
    for start in range(0, K, per):
        stop = min(start + per, K)
        k = stop - start
        big = repeat_rows(enc, n, k)
        if big is None:  # not row-major: encode the repeated prompts (same rows, processor cost k-fold)
            big = build_inputs(handle, list(prompts) * k, list(images) * k)
        rows = np.repeat(D[start:stop], n, axis=0)  # (k * n, d_model), direction-major like big
        with steer_rows(handle, layer, rows, positions=positions):
            logp = answer_logprobs(handle, big, cand)  # (k*n, letters)
        out[start:stop] = logp.reshape(k, n, len(cand))
    return out


def residual_norms_at(
    handle: Handle,
    prompts: Sequence[str],
    images: Sequence[Sequence[Image.Image]] | None,
    layers: Sequence[int],
    positions: Positions = "all",
    *,
    batch_size: int = 8,
) -> dict[int, tuple[float, int]]:
    """Per layer: the mean per-token L2 norm of that layer's output (unsteered) over the prompt
    positions a Steering with these `positions` edits, and the number of tokens averaged.

    "all": every real token (attention mask 1; left padding excluded: padding carries no
    information and is masked out of attention); "last": each row's last token; "image": each
    row's image-feature tokens (hooks.intervention.ops.image_mask, as the edit finds them); explicit
    indices / slices: those (padding included, as the edit includes it). A RowPositions is tied to
    one encoded batch, so it is refused here: measure at a name or at indices."""
    images = image_rows(prompts, images)
    import torch

    from evprobe.hooks.inputs import build_inputs

    positions = check_steer_positions(positions)
    if not isinstance(positions, (str, tuple, slice)):
        raise ValueError(f"residual_norms_at batches the prompts itself, so positions {positions!r} (resolved on one "
                         "batch) cannot apply; measure at 'all', 'last', 'image' or token indices")
    ids = image_ids(handle) if positions == "image" else None
    layers = [int(x) for x in layers]
    for layer in layers:
        if not 0 <= layer < len(handle.layers):
            raise ValueError(f"layer {layer} is out of range: this model has {len(handle.layers)} decoder layers")
    from evprobe.hooks.intervention import Read, intervene
    from evprobe.hooks.sites.vocabulary import Site

    totals = {layer: [0.0, 0] for layer in layers}
    for start in range(0, len(prompts), batch_size):
        enc = build_inputs(handle, list(prompts[start:start + batch_size]), list(images[start:start + batch_size]))
        reads = [Read(Site("resid_post", layer), reduce=lambda t: t.detach()) for layer in layers]
        with torch.inference_mode(), intervene(handle, reads, stop_after_reads=True) as run:
            run.forward(handle.model, enc, use_cache=False, logits_to_keep=1)
        for k, layer in enumerate(layers):
            norms = run.value(k).double().norm(dim=-1)  # (batch, seq)
            if positions == "all":
                mask = enc["attention_mask"].to(norms.device).bool()
            elif positions == "image":
                mask = image_mask(enc["input_ids"], ids).to(norms.device)
                if not mask.any(1).all():
                    raise ValueError(f"position 'image': prompt {start + int((~mask.any(1)).nonzero()[0])} has no "
                                     "image tokens; give every prompt images or measure at 'all'")
            else:
                mask = torch.zeros_like(norms, dtype=torch.bool)
                if positions == "last":
                    mask[:, -1] = True
                else:
                    mask[:, list(positions) if isinstance(positions, tuple) else positions] = True
            totals[layer][0] += float(norms[mask].sum())
            totals[layer][1] += int(mask.sum())
    if not prompts:
        raise ValueError("no prompts to measure the norm on")
    return {layer: (total / count, count) for layer, (total, count) in totals.items()}


__all__ = ["option_logprobs_rows", "residual_norms_at", "steer_rows"]
