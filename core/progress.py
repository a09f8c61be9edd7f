"""A one-line progress report on stderr: done / total, rate and ETA."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def progress_label(name: str, shard: object | None) -> str:
    """`name`, or `name [shard K/N]` for a shard (so a Slurm array's logs say whose line it is)."""
    return name if shard is None else f"{name} [shard {shard}]"


class Progress:
    """Prints `label done/total (rate/s, ETA s)` at most every `every` seconds, and at the end."""

    def __init__(
        self, label: str, total: int, *, stream: TextIO | None = None, every: float = 0.5
    ) -> None:
        self.label, self.total, self.every = label, total, every
        self.stream = stream if stream is not None else sys.stderr
        # Under a launcher (torchrun, accelerate) several processes share one terminal: whole lines,
        # at most every 15 s, instead of one line rewritten in place.
        from evprobe.core.shard import distributed_shard

        self.lines = distributed_shard() is not None
        if self.lines:
            self.every = max(every, 15.0)
        self.done = 0
        self.start = self._last = time.perf_counter()

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.perf_counter()
        if now - self._last >= self.every or self.done >= self.total:
            self._last = now
            self._print(now)

    def _print(self, now: float) -> None:
        elapsed = max(now - self.start, 1e-9)
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        end = "\n" if self.done >= self.total or self.lines else "\r"
        self.stream.write(
            f"{self.label} {self.done}/{self.total} ({rate:.1f}/s, ETA {eta:.0f} s)   {end}"
        )
        self.stream.flush()
