"""Shards of one job, their merge, and data parallel under torchrun / accelerate launch.

- `--shard K/N`: a job computes only the units of shard K's families (`core.shard`) into its own
  folder; its meta records `shard: "K/N"`.
- `merge_job(job, folders)`: the N shard folders of one job -> what one unsharded, uninterrupted
  run of `job` writes: its rows in the single run's order (`core.jobs.grid_order`), byte for byte
  for JSONL rows; the meta without `shard`; then the job's reports (`Job.finish`). Refused, in
  one line naming the fix: a folder of another kind or not written with --shard, different N, a
  missing or duplicated shard, shards of different settings, an incomplete shard, a row in the
  wrong shard or in two. Shard folders are only read.
- `launched_shard()` / `run_launched`: under a launcher (WORLD_SIZE > 1) each process runs shard
  RANK/WORLD_SIZE into OUT/.shards/shard-K-of-N, prints and stores its throughput, waits at a
  barrier (gloo on CPU, nccl on GPUs), and rank 0 merges into OUT.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from evprobe.core.errors import InputError
from evprobe.core.files import atomic_write_json
from evprobe.core.jobs import FORMAT_KEY, Job, RowKey, grid_order, read_meta
from evprobe.core.job_summary import JobSummary, MergeSummary, Session, Throughput
from evprobe.core.json_types import JsonObject
from evprobe.core.lock import folder_lock
from evprobe.core.shard import SHARDS_DIR, THROUGHPUT_FILE, Shard, distributed_shard, shard_of_ids

@dataclass(frozen=True)
class Part:
    folder: Path
    shard: Shard
    meta: JsonObject


def comparable(meta: JsonObject, free: Sequence[str], config_free: Sequence[str]) -> JsonObject:
    """`meta` without what may differ between shards: `free` top-level keys, and `config_free`
    keys inside the nested `config` / `model_config` / `config.model` mappings (out, shard, placement)."""
    out = {k: v for k, v in meta.items() if k not in free}
    for key in ("config", "model_config"):
        if isinstance(out.get(key), dict):
            inner = {k: v for k, v in out[key].items() if k not in config_free}
            if isinstance(inner.get("model"), dict):
                inner["model"] = {k: v for k, v in inner["model"].items() if k not in config_free}
            out[key] = inner
    return out


def first_difference(a: JsonObject, b: JsonObject, prefix: str = "") -> tuple[str, Any, Any] | None:
    """The first key (dotted into nested mappings) where `a` and `b` differ, with both values."""
    keys = [*a, *(k for k in b if k not in a)]
    # Plain settings first: "model" reads better than "config.model" for the same difference.
    for key in sorted(keys, key=lambda k: isinstance(a.get(k), dict) or isinstance(b.get(k), dict)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            found = first_difference(x, y, f"{prefix}{key}.")
            if found:
                return found
        elif x != y:
            return f"{prefix}{key}", x, y
    return None


def read_parts(job: Job, folders: Sequence[Path]) -> list[Part]:
    """One part per shard 0..N-1 in shard order, after checking kind, N, completeness of the set and settings."""
    if not folders:
        raise InputError("no shard folders given; pass every SHARD_DIR of the command")
    parts = []
    for folder in folders:
        if folder.resolve() == job.out.resolve():
            raise InputError(f"OUT {job.out} is also a shard folder; merge into another folder")
        meta = read_meta(folder / job.meta_file)
        if meta is None:
            raise InputError(f"{folder} holds no {job.meta_file}; pass the folders that `--shard K/N` wrote")
        if meta.get(FORMAT_KEY, job.kind) != job.kind:
            raise InputError(f"{folder} holds a {meta.get(FORMAT_KEY)} job, not {job.kind}; merge one kind at a time")
        if not meta.get("shard"):
            raise InputError(f"{folder} was not written with --shard K/N; merge only shard folders")
        parts.append(Part(folder, Shard.parse(meta["shard"]), meta))
    counts = sorted({p.shard.n for p in parts})
    if len(counts) > 1:
        raise InputError(f"the shards split the work {' and '.join(f'{n} ways' for n in counts)}; "
                         "merge the shards of one N only")
    by_k: dict[int, Part] = {}
    for p in parts:
        if p.shard.k in by_k:
            raise InputError(f"shard {p.shard} is given twice ({by_k[p.shard.k].folder} and {p.folder}); pass each once")
        by_k[p.shard.k] = p
    n = counts[0]
    missing = [k for k in range(n) if k not in by_k]
    if missing:
        raise InputError(f"shard {missing[0]}/{n} is missing ({len(missing)} of {n} missing); run it with "
                         f"--shard {missing[0]}/{n} and pass its folder too")
    ordered = [by_k[k] for k in range(n)]
    first = comparable(ordered[0].meta, job.shard_free(), job.config_free())
    for p in ordered[1:]:
        diff = first_difference(first, comparable(p.meta, job.shard_free(), job.config_free()))
        if diff:
            key, a, b = diff
            raise InputError(f"shard {p.shard} ({p.folder}) differs from shard {ordered[0].shard} in {key}: "
                             f"{b!r} vs {a!r}; merge only the shards of one command")
    return ordered


def merge_job(job: Job, folders: Sequence[Path]) -> MergeSummary[Any]:
    """Merge the shard folders of `job` (built unsharded, writing into its OUT); returns a summary."""
    parts = read_parts(job, [Path(f) for f in folders])
    # The merge target has one writer too (core.lock); the shard folders are only read.
    with folder_lock(job.out, f"evprobe merge ({job.kind})", fix="wait for it to finish, or merge into another folder"):
        return _merge_locked(job, parts)


def _merge_locked(job: Job, parts: list[Part]) -> MergeSummary[Any]:
    """`merge_job` once OUT's lock is held."""
    old = read_meta(job.meta_path())
    if old is not None and (old.get("shard") or first_difference(
            comparable(old, job.shard_free(), job.config_free()),
            comparable(parts[0].meta, job.shard_free(), job.config_free()))):
        raise InputError(f"{job.out} already holds a different {job.kind}; merge into another folder")
    units = job.units()
    conditions = list(job.conditions())
    families = list(job.all_families())
    owner: dict[RowKey, Part] = {}
    for p in parts:
        mine = shard_of_ids(units, p.shard, families)
        wanted = {(u.key, c) for u in mine for c in conditions}
        got = job.store_at(p.folder).done()
        stray = next((k for k in got if k not in wanted), None)
        if stray is not None:
            what = stray[0] if not stray[1] else f"{stray[0]} under {stray[1]}"
            raise InputError(f"{p.folder}: {what} is not a row of shard {p.shard}; that folder holds another job")
        have = sum(1 for k in wanted if k in got)
        if have != len(wanted):
            raise InputError(f"shard {p.shard} ({p.folder}) is incomplete: {have} of {len(wanted)} rows done; "
                             f"rerun shard {p.shard.k} with the same command to finish it")
        for k in wanted:
            if k in owner:
                raise InputError(f"{k[0]} is in two shards (second: {p.folder}); merge the shards of one command")
            owner[k] = p
    order = grid_order(units, conditions, job.batch_size)
    job.store().write_merged([(job.store_at(p.folder), p) for p in parts], order)
    meta = job.merged_meta([p.meta for p in parts])
    atomic_write_json(job.meta_path(), meta)
    rows = job.store().done()
    # the job reports on the merged rows as on a finished folder: nothing computed, every row found
    counts = JobSummary(kind=job.kind, out=job.out, meta=meta, n_units=len(units), n_conditions=len(conditions),
                        n_rows=len(order), computed=0, reused=len(order), n_done=len(order), complete=True,
                        last_session=Session.from_json(meta.get("last_session")))
    report = job.finish({k: rows[k] for k in order}, counts)
    return MergeSummary(kind=job.kind, out=job.out, n_shards=len(parts), n_units=len(units), n_rows=len(order),
                        report=report, throughput=merge_throughput(job.out, [p.folder for p in parts]))


