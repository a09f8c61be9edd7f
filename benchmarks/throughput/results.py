"""The typed result records of a run: one per section, per model and for the whole report (the JSON is
dataclasses.asdict of a Report), the section names, and the goal check on them."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .shapes import GOAL_S, GOAL_SHAPE


@dataclass(frozen=True)
class HardwareRatio:
    """Measured time / the time the hardware's roofline allows (>= 1 unless the model beats it)."""

    protocol: str
    batch_size: int
    decode_step_s: float  # one decoding step of the whole batch
    ideal_step_s: float  # weight bytes / bandwidth: every matmul weight read once per step
    decode_ratio: float
    prefill_s: float
    prefill_tokens: int  # real prompt tokens of the batch (padding excluded)
    prefill_flops: float  # 2 x matmul params x prompt tokens (attention scores and vision tower excluded)
    ideal_prefill_s: float
    prefill_ratio: float


@dataclass(frozen=True)
class Timing:
    median_s: float
    min_s: float
    max_s: float
    n: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> Timing:
        return cls(statistics.median(samples), min(samples), max(samples), len(samples))


@dataclass(frozen=True)
class ProtocolPoint:
    protocol: str
    batch_size: int
    new_tokens: int  # per row, forced
    prompt_tokens_mean: float  # real tokens per row (image tokens included)
    padded_prompt_len: int
    call: Timing  # one batch: build_inputs + generate
    s_per_call: float  # call median / rows
    tokens_per_s: float  # generated tokens of the batch / call median
    processor_s: float  # medians of the split
    prefill_s: float
    decode_s: float
    decode_step_s: float  # decode_s / (new_tokens - 1): the first token comes from the prefill
    peak_memory_mb: float
    memory_kind: str  # "cuda max_memory_allocated" | "process max RSS (so far)"


@dataclass(frozen=True)
class Throughput:
    points: tuple[ProtocolPoint, ...]
    failures: tuple[str, ...]  # (protocol, batch size) points that could not run, e.g. out of memory


@dataclass(frozen=True)
class Overhead:
    batch_size: int
    base: str
    base_s: Timing
    measured: str
    measured_s: Timing
    ratio: float  # measured / base medians
    note: str = ""


@dataclass(frozen=True)
class DoseItem:
    item_id: str
    logprobs: tuple[tuple[float, ...], ...]  # (alphas, letters)
    choices: str  # argmax letter at each alpha


@dataclass(frozen=True)
class DoseResponse:
    layer: int
    mean_norm: float  # mean residual norm at the layer over every real prompt token (the alpha unit)
    alphas_norm: tuple[float, ...]
    letters: tuple[str, ...]
    items: tuple[DoseItem, ...]
    seconds: float  # one option_logprobs_rows call: all alphas x items
    s_per_item_alpha: float
    # alpha 0 vs unsteered option_logprobs: 0.0 in float32; in bf16 the alphas' rows run as one
    # larger batch, so the batch-invariance differences show here too
    alpha0_max_abs_diff: float


@dataclass(frozen=True)
class SettingCheck:
    setting: str
    off: str
    on: str
    batch_size: int
    timed: str
    off_s: Timing
    on_s: Timing
    ratio: float  # on / off medians
    identical: bool  # the outputs compared (`compared`) are equal
    compared: str
    rows: int
    differing_rows: int
    max_abs_diff: float | None = None  # where logits are compared
    first_on_call_s: float | None = None  # the ON setting's first call (compilation for "compiled")
    # vision_attention: per setting, SDPA calls in one batch forward: {"vision": in the tower, "total"}
    sdpa_calls: dict[str, dict[str, int]] | None = None


@dataclass(frozen=True)
class BatchInvariance:
    batch_size: int
    rows: int
    layers: tuple[int, ...]
    capture_max_rel_diff: tuple[float, ...]  # per layer: max |batched - single| / max |single|
    generation_identical_fraction: float
    generation_new_tokens: int


@dataclass(frozen=True)
class Table50Ratio:
    protocol: str
    batch_size: int
    s_per_call: float
    anchor_s: float
    ratio: float


@dataclass(frozen=True)
class Ratios:
    table50: tuple[Table50Ratio, ...]  # empty for tiny shapes (no anchor)
    hardware: tuple[HardwareRatio, ...]  # empty without --bandwidth-gbs / --peak-tflops on a CPU
    bandwidth_gbs: float | None
    peak_tflops: float | None
    weight_bytes: int  # decoder layers + LM head, the bytes one decode step reads
    matmul_params: int
    note: str


@dataclass(frozen=True)
class SectionStatus:
    name: str
    status: str  # "ok" | "not applicable: ..." | "error: ..." | "skipped: ..."
    seconds: float


@dataclass(frozen=True)
class ModelResult:
    name: str
    arch: str
    checkpoint: str | None
    device: str
    dtype: str
    params: int | None = None
    build_s: float | None = None
    error: str | None = None
    sections: tuple[SectionStatus, ...] = ()
    throughput: Throughput | None = None
    capture: Overhead | None = None
    steering: Overhead | None = None
    dose_response: DoseResponse | None = None
    decode_cache: tuple[SettingCheck, ...] | None = None
    vision_attention: SettingCheck | None = None
    sort_by_length: SettingCheck | None = None
    prefetch: SettingCheck | None = None
    batch_invariance: BatchInvariance | None = None
    ratios: Ratios | None = None


@dataclass(frozen=True)
class Goal:
    shape: str
    target_s: float
    best_direct_s_per_call: float
    batch_size: int
    met: bool


@dataclass(frozen=True)
class Report:
    command: str
    small: bool
    device: str
    device_name: str
    dtype: str
    torch_version: str
    transformers_version: str
    threads: int
    items: int
    batch_sizes: tuple[int, ...]
    section_batch: int
    repeats: int
    budget_s: float | None
    forced_tokens: str
    invariance_advice: str
    models: tuple[ModelResult, ...]
    goal: Goal | None
    wall_s: float


SECTIONS = ("throughput", "capture", "steering", "dose_response", "decode_cache", "vision_attention",
            "sort_by_length", "prefetch", "batch_invariance", "ratios")


def goal_of(models: Sequence[ModelResult]) -> Goal | None:
    direct = [p for m in models if m.name == GOAL_SHAPE and m.throughput for p in m.throughput.points
              if p.protocol == "direct"]
    if not direct:
        return None
    best = min(direct, key=lambda p: p.s_per_call)
    return Goal(GOAL_SHAPE, GOAL_S, best.s_per_call, best.batch_size, best.s_per_call <= GOAL_S)
