"""The forward of `steering_dose_response`'s letter readout: the hf model with hooks (backend "hf") or a
vLLM engine with per-request edits (backend "vllm", an analysis.engine_model.EngineModel as the
handle). The estimates, nulls and cross-fit are the same code on either; only these three reads differ:
the unit of alpha (mean residual norm where the vector is added), the unsteered letter log-probs, and
the log-probs under K raw vectors at one layer (through the engine: ONE call of K x n requests)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from evprobe.core.errors import InputError, shown

BACKENDS = ("hf", "vllm")


def check_backend(handle: Any, backend: str, *, ablation: bool, generated: bool, images: Sequence[Any]) -> None:
    """What a backend cannot run, one line before any model call: the wrong kind of handle, and on the
    engine ablation, a generated readout and images."""
    from evprobe.analysis.engine_model import EngineModel, refuse_images

    if backend not in BACKENDS:
        raise InputError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    if backend == "hf" and isinstance(handle, EngineModel):
        raise InputError("the handle is a vLLM engine (EngineModel); pass backend='vllm', or an hf handle")
    if backend == "hf":
        return
    if not isinstance(handle, EngineModel):
        raise InputError(f"backend='vllm' steers through an engine: pass handle=open_engine(model folder) "
                         f"(evprobe.analysis.engine_model), got {shown(type(handle).__name__, 40)}")
    if ablation:
        raise InputError("ablation=True projects the direction out, which is not an edit the vLLM backend makes; "
                         "drop ablation or use backend='hf'")
    if generated:
        raise InputError("backend='vllm' reads letter log-probs; a generated readout runs with backend='hf'")
    refuse_images(images)


def unit_norm(handle: Any, backend: str, prompts: Sequence[str], images: Sequence[Any], layer: int, positions: Any,
              batch_size: int) -> tuple[float, int]:
    """The mean residual norm at `layer` over the edited positions, unsteered, and the tokens averaged."""
    if backend == "vllm":
        from evprobe.analysis.engine_model import engine_norms

        return engine_norms(handle, handle.prompt_ids(prompts), [layer], positions)[layer]
    from evprobe.hooks.steer_rows import residual_norms_at

    return residual_norms_at(handle, prompts, images, [layer], positions, batch_size=batch_size)[layer]


def unsteered_logprobs(handle: Any, backend: str, prompts: Sequence[str], images: Sequence[Any],
                       candidates: Sequence[str], batch_size: int) -> np.ndarray:
    """(n, candidates) letter log-probs with no edit at all."""
    if backend == "vllm":
        from evprobe.analysis.engine_model import engine_logprobs

        return engine_logprobs(handle, handle.prompt_ids(prompts), handle.letter_ids(candidates), None, None)[0]
    from evprobe.hooks.generation import next_token_logprobs

    return next_token_logprobs(handle, prompts, images, list(candidates), batch_size=batch_size)


def steered_logprobs(handle: Any, backend: str, prompts: Sequence[str], images: Sequence[Any],
                     candidates: Sequence[str], layer: int, deltas: np.ndarray, positions: Any, max_rows: int,
                     batch_size: int, largest: float) -> np.ndarray:
    """(rows of deltas, n, candidates) letter log-probs under each raw vector at `layer`: through
    hooks.steer_rows.option_logprobs_rows (hf), or one engine call; non-finite ones (the activations
    overflowed: no readout to estimate with) are one line."""
    if backend == "vllm":
        from evprobe.analysis.engine_model import engine_logprobs

        lp = engine_logprobs(handle, handle.prompt_ids(prompts), handle.letter_ids(candidates), layer, deltas,
                             positions)
    else:
        from evprobe.hooks.inputs import build_inputs
        from evprobe.hooks.steer_rows import option_logprobs_rows

        lp = np.concatenate([
            option_logprobs_rows(handle, list(prompts[s:s + batch_size]), list(images[s:s + batch_size]),
                                 list(candidates), layer, deltas, positions=positions, max_rows=max_rows,
                                 enc=build_inputs(handle, list(prompts[s:s + batch_size]),
                                                  list(images[s:s + batch_size])))
            for s in range(0, len(prompts), batch_size)], axis=1)
    if not np.isfinite(lp).all():
        dtype = getattr(handle, "dtype", "?")
        raise InputError(f"layer {layer}: the steered model's log-probabilities are not finite at raw doses up to "
                         f"{largest:.3g} ({dtype}); lower |alpha| (or mean_norm)")
    return lp


__all__ = ["BACKENDS", "check_backend", "steered_logprobs", "unit_norm", "unsteered_logprobs"]
