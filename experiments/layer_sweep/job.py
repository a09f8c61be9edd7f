"""The layer sweep as one job (`layer_sweep`: steps 1-4, resumable, one writer per folder), the
merge of `--shard` folders (`merge_shards`) and the command line (`evprobe layer-sweep`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

from evprobe.core.errors import InputError
from evprobe.core.files import atomic_write_bytes, atomic_write_json
from evprobe.core.job_summary import MergeSummary
from evprobe.core.lock import folder_lock
from evprobe.experiments.config import add_experiment_parser, as_dict, experiment_config, load_config
from evprobe.experiments.layer_sweep.config import (
    ACTS_DIR,
    DIRECTIONS_DIR,
    JSON_FILE,
    KIND,
    MD_FILE,
    PNG_FILE,
    SHARD_CONFIG_FILE,
    SWEEPS_DIR,
    LayerSweepConfig,
    Plan,
    make_plan,
)
from evprobe.experiments.layer_sweep.report import BestLayer, auc_text, best_layers, markdown, plot
from evprobe.experiments.layer_sweep.steps import run_capture, run_directions, run_sweep


@dataclass(frozen=True)
class LayerSweepSummary:
    """What `layer_sweep` did. captured: capture rows computed in this session; shard: the --shard
    K/N it captured (then it swept nothing: `evprobe merge` sweeps); complete: every capture row of
    the selection is there; swept / reused: the labels swept now / found swept; best: (label title,
    its nested best layer (a BestLayer) or None); files: what it wrote in `out` (none on a launcher's
    rank > 0, which only captures)."""

    out: Path
    n_items: int
    captured: int
    shard: str | None
    complete: bool
    swept: tuple[str, ...] = ()
    reused: tuple[str, ...] = ()
    directions_fitted: bool = False
    best: tuple[tuple[str, BestLayer | None], ...] = ()
    files: tuple[str, ...] = ()


def layer_sweep(config: LayerSweepConfig, *, progress: bool = True) -> LayerSweepSummary:
    """Run (or finish) the layer sweep; returns its summary (captured rows, labels swept / reused, files)."""
    from evprobe.core.launch import launched_shard

    plan = make_plan(config)
    launched = launched_shard()
    # One writer per OUT (core.lock); under a launcher only rank 0 writes OUT itself (the others
    # write their shards of OUT/acts, each locked by the job runner).
    with folder_lock(plan.out, "evprobe layer-sweep") if launched is None or launched.k == 0 else nullcontext():
        return _layer_sweep(plan, progress)


def _layer_sweep(plan: Plan, progress: bool) -> LayerSweepSummary:
    config = plan.config
    cap = run_capture(plan, progress)
    captured = cap.last_session.items if cap is not None and cap.last_session is not None else 0
    if cap is None or config.shard is not None:  # a launcher's other rank, or one --shard job: capture only
        if config.shard is not None:
            atomic_write_json(plan.out / SHARD_CONFIG_FILE, {"kind": KIND, **as_dict(config)})
        return LayerSweepSummary(out=plan.out, n_items=cap.meta["n_items"] if cap else plan.n_items, captured=captured,
                                 shard=config.shard, complete=bool(cap and cap.complete),
                                 files=() if cap is None else (ACTS_DIR, SHARD_CONFIG_FILE))
    swept, reused = [], []
    for label in config.labels:
        (swept if run_sweep(plan, label, progress) else reused).append(label)
    directions_fitted = run_directions(plan)
    result = best_layers(plan)
    atomic_write_bytes(plan.out / JSON_FILE, (json.dumps(result.to_json(), indent=1) + "\n").encode("utf-8"))
    atomic_write_bytes(plan.out / MD_FILE, markdown(result).encode("utf-8"))
    plot(result, plan.out)
    return LayerSweepSummary(
        out=plan.out, n_items=plan.n_items, captured=captured, shard=None, complete=True, swept=tuple(swept),
        reused=tuple(reused), directions_fitted=directions_fitted,
        best=tuple((r.title, r.best) for r in result.labels),
        files=(JSON_FILE, MD_FILE, PNG_FILE, f"{SWEEPS_DIR}/<label>/sweep.*", f"{DIRECTIONS_DIR}/geometry.png"))


def merge_shards(out: str | Path, folders: Sequence[str | Path]) -> MergeSummary[LayerSweepSummary]:
    """`evprobe merge OUT SHARD_OUT...` for `layer-sweep --shard K/N` folders: their captures merged
    into OUT/acts by the job runner, then steps 2-4 run on OUT with the shards' config (CPU only, no
    model). Shards of another sweep (labels, layers, model ...) are refused, naming the settings."""
    out, folders = Path(out), [Path(f) for f in folders]
    with folder_lock(out, "evprobe merge", fix="wait for it to finish, or merge into another folder"):
        return _merge_shards(out, folders)


def _merge_shards(out: Path, folders: list[Path]) -> MergeSummary[LayerSweepSummary]:
    from evprobe.core.jobs import read_meta
    from evprobe.core.launch import comparable, merge_folders
    from evprobe.experiments.capture.config import CAPTURE_META_FILE
    from evprobe.experiments.capture.job import CaptureJob
    from evprobe.experiments.capture.store import ACTS_FILE, INDEX_FILE
    from evprobe.hooks.devices import PLACEMENT_KEYS

    configs = [{k: v for k, v in (read_meta(f / SHARD_CONFIG_FILE) or {}).items() if k != "kind"} for f in folders]
    # Without out, shard and the model's placement (where each shard ran).
    same = [comparable({"config": c}, (), ("out", "shard", *PLACEMENT_KEYS))["config"] for c in configs]
    for folder, other in zip(folders[1:], same[1:]):
        diff = sorted(k for k in other.keys() | same[0].keys() if other.get(k) != same[0].get(k))
        if diff:
            raise InputError(f"{folder} is a shard of another layer sweep than {folders[0]} (different "
                             f"{', '.join(diff)}); merge the shards of one command")
    captured = merge_folders(CaptureJob, out / ACTS_DIR, [f / ACTS_DIR for f in folders])
    config = load_config(LayerSweepConfig, {**configs[0], "out": str(out), "shard": None},
                         where=str(folders[0] / SHARD_CONFIG_FILE))
    summary = layer_sweep(config, progress=False)
    files = tuple(f"{ACTS_DIR}/{name}" for name in (ACTS_FILE, INDEX_FILE, CAPTURE_META_FILE)) + summary.files
    return MergeSummary(kind=KIND, out=out, n_shards=captured.n_shards, n_units=captured.n_units, n_rows=captured.n_rows,
                        report=replace(summary, files=files))


# ---------------------------------------------------------------- command line


def add_layer_sweep_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    return add_experiment_parser(
        sub, "layer-sweep", LayerSweepConfig, run_layer_sweep, example="layer_sweep_tiny",
        help="capture -> probe sweeps per label with controls, transfer matrices, directions, best-layer table",
        description="Capture the residual stream, sweep probes for each label (resolved, history, threshold level, "
        "missing property, ...) with shuffled controls and input baselines, transfer matrices for resolved, "
        "mass-mean resolved directions per system with their cosine heatmap, and best_layers.md/.json with the "
        "nested best layer per label. Flags override the config. Resumable: rerun to continue or reuse.",
    )


def config_from_args(args: argparse.Namespace) -> LayerSweepConfig:
    return experiment_config(LayerSweepConfig, args)


def run_layer_sweep(args: argparse.Namespace) -> int:
    summary = layer_sweep(config_from_args(args), progress=not args.quiet)
    if summary.shard is not None:
        state = "complete" if summary.complete else "incomplete: rerun the same command to finish it"
        print(f"shard {summary.shard}: {summary.n_items} items captured into {summary.out}/{ACTS_DIR} "
              f"({summary.captured} now; {state}); when every shard is complete: evprobe merge OUT "
              "SHARD_OUT... (merges the captures and runs the sweeps)")
        return 0
    if not summary.files:  # a launcher's rank > 0: rank 0 sweeps
        return 0
    print(f"{summary.n_items} items ({summary.captured} captured now); swept {', '.join(summary.swept) or '-'}; "
          f"reused {', '.join(summary.reused) or '-'}")
    for title, best in summary.best:
        where = "no nested best" if best is None else (
            f"L{best.layer}/{best.position} AUROC {auc_text(best.to_json())}")
        print(f"  {title}: {where}")
    print(f"wrote {', '.join(summary.files)} in {summary.out}")
    return 0
