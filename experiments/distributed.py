"""Data parallel through torch's own launcher: `torchrun --nproc_per_node N -m evprobe run|capture ...`.

When a launcher sets WORLD_SIZE > 1 (torchrun, or `accelerate launch`, which sets the same
variables), each process takes shard RANK/WORLD_SIZE (core.shard), writes it to
OUT/.shards/shard-K-of-N/, waits for the others at a torch.distributed barrier (gloo on CPU,
nccl on GPUs), and rank 0 merges the shards into OUT (core.launch). Rerunning the same
command after a kill resumes every shard and merges again; nothing is lost or duplicated.

On CPU each process uses (CPU cores / processes on the node) torch threads. On GPUs a process
without --device-map uses GPU LOCAL_RANK; with --device-map auto (a model larger than one GPU)
the node's GPUs are split evenly among its processes (placement_for_rank).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["data_parallel", "placement_for_rank", "rank_placement"]


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
    from evprobe.hooks.devices import parse_max_memory

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


def for_rank(config: Any) -> Any:
    """`config` (any model-driving config: its `model` is a ModelConfig, or a name of one) with its
    model's device_map and max_memory placed for this process."""
    from dataclasses import replace

    from evprobe.experiments.config import load_model_config

    model = load_model_config(config.model)
    device_map, max_memory = rank_placement(model.device_map, model.max_memory)
    return replace(config, model=load_model_config(model, {"device_map": device_map, "max_memory": max_memory}))


def data_parallel(config: Any, work: Callable[[Any], Any], *, unit: str, job: type) -> bool:
    """If a launcher started this process: run `work` on this rank's shard of `config` (a frozen
    config with `out` and `shard`, placed by `for_rank`) in OUT/.shards/shard-K-of-N, merge the
    shards into OUT on rank 0 as `job` (a core.jobs.Job class) merges, print there, and return True.
    Without a launcher return False (the caller runs as usual)."""
    from dataclasses import replace

    from evprobe.core.launch import launched_shard, merge_folders, print_launched, run_launched

    launched = launched_shard()
    if launched is None:
        return False
    if config.shard is not None:
        raise ValueError("--shard and a torchrun launch both pick the shard; drop --shard")
    config = replace(for_rank(config), shard=str(launched))
    out = Path(config.out)
    result = run_launched(launched, out, lambda folder: work(replace(config, out=str(folder))),
                          lambda o, folders: merge_folders(job, o, folders), unit=unit,
                          what=f"evprobe {job.kind} (process {launched} of a launch)")
    if result is not None:
        print_launched(result, out, unit)
    return True
