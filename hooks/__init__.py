"""hooks: load vision-language models (real or tiny) and run them for capture and steering.

Public API (`import hooks` stays cheap: nothing here imports torch until used):
    load(model, *, dtype, device_map, trust_remote_code, attn_implementation) -> Handle
    tiny(arch, *, seed) -> Handle            TINY_ARCHS: names tiny() accepts
    Handle                                   model, processor, tokenizer, layers, n_layers, d_model, nn
    build_inputs(handle, prompts, images) -> BatchFeature
    generate(handle, prompts, images, *, max_new_tokens, batch_size) -> list[Generation]
    next_token_logprobs(handle, prompts, images, candidates) -> np.ndarray
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# Eager on purpose: importing the submodule hooks.tiny sets the package attribute
# `tiny` to that module; binding the function right after makes `hooks.tiny` the
# function for good. hooks.tiny imports nothing heavy at module level.
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
}

__all__ = [
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
