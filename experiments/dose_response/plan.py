"""The dose-response plan (no model): the direction at each layer, turned to point toward measuring,
the held-out target items, the conditions, and the settings a run folder pins (meta.json).

Sign, layer and held-out conventions: experiments.dose_response's docstring."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from evprobe.core.json_types import JsonObject
from evprobe.bench.items import Item
from evprobe.bench.manifest import META_FILE as BENCH_META_FILE
from evprobe.bench.manifest import read_items, read_meta
from evprobe.core.errors import InputError
from evprobe.core.json_files import parse_json
from evprobe.experiments.config import ConfigError, ModelConfig, as_dict, load_model_config
from evprobe.experiments.dose_response.controls import ControlDirection, control_directions, controls_record
from evprobe.experiments.dose_response.config import FORMAT, LETTERS, DoseResponseConfig
from evprobe.analysis.label_null import LabelFreeNull
from evprobe.experiments.dose_response.relabel import relabel_directions, relabel_record
from evprobe.experiments.steering_conventions import alpha_key, measure_sign

if TYPE_CHECKING:
    from evprobe.probes.directions import Direction

SET_KINDS = ("random", "relabel", "controls")
# Provenance fields two directions must share to be "the same direction at another layer".
SIBLING_KEYS = ("model", "position", "label", "positive", "probe", "condition", "regimes", "restriction", "d_model")


@dataclass(frozen=True)
class Condition:
    """One steering condition. kind: baseline | probe | random | controls | ablation; alpha: the
    dose (None for ablation, 0 for the baseline). `random` and `controls` are direction *sets*: one
    row per item holds the readouts of every random (or control) direction at that layer and dose,
    read in a few large forwards (experiments.dose_response.readouts). index: unused (kept for old rows)."""

    key: str
    kind: str
    layer: int | None = None
    alpha: float | None = None
    index: int | None = None

    @property
    def label(self) -> str:
        return self.kind

    @property
    def is_set(self) -> bool:
        return self.kind in SET_KINDS


@dataclass(frozen=True, eq=False)
class LayerDirection:
    """The direction used at one layer: the measuring-pointing unit vector (d_model,) float64."""

    layer: int
    name: str
    vector: np.ndarray = field(repr=False)
    mean_norm: float
    n_items: int
    sha256: str


@dataclass(frozen=True, eq=False)
class Plan:
    """Everything a run needs, checked before any model is loaded. `items` is the whole (unsharded)
    selection; `bench_families` (every family id of the benchmark) fixes the shards (core.shard)."""

    config: DoseResponseConfig
    model: ModelConfig
    bench: Path
    out: Path
    items: list[Item]
    bench_families: list[str]
    layers: list[int]
    directions: dict[int, LayerDirection]
    random: np.ndarray  # (n_random, d_model) float64 unit rows, the same at every layer
    relabel: dict[int, LabelFreeNull]  # per layer, the label-free null (experiments.dose_response.relabel; {} when off)
    controls: dict[int, list[ControlDirection]]  # per layer, the specificity controls (config order)
    conditions: list[Condition]
    name: str  # the named direction
    provenance: JsonObject  # the named direction's provenance (without the item list)
    flipped: bool  # the stored vectors point toward stopping and were negated
    norm_items: list[Item]  # the items the alpha unit is measured on (experiments.dose_response.units)
    norm_source: str  # "fit items" (select prompts of the items the directions were fitted on) or "target items"
    fit_families: list[str]  # families the used directions were fitted on
    excluded: list[str]  # of those, the ones present in the benchmark and dropped (heldout)
    d_model: int
    n_layers: int | None  # known before loading (tiny archs, capture meta), else None
    pinned: JsonObject

    @property
    def batch_size(self) -> int:
        return self.config.batch_size or self.model.batch_size


def _family_of(item_id: str, families_by_item: dict[str, str]) -> str:
    # Item ids start with their family id ("sliding-004.select.h0.low"); family ids hold no dot.
    return families_by_item.get(item_id, item_id.split(".", 1)[0])


def _known_n_layers(model: ModelConfig, direction: Direction) -> int | None:
    """The model's decoder layer count without loading it: tiny archs, or the capture's meta."""
    if model.is_tiny:
        from evprobe.hooks.tiny_models import N_LAYERS

        return N_LAYERS
    from evprobe.probes.captures import CaptureError
    from evprobe.probes.provenance import capture_paths

    try:
        captures = capture_paths(direction)  # from the directions folder, never the working directory
    except CaptureError:
        return None  # a hint only: the loaded model tells the layer count later
    for capture in captures:
        path = capture / "meta.json"
        try:
            meta = parse_json(path.read_text(), path, "")
        except (OSError, ValueError):  # not UTF-8, not JSON, nested too deep
            continue  # a hint only: the loaded model tells the layer count later
        value = meta.get("n_model_layers") if isinstance(meta, dict) else None
        if isinstance(value, int):
            return value
    return None


def _choose_direction(folder: Path, name: str | None) -> tuple[str, dict[str, Direction]]:
    from evprobe.probes.directions import read_directions

    if not folder.is_dir():
        raise ConfigError(f"directions folder {folder} not found; write one with `evprobe directions ACTS --layer L "
                          f"--out {folder}`")
    every = read_directions(folder)
    if not every:
        raise ConfigError(f"{folder} holds no directions; write some with `evprobe directions ACTS --layer L`")
    if name is None:
        return min(every), every
    if name not in every:
        names = sorted(every)
        listed = ", ".join(names[:6]) + (f", ... ({len(names)} in all)" if len(names) > 6 else "")
        raise ConfigError(f"direction {name!r} is not in {folder}; choose one of: {listed}")
    return name, every


def _layer_directions(
    named: Direction, every: dict[str, Direction], layers: tuple[int, ...] | str, n_layers: int | None,
    model_label: str, folder: Path,
) -> dict[int, Direction]:
    def signature(d: Direction) -> tuple:
        return tuple(json.dumps(d.provenance.get(k), sort_keys=True) for k in SIBLING_KEYS)

    siblings: dict[int, Direction] = {}
    for d in sorted(every.values(), key=lambda d: d.name):
        if signature(d) == signature(named):
            siblings.setdefault(d.layer, d)
    siblings[named.layer] = named  # the named one wins at its own layer
    if layers == "from-direction":
        return dict(sorted(siblings.items()))
    out = {}
    for layer in layers:
        if n_layers is not None and layer >= n_layers:
            raise ConfigError(f"layer {layer} is out of range: {model_label} has {n_layers} decoder layers; "
                              f"use 0 .. {n_layers - 1}")
        if layer not in siblings:
            raise ConfigError(f"no direction like {named.name} at layer {layer} in {folder} (it has layers "
                              f"{', '.join(map(str, sorted(siblings)))}); fit one with `evprobe directions ACTS "
                              f"--layer {layer}` and the same label, probe, position and --by")
        out[layer] = siblings[layer]
    return out


def _sha256_vector(v: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(v, dtype="<f8").tobytes()).hexdigest()


def _select_items(config: DoseResponseConfig, bench: Path, every_item: list[Item],
                  fit_families: set[str]) -> tuple[list[Item], list[str]]:
    from evprobe.bench.runner import select_items

    items = select_items(every_item, list(config.requests), None, (config.injection,))
    present = {it.family_id for it in items}
    systems = {it.system for it in items}
    for system in config.systems or ():
        if system not in systems:
            raise ConfigError(f"system {system!r} has no selected items in {bench}; choose from "
                              f"{', '.join(sorted(systems))}")
    for family in config.families or ():
        if family not in present:
            raise ConfigError(f"family {family!r} has no selected items in {bench}")
    excluded = sorted(fit_families & present) if config.heldout else []
    kept = [it for it in items
            if (config.systems is None or it.system in config.systems)
            and (config.families is None or it.family_id in config.families)
            and it.family_id not in excluded]
    if config.limit is not None:
        kept = kept[: config.limit]
    if not kept:
        why = (f" after dropping the {len(excluded)} families the directions were fitted on (heldout: true); fit "
               "them on part of the families (e.g. `evprobe directions ... --by system`) or set heldout: false"
               if excluded else "")
        raise ConfigError(f"no items left to steer in {bench}{why}")
    for it in kept:
        if not it.options or not set(it.options) <= set(LETTERS) or "stop" not in it.options.values():
            raise InputError(f"item {it.item_id} has options {it.options}; expected letters A-E with a stop option")
    return kept, excluded


def _norm_items(config: DoseResponseConfig, every_item: list[Item], chosen: dict[int, Direction],
                targets: list[Item]) -> tuple[list[Item], str]:
    """The first `norm_items` select prompts (config requests, manifest order) of the items the used
    directions were fitted on; the target items when none of those are in this benchmark. The whole
    (unsharded) selection either way, so every shard measures the same unit."""
    from evprobe.bench.runner import select_items

    fit_ids = {i for d in chosen.values() for i in d.provenance.get("items") or ()}
    fit = [it for it in select_items(every_item, list(config.requests), None) if it.item_id in fit_ids]
    if fit:
        return fit[: config.norm_items], "fit items"
    return targets[: config.norm_items], "target items"


def conditions_for(layers: Sequence[int], alphas: Sequence[float], n_random: int, ablation: bool,
                   n_controls: int = 0, n_relabel: int = 0) -> list[Condition]:
    """baseline, then per layer: each nonzero dose along the probe, the random set, the relabelled
    set and the control set (when there are any), then ablation."""
    out = [Condition("base", "baseline", None, 0.0)]
    for layer in layers:
        for alpha in sorted(alphas):
            if alpha == 0:
                continue
            out.append(Condition(f"L{layer}.probe.{alpha_key(alpha)}", "probe", layer, float(alpha)))
            if n_random:
                out.append(Condition(f"L{layer}.random.{alpha_key(alpha)}", "random", layer, float(alpha)))
            if n_relabel:
                out.append(Condition(f"L{layer}.relabel.{alpha_key(alpha)}", "relabel", layer, float(alpha)))
            if n_controls:
                out.append(Condition(f"L{layer}.controls.{alpha_key(alpha)}", "controls", layer, float(alpha)))
        if ablation:
            out.append(Condition(f"L{layer}.ablate", "ablation", layer))
    return out


def make_plan(config: DoseResponseConfig) -> Plan:
    """Check the config against the files it names (model config, benchmark, directions, layers)
    and fix the items and conditions. Loads no model; every problem is a one-line error."""
    from evprobe.experiments.pins import input_pins
    from evprobe.hooks.fingerprint import check_fitted_on
    from evprobe.hooks.direction_vectors import random_directions

    model = load_model_config(config.model)
    bench, out = Path(config.bench), Path(config.out)
    if not (bench / BENCH_META_FILE).is_file():
        raise ConfigError(f"benchmark {bench} not found (no {BENCH_META_FILE}); generate it with `evprobe generate "
                          f"--out {bench}`")
    name, every = _choose_direction(Path(config.directions), config.direction)
    named = every[name]
    prov = named.provenance
    sign = measure_sign(prov, name)
    check_fitted_on(name, prov.get("model", "unknown"), model.model, override=None, error=ConfigError)
    n_layers = _known_n_layers(model, named)
    if n_layers is not None and named.layer >= n_layers:
        raise ConfigError(f"direction {name} is at layer {named.layer}, but {model.model} has {n_layers} layers")
    chosen = _layer_directions(named, every, config.layers, n_layers, model.model, Path(config.directions))
    every_item = read_items(bench)
    family_by_item = {it.item_id: it.family_id for it in every_item}
    fit_families = {_family_of(i, family_by_item) for d in chosen.values() for i in d.provenance.get("items") or ()}
    items, excluded = _select_items(config, bench, every_item, fit_families)
    norm_items, norm_source = _norm_items(config, every_item, chosen, items)
    d_model = int(prov["d_model"])
    directions = {}
    for layer, d in chosen.items():
        if int(d.provenance["d_model"]) != d_model:
            raise ConfigError(f"direction {d.name} has width {d.provenance['d_model']}, not {d_model}")
        v = sign * d.vector.astype(np.float64)
        v /= np.linalg.norm(v)  # stored as float32 unit vectors; renormalise in float64
        directions[layer] = LayerDirection(layer, d.name, v, d.mean_norm, int(d.provenance.get("n_items", 0)),
                                           _sha256_vector(v))
    layers = sorted(directions)
    random = (random_directions(d_model, config.n_random, config.random_seed)
              if config.n_random else np.zeros((0, d_model)))  # (n_random, d_model)
    probe_vectors = {layer: d.vector for layer, d in directions.items()}
    controls = control_directions(config.controls, named, every, chosen, probe_vectors, config.random_seed)
    relabel = relabel_directions(config.n_relabel, named, chosen, probe_vectors, config.random_seed)
    if len({s.k for s in relabel.values()}) > 1:  # one set size: the rows of every layer read K directions
        raise ConfigError("the label-free null has " + ", ".join(f"{s.k} directions at L{layer}" for layer, s in
                          relabel.items()) + ": the layers' directions were fitted on different families; "
                          "fit them on the same items, or set n_relabel: 0")
    conditions = conditions_for(layers, config.alphas, config.n_random, config.ablation, len(config.controls),
                                config.n_relabel)
    bench_meta = read_meta(bench)
    pinned = {
        "format": FORMAT,
        "model": model.model,
        "revision": model.revision,
        "dtype": model.dtype,
        "attn_implementation": model.attn_implementation,
        "items_sha256": bench_meta.get("items_sha256"),
        "readout": config.readout,
        "generate_sets": None if config.generate_sets else False,  # True as None: older folders resume
        "regime": config.regime,
        "positions": config.positions,
        # alpha in raw units (config alpha_units: raw); None for norm units, so older folders resume. Not
        # "alpha_units": meta.json's key of the measured units (experiments.dose_response.units)
        "raw_alpha": True if config.alpha_units == "raw" else None,
        "schedule": "every-step",
        "random_seed": config.random_seed,
        "n_random": config.n_random,
        "n_relabel": config.n_relabel or None,  # 0 as None: a folder written before the relabelled null resumes with 0
        "controls": list(config.controls),
        "direction": name,
        "flipped": sign < 0,
        "max_new_tokens": model.max_new_tokens_direct if "generate" in config.readouts else None,
        # the direct protocol's prompt text, every image of the benchmark (limit, systems and families
        # may grow the selection on a rerun) and the model's files; dose_response adds what the loaded model tells
        **input_pins(model.model, templates=("direct", config.regime), images=(bench, every_item)),
        # level 0 is pinned as None, so a folder written before levels existed resumes at level 0 and
        # any other level is refused there (core.jobs.check_pinned: an absent key matches only None)
        "injection": config.injection or None,
        # the forward (experiments.dose_response.forward); hf as None, so older folders resume; the engine's
        # own pins (engine, vllm_version, the dtype it computes in) come once it starts
        "backend": None if config.backend == "hf" else config.backend,
    }
    return Plan(config=config, model=model, bench=bench, out=out, items=items,
                bench_families=sorted(set(family_by_item.values())), layers=layers,
                directions=directions, random=random, relabel=relabel, controls=controls, conditions=conditions,
                name=name,
                provenance={k: v for k, v in prov.items() if k != "items"}, flipped=sign < 0,
                norm_items=norm_items, norm_source=norm_source,
                fit_families=sorted(fit_families), excluded=excluded, d_model=d_model, n_layers=n_layers,
                pinned=pinned)


def layer_record(plan: Plan) -> JsonObject:
    """meta.json's `layer_directions`: per steered layer, the vector's name, sha256 and mean norm (and
    the relabelled set's sha256, which depends on the capture the direction was fitted on)."""
    out = {str(layer): {"name": d.name, "sha256": d.sha256, "mean_norm": d.mean_norm}
           for layer, d in plan.directions.items()}
    for layer, s in plan.relabel.items():
        out[str(layer)]["relabel_sha256"] = s.sha256
    return out


def check_layers(plan: Plan, recorded: JsonObject) -> None:
    """Refuse another vector (sha256 or mean norm) at a layer the folder already steered (`recorded`:
    its meta's layer_directions); a layer new to the folder only adds rows."""
    for layer, now in layer_record(plan).items():
        was = recorded.get(layer)
        if was is not None and was.get("relabel_sha256") != now.get("relabel_sha256"):
            raise ConfigError(f"{plan.out} steered layer {layer} with another relabelled null (sha256 "
                              f"{str(was.get('relabel_sha256'))[:12]}, this run {str(now.get('relabel_sha256'))[:12]}): "
                              "the capture or n_relabel changed; use another out folder")
        if was is not None and (was.get("sha256"), was.get("mean_norm")) != (now["sha256"], now["mean_norm"]):
            raise ConfigError(f"{plan.out} steered layer {layer} along {was.get('name')} (sha256 "
                              f"{str(was.get('sha256'))[:12]}, mean_norm {was.get('mean_norm')}), this run along "
                              f"{now['name']} (sha256 {now['sha256'][:12]}, mean_norm {now['mean_norm']}); use another "
                              "out folder for a different direction")


def run_meta(plan: Plan, recorded: JsonObject | None = None) -> JsonObject:
    """meta.json: the pinned settings, every layer steered in this folder so far, paths and configs."""
    return {
        **plan.pinned,
        "layer_directions": {**(recorded or {}), **layer_record(plan)},
        "controls_directions": controls_record(plan.controls),
        "relabel_directions": relabel_record(plan.relabel),
        "bench": str(plan.bench.resolve()),
        "directions_folder": str(Path(plan.config.directions).resolve()),
        "config": as_dict(plan.config),
        "model_config": as_dict(plan.model),
    }


__all__ = [
    "SET_KINDS",
    "SIBLING_KEYS",
    "Condition",
    "LayerDirection",
    "Plan",
    "check_layers",
    "conditions_for",
    "layer_record",
    "make_plan",
    "run_meta",
]
