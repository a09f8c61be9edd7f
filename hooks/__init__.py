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
    intervene(handle, [Read, Add, Ablate, Replace, Patch])   the intervention core (hooks.intervention)
    capture_sites(handle, prompts, images, sites=, positions=)   any site (hooks.sites): heads, vision, ...
    Site, Adapter, register_adapter                          the site vocabulary and architecture adapters
    set_vision_attention(handle, name)      VISION_ATTENTIONS: "stock" | "packed" (one call per vision layer)
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# Eager on purpose: importing a submodule (hooks.tiny, hooks.steer, hooks.ablate) sets the
# package attribute of that name to the module; binding the function right after makes
# `hooks.tiny` / `hooks.steer` / `hooks.ablate` the function for good. None of the three
# imports anything heavy at module level.
from evprobe.hooks.ablate import ablate
from evprobe.hooks.steer import steer
from evprobe.hooks.tiny import TINY_ARCHS, tiny

if TYPE_CHECKING:
    from evprobe.hooks.generation import Generation, generate, next_token_logprobs
    from evprobe.hooks.handle import Handle
    from evprobe.hooks.loading import load
    from evprobe.hooks.inputs import build_inputs
    from evprobe.hooks.vision_attention import VISION_ATTENTIONS, set_vision_attention

_LAZY = {
    "load": "evprobe.hooks.loading",
    "wrap": "evprobe.hooks.loading",
    "capture_components": "evprobe.hooks.capture",
    "capture_tokens": "evprobe.hooks.token_capture",
    "TokenActs": "evprobe.hooks.token_capture",
    "Token": "evprobe.hooks.positions",
    "Marker": "evprobe.hooks.positions",
    "Handle": "evprobe.hooks.handle",
    "build_inputs": "evprobe.hooks.inputs",
    "generate": "evprobe.hooks.generation",
    "next_token_logprobs": "evprobe.hooks.generation",
    "Generation": "evprobe.hooks.generation",
    "capture_layers": "evprobe.hooks.capture",
    "capture_batch": "evprobe.hooks.capture",
    "Capture": "evprobe.hooks.capture",
    "POSITIONS": "evprobe.hooks.capture",
    "token_spans": "evprobe.hooks.spans",
    "batch_spans": "evprobe.hooks.spans",
    "Spans": "evprobe.hooks.spans",
    "Steering": "evprobe.hooks.steer",
    "SteeredRun": "evprobe.hooks.steer",
    "steered_generate": "evprobe.hooks.steer",
    "steered_generate_nnsight": "evprobe.hooks.steer",
    "option_logprobs": "evprobe.hooks.steer",
    "random_directions": "evprobe.hooks.steer",
    "mean_residual_norm": "evprobe.hooks.steer",
    "set_vision_attention": "evprobe.hooks.vision_attention",
    "intervene": "evprobe.hooks.intervention",
    "capture_sites": "evprobe.hooks.site_capture",
    "Site": "evprobe.hooks.sites",
    "Adapter": "evprobe.hooks.sites",
    "register_adapter": "evprobe.hooks.sites",
    "patch_sites": "evprobe.hooks.patching",
    "VISION_ATTENTIONS": "evprobe.hooks.vision_attention",
}

__all__ = [
    "wrap",
    "capture_components",
    "capture_tokens",
    "TokenActs",
    "Token",
    "Marker",
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
    "set_vision_attention",
    "VISION_ATTENTIONS",
    "intervene",
    "capture_sites",
    "Site",
    "Adapter",
    "register_adapter",
    "patch_sites",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hooks' has no attribute {name!r}")
