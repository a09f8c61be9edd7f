"""Data parallel through torch's own launcher: `torchrun --nproc_per_node N -m experiments run|capture ...`.

When a launcher sets WORLD_SIZE > 1 (torchrun, or `accelerate launch`, which sets the same
variables), each process takes shard RANK/WORLD_SIZE (bench.shard), writes it to
OUT/.shards/shard-K-of-N/, waits for the others at a torch.distributed barrier (gloo on CPU,
nccl on GPUs), and rank 0 merges the shards into OUT (experiments.merge). Rerunning the same
command after a kill resumes every shard and merges again; nothing is lost or duplicated.

On CPU each process uses (CPU cores / processes on the node) torch threads. On GPUs a process
without --device-map uses GPU LOCAL_RANK; with --device-map auto (a model larger than one GPU)
the node's GPUs are split evenly among its processes (placement_for_rank).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.shard import SHARDS_DIR, THROUGHPUT_FILE, Shard, distributed_shard

__all__ = ["data_parallel", "distributed_shard", "placement_for_rank", "rank_placement", "run_data_parallel"]


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# accelerate's automatic placements: a model spread over several devices.
AUTO_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def placement_for_rank(device_map: str | None, max_memory: str | None, *, n_gpus: int, local_rank: int,
                       local_world_size: int, free: dict[int, int] | None = None) -> tuple[str | None, str | None]:
    """(device_map, max_memory) of one process under a launcher, on a node with `n_gpus` GPUs shared by
    `local_world_size` processes.

    - No GPU: as given (CPU).
    - No device map: the process's own GPU, cuda:LOCAL_RANK (one model copy per GPU).
    - An automatic map (auto, balanced, sequential; a model larger than one GPU): with one process
      per node, as given; with several, the node's GPUs are split evenly and this process's GPUs
      are the only ones given a budget in max_memory (the user's value for a GPU, else its free
      bytes from `free`); the user's cpu/disk entries are kept.
    - Anything else (cuda:1, cpu): as given.
    """
    from hooks.devices import parse_max_memory

    if n_gpus == 0 or (device_map is not None and device_map not in AUTO_MAPS):
        return device_map, max_memory
    if device_map is None:
        if local_world_size > n_gpus:
            raise ValueError(f"{local_world_size} processes per node but {n_gpus} GPUs: start at most {n_gpus} "
                             "(torchrun --nproc_per_node)")
        return f"cuda:{local_rank}", max_memory
    if local_world_size == 1:
        return device_map, max_memory
    if n_gpus % local_world_size:
        raise ValueError(f"--device-map {device_map} with {local_world_size} processes per node: the node's "
                         f"{n_gpus} GPUs do not split evenly; start a number of processes that divides {n_gpus}")
    per = n_gpus // local_world_size
    mine = range(local_rank * per, (local_rank + 1) * per)
    given = parse_max_memory(max_memory) or {}
    free = free or {}
    budget = [f"{g}={given.get(g) or str(free[g]) + 'B'}" for g in mine]
    budget += [f"{k}={v}" for k, v in given.items() if isinstance(k, str)]
    return device_map, ",".join(budget)


def rank_placement(device_map: str | None, max_memory: str | None) -> tuple[str | None, str | None]:
    """placement_for_rank for this process (LOCAL_RANK, LOCAL_WORLD_SIZE, the visible GPUs)."""
    import torch

    n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    free = {}
    if n_gpus and device_map in AUTO_MAPS and local_world > 1:
        free = {g: int(torch.cuda.mem_get_info(g)[0]) for g in range(n_gpus)}
    return placement_for_rank(device_map, max_memory, n_gpus=n_gpus, local_rank=int(os.environ.get("LOCAL_RANK", "0")),
                              local_world_size=local_world, free=free)


def shard_folders(out: Path, n: int) -> list[Path]:
    return [out / SHARDS_DIR / Shard(k, n).dirname for k in range(n)]


def _new_units(summary: Any) -> int | None:
    """Units this process computed, from a command's summary (run/capture: last_session.items;
    dose-response, patching: computed)."""
    if not isinstance(summary, dict):
        return None
    session = summary.get("last_session")
    if isinstance(session, dict) and session.get("items") is not None:
        return int(session["items"])
    return int(summary["computed"]) if summary.get("computed") is not None else None


def write_throughput(folder: Path, shard: Shard, units: int | None, seconds: float, device: str) -> dict[str, Any]:
    """This process's throughput, stored in its shard folder (merge gathers them)."""
    import socket

    from bench.manifest import atomic_write_json

    record = {"shard": str(shard), "host": socket.gethostname(), "device": device, "units": units,
              "seconds": round(seconds, 3),
              "per_second": round(units / seconds, 3) if units and seconds > 0 else None}
    atomic_write_json(folder / THROUGHPUT_FILE, record)
    return record


