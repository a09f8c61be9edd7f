"""Clocks that wait for the device, interleaved timing rounds, peak memory, SDPA call counting, freeing
device memory, and the run's wall-clock budget."""

from __future__ import annotations

import contextlib
import gc
import math
import resource
import time
from collections.abc import Callable, Iterator
from typing import Any

from .results import Timing


def sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def clock(device: Any) -> float:
    """perf_counter after the device finished its queued work (GPU kernels run asynchronously)."""
    sync(device)
    return time.perf_counter()


def timed(fn: Callable[[], Any], device: Any) -> tuple[float, Any]:
    start = clock(device)
    out = fn()
    return clock(device) - start, out


def rounds(variants: dict[str, Callable[[], Any]], repeats: int, device: Any
            ) -> tuple[dict[str, Timing], dict[str, Any], dict[str, float]]:
    """One warm-up call of each variant (its seconds kept), then `repeats` interleaved rounds (drift
    hits all alike). Returns medians, each variant's last output and the warm-up seconds."""
    first, outputs = {}, {}
    for name, fn in variants.items():
        first[name], outputs[name] = timed(fn, device)
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            seconds, outputs[name] = timed(fn, device)
            samples[name].append(seconds)
    return {k: Timing.of(v) for k, v in samples.items()}, outputs, first


def reset_peak(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_mb(device: Any) -> tuple[float, str]:
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda max_memory_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "process max RSS (so far)"


@contextlib.contextmanager
def first_forward_end(model: Any, device: Any) -> Iterator[list[float]]:
    """Clock time at the end of the model's first forward inside the block (generate's prefill)."""
    ends: list[float] = []

    def hook(module, args, output):
        if not ends:
            ends.append(clock(device))

    handle = model.register_forward_hook(hook)
    try:
        yield ends
    finally:
        handle.remove()


@contextlib.contextmanager
def count_sdpa(inside: Any) -> Iterator[dict[str, int]]:
    """Count torch.nn.functional.scaled_dot_product_attention calls, in total and while module
    `inside` (the vision tower) runs. transformers and hooks.vision_attention look the function up
    on torch.nn.functional at call time, so the wrapper sees every call."""
    import torch.nn.functional as F

    counts = {"total": 0, "vision": 0}
    depth = [0]
    original = F.scaled_dot_product_attention

    def counting(*args, **kwargs):
        counts["total"] += 1
        counts["vision"] += depth[0] > 0
        return original(*args, **kwargs)

    enter = inside.register_forward_pre_hook(lambda m, a: depth.__setitem__(0, depth[0] + 1))
    leave = inside.register_forward_hook(lambda m, a, o: depth.__setitem__(0, depth[0] - 1))
    F.scaled_dot_product_attention = counting
    try:
        yield counts
    finally:
        F.scaled_dot_product_attention = original
        enter.remove()
        leave.remove()


class Budget:
    """Wall-clock budget of the whole run; each required model gets an equal share of what is left."""

    def __init__(self, limit_s: float | None) -> None:
        self.limit_s, self.start, self.model_deadline = limit_s, time.perf_counter(), math.inf

    def left(self) -> float:
        return math.inf if not self.limit_s else self.limit_s - (time.perf_counter() - self.start)

    def start_model(self, share_of: int) -> None:
        self.model_deadline = time.perf_counter() + self.left() / max(1, share_of)

    def spent(self) -> str | None:
        if self.left() <= 0:
            return f"skipped: time budget of {self.limit_s:.0f} s spent"
        if time.perf_counter() > self.model_deadline:
            return "skipped: this model's share of the time budget is spent"
        return None


def free_memory(device: Any) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
