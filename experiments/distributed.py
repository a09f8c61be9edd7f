"""Data parallel through torch's own launcher: `torchrun --nproc_per_node N -m experiments run|capture ...`.

When a launcher sets WORLD_SIZE > 1 (torchrun, or `accelerate launch`, which sets the same
variables), each process takes shard RANK/WORLD_SIZE (bench.shard), writes it to
OUT/.shards/shard-K-of-N/, waits for the others at a torch.distributed barrier (gloo on CPU,
nccl on GPUs), and rank 0 merges the shards into OUT (experiments.merge). Rerunning the same
command after a kill resumes every shard and merges again; nothing is lost or duplicated.

On CPU each process uses (CPU cores / processes on the node) torch threads; on GPUs each process
uses the GPU LOCAL_RANK (a --device-map of auto or none becomes cuda:LOCAL_RANK).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.shard import SHARDS_DIR, Shard, distributed_shard

__all__ = ["data_parallel", "device_map_for_rank", "distributed_shard", "run_data_parallel"]


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def device_map_for_rank(device_map: str | None) -> str | None:
    """This process's --device-map under a launcher: its own GPU, or the user's choice."""
    import torch

    if torch.cuda.is_available() and device_map in (None, "auto"):
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return device_map


def shard_folders(out: Path, n: int) -> list[Path]:
    return [out / SHARDS_DIR / Shard(k, n).dirname for k in range(n)]


def run_data_parallel(shard: Shard, out: Path, work: Callable[[Path], Any]) -> dict[str, Any] | None:
    """Run `work(shard_folder)` in this process, then merge all shards into `out` on rank 0.

    Returns merge's result on rank 0, None on the other ranks.
    """
    import torch
    import torch.distributed as dist

    from experiments.merge import merge

    if torch.cuda.is_available():
        backend = "nccl"
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    else:
        backend = "gloo"
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", str(shard.n)))
        torch.set_num_threads(max(1, _cores() // max(1, per_node)))
    # A long shard may keep the others waiting at the barrier: allow a day.
    dist.init_process_group(backend=backend, timeout=timedelta(hours=24))
    try:
        work(out / SHARDS_DIR / shard.dirname)
        dist.barrier()
        return merge(out, shard_folders(out, shard.n)) if shard.k == 0 else None
    finally:
        dist.destroy_process_group()


def data_parallel(config: Any, work: Callable[[Any], Any], *, unit: str,
                  for_rank: Callable[[Any], Any] | None = None) -> bool:
    """If a launcher started this process: run `work` on this rank's shard of `config` (a frozen
    config with `out` and `shard`), merge on rank 0, print one line there, and return True.
    Without a launcher return False (the caller runs as usual).

    for_rank: how this rank's config differs (default: its `device_map` via device_map_for_rank).
    """
    from dataclasses import replace

    launched = distributed_shard()
    if launched is None:
        return False
    if config.shard is not None:
        raise ValueError("--shard and a torchrun launch both pick the shard; drop --shard")
    if for_rank is None:
        config = replace(config, device_map=device_map_for_rank(config.device_map))
    else:
        config = for_rank(config)
    config = replace(config, shard=str(launched))
    out = Path(config.out)
    result = run_data_parallel(launched, out, lambda folder: work(replace(config, out=str(folder))))
    if result is not None:
        print(f"{result['n_items']} {unit} from {result['n_shards']} processes in {out}")
    return True
