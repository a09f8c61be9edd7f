"""What a job returns (core.jobs.run_job, core.launch.merge_job): typed counts, this session's work
and the job's own report, so a command prints from fields, not from keys of a merged dict."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from evprobe.core.json_types import JsonObject


@dataclass(frozen=True)
class Session:
    """One session's work: the rows it computed, its wall seconds and rows per second (None when it
    computed none). A job's meta and run.json record it as {"items", "seconds", "items_per_second"}."""

    items: int
    seconds: float
    items_per_second: float | None

    @classmethod
    def timed(cls, items: int, elapsed: float) -> Session:
        return cls(items, round(elapsed, 3), round(items / elapsed, 3) if items and elapsed > 0 else None)

    @classmethod
    def from_json(cls, value: JsonObject | None) -> Session | None:
        """A recorded session (a shard's meta, a merged one); None where none is recorded."""
        if not value:
            return None
        return cls(int(value.get("items") or 0), float(value.get("seconds") or 0.0), value.get("items_per_second"))

    def to_json(self) -> JsonObject:
        return {"items": self.items, "seconds": self.seconds, "items_per_second": self.items_per_second}


R = TypeVar("R")


@dataclass(frozen=True)
class JobSummary(Generic[R]):
    """What `run_job` returns: the folder's counts after this session and, once every row of the
    selection is there, the job's own typed report (what `Job.finish` returned; None before).

    meta: the folder's meta file as it now stands (what the job is: config, pins, shapes).
    n_rows: rows of this selection (units x conditions); computed: new in this session; reused:
    found on disk; n_done: done now. last_session: this session's work (None on a merge: the
    merged meta's own record, where it keeps one)."""

    kind: str
    out: Path
    meta: JsonObject
    n_units: int
    n_conditions: int
    n_rows: int
    computed: int
    reused: int
    n_done: int
    complete: bool
    last_session: Session | None
    report: R | None = None

    def counts_text(self, n_items: int, items: str = "items") -> str:
        """The line a job's command prints: `N rows (n items x C conditions): X computed in S s, R reused`."""
        seconds = None if self.last_session is None else self.last_session.seconds
        return (f"{self.n_rows} rows ({n_items} {items} x {self.n_conditions} conditions): "
                f"{self.computed} computed in {seconds} s, {self.reused} reused")


@dataclass(frozen=True)
class MergeSummary(Generic[R]):
    """What merging a job's `--shard K/N` folders returns (core.launch.merge_job): the shards, the
    merged counts, the job's report on the merged rows and the launch's throughput (if recorded)."""

    kind: str
    out: Path
    n_shards: int
    n_units: int
    n_rows: int
    report: R | None = None
    throughput: Throughput | None = None


@dataclass(frozen=True)
class Throughput:
    """A launch's throughput (OUT/throughput.json, core.launch.merge_throughput): every process's own
    record as it wrote it, all units, the slowest process's seconds and the whole job's units per second."""

    processes: tuple[JsonObject, ...]
    units: int
    seconds: float
    per_second: float | None

    def to_json(self) -> JsonObject:
        return {"processes": list(self.processes), "units": self.units, "seconds": self.seconds,
                "per_second": self.per_second}


__all__ = ["JobSummary", "MergeSummary", "Session", "Throughput"]