def merge_folders(job_class: type[Job], out: Path, folders: Sequence[Path]) -> MergeSummary[Any]:
    """`evprobe merge` for one job kind: the unsharded job the first shard describes, merged into `out`."""
    folders = [Path(f) for f in folders]
    if not folders:
        raise InputError("no shard folders given; pass every SHARD_DIR of the command")
    meta = read_meta(folders[0] / job_class.meta_file)
    if meta is None:
        raise InputError(f"{folders[0]} holds no {job_class.meta_file}; pass the folders that `--shard K/N` wrote")
    try:
        job = job_class.from_meta(meta, Path(out))
    except InputError:
        raise
    except (KeyError, TypeError, ValueError) as err:  # a damaged meta: its settings no longer make the job
        what = f"missing field {err.args[0]!r}" if isinstance(err, KeyError) and err.args else str(err)
        raise InputError(f"{folders[0] / job_class.meta_file}: its settings do not make a {job_class.kind} job "
                         f"({what}); restore the file, or rerun that shard into a new folder") from None
    return merge_job(job, folders)


def merge_throughput(out: Path, folders: Sequence[Path]) -> Throughput | None:
    """OUT/throughput.json from the shards' throughput.json (written by launched processes): every
    process's units per second and the whole job's (all units / the slowest process's seconds).
    None when a shard has none (`--shard` jobs print their own)."""
    paths = [f / THROUGHPUT_FILE for f in folders]
    if not all(p.is_file() for p in paths):
        return None
    processes = [read_meta(p) or {} for p in paths]
    units = sum(int(p.get("units") or 0) for p in processes)
    seconds = max(float(p.get("seconds") or 0.0) for p in processes)
    summary = Throughput(tuple(processes), units, seconds, round(units / seconds, 3) if units and seconds > 0 else None)
    atomic_write_json(out / THROUGHPUT_FILE, summary.to_json())
    return summary


