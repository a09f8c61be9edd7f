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

import argparse
import json
import re
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from evprobe.core.estimate_text import estimate_text, missing_text
from evprobe.core.flags import setting
from evprobe.core.bootstrap import DEFAULT_N_BOOT, DEFAULT_SEED, INTERVAL_METHOD
from evprobe.bench.manifest import META_FILE as BENCH_META_FILE
from evprobe.core.errors import InputError
from evprobe.core.files import atomic_write_bytes, atomic_write_json
from evprobe.core.job_summary import JobSummary, MergeSummary
from evprobe.core.json_files import parse_json, read_json_object
from evprobe.core.lock import folder_lock
from evprobe.bench.manifest import read_items
from evprobe.bench.protocols import check_regime
from evprobe.experiments.config import (
    ConfigError,
    ModelConfig,
    add_experiment_parser,
    as_dict,
    check_tiny_layers,
    experiment_config,
    load_config,
    load_model_config,
    resolve_config,
)
from evprobe.probes.control_tasks import fmt_selectivity

SWEEPS_DIR = "sweeps"
ACTS_DIR = "acts"
DIRECTIONS_DIR = "directions"
SETTINGS_FILE = "settings.json"
SHARD_CONFIG_FILE = "layer_sweep_config.json"  # a --shard folder's config (evprobe merge runs the sweep)
KIND = "layer-sweep"  # recorded in SHARD_CONFIG_FILE; `evprobe merge` dispatches on it (experiments.registry)
JSON_FILE = "best_layers.json"
MD_FILE = "best_layers.md"
PNG_FILE = "layer_sweep.png"
DEFAULT_LABELS = ("resolved", "history", "threshold_level", "missing_property")
# Transfer kinds of probes.transfer that work on one capture (regime needs several captures).
TRANSFER_KINDS = ("system", "initial", "pairs", "request")
# Labels computed from the index rows alone (behavioural labels need a run's records: out of scope here).
DERIVED = ("missing_property", "initial")
_SAFE = re.compile(r"[^A-Za-z0-9._=+-]")


def _index_fields() -> tuple[str, ...]:
    from evprobe.experiments.capture.config import INDEX_FIELDS

    return INDEX_FIELDS