def run_data_parallel(shard: Shard, out: Path, work: Callable[[Path], Any], *, unit: str = "items"
                      ) -> dict[str, Any] | None:
    """Run `work(shard_folder)` in this process, then merge all shards into `out` on rank 0.

    Each process prints its own throughput line (units per second) and stores it in its shard
    folder; merge writes them all to OUT/throughput.json. Returns merge's result on rank 0, None on
    the other ranks.
    """
    import sys
    import time

    import torch
    import torch.distributed as dist

    from experiments.merge import merge

    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", str(shard.n)))
    if torch.cuda.is_available():
        backend = "nccl"
        n_gpus, local_rank = torch.cuda.device_count(), int(os.environ.get("LOCAL_RANK", "0"))
        # This process's first GPU (it may own several: placement_for_rank).
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
        started = time.perf_counter()
        summary = work(folder)
        record = write_throughput(folder, shard, _new_units(summary), time.perf_counter() - started, device)
        rate = "-" if record["per_second"] is None else f"{record['per_second']:.2f}/s"
        print(f"[process {shard}] {record['units']} {unit} computed in {record['seconds']:.1f} s ({rate}) "
              f"on {record['host']} {device}", file=sys.stderr, flush=True)
        dist.barrier()
        return merge(out, shard_folders(out, shard.n)) if shard.k == 0 else None
    finally:
        dist.destroy_process_group()


def data_parallel(config: Any, work: Callable[[Any], Any], *, unit: str,
                  for_rank: Callable[[Any], Any] | None = None) -> bool:
    """If a launcher started this process: run `work` on this rank's shard of `config` (a frozen
    config with `out` and `shard`), merge on rank 0, print one line there, and return True.
    Without a launcher return False (the caller runs as usual).

    for_rank: how this rank's config differs (default: its `device_map` and `max_memory` via
        rank_placement).
    """
    from dataclasses import replace

    launched = distributed_shard()
    if launched is None:
        return False
    if config.shard is not None:
        raise ValueError("--shard and a torchrun launch both pick the shard; drop --shard")
    if for_rank is None:
        device_map, max_memory = rank_placement(config.device_map, getattr(config, "max_memory", None))
        config = replace(config, device_map=device_map, max_memory=max_memory)
    else:
        config = for_rank(config)
    config = replace(config, shard=str(launched))
    out = Path(config.out)
    result = run_data_parallel(launched, out, lambda folder: work(replace(config, out=str(folder))), unit=unit)
    if result is not None:
        print(f"{result['n_items']} {unit} from {result['n_shards']} processes in {out}")
        speed = result.get("throughput") or {}
        if speed.get("per_second") is not None:
            rates = ", ".join(f"{p['per_second']}/s" for p in speed["processes"] if p.get("per_second") is not None)
            print(f"  computed {speed['units']} {unit} at {speed['per_second']}/s in all (per process: {rates}); "
                  f"{THROUGHPUT_FILE}")
    return True