def shard_folders(out: Path, n: int) -> list[Path]:
    return [out / SHARDS_DIR / Shard(k, n).dirname for k in range(n)]


def launched_shard() -> Shard | None:
    """This process's shard when a launcher (torchrun, accelerate launch) started several."""
    return distributed_shard()


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def run_launched(shard: Shard, out: Path, work: Callable[[Path], Any],
                 merge: Callable[[Path, list[Path]], MergeSummary[Any]], *, unit: str = "items",
                 what: str = "a launched shard") -> MergeSummary[Any] | None:
    """Run `work(shard_folder)` in this process, store and print its throughput, wait for the
    others, and on rank 0 `merge(out, shard_folders)`. `work` returns a summary with `last_session`
    (a JobSummary, or run's RunSummary). Returns merge's summary on rank 0, else None.
    The shard folder is locked (core.lock, as `what`) from the work to its throughput file; the
    merge locks OUT."""
    import torch
    import torch.distributed as dist

    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", str(shard.n)))
    if torch.cuda.is_available():
        backend = "nccl"
        n_gpus, local_rank = torch.cuda.device_count(), int(os.environ.get("LOCAL_RANK", "0"))
        # This process's first GPU (it may own several when a model spans GPUs).
        gpu = local_rank * (n_gpus // per_node) if n_gpus >= per_node else local_rank
        torch.cuda.set_device(gpu)
        device = f"cuda:{gpu}"
    else:
        backend = "gloo"
        torch.set_num_threads(max(1, _cores() // max(1, per_node)))
        device = f"cpu ({torch.get_num_threads()} threads)"
    # A long shard may keep the others waiting at the barrier: allow a day.
    dist.init_process_group(backend=backend, timeout=timedelta(hours=24))
    try:
        folder = out / SHARDS_DIR / shard.dirname
        with folder_lock(folder, what):
            started = time.perf_counter()
            summary = work(folder)
            seconds = time.perf_counter() - started
            units = summary.last_session.items if summary.last_session is not None else None
            record = {"shard": str(shard), "host": socket.gethostname(), "device": device, "units": units,
                      "seconds": round(seconds, 3),
                      "per_second": round(units / seconds, 3) if units and seconds > 0 else None}
            atomic_write_json(folder / THROUGHPUT_FILE, record)
        rate = "-" if record["per_second"] is None else f"{record['per_second']:.2f}/s"
        print(f"[process {shard}] {units} {unit} computed in {record['seconds']:.1f} s ({rate}) "
              f"on {record['host']} {device}", file=sys.stderr, flush=True)
        dist.barrier()
        return merge(out, shard_folders(out, shard.n)) if shard.k == 0 else None
    finally:
        dist.destroy_process_group()


def print_launched(result: MergeSummary[Any], out: Path, unit: str) -> None:
    """Rank 0's closing lines: what was merged, and the throughput of every process."""
    print(f"{result.n_rows} {unit} from {result.n_shards} processes in {out}")
    speed = result.throughput
    if speed is not None and speed.per_second is not None:
        rates = ", ".join(f"{p['per_second']}/s" for p in speed.processes if p.get("per_second") is not None)
        print(f"  computed {speed.units} {unit} at {speed.per_second}/s in all (per process: {rates}); "
              f"{THROUGHPUT_FILE}")
