"""Building the models: the tiny ones unchanged (--small), or a seed's shape with random weights on the
device; and the weights one decode step reads."""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from typing import Any

from .shapes import ModelShape, shaped_config, shaped_processor
from .timing import sync


@dataclass(frozen=True)
class Built:
    handle: Any
    name: str
    checkpoint: str | None
    build_s: float


def tiny_module():
    return importlib.import_module("evprobe.hooks.tiny_models")  # the module (hooks.tiny is the function)


def build_small(arch: str, device: Any) -> Built:
    from evprobe.hooks import tiny

    start = time.perf_counter()
    handle = tiny(arch)
    if device.type != "cpu":
        handle.model.to(device)
    return Built(handle, arch, None, time.perf_counter() - start)


def build_shaped(shape: ModelShape, device: Any, dtype: Any) -> Built:
    """A random-weight model of `shape` on `device`, built as hooks.tiny_models builds its own (seeded, zero
    matrices filled, the same generation token ids), without the tiny vocabulary check."""
    import torch

    from evprobe.hooks.handle import Handle

    tiny = tiny_module()
    start = time.perf_counter()
    model_cls, base_config, base_processor = tiny._BUILDERS[shape.arch]()
    config, processor = shaped_config(shape, base_config), shaped_processor(shape, base_processor)
    torch.manual_seed(0)
    with torch.device(device):
        model = model_cls._from_config(config, dtype=dtype).eval()
    tiny._fill_zero_matrices(model, std=getattr(config, "initializer_range", None) or 0.02)
    tok, gen = processor.tokenizer, model.generation_config
    gen.pad_token_id, gen.bos_token_id = tok.pad_token_id, tok.bos_token_id
    eos = [tok.eos_token_id] + [tok.convert_tokens_to_ids(t) for t in tiny._EXTRA_EOS.get(shape.arch, ())]
    gen.eos_token_id = eos[0] if len(eos) == 1 else eos
    handle = Handle.from_parts(model, processor, model_id=f"shape:{shape.name}")
    sync(device)
    return Built(handle, shape.name, shape.checkpoint, time.perf_counter() - start)


def matmul_weights(handle: Any) -> tuple[int, int]:
    """(parameters, bytes) of the decoder layers plus the LM head: what one decode step reads and
    what a prompt token multiplies through (embedding lookups and the vision tower excluded)."""
    params = list(handle.layers.parameters()) + list(handle.model.get_output_embeddings().parameters())
    return sum(p.numel() for p in params), sum(p.numel() * p.element_size() for p in params)
