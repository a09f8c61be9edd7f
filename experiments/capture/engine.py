"""`evprobe capture --backend vllm`: the capture job's rows read inside a vLLM engine.

The same folder as the hf capture (acts.npy, index.jsonl, meta.json: experiments.capture.store),
the same rows at the same positions: the prompts are rendered and tokenized by the model's own
processor (a handle without weights: hooks.vllm_engine.capture.weightless_handle), the positions
resolved by hooks.positions on those tokens, and the engine reads the residual stream after each
asked layer at those tokens (hooks.vllm_engine.capture). One engine for the whole job, started in
`open` (hooks.vllm_engine.steering.start_engine: eager, prefix caching off, evprobe's worker
extension) and shut down in `close`.

Vision-language models (LLaVA): an item's images are loaded and rendered as the hf job renders
them (bench.manifest.load_item_images, the same prompt), the handle's processor expands each image
placeholder and places every position on those ids ("image_mean", "frame:K" included), and the
engine gets the images with one placeholder each (hooks.vllm_engine.vision.engine_prompts; every
call checks the ids it ran are the handle's). The engine admits as many images a prompt as the
job's items hold (`limit_mm_per_prompt`). Both sides resize with the image processor that
transformers loads for the folder in this process: its `backend` (torchvision or PIL) goes to vLLM
(`mm_processor_kwargs`) and the class vLLM loaded is checked equal (`check_image_processor`);
meta.json's `image_processor` names it, because the torchvision and PIL LLaVA processors resize
differently (an hf folder written where torchvision is absent used the PIL one).

Refused in one line before the engine starts (`check_engine_capture`): a component other than
resid_post, a model built in memory (tiny:), a vision-language model other than LLaVA (the
placeholder handling and the vision worker were checked on LLaVA only), an item with images on a
text-only model, clips read natively as video (`--video-input native`, refused by the config), no
vLLM, and a vLLM version the engine's token map was not checked on
(hooks.vllm_engine.batch_map.CHECKED_VLLM).
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
from evprobe.hooks.vllm_engine.vision_worker import VISION_MODULES

# The VLM classes the engine capture takes: those the vision worker and the placeholder handling
# (hooks.vllm_engine.prompts) were checked on.
VLM_CLASSES: tuple[str, ...] = tuple(VISION_MODULES)

if TYPE_CHECKING:
    from evprobe.bench.items import Item
    from evprobe.experiments.capture.config import CaptureConfig
    from evprobe.hooks.capture import Capture
    from evprobe.hooks.handle import Handle


def check_engine_capture(config: CaptureConfig, items: Sequence[Item]) -> None:
    """Everything the engine capture cannot honour, one line each, before any engine or model."""
    from evprobe.hooks.vllm_engine.capture import COMPONENTS

    if config.component not in COMPONENTS:
        raise InputError(f"--component {config.component} is not read through vLLM (its engine capture reads the "
                         "residual stream after each decoder layer, resid_post); use --component resid_post or "
                         "--backend hf")
    from evprobe.hooks.vllm_engine.steering import saved_folder

    model = config.model.source
    folder = saved_folder(model, flag="--model")
    from transformers import AutoConfig

    hf_config = AutoConfig.from_pretrained(folder, trust_remote_code=config.model.trust_remote_code)
    if getattr(hf_config, "vision_config", None) is not None:
        names = list(getattr(hf_config, "architectures", None) or [type(hf_config).__name__])
        if not set(names) & set(VLM_CLASSES):
            raise InputError(f"--model {model} is a vision-language model of class {names[0]}: the capture "
                             f"through vLLM takes {', '.join(VLM_CLASSES)} only (its image placeholders and "
                             "vision worker were checked on it); use --backend hf")
    else:
        imaged = next((it for it in items if it.images), None)
        if imaged is not None:
            raise InputError(f"item {imaged.item_id} ({imaged.request}) has images and --model {model} is text-only: "
                             "choose text-only --requests, or a vision-language model (LLaVA)")
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


def check_image_processor(engine: str, handle: str) -> None:
    """The engine's image processor class must be the handle's: torchvision's and PIL's resize differently."""
    if engine != handle:
        raise InputError(f"vLLM loaded the image processor {engine}, the handle {handle}: their resizes differ, so "
                         "the rows would not be the hf capture's; use --backend hf")


class EngineCapture:
    """The job's engine and weightless handle, from `open` to `close`."""

    def __init__(self, config: CaptureConfig, max_images: int = 0) -> None:
        """max_images: the most images one of the job's items holds (the engine's limit a prompt)."""
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
        image_processor = getattr(self.handle.processor, "image_processor", None)
        if max_images > 0:  # vLLM admits one image a prompt unless told more
            kwargs["limit_mm_per_prompt"] = {"image": max_images}
        if isinstance(getattr(image_processor, "backend", None), str):  # vLLM resizes with the handle's processor
            kwargs["mm_processor_kwargs"] = {"backend": image_processor.backend}
        # hf's "auto": float32 on the CPU, the checkpoint's dtype on an accelerator (as --backend vllm runs)
        dtype = "float32" if m.dtype == "auto" and current_platform.is_cpu() else m.dtype
        self.llm: Any = start_engine(folder, dtype=dtype, **kwargs)  # refuses what the token map cannot honour
        self.image_processor = None if image_processor is None else type(image_processor).__name__
        if self.image_processor is not None:
            from vllm.multimodal import MULTIMODAL_REGISTRY

            info = MULTIMODAL_REGISTRY.create_processor(self.llm.llm_engine.model_config).info
            try:
                check_image_processor(type(info.get_hf_processor().image_processor).__name__, self.image_processor)
            except InputError:
                self.close()
                raise

    def pins(self) -> JsonObject:
        """What read the rows: meta.json's `backend` and `engine` (steering.engine_pin: vLLM's version and
        the checked ones, dtype, eager, prefix caching, tensor- and pipeline-parallel sizes); `dtype`
        is the engine's."""
        from evprobe.hooks.vllm_engine.steering import engine_pin

        pin = engine_pin(self.llm)
        out: JsonObject = {"backend": "vllm", "engine": pin, "dtype": pin["dtype"]}
        if self.image_processor is not None:  # torchvision's and PIL's LLaVA processors resize differently
            out["image_processor"] = self.image_processor
        return out

    def capture_items(self, handle: Handle, bench: Any, items: list[Item], config: CaptureConfig, layers: list[int],
                      positions: list[str]) -> Capture:
        """The rows of `items`, as the hf job's `_capture_items` reads them: the protocol's prompt and
        the item's images (loaded as there), its question sentence the text marker."""
        from evprobe.bench.manifest import load_item_images
        from evprobe.bench.protocols import build_prompt
        from evprobe.experiments.capture.config import question_marker
        from evprobe.hooks.positions import parse_position
        from evprobe.hooks.vllm_engine.capture import capture_prompts

        prompts = [build_prompt(it, config.protocol, config.regime) for it in items]
        images = [load_item_images(bench, it.images) for it in items]  # clips as frames: native video is refused
        markers = [question_marker(it.prompt) if handle.keeps_prompt_text else None for it in items]
        return capture_prompts(self.llm, handle, prompts, layers=layers,
                               positions=[parse_position(p) for p in positions], text_markers=markers,
                               images=images if any(images) else None)

    def close(self) -> None:
        """Shut the engine down: its engine-core process and workers exit (waited for)."""
        from evprobe.hooks.vllm_engine.steering import close_engine

        llm, self.llm = self.llm, None
        if llm is not None:
            close_engine(llm)
