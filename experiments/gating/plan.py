"""The gating plan (no model) and its preparation: the held-out split, the conditions, the capture,
the chosen layer and each regime's direction."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evprobe.bench.family import LETTERS  # the option letters, one home
from evprobe.bench.items import Item
from evprobe.bench.manifest import META_FILE as BENCH_META_FILE
from evprobe.core.errors import InputError
from evprobe.core.files import atomic_write_json
from evprobe.core.json_files import optional_json_object
from evprobe.bench.manifest import read_items
from evprobe.core.shard import Shard, shard_of_ids
from evprobe.experiments.config import ConfigError, ModelConfig, check_tiny_layers, load_model_config
from evprobe.experiments.steering_conventions import alpha_key, measure_sign
from evprobe.experiments.gating.config import GatingConfig, POSITION, REGIMES
from evprobe.core.json_types import JsonObject

# ---------------------------------------------------------------- the plan (no model)


@dataclass(frozen=True, eq=False)
class Plan:
    config: GatingConfig
    model: ModelConfig
    bench: Path
    out: Path
    captured: list[Item]  # every item of the chosen requests (captured under both regimes)
    fit_families: list[str]
    heldout_families: list[str]
    targets: list[Item]  # held-out items that are steered and scored
    conditions: list[tuple[str, str, str | None, float]] = field(default_factory=list)  # key, inference, dir, alpha

    @property
    def batch_size(self) -> int:
        return self.config.batch_size or self.model.batch_size


def split_families(items: list[Item], seed: int) -> tuple[list[str], list[str]]:
    """(fitting, held-out) family ids: per system, the first floor(n/2) of a seeded permutation fit."""
    fit, held = [], []
    by_system: dict[str, list[str]] = {}
    for it in items:
        fams = by_system.setdefault(it.system, [])
        if it.family_id not in fams:
            fams.append(it.family_id)
    for k, system in enumerate(sorted(by_system)):
        fams = sorted(by_system[system])
        order = np.random.default_rng([seed, k]).permutation(len(fams))
        n_fit = len(fams) // 2
        fit += [fams[i] for i in order[:n_fit]]
        held += [fams[i] for i in order[n_fit:]]
    return sorted(fit), sorted(held)


def conditions_for(doses: list[float]) -> list[tuple[str, str, str | None, float]]:
    out: list[tuple[str, str, str | None, float]] = []
    for inference in REGIMES:
        out.append((f"{inference}.base", inference, None, 0.0))
        for direction in REGIMES:
            for a in doses:
                out.append((f"{inference}.dir_{direction}.{alpha_key(a)}", inference, direction, a))
    return out


def make_plan(config: GatingConfig) -> Plan:
    """Check the config against the benchmark and model config; loads no model."""
    from evprobe.bench.runner import select_items

    model = load_model_config(config.model)
    bench = Path(config.bench)
    if not (bench / BENCH_META_FILE).is_file():
        raise ConfigError(f"benchmark {bench} not found (no {BENCH_META_FILE}); generate it with `evprobe generate "
                          f"--out {bench}`")
    items = select_items(read_items(bench), list(config.requests), None)
    if not items:
        raise ConfigError(f"no items of {bench} match requests {', '.join(config.requests)}")
    if config.layer != "best":
        check_tiny_layers(model, [config.layer])
    fit, held = split_families(items, config.split_seed)
    if not fit or not held:
        raise ConfigError(f"{bench} has too few families to split (fitting {len(fit)}, held out {len(held)}); "
                          "gating needs at least 2 families of some system")
    fit_items = [it for it in items if it.family_id in fit]
    if len({bool(it.resolved) for it in fit_items}) < 2:
        raise ConfigError("the fitting families have one class of resolved only; no direction can be fitted")
    targets = [it for it in items if it.family_id in held]
    if config.limit is not None:
        targets = targets[: config.limit]
    for it in targets:
        values = set((it.options or {}).values())
        if not it.options or not set(it.options) <= set(LETTERS) or not ({"undetermined", "stop"} & values):
            raise InputError(f"item {it.item_id} has options {it.options}; expected letters A-E with an "
                             "undetermined (answer) or stop (select) option")
    if config.shard is not None and not shard_of_ids(targets, Shard.parse(config.shard), held):
        raise ConfigError(f"shard {config.shard} holds none of the {len(targets)} held-out items to steer (too many "
                          "shards for their families); use fewer shards")
    return Plan(config=config, model=model, bench=bench, out=Path(config.out), captured=items, fit_families=fit,
                heldout_families=held, targets=targets, conditions=conditions_for(config.doses))


# ---------------------------------------------------------------- capture, layer, directions


def _capture(plan: Plan, regime: str, progress: bool) -> Path:
    from evprobe.experiments.capture.config import CaptureConfig
    from evprobe.experiments.capture.job import capture

    out = plan.out / "acts" / regime
    capture(CaptureConfig(model=plan.model, bench=str(plan.bench), out=str(out),
                          requests=tuple(plan.config.requests), layers="all", positions=(POSITION,), regime=regime,
                          batch_size=plan.batch_size), progress=progress)
    return out


def _fit_labels(acts: Path, fit: list[str]) -> tuple[Any, Any]:
    from evprobe.probes.captures import load_captures
    from evprobe.probes.label_sets import labels

    cs = load_captures([acts])
    ls = labels(cs, "resolved")
    return cs, ls.subset(np.isin(ls.families.astype(str), fit), reason="held-out family (gating split)")


def choose_layer(plan: Plan, acts: Path, progress: bool) -> tuple[int, JsonObject | None]:
    """The configured layer, or the nested best of a resolved sweep on the fitting families."""
    from evprobe.probes.captures import load_capture
    from evprobe.experiments.report.summary_files import SweepSummary, read_summary

    config = plan.config
    meta = load_capture(acts).meta  # validated (probes.captures): a damaged meta.json is one line
    if config.layer != "best":
        if config.layer not in meta["layers"]:
            raise ConfigError(f"layer {config.layer} is out of range: the model has layers "
                              f"0 .. {meta['n_model_layers'] - 1}")
        return int(config.layer), None
    folder = plan.out / "layer_sweep"
    n_folds = min(config.folds, len(plan.fit_families))
    settings = {"label": "resolved", "probe": "logistic", "position": POSITION, "folds": n_folds,
                "n_boot": config.n_boot, "seed": config.seed, "fit_families": plan.fit_families,
                "capture": {k: meta.get(k) for k in ("model", "layers", "selection_sha256", "items_sha256")}}
    path = folder / "settings.json"
    fix = f"delete {folder} to redo the gating sweep"
    if path.is_file() and (folder / "sweep.json").is_file() and optional_json_object(path, fix) == settings:
        best = read_summary(folder / "sweep.json", SweepSummary, fix).get("best")
    else:
        from evprobe.probes.runs import sweep_to_folder
        from evprobe.probes.sweep import SweepConfig

        cs, ls = _fit_labels(acts, plan.fit_families)
        result = sweep_to_folder(cs, ls, folder, SweepConfig(probe="logistic", folds=n_folds, seed=config.seed,
                                                             n_boot=config.n_boot, positions=(POSITION,)),
                                 progress="gating sweep" if progress else None).result
        atomic_write_json(path, settings)
        best = None if result.best is None else result.best.to_json()
    if best is None:
        raise ConfigError(f"the resolved sweep on the fitting families has no nested best layer (degenerate or too "
                          f"few families; see {folder / 'sweep.md'}); give layer: N")
    return int(best["layer"]), {k: best.get(k) for k in ("layer", "position", "auroc", "ci", "n", "n_families")}


@dataclass(frozen=True, eq=False)
class GateDirection:
    regime: str
    name: str
    vector: np.ndarray | None  # (d_model,) float64 unit toward abstaining / measuring; None: rebuilt from a meta
    mean_norm: float
    n_items: int
    sha256: str


def fit_direction(plan: Plan, regime: str, acts: Path, layer: int) -> GateDirection:
    """Mass-mean resolved direction at `layer`, position last, on the fitting families; negated
    so that + points toward unresolved (abstain / measure)."""
    from evprobe.probes.directions import fit_directions, write_directions

    cs, ls = _fit_labels(acts, plan.fit_families)
    fitted = fit_directions(cs, ls, [layer], POSITION, "massmean")
    if not fitted:  # fit_directions skips (with a warning) a layer whose two classes have identical mean states
        raise ConfigError(f"gating's {regime} direction at layer {layer}/{POSITION}: the resolved and unresolved rows "
                          f"of the fitting families have identical mean states, so there is no direction to steer; "
                          f"choose another layer (--layer) or a benchmark whose {regime} prompts differ by evidence")
    (d,) = fitted
    write_directions(plan.out / "directions" / regime, [d])
    v = measure_sign(d.provenance, d.name) * d.vector.astype(np.float64)
    v /= np.linalg.norm(v)  # stored as float32; renormalise in float64
    sha = hashlib.sha256(np.ascontiguousarray(v, dtype="<f8").tobytes()).hexdigest()
    return GateDirection(regime, d.name, v, d.mean_norm, int(d.provenance["n_items"]), sha)


def prepare(plan: Plan, progress: bool) -> tuple[int, JsonObject | None, dict[str, GateDirection]]:
    """Steps 1-4 into `plan.out` (deterministic; resumable): (layer, its choice, direction per regime)."""
    acts = {r: _capture(plan, r, progress) for r in REGIMES}
    layer, best = choose_layer(plan, acts["standard"], progress)
    return layer, best, {r: fit_direction(plan, r, acts[r], layer) for r in REGIMES}
