"""Steps 1-3 of the layer sweep: the capture job, a probe sweep per label, the resolved directions.
A step whose folder holds a settings.json equal to this run's settings is reused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evprobe.core.files import atomic_write_json
from evprobe.core.job_summary import JobSummary
from evprobe.core.json_files import parse_json
from evprobe.experiments.layer_sweep.config import (
    DIRECTIONS_DIR,
    SETTINGS_FILE,
    SWEEPS_DIR,
    Plan,
    check_label,
    label_dir,
)
from evprobe.core.json_types import JsonObject


def capture_config(plan: Plan):
    """The CaptureConfig of step 1 (the plan's model, layers and positions, into OUT/acts)."""
    from evprobe.experiments.capture.config import CaptureConfig

    c = plan.config
    layers = "all" if c.layers == "all" else ",".join(map(str, c.layers))
    return CaptureConfig(model=plan.model, bench=str(plan.bench), out=str(plan.acts),
                         requests=tuple(c.requests), layers=layers, positions=tuple(c.positions),
                         regime=c.regime, limit=c.limit, batch_size=plan.batch_size, shard=c.shard)


def run_capture(plan: Plan, progress: bool) -> JobSummary[Any] | None:
    """Step 1, the capture job (resumable, `--shard K/N` through the runner). Under a launcher every
    process captures its shard and rank 0 merges them; then rank 0 reads the complete capture (no
    model load) and the other ranks get None (they stop here)."""
    from evprobe.core.launch import launched_shard
    from evprobe.experiments.capture.job import CaptureJob, capture
    from evprobe.experiments.distributed import data_parallel

    config = capture_config(plan)
    if data_parallel(config, lambda c: capture(c, progress=progress), unit="rows", job=CaptureJob):
        launched = launched_shard()
        return None if launched is not None and launched.k != 0 else capture(config, progress=False)
    return capture(config, progress=progress)


def capture_meta(plan: Plan) -> JsonObject:
    from evprobe.probes.captures import load_capture

    return load_capture(plan.acts).meta  # validated (probes.captures): a damaged meta.json is one line


def sweep_settings(plan: Plan, label: str) -> JsonObject:
    """What a finished sweep of `label` depends on: equal settings -> the sweep is reused."""
    meta, c = capture_meta(plan), plan.config
    return {
        "label": label,
        "probe": c.probe,
        # only when given, so a sweep folder written before the field existed is still reused
        **({"probe_params": list(c.probe_params)} if c.probe_params else {}),
        "folds": c.folds,
        "n_boot": c.n_boot,
        "seed": c.seed,
        "transfer": list(c.transfer) if check_label(label) == "resolved" else [],
        "capture": {k: meta.get(k) for k in ("model", "revision", "layers", "positions", "regime", "selection_sha256",
                                             "items_sha256")},
    }


def same_settings(folder: Path, settings: JsonObject, needed: tuple[str, ...]) -> bool:
    path = folder / SETTINGS_FILE
    if not path.is_file() or not all((folder / n).is_file() for n in needed):
        return False
    try:
        return parse_json(path.read_text(), path, "") == json.loads(json.dumps(settings))
    except ValueError:  # not UTF-8, not JSON, nested too deep: not the same settings
        return False


def run_sweep(plan: Plan, label: str, progress: bool) -> bool:
    """Sweep one label (and its transfer matrices); False when a finished sweep was reused."""
    from evprobe.probes.runs import sweep_to_folder
    from evprobe.probes.sweep import SweepConfig

    folder = plan.out / SWEEPS_DIR / label_dir(label)
    settings = sweep_settings(plan, label)
    needed = ("sweep.json", "sweep.png", *(f"transfer-{k}.png" for k in settings["transfer"]))
    if same_settings(folder, settings, needed):
        return False
    (folder / SETTINGS_FILE).unlink(missing_ok=True)  # stale until the sweep below finishes
    c = plan.config
    sweep_to_folder([plan.acts], label, folder, SweepConfig(probe=c.probe, probe_params=c.probe_params,
                                                           folds=c.folds, seed=c.seed, n_boot=c.n_boot),
                    transfer=settings["transfer"], progress="sweep" if progress else None)
    atomic_write_json(folder / SETTINGS_FILE, settings)  # written last: marks the folder finished
    return True


def run_directions(plan: Plan) -> bool:
    """Mass-mean resolved directions per system at every captured layer (position last, or the
    first captured position); False when the same directions are already there."""
    from evprobe.probes.runs import directions_to_folder

    meta = capture_meta(plan)
    position = "last" if "last" in meta["positions"] else meta["positions"][0]
    folder = plan.out / DIRECTIONS_DIR
    settings = {"label": "resolved", "probe": "massmean", "position": position, "by": "system",
                "layers": meta["layers"], "seed": plan.config.seed,
                "capture": {k: meta.get(k) for k in ("model", "regime", "selection_sha256", "items_sha256")}}
    if same_settings(folder, settings, ("directions.json", "geometry.png")):
        return False
    (folder / SETTINGS_FILE).unlink(missing_ok=True)
    directions_to_folder([plan.acts], "resolved", folder, meta["layers"], position=position, probe="massmean",
                         by="system", seed=plan.config.seed)
    atomic_write_json(folder / SETTINGS_FILE, settings)
    return True