@dataclass(frozen=True)
class LayerSweepConfig:
    """One layer sweep (configs/experiments/layer_sweep*.yaml); every field is also a flag."""

    model: str | ModelConfig = setting(help="model config name or YAML, tiny:<arch> or hub id (or an inline mapping)")
    bench: str = setting(help="benchmark folder")
    out: str = setting(help="output folder (acts/, sweeps/, directions/, best_layers.*)")
    requests: tuple[str, ...] = setting(("select", "answer_initial"), "request types captured and probed")
    positions: tuple[str, ...] = setting(("last", "text_mean", "image_mean"), "captured token positions")
    layers: tuple[int, ...] | Literal["all"] = setting("all", "all, or layer numbers, e.g. 0,8,16")
    labels: tuple[str, ...] = setting(
        DEFAULT_LABELS, "labels: index fields, missing_property, initial or name=value, e.g. resolved,system=sliding")
    probe: str = setting("logistic", "a registered probe: logistic (TRAPS), massmean, centroid or one of yours "
                                     "(evprobe.probes.register_probe)")
    probe_params: tuple[str, ...] = setting((), "the probe's parameters as NAME=VALUE, e.g. C=0.5 (any its class "
                                                "declares; default: the class's defaults)")
    transfer: tuple[str, ...] = setting(("system", "pairs", "request"), "kinds of transfer matrix for resolved")
    regime: str = setting("standard", "prompt regime of the capture: standard, guided or json")
    folds: int = setting(5, "cross-validation folds of whole families")
    n_boot: int = setting(DEFAULT_N_BOOT, "family bootstrap resamples")
    seed: int = setting(DEFAULT_SEED, "seed of folds, shuffles and bootstrap")
    limit: int | None = setting(None, "only the first N selected items")
    batch_size: int | None = setting(None, "rows per forward (null: the model config's)")
    shard: str | None = setting(None, "capture only shard K/N (0-based, whole families) into this out; `evprobe "
                                "merge OUT SHARD_OUT...` then merges the captures and runs the sweeps. Under torchrun "
                                "the rank picks it")

    def __post_init__(self) -> None:
        from evprobe.core.shard import Shard
        from evprobe.experiments.capture.config import check_positions

        if self.shard is not None:
            Shard.parse(self.shard)  # a bad K/N fails here, naming the fix
        if not self.requests:
            raise ValueError("key 'requests' is empty; e.g. [select, answer_initial]")
        if not self.positions:
            raise ValueError("key 'positions' is empty; e.g. [last, text_mean, image_mean]")
        try:
            check_positions(self.positions)
        except ValueError as err:
            raise ValueError(f"key 'positions': {str(err).removeprefix('--positions: ')}") from None
        if self.layers != "all" and (not self.layers or any(x < 0 for x in self.layers)
                                     or len(set(self.layers)) != len(self.layers)):
            raise ValueError(f"key 'layers' must be 'all' or distinct layer numbers >= 0, got {self.layers}")
        if not self.labels:
            raise ValueError("key 'labels' is empty; e.g. [resolved]")
        for label in self.labels:
            check_label(label)
        if len({_label_dir(x) for x in self.labels}) != len(self.labels):
            raise ValueError(f"key 'labels' repeats a label ({', '.join(self.labels)})")
        from evprobe.probes.registry import probe_names

        if self.probe not in probe_names():
            raise ValueError(f"key 'probe' is {self.probe!r}; choose from {', '.join(probe_names())}")
        from evprobe.probes.registry import ProbeSpec

        try:
            ProbeSpec.of(self.probe, self.probe_params)
        except (TypeError, ValueError) as err:
            raise ValueError(f"key 'probe_params': {err}") from None
        for kind in self.transfer:
            if kind not in TRANSFER_KINDS and kind not in _index_fields():
                raise ValueError(f"key 'transfer' has unknown kind {kind!r}; choose from {', '.join(TRANSFER_KINDS)} "
                                 "or an index field (regime needs two captures: use evprobe sweep)")
        check_regime(self.regime)
        if self.folds < 2:
            raise ValueError(f"key 'folds' must be 2 or more, got {self.folds}")
        if self.n_boot < 1:
            raise ValueError(f"key 'n_boot' must be a positive integer, got {self.n_boot}")
        for key in ("limit", "batch_size"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ValueError(f"key {key!r} must be a positive integer or null, got {value}")


def check_label(label: str) -> str:
    """The label's field name, after checking it is an index field, a derived label, or name=value."""
    name, eq, value = label.partition("=")
    known = (*_index_fields(), *DERIVED)
    if name not in known:
        raise ValueError(f"key 'labels' has unknown label {label!r}; use an index field, missing_property, initial "
                         f"or name=value ({', '.join(known)})")
    if eq and not value:
        raise ValueError(f"key 'labels' has {label!r} with an empty value; write name=value, e.g. system=sliding")
    return name


def _label_dir(label: str) -> str:
    return _SAFE.sub("_", label)


def load_layer_sweep_config(ref: str | Path, overrides: dict[str, Any] | None = None) -> LayerSweepConfig:
    """The config a path or a bare name in configs/experiments names, with CLI overrides applied."""
    return load_config(LayerSweepConfig, resolve_config(ref, "experiments"), overrides)


# ---------------------------------------------------------------- the plan (no model)


@dataclass(frozen=True)
class Plan:
    config: LayerSweepConfig
    model: ModelConfig
    bench: Path
    out: Path
    n_items: int

    @property
    def acts(self) -> Path:
        return self.out / ACTS_DIR

    @property
    def batch_size(self) -> int:
        return self.config.batch_size or self.model.batch_size


def make_plan(config: LayerSweepConfig) -> Plan:
    """Check the config against the files it names; loads no model."""
    from evprobe.bench.runner import select_items

    model = load_model_config(config.model)
    bench = Path(config.bench)
    if not (bench / BENCH_META_FILE).is_file():
        raise ConfigError(f"benchmark {bench} not found (no {BENCH_META_FILE}); generate it with `evprobe generate "
                          f"--out {bench}`")
    try:
        items = select_items(read_items(bench), list(config.requests), config.limit)
    except InputError as err:
        raise ConfigError(f"key 'requests': {err}") from None
    if not items:
        raise ConfigError(f"no items of {bench} match requests {', '.join(config.requests)}")
    if "image_mean" in config.positions and any(not it.images for it in items):
        raise ConfigError("position image_mean needs images; drop it or the image-less requests")
    if config.layers != "all":
        check_tiny_layers(model, config.layers)
    return Plan(config=config, model=model, bench=bench, out=Path(config.out), n_items=len(items))


# ---------------------------------------------------------------- the steps


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


def _capture_meta(plan: Plan) -> dict[str, Any]:
    from evprobe.probes.captures import load_capture

    return load_capture(plan.acts).meta  # validated (probes.captures): a damaged meta.json is one line


def sweep_settings(plan: Plan, label: str) -> dict[str, Any]:
    """What a finished sweep of `label` depends on: equal settings -> the sweep is reused."""
    meta, c = _capture_meta(plan), plan.config
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


def _same_settings(folder: Path, settings: dict[str, Any], needed: tuple[str, ...]) -> bool:
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

    folder = plan.out / SWEEPS_DIR / _label_dir(label)
    settings = sweep_settings(plan, label)
    needed = ("sweep.json", "sweep.png", *(f"transfer-{k}.png" for k in settings["transfer"]))
    if _same_settings(folder, settings, needed):
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

    meta = _capture_meta(plan)
    position = "last" if "last" in meta["positions"] else meta["positions"][0]
    folder = plan.out / DIRECTIONS_DIR
    settings = {"label": "resolved", "probe": "massmean", "position": position, "by": "system",
                "layers": meta["layers"], "seed": plan.config.seed,
                "capture": {k: meta.get(k) for k in ("model", "regime", "selection_sha256", "items_sha256")}}
    if _same_settings(folder, settings, ("directions.json", "geometry.png")):
        return False
    (folder / SETTINGS_FILE).unlink(missing_ok=True)
    directions_to_folder([plan.acts], "resolved", folder, meta["layers"], position=position, probe="massmean",
                         by="system", seed=plan.config.seed)
    atomic_write_json(folder / SETTINGS_FILE, settings)
    return True


# ---------------------------------------------------------------- the best-layer table


def _row_at(sweep: dict[str, Any], layer: int, position: str) -> dict[str, Any] | None:
    return next((r for r in sweep["rows"] if r["layer"] == layer and r["position"] == position), None)


def best_layers(plan: Plan) -> dict[str, Any]:
    """Per label: nested best layer/position with held-out AUROC, interval and n; the control tasks
    (mean, range, k) and the selectivity at that layer/position; the one-hot cell and input-only
    baselines; the optimistic (test-fold) maximum."""
    from evprobe.experiments.summary_files import SweepSummary, read_summary

    out = []
    for label in plan.config.labels:
        folder = plan.out / SWEEPS_DIR / _label_dir(label)
        sweep = read_summary(folder / "sweep.json", SweepSummary, f"delete {folder} to redo that sweep")
        best = sweep.get("best")
        row = _row_at(sweep, best["layer"], best["position"]) if best else None
        out.append({
            "label": label,
            "title": f"{sweep['label']}={sweep['positive']}",
            "n": sweep["n"],
            "n_families": sweep["n_families"],
            "degenerate": sweep["degenerate"],
            "best": None if best is None else {**{k: best[k] for k in ("layer", "position", "auroc", "ci", "n",
                                                                        "accuracy", "accuracy_ci")},
                                               "n_families": best.get("n_families")},  # None: an older sweep.json
            "control_tasks": None if row is None or not row.get("control_tasks") else {**row["control_tasks"],
                                                                                       "n": row["n"]},
            "selectivity": row.get("selectivity") if row is not None and isinstance(row.get("selectivity"), dict)
            else None,  # a sweep.json written before control tasks has a bare number (another meaning) or none
            # the row's test against chance and the label against the design's factors (None: an older sweep.json)
            "chance_test": None if row is None else row.get("chance_test"),
            "factors": None if row is None else row.get("factors"),
            "cell_baseline": sweep.get("cell_baseline"),
            "baselines": sweep["baselines"],
            "naive_best": sweep.get("naive_best"),
            "sweep": str(folder / "sweep.json"),
            "warnings": sweep.get("warnings", []),
        })
    meta = _capture_meta(plan)
    return {
        "model": meta.get("model"),
        "model_name": plan.model.name,
        "regime": meta.get("regime"),
        "requests": list(plan.config.requests),
        "layers": meta.get("layers"),
        "positions": meta.get("positions"),
        "n_items": meta.get("n_items"),
        "probe": plan.config.probe,
        "folds": plan.config.folds,
        "n_boot": plan.config.n_boot,
        "seed": plan.config.seed,
        "interval_method": INTERVAL_METHOD,
        "labels": out,
        "config": as_dict(plan.config),
    }


def _auc(record: dict[str, Any]) -> str:
    """A sweep.json row's or best's AUROC through the one formatter (core.estimate_text)."""
    from evprobe.probes.sweep_row import auroc_json

    return estimate_text(auroc_json(record), 3)


def _chance_cell(test: dict[str, Any] | None) -> str:
    """`yes (0.01)` / `no (0.49)`: the row's verdict against chance with its adjusted p."""
    if not test or test.get("p_adjusted") is None:
        return missing_text("not tested")
    return f"{'yes' if test.get('decodable') else 'no'} ({test['p_adjusted']:.2g})"


def _factors_cell(factors: dict[str, Any] | None) -> str:
    """`+0.000 [-0.025, +0.025] vs system: not singled out`: the label minus the closest design factor."""
    readings = (factors or {}).get("factors") or []
    if not readings:
        return missing_text("no factors")
    c = min(readings, key=lambda r: r["difference"])
    verdict = "singled out" if factors.get("singled_out") else "not singled out"  # type: ignore[union-attr]
    return f"{estimate_text({'value': c['difference'], 'ci': c['ci']}, 3, sign=True, n=False)} vs {c['field']}: {verdict}"


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# Layer sweep: {result['model_name']} ({result['model']})",
        "",
        (f"- Capture: {', '.join(result['requests'])} prompts, regime {result['regime']}, n={result['n_items']} items, "
        f"layers {result['layers'][0]}..{result['layers'][-1]} ({len(result['layers'])}), positions "
        f"{', '.join(result['positions'])}."),
        (f"- Probe: {result['probe']}, {result['folds']} folds of whole families; best layer/position chosen on inner "
        "folds of the training families only (nested) and scored on the held-out families' out-of-fold decisions."),
        ("- Control tasks (Hewitt and Liang): random balanced functions of the prompt's cell (system x initial property "
        "x history x threshold level) fitted like the probe, at the best layer/position: their mean AUROC [min, max] "
        "(k tasks); selectivity = held-out AUROC there - that mean, interval [AUROC - max control, AUROC - min control] "
        "(95% at k = 39 when the label decodes like one more cell function; selective = decoded better than every "
        "random function of the cell). Decodable there: that row's within-family permutation test against chance, "
        "adjusted over the sweep's layer/positions (step-down maxT; the AUROC interval is no test). Design factors: "
        "the cell fields decoded on the same rows with the same probe and folds; the label minus the closest one, "
        "and singled out when the label is decoded better than each. Baselines: "
        "logistic models on the prompt inputs alone, out of fold: the one-hot cell (~1.0 for sufficiency by "
        "construction: it is a function of the cell), and history, threshold level, both (at chance by design)."),
        f"- Intervals: {result['interval_method']}; B={result['n_boot']}, seed {result['seed']}; n = labelled items.",
        "",
        ("| label | n (families) | nested best | held-out AUROC | decodable there (p adjusted) | control tasks mean "
        "[min, max] (k) | selectivity | vs design factors | one-hot cell | history only | threshold only | "
        "history+threshold | max over test folds (optimistic) |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["labels"]:
        b, ctl, base = r["best"], r["control_tasks"], r["baselines"]
        sel = r["selectivity"] or {}
        where = "DEGENERATE" if r["degenerate"] else ("none" if b is None else f"L{b['layer']} / {b['position']}")
        naive = r["naive_best"]
        naive_text = missing_text() if not naive else (f"L{naive.get('layer')} / {naive.get('position')}: "
                                             f"{_auc(naive)}")
        lines.append("| " + " | ".join([
            r["title"], f"{r['n']} ({r['n_families']})", where,
            missing_text("n=0") if b is None else _auc(b),
            _chance_cell(r.get("chance_test")),
            missing_text() if ctl is None else f"{ctl['mean']:.3f} [{ctl['min']:.3f}, {ctl['max']:.3f}] (k={ctl['k']}, n={ctl['n']})",
            fmt_selectivity(sel),
            _factors_cell(r.get("factors")),
            estimate_text(r["cell_baseline"], 3),
            *(estimate_text(e, 3) for e in
              (base.get("history"), base.get("threshold"), base.get("history_threshold"))),
            naive_text,
        ]) + " |")
    warnings = [f"- {r['title']}: {w}" for r in result["labels"] for w in r["warnings"]]
    if warnings:
        lines += ["", "## Warnings", "", *warnings]
    lines += ["", ("Per-label detail: `sweeps/<label>/sweep.md` (every layer and position), transfer matrices in "
              "`sweeps/resolved/transfer-<kind>.md/.png`, direction cosines in `directions/geometry.md/.png`.")]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], out: Path) -> Path:
    """Held-out AUROC by layer per label (one panel per position), 95% interval bands; the control
    tasks' mean dashed with their min-max range as a hatched band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    positions = result["positions"]
    fig, axes = plt.subplots(1, len(positions), figsize=(5.0 * len(positions), 4.0), squeeze=False, sharey=True)
    for pi, position in enumerate(positions):
        ax = axes[0][pi]
        for li, r in enumerate(result["labels"]):
            sweep = read_json_object(Path(r["sweep"]), "run the layer sweep again into a new --out")[0]
            rows = [x for x in sweep["rows"] if x["position"] == position]
            rows.sort(key=lambda x: x["layer"])
            if not rows:
                continue
            nan = (lambda v: np.nan if v is None else v)
            layers = [x["layer"] for x in rows]
            color = f"C{li}"
            ax.plot(layers, [nan(x["auroc"]) for x in rows], "o-", color=color, label=f"{r['title']} (n={r['n']})")
            ax.fill_between(layers, [nan(x["ci"][0]) for x in rows], [nan(x["ci"][1]) for x in rows], color=color,
                            alpha=0.2)
            ctl = [x.get("control_tasks") or {} for x in rows]
            if any(ctl):
                ax.plot(layers, [nan(c.get("mean")) for c in ctl], "--", color=color, alpha=0.6)
                ax.fill_between(layers, [nan(c.get("min")) for c in ctl], [nan(c.get("max")) for c in ctl],
                                facecolor="none", edgecolor=color, hatch="///", alpha=0.35, linewidth=0)
        ax.axhline(0.5, color="0.6", lw=0.8)
        ax.set_title(f"position {position}", fontsize=10)
        ax.set_xlabel("decoder layer (index)")
        ax.set_ylabel("held-out AUROC (out of fold; dashed, hatched: control tasks mean, range)")
        ax.set_ylim(0.0, 1.02)
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"Probe sweep ({result['probe']}): {result['model_name']}, regime {result['regime']}, "
                 f"n={result['n_items']} items; bands: 95% family-bootstrap intervals", fontsize=10)
    fig.tight_layout()
    path = out / PNG_FILE
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


# ---------------------------------------------------------------- the job


@dataclass(frozen=True)
class LayerSweepSummary:
    """What `layer_sweep` did. captured: capture rows computed in this session; shard: the --shard
    K/N it captured (then it swept nothing: `evprobe merge` sweeps); complete: every capture row of
    the selection is there; swept / reused: the labels swept now / found swept; best: (label title,
    its nested best layer record or None); files: what it wrote in `out` (none on a launcher's
    rank > 0, which only captures)."""

    out: Path
    n_items: int
    captured: int
    shard: str | None
    complete: bool
    swept: tuple[str, ...] = ()
    reused: tuple[str, ...] = ()
    directions_fitted: bool = False
    best: tuple[tuple[str, dict[str, Any] | None], ...] = ()
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
    atomic_write_bytes(plan.out / JSON_FILE, (json.dumps(result, indent=1) + "\n").encode("utf-8"))
    atomic_write_bytes(plan.out / MD_FILE, markdown(result).encode("utf-8"))
    plot(result, plan.out)
    return LayerSweepSummary(
        out=plan.out, n_items=plan.n_items, captured=captured, shard=None, complete=True, swept=tuple(swept),
        reused=tuple(reused), directions_fitted=directions_fitted,
        best=tuple((r["title"], r["best"]) for r in result["labels"]),
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
            f"L{best['layer']}/{best['position']} AUROC {_auc(best)}")
        print(f"  {title}: {where}")
    print(f"wrote {', '.join(summary.files)} in {summary.out}")
    return 0


__all__ = ["LayerSweepConfig", "LayerSweepSummary", "add_layer_sweep_parser", "best_layers", "layer_sweep", "load_layer_sweep_config",
           "make_plan", "merge_shards", "run_layer_sweep"]
