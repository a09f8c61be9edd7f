"""The forward of `steering_dose_response`'s readouts: the hf model with hooks (backend "hf") or a
vLLM engine with per-request edits (backend "vllm", an analysis.engine_model.EngineModel as the
handle). The estimates, nulls and cross-fit are the same code on either; only these reads differ:
the unit of alpha (mean residual norm where the vector is added), the unsteered letter log-probs or
greedy replies, and the log-probs or replies under K raw vectors at one layer (through the engine: ONE
call of K x n requests; the replies are hf's rows: analysis.engine_model.engine_generate)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from evprobe.core.errors import InputError, shown

BACKENDS = ("hf", "vllm")


def check_backend(handle: Any, backend: str, *, ablation: bool, images: Sequence[Any]) -> None:
    """What a backend cannot run, one line before any model call: the wrong kind of handle, and on the
    engine ablation and images."""
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


def unsteered_replies(handle: Any, backend: str, prompts: Sequence[str], images: Sequence[Any], spec: Any,
                      batch_size: int) -> Any:
    """Each prompt's greedy reply with no edit, read (analysis.generated_readout.Replies: (n,) texts)."""
    from evprobe.analysis.generated_readout import Replies, unsteered

    if backend != "vllm":
        return unsteered(handle, prompts, images, spec, batch_size)
    texts = _engine_texts(handle, prompts, [None] * len(prompts), spec.max_new_tokens)
    return Replies(texts, spec.values(range(len(prompts)), list(texts)))


def steered_replies(handle: Any, backend: str, prompts: Sequence[str], images: Sequence[Any], spec: Any, layer: int,
                    deltas: np.ndarray, *, positions: Any, max_rows: int, batch_size: int) -> Any:
    """The greedy replies under each raw vector of `deltas` (K, d_model) at `layer`, read ((K, n) texts):
    through hooks.steer_rows (hf), or one engine call of K x n requests, direction-major."""
    from evprobe.analysis.engine_model import edit_rows
    from evprobe.analysis.generated_readout import Replies, steered

    if backend != "vllm":
        return steered(handle, prompts, images, spec, layer, deltas, positions=positions, max_rows=max_rows,
                       batch_size=batch_size)
    K, n = len(deltas), len(prompts)
    texts = _engine_texts(handle, list(prompts) * K, edit_rows(layer, deltas, n, positions),
                          spec.max_new_tokens).reshape(K, n)
    items = np.broadcast_to(np.arange(n), (K, n)).reshape(-1)
    return Replies(texts, spec.values(items, list(texts.reshape(-1))).reshape(K, n, len(spec.measures)))


def _engine_texts(engine: Any, prompts: Sequence[str], edits: Sequence[Any], max_new_tokens: int) -> np.ndarray:
    """(rows,) reply texts of one engine generate call, hf's rows (analysis.engine_model.engine_generate)."""
    from evprobe.analysis.engine_model import engine_generate

    gens = engine_generate(engine, engine.prompt_ids(prompts, for_generation=True), edits,
                           max_new_tokens=max_new_tokens)
    return np.array([g.text for g in gens], dtype=object)


__all__ = ["BACKENDS", "check_backend", "steered_logprobs", "steered_replies", "unit_norm", "unsteered_logprobs",
           "unsteered_replies"]
