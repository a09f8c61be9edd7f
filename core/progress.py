"""Progress on stderr for every long step: done / total, rate and ETA, on by default.

    bar = Progress("capture", n)       # then bar.update(k) after each batch of k units
    note("capture", "loading model")   # one line saying what a silent step is doing

Choices (no science decides them; each is tested in tests/core/test_progress.py):

- On by default. `set_progress(False)` (the CLI's `--no-progress` on every subcommand) silences
  every Progress and note of the process, including the steps a command runs inside it (the
  quickstart's, a layer sweep's capture); an API caller's `progress=False` silences one step.
- A terminal gets one line rewritten in place (`\\r`) at most every 0.5 s. Anything else (a pipe,
  a file, a notebook's captured stream, a CI log) gets whole lines, at most one every 10 s, so a
  log holds readable lines rather than thousands of `\\r` fragments. Under a launcher (torchrun,
  accelerate) several processes share one stream: whole lines at most every 15 s, named by shard.
- The first update and the last are always printed, whatever the interval: the first tells that
  the step started computing and at what rate, the last its total rate.
- The rate counts this session only (a resumed job's earlier rows are not in it), in units per
  second (one decimal from 1/s up, two significant digits below); the ETA is the remaining count
  at that rate, shown in s below 100 s, then min, then h.
- No rate or ETA before MIN_TIMED (1 s) has passed since the step started: the line is then
  `done/total` alone. A rate over microseconds is noise (`879120.9/s, ETA 0 s` for layers that
  came back at once), and a step that short needs no ETA. One second, not a count of updates: the
  rate is done / time since the start, so one update after 1 s (the first unit of a slow step) is
  already timed, while many updates within a millisecond are not. `progress_callback` starts its
  clock when it is made (just before the step), not at the first report, so the first unit's time
  counts.
- Our own ~50 lines rather than tqdm: tqdm is no declared dependency (it comes with transformers),
  and it rewrites one line with `\\r` in pipes and files too, which is what a log must not hold.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

TERMINAL_EVERY = 0.5  # seconds between rewrites of a terminal's line
LOG_EVERY = 10.0  # seconds between whole lines in a pipe or file
LAUNCHER_EVERY = 15.0  # seconds between whole lines of each process under a launcher
MIN_TIMED = 1.0  # seconds since the start before a line shows a rate and ETA (module docstring)

_enabled = True


def set_progress(enabled: bool) -> None:
    """Turn every progress line and note of this process on or off (the CLI's --no-progress)."""
    global _enabled
    _enabled = bool(enabled)


def progress_enabled() -> bool:
    return _enabled


def progress_label(name: str, shard: object | None) -> str:
    """`name`, or `name [shard K/N]` for a shard (so a Slurm array's logs say whose line it is)."""
    return name if shard is None else f"{name} [shard {shard}]"


def duration(seconds: float) -> str:
    """`42 s`, `7 min`, `2.5 h`: short enough for a progress line, exact enough for an ETA."""
    if seconds != seconds or seconds == float("inf"):
        return "? s"
    if seconds < 100:
        return f"{seconds:.0f} s"
    if seconds < 6000:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _interactive(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # a closed or detached stream
        return False


def note(label: str, text: str, *, stream: TextIO | None = None) -> None:
    """One whole line `label: text` on stderr, unless progress is off (a slow step with no count)."""
    if _enabled:
        out = stream if stream is not None else sys.stderr
        out.write(f"{label}: {text}\n")
        out.flush()


class Progress:
    """Prints `label done/total (rate/s, ETA t)`: on the first update, at most every `every`
    seconds after it, and at the end; `label done/total` alone before MIN_TIMED seconds. `every`
    defaults by where the stream goes (module docstring); `clock` (seconds) is for tests."""

    def __init__(self, label: str, total: int, *, stream: TextIO | None = None, every: float | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        from evprobe.core.shard import distributed_shard

        self.label, self.total = label, total
        self.stream = stream if stream is not None else sys.stderr
        self.silent = not _enabled
        launched = distributed_shard() is not None
        self.lines = launched or not _interactive(self.stream)
        default = LAUNCHER_EVERY if launched else LOG_EVERY if self.lines else TERMINAL_EVERY
        self.every = default if every is None else max(every, LAUNCHER_EVERY) if launched else every
        self.done = 0
        self.clock = clock
        self.start = clock()
        self._last: float | None = None  # when the last line was printed (None: none yet)

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.silent:
            return
        now = self.clock()
        if self._last is None or now - self._last >= self.every or self.done >= self.total:
            self._last = now
            self._print(now)

    def _print(self, now: float) -> None:
        elapsed = now - self.start
        end = "\n" if self.done >= self.total or self.lines else "\r"
        pad = "" if self.lines else "   "  # a rewritten line must cover a longer previous one
        timed = ""
        if elapsed >= MIN_TIMED:  # else too short to time: done/total alone
            rate = self.done / elapsed
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            speed = f"{rate:.1f}/s" if rate >= 1 else f"{rate:.2g}/s"  # two digits of a slow rate: 0.31/s
            timed = f" ({speed}, ETA {duration(eta)})"  # once timed, every later line is: elapsed only grows
        self.stream.write(f"{self.label} {self.done}/{self.total}{timed}{pad}{end}")
        self.stream.flush()


def progress_callback(label: str, *, stream: TextIO | None = None,
                      clock: Callable[[], float] = time.perf_counter) -> Callable[[int, int], None]:
    """A `report(done, total)` function (the form probes' sweeps call) drawing one Progress, timed
    from now (the first unit's time counts, though the total is known only at the first report)."""
    bar: Progress | None = None
    start = clock()

    def report(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = Progress(label, total, stream=stream, clock=clock)
            bar.start = start
        bar.update(done - bar.done)

    return report
