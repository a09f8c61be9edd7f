"""`evprobe layer-sweep`: capture -> probe sweeps for sufficiency and the other labels, with
controls, transfer matrices, directions and one table of best layers.

    evprobe layer-sweep --config layer_sweep_tiny [--limit 32] [--labels resolved,history] ...

Steps (each resumable; a rerun reuses finished work):

1. capture the residual stream of the chosen requests at every chosen layer and position into
   `out/acts` (experiments.capture.capture: resumes a killed capture, refuses other settings);
2. for each label, a probe sweep (probes.runs.sweep_to_folder: what `evprobe sweep` writes) into
   `out/sweeps/<label>/` (sweep.json / .md / .png); for `resolved` also the transfer matrices of
   the configured kinds (transfer-<kind>.json / .md / .png heatmaps). A label whose folder holds a
   sweep.json and a settings.json equal to this run's settings is skipped;
3. mass-mean `resolved` directions at every captured layer, position `last`, one per system
   (probes.runs.directions_to_folder, as `evprobe directions --by system`) into `out/directions`;
   `geometry.png` there is the direction cosine heatmap (layers x systems);
4. `best_layers.json` / `best_layers.md`: per label the nested best layer and position (chosen on
   inner folds of the training families only) with its held-out AUROC, interval and n, beside the
   within-family shuffled control at that layer/position and the input-only baselines; and
   `layer_sweep.png`: held-out AUROC by layer for every label (one panel per position).

Scaling out: step 1 is the capture job (experiments.capture.CaptureJob on the job runner, so it
resumes and shards as `evprobe capture` does). `--shard K/N` runs step 1 for shard K only (whole
families) into that shard's `--out`/acts, and stores the sweep's config there
(`layer_sweep_config.json`, with `"kind": "layer-sweep"`); `evprobe merge OUT SHARD_OUT...`
(`merge_shards`) merges the shards' captures into OUT/acts (core.launch.merge_folders) and runs
steps 2-4 there, giving the files of one unsharded run. Under torchrun (`torchrun
--nproc_per_node N -m evprobe layer-sweep ...`) every process captures its shard, rank 0 merges
them into OUT/acts and runs steps 2-4 (CPU only; the other processes end after their capture).

Everything the config names (file, keys, labels, positions, transfer kinds, benchmark, requests,
layers of a tiny model) is checked before any model is loaded; each problem is one line.
"""


from __future__ import annotations

from typing import Any

# One table: public name -> the submodule defining it (imported on first use: `evprobe --help`
# builds this command's parser without the probes' or the capture's heavy imports).
_PUBLIC = {
    "LayerSweepConfig": "config", "load_layer_sweep_config": "config", "make_plan": "config", "Plan": "config",
    "check_label": "config",
    "run_capture": "steps", "run_sweep": "steps", "run_directions": "steps",
    "best_layers": "report", "markdown": "report", "plot": "report",
    "LayerSweepSummary": "job", "layer_sweep": "job", "merge_shards": "job", "add_layer_sweep_parser": "job",
    "config_from_args": "job", "run_layer_sweep": "job",
}


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{_PUBLIC[name]}"), name)


__all__ = sorted(_PUBLIC)
