"""One model through every section, in RUN_ORDER, each guarded: a section that cannot run is reported
with why, and the next one runs; a model that fails to build is reported with its error."""

from __future__ import annotations

import contextlib
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .availability import NotApplicable
from .hook_costs import run_capture, run_dose, run_steering
from .invariance import run_invariance
from .items import Rows
from .models import Built, build_shaped, build_small
from .protocol_timing import run_throughput
from .ratios import run_ratios
from .results import SECTIONS, ModelResult, SectionStatus, SettingCheck
from .settings import run_decode_cache, run_runner_settings, run_vision_attention
from .shapes import ModelShape
from .timing import Budget, free_memory


# Run order: what matters most first, the slow compilation near the end (a spent budget skips it).
RUN_ORDER = ("throughput", "ratios", "capture", "steering", "dose_response", "batch_invariance", "vision_attention",
             "sort_by_length", "prefetch", "decode_cache")


@dataclass(frozen=True)
class Plan:
    """What run_model needs besides the model, fixed by the arguments (the budget's clock runs on)."""

    rows: Rows
    bench: Path
    scratch: Path
    batch_sizes: tuple[int, ...]
    section_batch: int
    runner_items: int
    repeats: int
    bandwidth_gbs: float | None
    peak_tflops: float | None
    budget: Budget = field(default_factory=lambda: Budget(None))


def _guarded(name: str, fn: Callable[[], Any], statuses: list[SectionStatus], budget: Budget, device: Any) -> Any:
    skipped = budget.spent()
    if skipped:
        statuses.append(SectionStatus(name, skipped, 0.0))
        return None
    start, value, status = time.perf_counter(), None, "ok"
    try:
        value = fn()
    except NotApplicable as err:
        status = f"not applicable: {err}"
    except Exception as err:  # noqa: BLE001 - reported in the JSON; the next section runs
        status = f"error: {type(err).__name__}: {err}"
        traceback.print_exc(file=sys.stderr)
        free_memory(device)
    statuses.append(SectionStatus(name, status, time.perf_counter() - start))
    return value


def run_model(built: Built, shape: ModelShape | None, plan: Plan, device: Any,
              on_section: Callable[[ModelResult], None] = lambda partial: None) -> ModelResult:
    """Every section on one model, in RUN_ORDER; `on_section` gets the result so far after each."""
    h, b, r = built.handle, plan.section_batch, plan.repeats
    label = f"tiny:{built.name}" if shape is None else f"shape:{built.name}"
    statuses: list[SectionStatus] = []
    found: dict[str, Any] = {}
    shared: dict[str, Any] = {}  # the runner settings share their OFF runs: measured once, read twice

    def runner(setting: str) -> SettingCheck:
        if "runs" not in shared:
            try:
                shared["runs"] = run_runner_settings(h, label, plan.bench, plan.scratch / built.name, b,
                                                     plan.runner_items, r)
            except Exception as err:
                shared["runs"] = err
        got = shared["runs"]
        got = got.get(setting) if isinstance(got, dict) else got
        if isinstance(got, BaseException):
            raise got
        return got
    jobs: dict[str, Callable[[], Any]] = {
        "throughput": lambda: run_throughput(h, plan.rows, plan.batch_sizes, r, plan.budget.spent),
        "ratios": lambda: run_ratios(h, shape, found["throughput"] and found["throughput"].points, plan.bandwidth_gbs,
                                     plan.peak_tflops),
        "capture": lambda: run_capture(h, plan.rows, b, r),
        "steering": lambda: run_steering(h, plan.rows, b, r),
        "dose_response": lambda: run_dose(h, plan.rows, b),
        "batch_invariance": lambda: run_invariance(h, plan.rows, b),
        "vision_attention": lambda: run_vision_attention(h, plan.rows, b, r),
        "sort_by_length": lambda: runner("sort_by_length"),
        "prefetch": lambda: runner("prefetch"),
        "decode_cache": lambda: run_decode_cache(h, plan.rows, b, r),
    }
    assert set(jobs) == set(SECTIONS) == set(RUN_ORDER)
    order = {name: i for i, name in enumerate(SECTIONS)}
    n_params = sum(p.numel() for p in h.model.parameters())

    def result() -> ModelResult:
        return ModelResult(built.name, h.arch, built.checkpoint, str(device), str(h.dtype).removeprefix("torch."),
                           n_params, built.build_s, sections=tuple(sorted(statuses, key=lambda s: order[s.name])),
                           **found)

    for name in RUN_ORDER:
        found[name] = _guarded(name, jobs[name], statuses, plan.budget, device)
        on_section(result())
    return result()


def build_and_run(name: str, shape: ModelShape | None, plan: Plan, device: Any, dtype: Any,
                  on_section: Callable[[ModelResult], None]) -> ModelResult:
    """Build one model (tiny when `shape` is None), run every section on it, then free it."""
    try:
        built = build_small(name, device) if shape is None else build_shaped(shape, device, dtype)
    except Exception as err:  # noqa: BLE001 - reported; the next model runs
        traceback.print_exc(file=sys.stderr)
        free_memory(device)
        return ModelResult(name, shape.arch if shape else name, shape and shape.checkpoint, str(device),
                           str(dtype).removeprefix("torch."), error=f"build failed: {type(err).__name__}: {err}")
    try:
        return run_model(built, shape, plan, device, on_section)
    finally:
        del built
        free_memory(device)
        with contextlib.suppress(Exception):
            import torch

            torch._dynamo.reset()  # compiled decode graphs of this model (and their CUDA graph pools)
