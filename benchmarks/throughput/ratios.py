"""The ratios section: seconds per call vs seed 000's Table 50 (A100), and decode step / prefill vs the
hardware's roofline (memory bandwidth, peak FLOP/s; the arithmetic is pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .models import matmul_weights
from .results import HardwareRatio, ProtocolPoint, Ratios, Table50Ratio
from .shapes import ModelShape


H200_BANDWIDTH_GBS, H200_PEAK_TFLOPS = 4800.0, 989.0  # HBM3e; bf16 dense tensor cores


def hardware_ratio(*, protocol: str, batch_size: int, decode_step_s: float, prefill_s: float, prefill_tokens: int,
                   weight_bytes: int, matmul_params: int, bandwidth_gbs: float, peak_tflops: float) -> HardwareRatio:
    for name, value in (("decode_step_s", decode_step_s), ("prefill_s", prefill_s), ("prefill_tokens", prefill_tokens),
                        ("weight_bytes", weight_bytes), ("matmul_params", matmul_params),
                        ("bandwidth_gbs", bandwidth_gbs), ("peak_tflops", peak_tflops)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    ideal_step = weight_bytes / (bandwidth_gbs * 1e9)
    flops = 2.0 * matmul_params * prefill_tokens
    ideal_prefill = flops / (peak_tflops * 1e12)
    return HardwareRatio(protocol, batch_size, decode_step_s, ideal_step, decode_step_s / ideal_step, prefill_s,
                         prefill_tokens, flops, ideal_prefill, prefill_s / ideal_prefill)


def run_ratios(handle: Any, shape: ModelShape | None, points: Sequence[ProtocolPoint] | None,
               bandwidth_gbs: float | None, peak_tflops: float | None) -> Ratios:
    if not points:
        raise RuntimeError("no throughput measured to relate")
    params, weight_bytes = matmul_weights(handle)
    table = ()
    if shape is not None:
        anchor = {"direct": shape.anchor_direct_s, "brief": shape.anchor_reason_s}
        table = tuple(Table50Ratio(p.protocol, p.batch_size, p.s_per_call, anchor[p.protocol],
                                   p.s_per_call / anchor[p.protocol]) for p in points)
    hardware = ()
    if bandwidth_gbs and peak_tflops:
        hardware = tuple(hardware_ratio(protocol=p.protocol, batch_size=p.batch_size, decode_step_s=p.decode_step_s,
                                        prefill_s=p.prefill_s,
                                        prefill_tokens=round(p.prompt_tokens_mean * p.batch_size),
                                        weight_bytes=weight_bytes, matmul_params=params, bandwidth_gbs=bandwidth_gbs,
                                        peak_tflops=peak_tflops) for p in points)
    note = ("Table 50: seed 000, A100, seconds per call, direct / reason (= brief); ratio < 1 is faster. "
            if shape else "no Table 50 anchor for a tiny shape. ")
    note += ("hardware: decode step vs weight bytes / bandwidth (KV cache reads excluded), prefill vs "
             "2 x matmul params x prompt tokens / peak (attention scores, vision tower and generate's set-up "
             "excluded) give lower bounds, so a ratio below 1 means the given bandwidth or peak is below what the "
             "device does" if hardware else "hardware ratios need --bandwidth-gbs and "
             "--peak-tflops on a CPU")
    return Ratios(table, hardware, bandwidth_gbs, peak_tflops, weight_bytes, params, note)
