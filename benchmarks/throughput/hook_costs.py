"""What evprobe's hooks cost: the capture, steering and dose_response sections (capture of every layer
vs a plain forward, steered vs unsteered generation, the dose-response readout at a few alphas)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .items import Rows
from .results import DoseItem, DoseResponse, Overhead
from .timing import rounds, timed


def run_capture(handle: Any, rows: Rows, b: int, repeats: int) -> Overhead:
    import torch

    from evprobe.hooks.capture import capture_batch
    from evprobe.hooks.inputs import build_inputs

    prompts, images = rows.prompts("direct", b), rows.image_lists(b)
    layers = list(range(handle.n_layers))

    def plain():
        enc = build_inputs(handle, prompts, images)
        with torch.inference_mode():  # logits_to_keep=1: the LM head at the last position only
            return handle.model(**enc, use_cache=False, logits_to_keep=1).logits

    def capture():
        return capture_batch(handle, prompts, images, layers=layers, positions=["last"]).acts

    t, _, _ = rounds({"plain": plain, "capture": capture}, repeats, handle.device)
    return Overhead(b, "build_inputs + plain forward (use_cache=False, logits_to_keep=1)", t["plain"],
                    f"capture_batch: all {len(layers)} layers, resid_post, last position", t["capture"],
                    t["capture"].median_s / t["plain"].median_s)


def _middle_steering(handle: Any, rows: Rows, b: int, alpha_norm: float) -> tuple[Any, float]:
    """A random unit direction at the middle layer, alpha in units of that layer's mean residual norm
    over every real prompt token (hooks.steer_rows.residual_norms_at, positions "all")."""
    from evprobe.hooks.direction_vectors import random_directions
    from evprobe.hooks.steering import Steering
    from evprobe.hooks.steer_rows import residual_norms_at

    layer = handle.n_layers // 2
    norm, _ = residual_norms_at(handle, rows.prompts("direct", b), rows.image_lists(b), [layer], "all",
                                batch_size=b)[layer]
    direction = random_directions(handle.d_model, 1, seed=0)[0]
    return Steering.from_norm_units(direction, layer, alpha_norm, norm, positions="all", measured_at="all"), norm


def run_steering(handle: Any, rows: Rows, b: int, repeats: int) -> Overhead:
    from evprobe.bench.budgets import default_reply_budget as max_new_tokens
    from evprobe.hooks.steering import steered_generate

    prompts, images = rows.prompts("direct", b), rows.image_lists(b)
    n = max_new_tokens("direct", "standard")
    steering, _ = _middle_steering(handle, rows, b, alpha_norm=0.5)
    variants = {"plain": lambda: steered_generate(handle, prompts, images, None, n, min_new_tokens=n),
                "steered": lambda: steered_generate(handle, prompts, images, steering, n, min_new_tokens=n)}
    t, out, _ = rounds(variants, repeats, handle.device)
    changed = int((out["plain"].token_ids != out["steered"].token_ids).any(dim=1).sum())
    return Overhead(b, "steered_generate(steering=None)", t["plain"],
                    f"steered_generate(Steering at layer {steering.layer}, alpha 0.5 norm units, every step)",
                    t["steered"], t["steered"].median_s / t["plain"].median_s,
                    note=f"{n} new tokens forced; steering changed the reply of {changed} of {b} rows")


def _choice(item: Any, logp: Any, letters: Sequence[str]) -> str:
    """The item's option letter with the highest log-prob (ties: the earlier letter), as the
    dose-response readout chooses (experiments.dose_response.readouts.logprob_readout)."""
    offered = sorted(item.options) if item.options else list(letters)
    return max(offered, key=lambda letter: (logp[letters.index(letter)], -ord(letter)))


def run_dose(handle: Any, rows: Rows, b: int, alphas: Sequence[float] = (0.0, 0.5, 1.0, 2.0)) -> DoseResponse:
    import numpy as np

    from evprobe.hooks.steering import LETTERS, option_logprobs
    from evprobe.hooks.steer_rows import option_logprobs_rows

    prompts, images = rows.prompts("direct", b), rows.image_lists(b)
    steering, norm = _middle_steering(handle, rows, b, alpha_norm=1.0)
    deltas = np.asarray(alphas)[:, None] * norm * steering.direction[None, :]  # (alphas, d_model), raw

    def read():  # (alphas, rows, letters), all alphas x rows in one forward
        return option_logprobs_rows(handle, prompts, images, LETTERS, steering.layer, deltas, positions="all",
                                    max_rows=len(alphas) * b)

    seconds, logp = timed(read, handle.device)  # one call; the model is warm from the sections before
    plain = option_logprobs(handle, prompts, images, LETTERS)  # (rows, letters), no hook at all
    items = tuple(DoseItem(it.item_id, tuple(tuple(float(x) for x in logp[k, i]) for k in range(len(alphas))),
                           "".join(_choice(it, logp[k, i], LETTERS) for k in range(len(alphas))))
                  for i, it in enumerate(rows.items[:b]))
    return DoseResponse(steering.layer, norm, tuple(alphas), tuple(LETTERS), items, seconds,
                        seconds / (len(alphas) * b), float(np.abs(logp[0] - plain).max()))
