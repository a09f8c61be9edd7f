"""Preparing the next pieces of work on a thread while the current one runs (a bounded queue).

`prefetched(work, prepare, depth)` yields each piece of work with `prepare(piece)`, in order. With
depth 0 `prepare` runs inline, just before its piece is used; with depth d > 0 one worker thread
prepares the next d pieces while the caller uses the current one, so at most d prepared results
wait in memory. The job runner uses it to build a batch's model inputs (images read, prompts
rendered and tokenized, pixels resized: CPU work) while the model computes the batch before it.

One worker, not a pool: pieces are prepared in order by a single thread, so whatever `prepare`
touches (e.g. its own copy of a processor) is never used by two threads at once. An exception in
`prepare` is raised in the caller's thread at the piece it belongs to; pieces before it are
yielded first. When the caller stops early (an exception, a closed generator), waiting
preparations are cancelled and the worker has ended before `prefetched` returns.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def prefetched(work: Sequence[T], prepare: Callable[[T], R], depth: int) -> Iterator[tuple[T, R]]:
    """(piece, prepare(piece)) for each piece of `work`, in order; `depth` pieces prepared ahead."""
    if type(depth) is not int or depth < 0:
        raise ValueError(f"prefetch depth must be a non-negative integer, got {depth!r}")
    if depth == 0:
        for piece in work:
            yield piece, prepare(piece)
        return
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evprobe-prefetch")
    waiting: deque[Future[R]] = deque()
    nxt = 0
    try:
        for i, piece in enumerate(work):
            # Keep the current piece and up to `depth` after it submitted (the bound on memory).
            while nxt < len(work) and nxt <= i + depth:
                waiting.append(pool.submit(prepare, work[nxt]))
                nxt += 1
            yield piece, waiting.popleft().result()
    finally:
        for future in waiting:
            future.cancel()
        pool.shutdown(wait=True)
