"""Many steering vectors at once: a different raw vector per batch row (`steer_rows`), the
option-letter log-probabilities of K directions x n prompts in a few large forwards
(`option_logprobs_rows`, what the dose-response's 50-direction random null runs on), and the
residual norm measured at exactly the positions an edit touches (`residual_norms_at`, the unit of
`Steering.from_norm_units`). The single-vector steering and its conventions (positions,
schedule, prompt pass vs decode step) are in hooks.steer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from evprobe.hooks.inputs import image_rows
from evprobe.hooks.steer import (
    SCHEDULES,
    Positions,
    Schedule,
    SteeringLog,
    check_steer_positions,
    hidden_of,
    replace_hidden,
)

if TYPE_CHECKING:
    from PIL import Image

    from evprobe.hooks.handle import Handle


@contextmanager
def steer_rows(handle: Any, layer: int, deltas: Any, *, positions: Positions = "all",
               schedule: Schedule = "every-step") -> Iterator[SteeringLog]:
    """Add deltas[r] (raw, already scaled) to row r of layer `layer`'s output inside the block.

    deltas: (rows, d_model); every forward inside must have exactly `rows` rows (call the
    readouts with batch_size = rows). Positions and schedule as in Steering. Yields a
    SteeringLog (index 0 for every call)."""
    import torch

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
    log = SteeringLog()
    cache: dict[tuple[Any, Any], torch.Tensor] = {}

    def hook(module, args, output):
        hidden = hidden_of(output)  # (rows, seq, d_model)
        if hidden.shape[0] != d.shape[0]:
            raise RuntimeError(f"steer_rows has {d.shape[0]} row vectors but the forward has {hidden.shape[0]} rows; "
                               "run the readout with batch_size equal to the number of rows")
        prompt = hidden.shape[1] > 1
        edit = prompt or schedule == "every-step"
        log.calls.append((0, int(layer), int(hidden.shape[1]), edit))
        if not edit:
            return None
        key = (hidden.dtype, hidden.device)
        if key not in cache:
            cache[key] = torch.from_numpy(d).to(device=hidden.device, dtype=hidden.dtype)[:, None, :]  # (rows, 1, d)
        delta = cache[key]
        if positions == "all" or not prompt:
            return replace_hidden(output, hidden + delta)
        out = hidden.clone()
        if positions == "last":
            out[:, -1:] += delta
        else:
            out[:, list(positions) if isinstance(positions, tuple) else positions] += delta
        return replace_hidden(output, out)

    remover = handle.layers[int(layer)].register_forward_hook(hook)
    try:
        yield log
    finally:
        remover.remove()


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
    import torch

    from evprobe.hooks.generation import candidate_token_ids
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
        with steer_rows(handle, layer, rows, positions=positions), torch.inference_mode():
            logits = handle.model(**big, use_cache=False, logits_to_keep=1).logits  # (k*n, 1, vocab)
        logp = torch.log_softmax(logits[:, -1, :].float(), dim=-1)[:, cand].double().cpu().numpy()  # (k*n, letters)
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
    information and is masked out of attention); "last": each row's last token; explicit indices
    / slices: those (padding included, as the edit includes it)."""
    images = image_rows(prompts, images)
    import torch

    from evprobe.hooks.inputs import build_inputs

    positions = check_steer_positions(positions)
    layers = [int(x) for x in layers]
    for layer in layers:
        if not 0 <= layer < len(handle.layers):
            raise ValueError(f"layer {layer} is out of range: this model has {len(handle.layers)} decoder layers")
    totals = {layer: [0.0, 0] for layer in layers}
    seen: dict[int, Any] = {}

    def hook_for(layer: int):
        def hook(module, args, output):
            seen[layer] = hidden_of(output).detach()
        return hook

    for start in range(0, len(prompts), batch_size):
        enc = build_inputs(handle, list(prompts[start:start + batch_size]), list(images[start:start + batch_size]))
        seen.clear()
        removers = [handle.layers[layer].register_forward_hook(hook_for(layer)) for layer in layers]
        try:
            with torch.inference_mode():
                handle.model(**enc, use_cache=False, logits_to_keep=1)
        finally:
            for r in removers:
                r.remove()
        for layer in layers:
            norms = seen[layer].double().norm(dim=-1)  # (batch, seq)
            if positions == "all":
                mask = enc["attention_mask"].to(norms.device).bool()
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
