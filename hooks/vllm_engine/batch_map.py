"""Which flattened token of a vLLM forward belongs to which request, at which position.

vLLM V1 runs every scheduled request's tokens as ONE (num_tokens, d_model) tensor: request 0's
scheduled tokens, then request 1's, ... (each request's tokens contiguous, in batch order), then
padding rows up to the padded size (CUDA-graph buckets; none on an eager CPU engine, but the map
never counts on it). A hook inside the worker edits or reads rows of that tensor, so it must know,
for the first `num_tokens` rows, the request index and the absolute position of each token in its
request's sequence (prompt tokens first, generated tokens after). The position is what makes
chunked prefill and preemption safe: a prompt split across steps, or a request recomputed after
preemption, runs its tokens again at the same positions.

`token_map(runner)` reads it from the model runner (`worker.model_runner`), during a forward
(between `_prepare_inputs` and the model call's end). There is no public API for it in vLLM 0.32,
so it relies on these internals of `vllm/v1/worker/gpu_model_runner.py` (GPUModelRunner; the CPU
runner is its subclass) and `gpu_input_batch.py`, checked on vLLM 0.32.0 (CHECKED_VLLM; the
engine code refuses any other version before a model call):

- `runner.input_batch.num_reqs` and `runner.input_batch.req_ids[:num_reqs]`: the requests of this
  step in batch order;
- `runner.query_start_loc.np[:num_reqs + 1]`: the cumulative scheduled-token counts set by
  `_prepare_inputs` (`query_start_loc.np[num_reqs]` is `total_num_scheduled_tokens`);
- `runner.req_indices.np[:total]`: the request index of each flattened token (`_prepare_inputs`);
- `runner.positions[:total]`: each token's absolute position, the tensor the model receives;
- `runner.requests[req_id]` (a CachedRequestState): `.num_prompt_tokens` and `.sampling_params`,
  whose `extra_args` dict is the public per-request channel (`SamplingParams(extra_args=...)`).

A prompt token has position < num_prompt_tokens; a decode token (or a generated token recomputed
after preemption) has position >= num_prompt_tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

CHECKED_VLLM: tuple[str, ...] = ("0.32.0",)  # the vLLM versions these internals were read on


@dataclass(frozen=True, eq=False)
class BatchRequests:
    """The requests of one forward, in batch order (num_reqs of each)."""

    req_ids: tuple[str, ...]
    num_prompt_tokens: tuple[int, ...]
    extra_args: tuple[dict[str, Any] | None, ...]  # SamplingParams.extra_args, None when unset


@dataclass(frozen=True, eq=False)
class TokenMap:
    """The first `num_tokens` rows of a forward's flattened tokens mapped to their requests.

    req_index: (num_tokens,) int64, the batch index of each row's request (non-decreasing).
    position: (num_tokens,) int64, each row's absolute position in its request's sequence.
    starts: (num_reqs + 1,) int64, request r's rows are starts[r]:starts[r + 1].
    """

    requests: BatchRequests
    req_index: np.ndarray
    position: np.ndarray
    starts: np.ndarray

    @property
    def num_tokens(self) -> int:
        return int(self.req_index.shape[0])

    def is_prompt(self) -> np.ndarray:
        """(num_tokens,) bool: the row is a prompt token (position < its num_prompt_tokens)."""
        n_prompt = np.asarray(self.requests.num_prompt_tokens, dtype=np.int64)
        return self.position < n_prompt[self.req_index]


def batch_requests(runner: Any) -> BatchRequests:
    """The requests scheduled in the current forward (cheap: no per-token work)."""
    num_reqs = int(runner.input_batch.num_reqs)
    ids = tuple(runner.input_batch.req_ids[:num_reqs])
    states = [runner.requests[r] for r in ids]
    return BatchRequests(req_ids=ids, num_prompt_tokens=tuple(int(s.num_prompt_tokens) for s in states),
                         extra_args=tuple(None if s.sampling_params is None else s.sampling_params.extra_args
                                          for s in states))


def token_map(runner: Any, requests: BatchRequests | None = None) -> TokenMap:
    """The token map of the current forward (call it inside the model's forward)."""
    requests = batch_requests(runner) if requests is None else requests
    num_reqs = len(requests.req_ids)
    total = int(runner.query_start_loc.np[num_reqs])  # total_num_scheduled_tokens
    req_index = np.asarray(runner.req_indices.np[:total], dtype=np.int64).copy()
    position = runner.positions[:total].to("cpu").numpy().astype(np.int64)
    starts = np.asarray(runner.query_start_loc.np[:num_reqs + 1], dtype=np.int64).copy()
    if req_index.shape[0] != total or position.shape[0] != total:
        raise RuntimeError(f"vLLM's token map has {req_index.shape[0]} request indices and {position.shape[0]} "
                           f"positions for {total} scheduled tokens; checked on vLLM {CHECKED_VLLM}")
    return TokenMap(requests=requests, req_index=req_index, position=position, starts=starts)


__all__ = ["CHECKED_VLLM", "BatchRequests", "TokenMap", "batch_requests", "token_map"]
