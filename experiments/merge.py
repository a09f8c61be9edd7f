"""`evprobe merge OUT SHARD_DIR...`: the `--shard K/N` folders of one job -> what one run writes.

    evprobe run ... --shard 0/2 --out runs/m/shard-0      evprobe capture ... --shard 0/2 --out acts/m/shard-0
    evprobe run ... --shard 1/2 --out runs/m/shard-1      evprobe capture ... --shard 1/2 --out acts/m/shard-1
    evprobe merge runs/m runs/m/shard-*                   evprobe merge acts/m acts/m/shard-*

Every job folder names its kind in its meta (`kind`); merge finds the job by it (experiments.registry) and
lets the job runner merge (`core.launch.merge_folders`): the rows in the single run's order
(byte for byte for JSONL rows; acts.npy row by row for a capture), the meta without `shard`,
then the job's reports. A layer sweep merges its captures, then runs its CPU steps. Refused, in
one line naming the fix: folders of different kinds, not written with --shard, different N, a
missing or duplicated shard, shards of different settings, an incomplete shard, a row in the
wrong shard. Shard folders are only read.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evprobe.bench.records import RUN_META_FILE
from evprobe.core.errors import InputError
from evprobe.core.jobs import FORMAT_KEY, read_meta
from evprobe.core.job_summary import MergeSummary
from evprobe.experiments.registry import job_kinds, resolve

# Where a job folder states its kind: run.json (run), layer_sweep_config.json (layer sweep), meta.json (the rest).
META_FILES = (RUN_META_FILE, "layer_sweep_config.json", "meta.json")


def kind_of(folder: Path) -> str:
    """The job kind a folder's meta names."""
    for name in META_FILES:
        meta = read_meta(folder / name)
        if meta is not None and meta.get(FORMAT_KEY) in job_kinds():
            if name == RUN_META_FILE:  # run.json's one schema, before any folder is merged
                from evprobe.bench.json_schema import RUN_FIX, read_run_meta

                if read_run_meta(folder).config is None:
                    raise InputError(f"{folder / name}:1: missing field 'config' (the run's settings, which "
                                     f"merge rebuilds the job from); {RUN_FIX}")
            return meta[FORMAT_KEY]
    raise InputError(f"{folder} names no job kind ({', '.join(META_FILES)} with \"kind\": one of "
                     f"{', '.join(job_kinds())}); pass the folders that `--shard K/N` wrote, or rerun an older shard with "
                     "the same command to record its kind")


def merge(out: str | Path, shard_dirs: Sequence[str | Path]) -> MergeSummary[Any]:
    """Merge the shard folders of one job into `out`; returns the merge summary (its `report`: the
    job's report on the merged rows)."""
    from evprobe.core.launch import merge_folders

    out, folders = Path(out), [Path(d) for d in shard_dirs]
    if not folders:
        raise InputError("no shard folders given; pass every SHARD_DIR of the command")
    kinds = sorted({kind_of(f) for f in folders})
    if len(kinds) > 1:
        raise InputError(f"the folders mix {' and '.join(kinds)} shards; merge one kind at a time")
    # experiments.registry: the job of the experiment that records this kind (a Job class, or a
    # function(out, folders) for a job of several steps)
    target = resolve(job_kinds()[kinds[0]].job)
    return merge_folders(target, out, folders) if isinstance(target, type) else target(out, folders)


def add_merge_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "merge",
        help="combine the --shard K/N folders of one job (run, capture, patching, dose-response, gating, "
        "layer-sweep) into what one run writes",
        description="Combine the N shard folders of one command (written with --shard K/N) into OUT, exactly as "
        "one unsharded run writes them (except per-item timing), then write the job's reports. Refuses missing, "
        "duplicated, incomplete or mismatched shards.",
    )
    p.add_argument("out", metavar="OUT", type=Path, help="folder for the merged files")
    p.add_argument("shards", metavar="SHARD_DIR", type=Path, nargs="+", help="the shard folders (any order)")
    p.set_defaults(run=run_merge)
    return p


def run_merge(args: argparse.Namespace) -> int:
    result = merge(args.out, args.shards)
    print(f"merged {result.n_shards} {result.kind} shards ({result.n_units} units, {result.n_rows} rows) into {args.out}")
    return 0
