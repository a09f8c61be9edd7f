"""The throughput section: direct and brief protocols at each batch size with forced new tokens, timed
as one call and split into processor, prefill and decode, with peak memory."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .items import Rows
from .results import ProtocolPoint, Throughput, Timing
from .timing import clock, first_forward_end, free_memory, peak_mb, reset_peak


FORCED_NOTE = ("new tokens are forced: min_new_tokens = max_new_tokens(protocol, 'standard') (16 direct, 256 "
               "brief), so random weights cannot stop early and every call does the protocol's full work")


@dataclass(frozen=True)
class _Split:
    processor_s: float
    prefill_s: float
    decode_s: float
    total_s: float


def _one_call(handle: Any, prompts: list[str], images: list[list[Any]], n_tokens: int) -> tuple[_Split, Any, Any]:
    """build_inputs + generate_encoded with n_tokens forced; the split read off the clock."""
    from evprobe.hooks.generation import generate_encoded
    from evprobe.hooks.inputs import build_inputs

    device = handle.device
    t0 = clock(device)
    enc = build_inputs(handle, prompts, images, position_ids=False, for_generation=True)
    t1 = clock(device)
    with first_forward_end(handle.model, device) as ends:
        gens = generate_encoded(handle, enc, max_new_tokens=n_tokens, min_new_tokens=n_tokens)
    t2 = clock(device)
    t_prefill = ends[0] if ends else t1
    return _Split(t1 - t0, t_prefill - t1, t2 - t_prefill, t2 - t0), enc, gens


def _protocol_point(handle: Any, rows: Rows, protocol: str, b: int, repeats: int) -> ProtocolPoint:
    from evprobe.bench.budgets import default_reply_budget as max_new_tokens

    device, n_tokens = handle.device, max_new_tokens(protocol, "standard")
    prompts, images = rows.prompts(protocol, b), rows.image_lists(b)
    reset_peak(device)
    splits = []
    for _ in range(repeats):
        split, enc, gens = _one_call(handle, prompts, images, n_tokens)
        if any(g.n_new_tokens != n_tokens for g in gens):
            raise RuntimeError(f"{protocol} b{b}: a row made {min(g.n_new_tokens for g in gens)} tokens, "
                               f"not the forced {n_tokens}")
        splits.append(split)
    peak, kind = peak_mb(device)
    call = Timing.of([s.total_s for s in splits])
    decode = statistics.median(s.decode_s for s in splits)
    mask = enc["attention_mask"]  # (b, padded prompt length)
    return ProtocolPoint(
        protocol=protocol, batch_size=b, new_tokens=n_tokens,
        prompt_tokens_mean=float(mask.sum()) / b, padded_prompt_len=int(mask.shape[1]),
        call=call, s_per_call=call.median_s / b, tokens_per_s=b * n_tokens / call.median_s,
        processor_s=statistics.median(s.processor_s for s in splits),
        prefill_s=statistics.median(s.prefill_s for s in splits), decode_s=decode,
        decode_step_s=decode / max(1, n_tokens - 1), peak_memory_mb=peak, memory_kind=kind)


def _oom(err: BaseException) -> bool:
    return "out of memory" in str(err).lower()


def run_throughput(handle: Any, rows: Rows, batch_sizes: Sequence[int], repeats: int,
                   spent: Callable[[], str | None] = lambda: None) -> Throughput:
    """Every (protocol, batch size) point; one that runs out of memory, or comes after the time
    budget is spent (`spent` says why), is listed in `failures` and the others still run."""
    from evprobe.bench.budgets import default_reply_budget as max_new_tokens

    device, failures, sizes = handle.device, [], []
    for b in batch_sizes:  # warm-up at every shape (kernel selection, allocator, lazy inits)
        try:
            _one_call(handle, rows.prompts("direct", b), rows.image_lists(b), max_new_tokens("direct", "standard"))
            sizes.append(b)
        except Exception as err:
            if not _oom(err):
                raise
            failures.append(f"direct b{b} (warm-up) and brief b{b}: {type(err).__name__}: {str(err)[:200]}")
            free_memory(device)
    points = []
    for protocol in ("direct", "brief"):
        for b in sizes:
            if points and spent():
                failures.append(f"{protocol} b{b}: {spent()}")
                continue
            try:
                points.append(_protocol_point(handle, rows, protocol, b, repeats))
            except Exception as err:
                if not _oom(err):
                    raise
                failures.append(f"{protocol} b{b}: {type(err).__name__}: {str(err)[:200]}")  # the rest still run
                free_memory(device)
    if not points:
        raise RuntimeError("; ".join(failures) or "no batch size to run")
    return Throughput(tuple(points), tuple(failures))
