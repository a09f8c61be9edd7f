"""One resumable job runner under every experiment: plan, pin, resume, batch, append, progress.

A job (run, capture, patching, dose-response, gating, the capture of a layer sweep) declares
- its **units** (`Unit`: a row key, the family it belongs to, a batching group) and its
  **conditions** (strings; one row per unit x condition; `("",)` for one row per unit),
- its **pinned settings** (`pinned()`: what a rerun into the same folder must agree on, the
  benchmark hash, the model, the dtype, the seed ...) and its meta (`meta()`, written whole
  before the first row),
- how to **open** its resources once (`open()`: load the model; only called when rows are
  missing) and **compute** the rows of one batch under one condition (`compute`),
- how to **report** once every row of its selection is there (`finish`).

`run_job` does the rest, once for all of them: the shard's units (whole families, `core.shard`),
the pinned-settings check (a mismatch is refused in one line naming the setting and both
values), resume (rows already on disk are skipped; the writer cuts its own torn last line,
readers never do, and warn that they left it out), the grid order (units grouped by `group`, ascending, `batch_size` at a time,
every missing condition of a batch in turn; `grid_order` is that order, which `merge` restores),
appends with an fsync per batch and condition, progress with rate and ETA, and one writer per
folder (`core.lock.folder_lock`, held from before the rows are read until the reports are
written). `core.launch` adds `--shard K/N` folders, their merge and torchrun / accelerate launch
on top.

Rows go to a JSONL file (`JsonlRows`); a job with its own storage (capture's acts.npy) gives
`store()` another `RowStore`.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from evprobe.core.errors import InputError
from evprobe.core.files import (
    append_log_lines,
    atomic_write_bytes,
    atomic_write_json,
    cut_torn_tail,
    read_complete_lines,
)
from evprobe.core.flags import PLACEMENT_KEYS
from evprobe.core.json_files import optional_json_object, parse_json
from evprobe.core.job_summary import JobSummary, Session
from evprobe.core.json_types import JsonObject
from evprobe.core.lock import folder_lock
from evprobe.core.prefetch import prefetched
from evprobe.core.progress import Progress, note, progress_label
from evprobe.core.shard import Shard, shard_of_ids

RowKey = tuple[str, str]  # (unit key, condition)
FORMAT_KEY = "kind"  # every job folder's meta names its job kind; merge dispatches on it
# Meta keys that differ between the shards of one job by nature (what ran where, and when).
SHARD_FREE = ("shard", "last_session", "n_selected", "n_records", "bench", "directions_folder", "resources")
MOVE_ASIDE = "move the folder aside"  # the fix for a job folder's damaged row or meta file


@dataclass(frozen=True)
class Unit:
    """One unit of work: `key` names its rows (unique in a job), `family_id` decides its shard,
    units of different `group`s never share a batch (e.g. items with another number of images)."""

    key: str
    family_id: str
    group: int = 0
    value: Any = field(default=None, compare=False, repr=False)  # the job's own object (an item, a pair)


class RowStore(ABC):
    """Where a job's rows live. `done` reads (never writes; a reader warns of a torn tail it leaves
    out, the writer reads with `warn=False`); `repair` cuts the writer's own torn tail before it
    appends; `append` adds whole rows durably."""

    @abstractmethod
    def done(self, *, warn: bool = True) -> dict[RowKey, JsonObject]: ...

    def repair(self) -> None:
        """Make the store ready for appends (e.g. cut a torn last line). Only the writer calls it."""

    def prepare(self, meta: JsonObject) -> None:
        """Called once before the first append of a session, after the meta is on disk."""

    @abstractmethod
    def append(self, rows: list[JsonObject]) -> None: ...

    @abstractmethod
    def write_merged(self, parts: Sequence[tuple[RowStore, Any]], order: Sequence[RowKey]) -> None:
        """Write, whole and atomically, the rows of `parts` (shard stores, complete) in `order`."""


class JsonlRows(RowStore):
    """Rows as JSON lines in one append-only file; `key_of(row)` gives a row's (unit, condition);
    `check(row)` (the format's schema) names what is wrong with a row, or returns None."""

    def __init__(self, path: Path, key_of: Callable[[JsonObject], RowKey], *, what: str = "row",
                 check: Callable[[Any], str | None] | None = None) -> None:
        self.path, self.key_of, self.what, self.check = path, key_of, what, check

    def done(self, *, warn: bool = True) -> dict[RowKey, JsonObject]:
        out: dict[RowKey, JsonObject] = {}
        for number, line in read_complete_lines(self.path, warn=warn):
            row = parse_json(line, self.path, MOVE_ASIDE, line=number)  # bounded: a 3,000-deep line is one line
            try:
                key = self.key_of(row)
                hash(key)  # a list or object where a key field belongs: TypeError, a bad line
            except (KeyError, TypeError, AttributeError) as err:
                raise InputError(f"{self.path}:{number}: not a {self.what} ({err}); {MOVE_ASIDE}") from None
            problem = self.check(row) if self.check is not None else None
            if problem:
                raise InputError(f"{self.path}:{number}: {problem}; move the folder aside (or fix the line)")
            if key in out:
                raise InputError(f"{self.path}:{number}: a second {self.what} for {_describe(key)}; move the folder "
                                 "aside (two runs wrote into it)")
            out[key] = row
        return out

    def lines(self) -> dict[RowKey, str]:
        """The raw complete lines by key (merge copies them byte for byte)."""
        return {self.key_of(parse_json(line, self.path, MOVE_ASIDE, line=number)): line
                for number, line in read_complete_lines(self.path)}

    def repair(self) -> None:
        cut_torn_tail(self.path)

    def append(self, rows: list[JsonObject]) -> None:
        append_log_lines(self.path, rows)

    def write_merged(self, parts: Sequence[tuple[RowStore, Any]], order: Sequence[RowKey]) -> None:
        lines: dict[RowKey, str] = {}
        for store, _ in parts:
            assert isinstance(store, JsonlRows)
            lines.update(store.lines())
        atomic_write_bytes(self.path, "".join(lines[k] + "\n" for k in order).encode("utf-8"))


def _describe(key: RowKey) -> str:
    return key[0] if not key[1] else f"{key[0]} under {key[1]}"


class Job(ABC):
    """A resumable computation over units x conditions; see the module docstring."""

    kind: ClassVar[str]  # recorded in the meta file; `evprobe merge` finds the job by it
    meta_file: ClassVar[str] = "meta.json"
    unit_name: ClassVar[str] = "items"  # what the progress line and throughput count

    def __init__(self, out: str | Path, shard: str | Shard | None) -> None:
        self.out = Path(out)
        self.shard = Shard.parse(shard) if isinstance(shard, str) else shard

    # ---- the plan (no model)
    @abstractmethod
    def units(self) -> list[Unit]:
        """The whole (unsharded) selection, in plan order."""

    def all_families(self) -> Sequence[str]:
        """Every family id that fixes the shard assignment (default: the units' families)."""
        return [u.family_id for u in self.units()]

    def conditions(self) -> Sequence[str]:
        return ("",)

    @property
    @abstractmethod
    def batch_size(self) -> int: ...

    @abstractmethod
    def pinned(self) -> JsonObject:
        """Settings that change outputs; a rerun into the same folder must give the same values.

        Called before `open` and again after it: what only the loaded model tells (its layer
        count, revision, dtype) may be added once `open` has run."""

    def meta(self) -> JsonObject:
        """What the meta file holds (pinned settings included); called after `open` when there is work."""
        return dict(self.pinned())

    @abstractmethod
    def store_at(self, folder: Path) -> RowStore:
        """The row store of a folder of this job (its own, or a shard's when merging)."""

    def store(self) -> RowStore:
        return self.store_at(self.out)

    # ---- compute
    def open(self) -> None:
        """Load what `compute` needs (a model); called at most once, and only if rows are missing."""

    def close(self) -> None:
        """Release what open() took (an engine, a session); called once the rows are computed or a
        batch failed. The base job holds nothing."""

    @abstractmethod
    def compute(self, batch: list[Unit], condition: str) -> list[JsonObject]:
        """The rows of `batch` under `condition`, one per unit, in batch order.

        A job that overrides `prepare` takes a third argument, what `prepare` returned for the batch."""

    # A job that splits its work into CPU-side inputs (`prepare`) and the model call (`compute`)
    # gets the next `prefetch` batches prepared on a thread while the current one computes
    # (core.prefetch). prepare runs after open(), once per (batch, condition), in run order.
    prefetch: int = 0

    def prepare(self, batch: list[Unit], condition: str) -> Any:
        """The inputs of `batch` under `condition` that need no model call (run on a thread when
        prefetch > 0, so it must not touch what compute is using); the base job prepares nothing."""
        return None

    # ---- report
    def finish(self, rows: dict[RowKey, JsonObject], summary: JobSummary[Any]) -> Any:
        """Called when every row of this job's selection is there (`summary`: the counts, no report
        yet): write the reports and return the job's typed report (JobSummary.report)."""
        return None

    # ---- shards and their merge (core.launch)
    @classmethod
    @abstractmethod
    def from_meta(cls, meta: JsonObject, out: Path) -> Job:
        """The unsharded job a shard's meta describes, writing into `out` (for `evprobe merge`)."""

    def shard_free(self) -> Sequence[str]:
        """Top-level meta keys that may differ between the shards of one job."""
        return SHARD_FREE

    def config_free(self) -> Sequence[str]:
        """Keys of the recorded config that may differ between shards: where each wrote and where its model sat."""
        return ("out", "shard", *PLACEMENT_KEYS)

    def merged_meta(self, metas: Sequence[JsonObject]) -> JsonObject:
        """The meta of the merged folder, from the shards' metas (in shard order): the first shard's,
        without `shard`, writing into OUT; a recorded `last_session` sums the shards' rows and takes
        the slowest shard's seconds."""
        meta = {k: v for k, v in metas[0].items() if k not in ("n_selected", "n_records")}
        meta["shard"] = None
        if isinstance(meta.get("config"), dict):
            meta["config"] = {**meta["config"], "out": str(self.out), "shard": None}
        if "last_session" in meta:
            sessions = [m.get("last_session") or {} for m in metas]
            items = sum(s.get("items") or 0 for s in sessions)
            seconds = max((s.get("seconds") or 0.0 for s in sessions), default=0.0)
            meta["last_session"] = Session.timed(items, seconds).to_json()  # seconds: already to 3 decimals
        return meta

    # ---- derived
    def my_units(self) -> list[Unit]:
        """The units of this job's shard (all of them without a shard)."""
        units = self.units()
        return shard_of_ids(units, self.shard, self.all_families())

    def meta_path(self) -> Path:
        return self.out / self.meta_file


def batches(units: Sequence[Unit], batch_size: int) -> Iterator[list[Unit]]:
    """`units` grouped by `group` (ascending; order kept within a group), `batch_size` at a time."""
    groups: dict[int, list[Unit]] = {}
    for u in units:
        groups.setdefault(u.group, []).append(u)
    for g in sorted(groups):
        members = groups[g]
        for start in range(0, len(members), batch_size):
            yield members[start : start + batch_size]


def grid_order(units: Sequence[Unit], conditions: Sequence[str], batch_size: int) -> list[RowKey]:
    """(unit key, condition) of every row in the order one uninterrupted run appends them."""
    return [(u.key, c) for batch in batches(units, batch_size) for c in conditions for u in batch]


def read_meta(path: Path) -> JsonObject | None:
    """A job folder's meta file, or None if there is none; bad JSON is a one-line error."""
    return optional_json_object(path, MOVE_ASIDE)


def check_pinned(job: Job, old: JsonObject | None, new: JsonObject) -> None:
    """Refuse to continue in a folder written with other settings, naming the setting and both values."""
    if old is None:
        return
    if old.get(FORMAT_KEY, job.kind) != job.kind:
        raise InputError(f"{job.out} holds a {old.get(FORMAT_KEY)} job, not {job.kind}; use another --out")
    for key, value in new.items():
        if key in old and old[key] != value or key not in old and value is not None:
            raise InputError(f"{job.out} was written with {key}={old.get(key)!r}, this run has {key}={value!r}; "
                             "use another --out to start a different run, or the same settings to resume")


def run_job(job: Job, *, progress: bool = True) -> JobSummary[Any]:
    """Compute every missing row of `job` (its shard), then let it report; returns the summary."""
    units = job.my_units()
    conditions = list(job.conditions())
    if not units:
        raise InputError(f"shard {job.shard} holds none of the {job.unit_name} (too many shards for their families); "
                         "use fewer shards" if job.shard else f"nothing to do: the selection holds no {job.unit_name}")
    pinned = {**job.pinned(), "shard": str(job.shard) if job.shard else None}
    # One writer per folder (core.lock): a second run into OUT is refused here, before it reads the
    # rows it would redo or loads a model; the lock is held until the reports are written.
    with folder_lock(job.out, f"evprobe {job.kind}"):
        return _run_locked(job, units, conditions, pinned, progress)


def _run_locked(job: Job, units: list[Unit], conditions: list[str], pinned: JsonObject,
                progress: bool) -> JobSummary[Any]:
    """`run_job` once the folder's lock is held."""
    old = read_meta(job.meta_path())
    check_pinned(job, old, pinned)
    store = job.store()
    done = store.done(warn=False)  # the writer's read: a torn last line is its own, cut before it appends
    # Rows outside this selection (an earlier run with another --limit) are kept and left alone.
    wanted = {(u.key, c) for u in units for c in conditions}
    todo = {u.key: [c for c in conditions if (u.key, c) not in done] for u in units}
    n_todo = sum(len(v) for v in todo.values())
    started = time.perf_counter()
    label = progress_label(job.kind, job.shard)
    if n_todo:
        # Before the model loads: a torn tail cut, and a link or FIFO where the rows go refused in one line.
        store.repair()
        if progress:  # open() (loading a model) can take minutes with no count to show: say what happens
            note(label, f"{n_todo} rows to compute ({len(wanted) - n_todo} already in {job.out}); loading")
        job.open()  # the slow, failure-prone step, before anything is written
        try:
            _compute_missing(job, store, old, pinned, units, conditions, todo, n_todo, label, progress)
        finally:
            job.close()  # engines, sessions and worker processes end even when a batch fails
        done = store.done(warn=False)
    else:
        done = store.done()  # nothing to write: a reader, which says so if it leaves a torn last line out
    elapsed = time.perf_counter() - started
    summary = JobSummary(
        kind=job.kind, out=job.out, meta=read_meta(job.meta_path()) or {}, n_units=len(units),
        n_conditions=len(conditions), n_rows=len(wanted), computed=n_todo, reused=len(wanted) - n_todo,
        n_done=sum(1 for k in wanted if k in done), complete=wanted <= done.keys(),
        # Session.items counts the rows computed, whatever the unit (run.json's format since its first version).
        last_session=Session.timed(n_todo, elapsed))
    if summary.complete:
        summary = replace(summary, report=job.finish({k: done[k] for k in wanted}, summary))
    return summary


def _compute_missing(job: Job, store: RowStore, old: JsonObject | None, pinned: JsonObject,
                     units: list[Unit], conditions: list[str], todo: dict[Any, list[str]], n_todo: int,
                     label: str, progress: bool) -> None:
    """`run_job`'s work once the job is open: pins checked again, the meta written, every missing
    row computed and appended batch by batch."""
    pinned = {**job.pinned(), "shard": pinned["shard"]}  # now with what only the model tells (layers, dtype)
    check_pinned(job, old, pinned)
    meta = {FORMAT_KEY: job.kind, **job.meta(), **pinned}
    if old is None:
        atomic_write_json(job.meta_path(), meta)
    store.prepare(old or meta)
    bar = Progress(label, n_todo) if progress else None
    work = [(sub, cond) for batch in batches([u for u in units if todo[u.key]], job.batch_size)
            for cond in conditions if (sub := [u for u in batch if cond in todo[u.key]])]
    prepares = type(job).prepare is not Job.prepare
    for (sub, cond), prepared in prefetched(work, lambda w: job.prepare(*w) if prepares else None,
                                            job.prefetch if prepares else 0):
        rows = job.compute(sub, cond, prepared) if prepares else job.compute(sub, cond)
        if len(rows) != len(sub):
            raise RuntimeError(f"{job.kind}: compute returned {len(rows)} rows for {len(sub)} units")
        store.append(rows)
        if bar:
            bar.update(len(sub))
