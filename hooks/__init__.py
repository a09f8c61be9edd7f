"""hooks: load vision-language models (real or tiny) and run them for capture and steering.

Public API (`import hooks` stays cheap: nothing here imports torch until used):
    load(model, *, dtype, device_map, trust_remote_code, attn_implementation, max_memory, offload_folder) -> Handle
    tiny(arch, *, seed) -> Handle            TINY_ARCHS: names tiny() accepts
    Handle                                   model, processor, tokenizer, layers, n_layers, d_model, nn
    build_inputs(handle, prompts, images) -> BatchFeature
    generate(handle, prompts, images, *, max_new_tokens, batch_size) -> list[Generation]
    next_token_logprobs(handle, prompts, images, candidates) -> np.ndarray
    capture_layers(handle, prompts, images, *, layers, positions) -> np.ndarray
    positions (hooks.positions, shared by capture, steering and patching): "last", "all", "image"
        (every image token), "text", "image_mean" / "text_mean", Token, Marker, Frame;
        resolve_positions(handle, enc, prompts, images, p) -> per-row indices an edit takes
    steer(handle, Steering(direction, layer, alpha, positions, schedule))   context manager
    ablate(handle, direction, layers)                                        context manager
    intervene(handle, [Read, Add, Ablate, Replace, Patch])   the intervention core (hooks.intervention)
    capture_sites(handle, prompts, images, sites=, positions=)   any site (hooks.sites): heads, vision, ...
    Site, Adapter, register_adapter                          the site vocabulary and architecture adapters
    set_vision_attention(handle, name)      VISION_ATTENTIONS: "stock" | "packed" (one call per vision layer)
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# One table: every public name -> the module that defines it, imported on first use (`__all__` is
# its keys). The modules are named apart from the functions (hooks.steering defines `steer`,
# hooks.ablation `ablate`, hooks.tiny_models `tiny`), so importing one never rebinds a facade name.
_LAZY = {
    "load": "evprobe.hooks.loading",
    "wrap": "evprobe.hooks.loading",
    "tiny": "evprobe.hooks.tiny_models",
    "TINY_ARCHS": "evprobe.hooks.tiny_models",
    "Handle": "evprobe.hooks.handle",
    "build_inputs": "evprobe.hooks.inputs",
    "generate": "evprobe.hooks.generation",
    "next_token_logprobs": "evprobe.hooks.generation",
    "Generation": "evprobe.hooks.generation",
    "capture_layers": "evprobe.hooks.capture",
    "capture_batch": "evprobe.hooks.capture",
    "capture_components": "evprobe.hooks.capture",
    "Capture": "evprobe.hooks.capture",
    "POSITIONS": "evprobe.hooks.capture",
    "capture_tokens": "evprobe.hooks.token_capture",
    "TokenActs": "evprobe.hooks.token_capture",
    "Token": "evprobe.hooks.positions",
    "Marker": "evprobe.hooks.positions",
    "Frame": "evprobe.hooks.positions",
    "resolve_positions": "evprobe.hooks.positions",
    "token_spans": "evprobe.hooks.spans",
    "batch_spans": "evprobe.hooks.spans",
    "Spans": "evprobe.hooks.spans",
    "Steering": "evprobe.hooks.steering",
    "SteeredRun": "evprobe.hooks.steering",
    "steer": "evprobe.hooks.steering",
    "steered_generate": "evprobe.hooks.steering",
    "option_logprobs": "evprobe.hooks.steering",
    "random_directions": "evprobe.hooks.direction_vectors",
    "mean_residual_norm": "evprobe.hooks.direction_vectors",
    "ablate": "evprobe.hooks.ablation",
    "set_vision_attention": "evprobe.hooks.vision_attention",
    "VISION_ATTENTIONS": "evprobe.hooks.vision_attention",
    "intervene": "evprobe.hooks.intervention",
    "capture_sites": "evprobe.hooks.site_capture",
    "Site": "evprobe.hooks.sites",
    "Adapter": "evprobe.hooks.sites",
    "register_adapter": "evprobe.hooks.sites",
    "patch_sites": "evprobe.hooks.patching",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hooks' has no attribute {name!r}")
