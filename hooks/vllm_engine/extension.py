"""evprobe's vLLM worker extension: THE class passed as `LLM(worker_extension_cls=EXTENSION)`.

vLLM appends this class to its worker class's bases (vllm/v1/worker/worker_base.py,
`WorkerWrapperBase.init_worker`), so its methods run in the worker process, called by name through
`LLM.collective_rpc("evprobe_...")`; nothing is pickled into the engine. vLLM refuses an extension
attribute the worker already has, so every name here and in the mixins starts with `evprobe_` or
`_evprobe_`. One engine carries one extension class, so the mixins are combined here:

- SteerWorker (hooks.vllm_engine.steer_worker): per-request residual edits (hooks.vllm_engine.steering).
- CaptureWorker (hooks.vllm_engine.capture_worker): capture of the decoder's residual stream.
- VisionWorker (hooks.vllm_engine.vision_worker): capture at a VLM's vision blocks and projector.
"""

from __future__ import annotations

from evprobe.hooks.vllm_engine.capture_worker import CaptureWorker
from evprobe.hooks.vllm_engine.steer_worker import SteerWorker
from evprobe.hooks.vllm_engine.vision_worker import VisionWorker

EXTENSION = "evprobe.hooks.vllm_engine.extension.EvprobeExtension"



class EvprobeExtension(SteerWorker, CaptureWorker, VisionWorker):
    """All of evprobe's worker-side methods: steering, capture, vision-site capture."""


__all__ = ["EXTENSION", "EvprobeExtension"]
