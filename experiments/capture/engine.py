"""`evprobe capture --backend vllm`: the capture job's rows read inside a vLLM engine.

The same folder as the hf capture (acts.npy, index.jsonl, meta.json: experiments.capture.store),
the same rows at the same positions: the prompts are rendered and tokenized by the model's own
processor (a handle without weights: hooks.vllm_engine.capture.weightless_handle), the positions
resolved by hooks.positions on those tokens, and the engine reads the residual stream after each
asked layer at those tokens (hooks.vllm_engine.capture). One engine for the whole job, started in
`open` (hooks.vllm_engine.steering.start_engine: eager, prefix caching off, evprobe's worker
extension) and shut down in `close`.

Refused in one line before the engine starts (`check_engine_capture`): a component other than
resid_post, a model built in memory (tiny:), a vision-language model or an item with images (a clip
is images) (the engine capture takes text-only models and prompts), no vLLM, and a vLLM
version the engine's token map was not checked on (hooks.vllm_engine.batch_map.CHECKED_VLLM).
meta.json pins what read the rows: backend "vllm" and the engine (steering.engine_pin: vLLM's
version, dtype, tensor- and pipeline-parallel sizes, prefix caching, eager).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from evprobe.core.errors import InputError
from evprobe.core.json_types import JsonObject

if TYPE_CHECKING:
    from evprobe.bench.items import Item
    from evprobe.experiments.capture.config import CaptureConfig
    from evprobe.hooks.capture import Capture
    from evprobe.hooks.handle import Handle


def check_engine_capture(config: CaptureConfig, items: Sequence[Item]) -> None:
    """Everything the engine capture cannot honour, one line each, before any engine or model."""
    from evprobe.hooks.vllm_engine.capture import COMPONENTS, NO_IMAGES

    if config.component not in COMPONENTS:
        raise InputError(f"--component {config.component} is not read through vLLM (its engine capture reads the "
                         "residual stream after each decoder layer, resid_post); use --component resid_post or "
                         "--backend hf")
    model = config.model.source
    if model.startswith("tiny:"):
        raise InputError(f"--model {model} is built in memory and vLLM loads only saved models: save it "
                         "(handle.model.save_pretrained(DIR) and handle.processor.save_pretrained(DIR)) and pass "
                         "--model DIR")
    imaged = next((it for it in items if it.images), None)
    if imaged is not None:
        raise InputError(f"item {imaged.item_id} ({imaged.request}) has images: "
                         f"{NO_IMAGES.replace('backend ', '--backend ')}; or choose text-only --requests")
    from evprobe.hooks.loading import resolve_model

    folder = resolve_model(model)
    if (os.path.isabs(folder) or folder.startswith(".")) and not os.path.isdir(folder):
        raise InputError(f"model folder {folder!r} does not exist (and it is not a hub id)")
    from transformers import AutoConfig

    if getattr(AutoConfig.from_pretrained(folder, trust_remote_code=config.model.trust_remote_code),
               "vision_config", None) is not None:
        raise InputError(f"--model {model} is a vision-language model: "
                         f"{NO_IMAGES.replace('backend ', '--backend ')}")
    check_vllm_version()


def check_vllm_version() -> str:
    """The installed vLLM's version, refused in one line unless the token map was checked on it."""
    if importlib.util.find_spec("vllm") is None:
        from evprobe.bench.backends.vllm import NEEDS_VLLM

        raise InputError(NEEDS_VLLM)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # dozens of INFO lines at start say nothing a run needs
    import vllm
    from evprobe.hooks.vllm_engine.steering import check_version

    try:
        check_version(vllm.__version__)
    except ValueError as err:
        raise InputError(f"{err}, or use --backend hf") from None
    return vllm.__version__


class EngineCapture:
    """The job's engine and weightless handle, from `open` to `close`."""

    def __init__(self, config: CaptureConfig) -> None:
        from evprobe.hooks.loading import resolve_model
        from evprobe.hooks.vllm_engine.capture import weightless_handle
        from evprobe.hooks.vllm_engine.steering import start_engine

        m = config.model
        folder = resolve_model(m.source)
        self.handle: Handle = weightless_handle(folder, answer_prefix=m.answer_prefix, prompt_format=m.prompt_format,
                                                thinking=m.thinking, trust_remote_code=m.trust_remote_code)
        from vllm.platforms import current_platform

        kwargs: dict[str, Any] = {"trust_remote_code": m.trust_remote_code}
        if config.gpu_memory_utilization is not None:
            kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
        if config.max_model_len is not None:
            kwargs["max_model_len"] = config.max_model_len
        # hf's "auto": float32 on the CPU, the checkpoint's dtype on an accelerator (as --backend vllm runs)
        dtype = "float32" if m.dtype == "auto" and current_platform.is_cpu() else m.dtype
        self.llm: Any = start_engine(folder, dtype=dtype, **kwargs)  # refuses what the token map cannot honour

    def pins(self) -> JsonObject:
        """What read the rows: meta.json's `backend` and `engine` (steering.engine_pin: vLLM's version and
        the checked ones, dtype, eager, prefix caching, tensor- and pipeline-parallel sizes); `dtype`
        is the engine's."""
        from evprobe.hooks.vllm_engine.steering import engine_pin

        pin = engine_pin(self.llm)
        return {"backend": "vllm", "engine": pin, "dtype": pin["dtype"]}

    def capture_items(self, handle: Handle, bench: Any, items: list[Item], config: CaptureConfig, layers: list[int],
                      positions: list[str]) -> Capture:
        """The rows of `items` (text-only: refused otherwise before the engine started), as the hf
        job's `_capture_items` reads them: the protocol's prompt, its question sentence the text marker."""
        from evprobe.bench.protocols import build_prompt
        from evprobe.experiments.capture.config import question_marker
        from evprobe.hooks.positions import parse_position
        from evprobe.hooks.vllm_engine.capture import capture_prompts

        prompts = [build_prompt(it, config.protocol, config.regime) for it in items]
        markers = [question_marker(it.prompt) if handle.keeps_prompt_text else None for it in items]
        return capture_prompts(self.llm, handle, prompts, layers=layers,
                               positions=[parse_position(p) for p in positions], text_markers=markers)

    def close(self) -> None:
        """Shut the engine down: its engine-core process and workers exit (waited for)."""
        from evprobe.hooks.vllm_engine.steering import close_engine

        llm, self.llm = self.llm, None
        if llm is not None:
            close_engine(llm)
