"""hooks: load vision-language models (real or tiny) and run them for capture and steering.

Public API (`import hooks` stays cheap: nothing here imports torch until used):
    load(model, *, dtype, device_map, trust_remote_code, attn_implementation, max_memory, offload_folder) -> Handle
    tiny(arch, *, seed) -> Handle            TINY_ARCHS: names tiny() accepts
    Handle                                   model, processor, tokenizer, layers, n_layers, d_model, nn
    build_inputs(handle, prompts, images) -> BatchFeature
    generate(handle, prompts, images, *, max_new_tokens, batch_size) -> list[Generation]
    next_token_logprobs(handle, prompts, images, candidates) -> np.ndarray
    capture_layers(handle, prompts, images, *, layers, positions) -> np.ndarray
    steer(handle, Steering(direction, layer, alpha, positions, schedule))   context manager
    ablate(handle, direction, layers)                                        context manager
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# Eager on purpose: importing a submodule (hooks.tiny, hooks.steer, hooks.ablate) sets the
# package attribute of that name to the module; binding the function right after makes
# `hooks.tiny` / `hooks.steer` / `hooks.ablate` the function for good. None of the three
# imports anything heavy at module level.
from hooks.ablate import ablate
from hooks.steer import steer
from hooks.tiny import TINY_ARCHS, tiny

if TYPE_CHECKING:
    from hooks.generation import Generation, generate, next_token_logprobs
    from hooks.handle import Handle, load
    from hooks.inputs import build_inputs

_LAZY = {
    "load": "hooks.handle",
    "Handle": "hooks.handle",
    "build_inputs": "hooks.inputs",
    "generate": "hooks.generation",
    "next_token_logprobs": "hooks.generation",
    "Generation": "hooks.generation",
    "capture_layers": "hooks.capture",
    "capture_batch": "hooks.capture",
    "Capture": "hooks.capture",
    "POSITIONS": "hooks.capture",
    "token_spans": "hooks.spans",
    "batch_spans": "hooks.spans",
    "Spans": "hooks.spans",
    "Steering": "hooks.steer",
    "SteeredRun": "hooks.steer",
    "steered_generate": "hooks.steer",
    "steered_generate_nnsight": "hooks.steer",
    "option_logprobs": "hooks.steer",
    "random_directions": "hooks.steer",
    "mean_residual_norm": "hooks.steer",
}

__all__ = [
    "ablate",
    "steer",
    "TINY_ARCHS",
    "Generation",
    "Handle",
    "build_inputs",
    "generate",
    "load",
    "next_token_logprobs",
    "tiny",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hooks' has no attribute {name!r}")
