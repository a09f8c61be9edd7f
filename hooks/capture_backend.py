"""`evprobe.capture`: hooks.capture.capture_layers with a `backend=` (where the rows are read).

    evprobe.capture(handle, prompts, images, layers=, positions=)                      hf (this process)
    evprobe.capture(handle, prompts, layers=, positions=, backend="vllm", engine=llm)  inside a vLLM engine

A module of its own because each backend's capture imports hooks.capture (the positions, the
Capture record), so hooks.capture cannot import the engine's without an import cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from evprobe.hooks.handle import Handle
    from PIL import Image

BACKENDS: tuple[str, ...] = ("hf", "vllm")


def capture(handle: Handle, prompts: Sequence[str], images: Sequence[Sequence[Image.Image]] | None = None, *,
            backend: str = "hf", engine: Any = None, **arguments: Any) -> np.ndarray:
    """hooks.capture.capture_layers read by `backend`; `arguments` are capture_layers' keywords
    (layers=, positions=, text_markers=, batch_size=, component=).

    backend: "hf" (the handle's model, in this process; the default) or "vllm": the rows read inside
        `engine`, a vLLM engine from hooks.vllm_engine.steering.start_engine (resid_post of text-only
        rows at the same positions, hooks.vllm_engine.capture); the handle then only renders,
        tokenizes and places the positions, so it may be weightless
        (hooks.vllm_engine.capture.weightless_handle).
    engine: the vLLM engine, with backend "vllm" only.
    Returns float32 (rows, len(layers), len(positions), d_model).
    """
    if backend not in BACKENDS or (engine is not None and backend != "vllm"):
        raise ValueError(f"backend must be 'hf' or 'vllm' (engine= only with 'vllm'), got {backend!r}")
    if backend == "vllm":
        from evprobe.hooks.vllm_engine.capture import capture_layers as through_engine

        return through_engine(engine, handle, prompts, images, **arguments)
    from evprobe.hooks.capture import capture_layers

    return capture_layers(handle, prompts, images, **arguments)


__all__ = ["BACKENDS", "capture"]
