"""`evprobe dose-response`: steer a model along a probe direction on held-out families, layer x dose.

    evprobe dose-response --config dose_response_tiny [--limit 8] [--alphas=-1,0,1] ...

A direction written by `evprobe directions` (fitted on some families, e.g. one system or one kind
of pair) is added at one decoder layer, at every token position and on every generated token, to
the `select` prompts of the families it was NOT fitted on, over a grid of layers x doses; beside
it run seeded random unit directions (the null band) and the projection of the direction out of
that layer (ablation). Readouts per item and condition: the option letters' next-token log-probs
(default; the argmax letter is the choice) and/or the greedy direct-protocol reply read by the
runner's parser. Outputs per system and per resolved / unresolved group: stop rate, rate of
choosing the missing property's test, minimum-cost accuracy, mean log-odds of stop against the
best other letter, and the rate of useless tests (free fall, or repeating the initial test: no
belief justifies them), each with a family-bootstrap interval and its n.

Conventions (the report repeats them):

- **Sign.** Doses are stated toward *measuring*: positive alpha moves the residual toward
  "the evidence is not enough" (unresolved), negative alpha toward "enough, stop". A stored
  direction points toward its positive class (probes.directions): `resolved=True` (and
  `stopped=True`, `committed=True`) point toward stopping and are negated here;
  `resolved=False` (TRAPS's void - control) is used as stored. Other labels are refused. So the
  issue's "+alpha on resolved items to induce measuring, -alpha on unresolved items to induce
  stopping" are the two halves of one grid: every dose runs on every item and the report reads
  the resolved group at +alpha and the unresolved group at -alpha.
- **Units.** alpha is in multiples of the layer's mean residual norm at the direction's position
  over the items it was fitted on (`mean_norm` in directions.json): the raw vector added is
  alpha * mean_norm * unit direction (hooks.steer.Steering.from_norm_units). Random directions
  get the same raw size at the same layer.
- **Layers.** Each steered layer uses the direction fitted *at that layer* with the same model,
  label, probe, position, condition, regimes and restriction as the named one (`evprobe
  directions ... --layer 8,16` writes such a set); `layers: from-direction` means every layer the
  folder has such a direction for. A layer with none is an error naming the layers there are.
- **Held-out families.** The families of every item id in the used directions' provenance
  (`items`) are excluded from the target set (`heldout: true`, the default); `systems` and
  `families` filter what remains, then `limit` keeps the first N items in manifest order.
  `heldout: false` steers in-sample and the report says so.
- **alpha = 0** is the unsteered model: computed once per item (no hooks at all) and shared by
  every layer and direction kind; adding 0 * v is exact, so this is what a zero-dose hook gives.
- **Null band.** n_random seeded Gaussian unit directions (hooks.steer.random_directions, the same
  vectors at every layer) at the same raw doses. Per (layer, dose, group, system, measure) the
  band is the mean of their point estimates and the min-max envelope of those point estimates
  (not an interval: with k directions it is the range of k values; k and each estimate's n are
  reported).
- **Ablation** projects the direction out of that one layer's output (hooks.ablate), every
  position and step; it has no dose and is drawn as a horizontal line with its interval.
- **Choices from log-probs.** The choice is the argmax over the item's option letters (ties go
  to the earlier letter); `stop` = that letter's action is stop; `missing test` = it is the test
  of the property the initial test did not measure (undefined on `no_initial_test` variants,
  which leave both unknown; those items are out of that denominator); `minimum-cost` = it equals
  the item's reference action. Log-odds = log p(stop letter) - max log p(other letters), in nats.
  With `readout: generate` the direct-protocol reply (greedy, the model config's direct token
  limit) is parsed by bench.parse.parse_reply; invalid replies stay in every denominator (never
  stop, never correct) and their share is reported.
- **Intervals.** bench.bootstrap.FamilyBootstrap over the families of the selected items (one
  resample matrix for every number of a run, so differences to alpha = 0 are paired); per-system
  rows use the same resamples. Every number is printed with its interval and n (items).

Sharding: `--shard K/N` steers only the target items of shard K's families (bench.shard; after
the held-out filter and `limit`, so the N shards together hold exactly the unsharded selection);
`evprobe merge OUT SHARD_DIR...` writes results.jsonl in a single run's order, meta.json and every
report of the whole experiment.

Files in `out`: `meta.json` (what the run is; a rerun with other pinned settings is refused),
`results.jsonl` (one row per item x condition, appended with an fsync per batch and condition; a
rerun skips finished rows and cuts a torn last line), `dose_response.json` (all aggregates),
`dose_response.md` (tables), and curves `<measure>.png` (plus `<measure>.<system>.png` with
several systems; `generate.` prefix for the generated-reply readout).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from bench.argtypes import float_list, int_list_or, integer, str_list
from bench.bootstrap import (
    DEFAULT_N_BOOT,
    DEFAULT_SEED,
    INTERVAL_METHOD,
    FamilyBootstrap,
    percentile_interval,
)
from bench.items import VARIANTS, Item
from bench.manifest import META_FILE as BENCH_META_FILE
from bench.manifest import (
    BenchError,
    atomic_write_bytes,
    atomic_write_json,
    read_items,
    read_log_lines,
)
from bench.progress import Progress, progress_label
from bench.protocols import build_prompt, check_regime
from bench.shard import Shard, select_shard
from experiments.config import (
    ConfigError,
    ModelConfig,
    add_model_override_arguments,
    apply_model_overrides,
    as_dict,
    load_config,
    load_model_config,
    resolve_config,
)
from experiments.grid import fill_grid, grid_order

if TYPE_CHECKING:
    from probes.directions import Direction

RESULTS_FILE = "results.jsonl"
RUN_META_FILE = "meta.json"
JSON_FILE = "dose_response.json"
MD_FILE = "dose_response.md"
FORMAT = "evprobe-dose-response/1"
DEFAULT_ALPHAS = (-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0)
LETTERS = ("A", "B", "C", "D", "E")
READOUTS = ("logprobs", "generate")
GROUPS = ("resolved", "unresolved", "all")
SELECT_TYPES = ("select", *VARIANTS, "variants")
# Labels whose positive class True means "the evidence is enough / the model stops".
TOWARD_STOP_LABELS = ("resolved", "stopped", "committed")
# Provenance fields two directions must share to be "the same direction at another layer".
SIBLING_KEYS = ("model", "position", "label", "positive", "probe", "condition", "regimes", "restriction", "d_model")
MEASURES: dict[str, tuple[str, ...]] = {
    "logprobs": ("stop_rate", "missing_test_rate", "useless_test_rate", "min_cost_accuracy", "log_odds"),
    "generate": ("stop_rate", "missing_test_rate", "useless_test_rate", "min_cost_accuracy", "invalid_rate"),
}
MEASURE_TITLES = {
    "stop_rate": ("stop rate", "stop rate (fraction of items)"),
    "missing_test_rate": ("missing-property test rate", "missing-property test chosen (fraction of items)"),
    "useless_test_rate": ("useless test rate", "test that reveals nothing unknown: repeat or free fall (fraction)"),
    "min_cost_accuracy": ("minimum-cost accuracy", "minimum-cost choice (fraction of items)"),
    "log_odds": ("log-odds stop vs best other letter", "log p(stop) - max log p(other) (nats)"),
    "invalid_rate": ("invalid replies", "invalid replies (fraction of items)"),
}
RATE_MEASURES = ("stop_rate", "missing_test_rate", "useless_test_rate", "min_cost_accuracy", "invalid_rate")
ALPHA_AXIS = "alpha (multiples of mean residual norm; + = toward measuring)"


# ---------------------------------------------------------------- the config


@dataclass(frozen=True)
class DoseResponseConfig:
    """One dose-response experiment (configs/experiments/dose_response*.yaml; CLI flags override).

    model: a model config name (configs/models), a YAML path, tiny:<arch> or a hub id; or a
        ModelConfig mapping inline.
    bench: the benchmark folder; directions: a folder written by `evprobe directions`;
    direction: the name of the direction to use (None: the first name in sorted order).
    layers: decoder layers to steer, or "from-direction" (every layer with a sibling direction).
    alphas: doses in multiples of the layer's mean residual norm; + = toward measuring.
    n_random, random_seed: the random-direction null band; ablation: also project the direction out.
    requests: select request types / select variant names; systems, families: target filters;
    heldout: drop the families the directions were fitted on; limit: first N items after that.
    readout: logprobs (option letters' next-token log-probs), generate (greedy direct reply), both.
    positions: steer every prompt position ("all") or the last one; generated tokens always.
    regime: prompt regime (standard, guided, json); batch_size: None = the model config's.
    out: output folder; n_boot, seed: the family bootstrap.
    """

    model: str | ModelConfig
    bench: str
    directions: str
    out: str
    direction: str | None = None
    layers: tuple[int, ...] | Literal["from-direction"] = "from-direction"
    alphas: tuple[float, ...] = DEFAULT_ALPHAS
    n_random: int = 3
    random_seed: int = 0
    ablation: bool = True
    requests: tuple[str, ...] = ("select",)
    systems: tuple[str, ...] | None = None
    families: tuple[str, ...] | None = None
    heldout: bool = True
    limit: int | None = None
    readout: Literal["logprobs", "generate", "both"] = "logprobs"
    positions: Literal["all", "last"] = "all"
    regime: str = "standard"
    batch_size: int | None = None
    n_boot: int = DEFAULT_N_BOOT
    seed: int = DEFAULT_SEED
    shard: str | None = None  # "K/N": only the items of shard K's families (bench.shard); merge with `evprobe merge`

    def __post_init__(self) -> None:
        if self.shard is not None:
            Shard.parse(self.shard)  # a bad K/N fails here, naming the fix
        if not self.alphas:
            raise ValueError("key 'alphas' is empty; give at least one dose, e.g. [-1, 0, 1]")
        if not all(math.isfinite(a) for a in self.alphas):
            raise ValueError(f"key 'alphas' must hold finite numbers, got {list(self.alphas)}")
        keys = [alpha_key(a) for a in self.alphas]
        if len(set(keys)) != len(keys):
            raise ValueError(f"key 'alphas' repeats a dose ({', '.join(keys)}); give each once")
        if self.layers != "from-direction":
            if not self.layers:
                raise ValueError("key 'layers' is empty; give layer numbers or from-direction")
            if any(layer < 0 for layer in self.layers) or len(set(self.layers)) != len(self.layers):
                raise ValueError(f"key 'layers' must be distinct layer numbers >= 0, got {list(self.layers)}")
        if self.readout not in ("logprobs", "generate", "both"):
            raise ValueError(f"key 'readout' is {self.readout!r}; choose from logprobs, generate, both")
        if self.positions not in ("all", "last"):
            raise ValueError(f"key 'positions' is {self.positions!r}; choose from all, last")
        if self.n_random < 0:
            raise ValueError(f"key 'n_random' must be 0 or more, got {self.n_random}")
        for key in ("limit", "batch_size"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ValueError(f"key {key!r} must be a positive integer or null, got {value}")
        if self.n_boot < 1:
            raise ValueError(f"key 'n_boot' must be a positive integer, got {self.n_boot}")
        if not self.requests:
            raise ValueError("key 'requests' is empty; use [select]")
        bad = [r for r in self.requests if r not in SELECT_TYPES]
        if bad:
            raise ValueError(f"key 'requests' has {bad[0]!r}: dose-response reads stop-or-test choices, so only "
                             f"select requests qualify ({', '.join(SELECT_TYPES)})")
        check_regime(self.regime)

    @property
    def readouts(self) -> tuple[str, ...]:
        return READOUTS if self.readout == "both" else (self.readout,)


def load_dose_response_config(ref: str | Path, overrides: dict[str, Any] | None = None) -> DoseResponseConfig:
    """The config a path or a bare name in configs/experiments names, with CLI overrides applied."""
    return load_config(DoseResponseConfig, resolve_config(ref, "experiments"), overrides)


def alpha_key(alpha: float) -> str:
    """A dose as it appears in condition keys: +0.25, -1, +0 (6 significant digits)."""
    return f"{float(alpha) + 0.0:+g}"  # + 0.0 turns -0.0 into +0


# ---------------------------------------------------------------- the plan (no model)


@dataclass(frozen=True)
class Condition:
    """One steering condition. kind: baseline | probe | random | ablation; index: the random
    direction's number (1-based); alpha: the dose (None for ablation, 0 for the baseline)."""

    key: str
    kind: str
    layer: int | None = None
    alpha: float | None = None
    index: int | None = None

    @property
    def label(self) -> str:
        return f"random{self.index}" if self.kind == "random" else self.kind


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
    """Everything a run needs, checked before any model is loaded."""

    config: DoseResponseConfig
    model: ModelConfig
    bench: Path
    out: Path
    items: list[Item]
    layers: list[int]
    directions: dict[int, LayerDirection]
    random: np.ndarray  # (n_random, d_model) float64 unit rows, the same at every layer
    conditions: list[Condition]
    name: str  # the named direction
    provenance: dict[str, Any]  # the named direction's provenance (without the item list)
    flipped: bool  # the stored vectors point toward stopping and were negated
    fit_families: list[str]  # families the used directions were fitted on
    excluded: list[str]  # of those, the ones present in the benchmark and dropped (heldout)
    d_model: int
    n_layers: int | None  # known before loading (tiny archs, capture meta), else None
    pinned: dict[str, Any]

    @property
    def batch_size(self) -> int:
        return self.config.batch_size or self.model.batch_size


def measure_sign(provenance: dict[str, Any], name: str) -> int:
    """+1 when the stored direction already points toward measuring, -1 when toward stopping."""
    label, positive = provenance.get("label"), provenance.get("positive")
    if label not in TOWARD_STOP_LABELS:
        raise ConfigError(f"direction {name} is a {label}={positive} direction; dose-response needs one whose label "
                          f"says whether the evidence is enough ({', '.join(TOWARD_STOP_LABELS)})")
    truth = {"true": True, "1": True, "false": False, "0": False}.get(str(positive).lower())
    if truth is None:
        raise ConfigError(f"direction {name}: positive class {positive!r} of {label} is not true/false")
    return -1 if truth else 1


def _family_of(item_id: str, families_by_item: dict[str, str]) -> str:
    # Item ids start with their family id ("sliding-004.select.h0.low"); family ids hold no dot.
    return families_by_item.get(item_id, item_id.split(".", 1)[0])


def _known_n_layers(model: ModelConfig, provenance: dict[str, Any]) -> int | None:
    """The model's decoder layer count without loading it: tiny archs, or the capture's meta."""
    if model.is_tiny:
        from hooks.tiny import N_LAYERS

        return N_LAYERS
    for capture in provenance.get("captures") or ():
        path = Path(capture) / "meta.json"
        try:
            value = json.loads(path.read_text()).get("n_model_layers")
        except (OSError, ValueError):
            continue
        if isinstance(value, int):
            return value
    return None


def _choose_direction(folder: Path, name: str | None) -> tuple[str, dict[str, Direction]]:
    from probes.directions import read_directions

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
    from bench.runner import select_items

    items = select_items(every_item, list(config.requests), None)
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
    if kept and config.shard is not None:  # after the limit: the shards' union is the unsharded selection
        kept = select_shard(kept, Shard.parse(config.shard), every_item)
        if not kept:
            raise ConfigError(f"shard {config.shard} holds none of the items to steer (too many shards for their "
                              "families); use fewer shards")
    if not kept:
        why = (f" after dropping the {len(excluded)} families the directions were fitted on (heldout: true); fit "
               "them on part of the families (e.g. `evprobe directions ... --by system`) or set heldout: false"
               if excluded else "")
        raise ConfigError(f"no items left to steer in {bench}{why}")
    for it in kept:
        if not it.options or not set(it.options) <= set(LETTERS) or "stop" not in it.options.values():
            raise BenchError(f"item {it.item_id} has options {it.options}; expected letters A-E with a stop option")
    return kept, excluded


def conditions_for(layers: Sequence[int], alphas: Sequence[float], n_random: int, ablation: bool) -> list[Condition]:
    """baseline, then per layer: each nonzero dose along the probe and each random direction, then ablation."""
    out = [Condition("base", "baseline", None, 0.0)]
    for layer in layers:
        for alpha in sorted(alphas):
            if alpha == 0:
                continue
            out.append(Condition(f"L{layer}.probe.{alpha_key(alpha)}", "probe", layer, float(alpha)))
            for k in range(1, n_random + 1):
                out.append(Condition(f"L{layer}.random{k}.{alpha_key(alpha)}", "random", layer, float(alpha), k))
        if ablation:
            out.append(Condition(f"L{layer}.ablate", "ablation", layer))
    return out


def make_plan(config: DoseResponseConfig) -> Plan:
    """Check the config against the files it names (model config, benchmark, directions, layers)
    and fix the items and conditions. Loads no model; every problem is a one-line error."""
    from hooks.steer import random_directions

    model = load_model_config(config.model)
    bench, out = Path(config.bench), Path(config.out)
    if not (bench / BENCH_META_FILE).is_file():
        raise ConfigError(f"benchmark {bench} not found (no {BENCH_META_FILE}); generate it with `evprobe generate "
                          f"--out {bench}`")
    name, every = _choose_direction(Path(config.directions), config.direction)
    named = every[name]
    prov = named.provenance
    sign = measure_sign(prov, name)
    if prov.get("model") != model.model:
        raise ConfigError(f"direction {name} was fitted on {prov.get('model')!r}, not {model.model!r}; steer the "
                          "model it was fitted on (or fit directions on this model's capture)")
    n_layers = _known_n_layers(model, prov)
    if n_layers is not None and named.layer >= n_layers:
        raise ConfigError(f"direction {name} is at layer {named.layer}, but {model.model} has {n_layers} layers")
    chosen = _layer_directions(named, every, config.layers, n_layers, model.model, Path(config.directions))
    every_item = read_items(bench)
    family_by_item = {it.item_id: it.family_id for it in every_item}
    fit_families = {_family_of(i, family_by_item) for d in chosen.values() for i in d.provenance.get("items") or ()}
    items, excluded = _select_items(config, bench, every_item, fit_families)
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
    conditions = conditions_for(layers, config.alphas, config.n_random, config.ablation)
    bench_meta = json.loads((bench / BENCH_META_FILE).read_text())
    pinned = {
        "format": FORMAT,
        "model": model.model,
        "revision": model.revision,
        "dtype": model.dtype,
        "attn_implementation": model.attn_implementation,
        "items_sha256": bench_meta.get("items_sha256"),
        "readout": config.readout,
        "regime": config.regime,
        "positions": config.positions,
        "schedule": "every-step",
        "random_seed": config.random_seed,
        "direction": name,
        "flipped": sign < 0,
        "max_new_tokens": model.max_new_tokens_direct if "generate" in config.readouts else None,
        "shard": config.shard,
    }
    return Plan(config=config, model=model, bench=bench, out=out, items=items, layers=layers,
                directions=directions, random=random, conditions=conditions, name=name,
                provenance={k: v for k, v in prov.items() if k != "items"}, flipped=sign < 0,
                fit_families=sorted(fit_families), excluded=excluded, d_model=d_model, n_layers=n_layers,
                pinned=pinned)


def _run_meta(plan: Plan) -> dict[str, Any]:
    return {
        **plan.pinned,
        "layer_directions": {str(layer): {"name": d.name, "sha256": d.sha256, "mean_norm": d.mean_norm}
                             for layer, d in plan.directions.items()},
        "bench": str(plan.bench.resolve()),
        "directions_folder": str(Path(plan.config.directions).resolve()),
        "config": as_dict(plan.config),
        "model_config": as_dict(plan.model),
    }


def _check_pinned(plan: Plan) -> dict[str, Any] | None:
    """The stored meta.json, after refusing a run whose pinned settings differ from this one's."""
    path = plan.out / RUN_META_FILE
    if not path.is_file():
        return None
    try:
        old = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not valid JSON ({err.msg}); move the folder aside") from None
    if old.get("format") != FORMAT:
        raise ConfigError(f"{path} is not a dose-response run ({old.get('format')!r}); use another out folder")
    for key, value in plan.pinned.items():
        if old.get(key) != value:
            raise ConfigError(f"{plan.out} holds a dose-response run with {key}={old.get(key)!r}, not {value!r}; "
                              "use another out folder for a different run")
    for layer, d in plan.directions.items():
        was = (old.get("layer_directions") or {}).get(str(layer))
        if was is not None and (was.get("sha256"), was.get("mean_norm")) != (d.sha256, d.mean_norm):
            raise ConfigError(f"{plan.out} steered layer {layer} along another vector ({was.get('name')}); use "
                              "another out folder for a different direction")
    return old


# ---------------------------------------------------------------- results.jsonl


def load_results(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """Finished rows by (item_id, condition). A torn last line (a kill mid-append) is cut off the
    file; a bad line elsewhere or a duplicate is an error naming the line."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for number, line in read_log_lines(path):
        try:
            row = json.loads(line)
            key = (row["item_id"], row["condition"])
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise BenchError(f"{path}:{number}: not a dose-response row ({err}); move the file aside") from None
        if key in out:
            raise BenchError(f"{path}:{number}: duplicate row for {key[0]} under {key[1]}")
        out[key] = row
    return out


def missing_test(item: Item) -> str | None:
    """The test of the property the initial test did not measure (None: no initial test shown)."""
    if item.variant == "no_initial_test":
        return None
    return "test_other" if item.initial_property == "mass" else "test_mass"


def useless_test(item: Item, action: str | None) -> bool:
    """A test whose result is already known or tells nothing: free fall, or repeating the initial test.

    No state of belief justifies it (unlike the combined report, which resolves but costs more),
    so a steered model choosing it has stopped reasoning about the evidence: the known-answer
    checks call a dose where this passes 10% of a group the point where the model breaks."""
    if action == "free_fall":
        return True
    if item.variant == "no_initial_test" or action is None:
        return False
    return action == ("test_mass" if item.initial_property == "mass" else "test_other")


def logprob_readout(item: Item, logp: np.ndarray) -> dict[str, Any]:
    """Choice and measures from one row of option log-probs, logp: (len(LETTERS),) float64."""
    assert item.options is not None
    letters = sorted(item.options)
    values = [float(logp[LETTERS.index(letter)]) for letter in letters]
    choice = letters[int(np.argmax(values))]  # argmax: first maximum, so ties go to the earlier letter
    action = item.options[choice]
    stop_letter = next(letter for letter in letters if item.options[letter] == "stop")
    best_other = max(v for letter, v in zip(letters, values) if letter != stop_letter)
    missing = missing_test(item)
    return {
        "choice": choice,
        "action": action,
        "stop": action == "stop",
        "missing": None if missing is None else action == missing,
        "useless": useless_test(item, action),
        "min_cost": action == item.reference_action,
        "log_odds": values[letters.index(stop_letter)] - best_other,
    }


def generate_readout(item: Item, text: str, regime: str, n_new: int) -> dict[str, Any]:
    """The parsed greedy reply; invalid replies stop nothing and choose nothing (they stay counted)."""
    from bench.parse import parse_reply

    parsed = parse_reply(item, text, regime)
    missing = missing_test(item)
    return {
        "reply": text,
        "valid": parsed.valid,
        "route": parsed.route,
        "choice": parsed.choice,
        "action": parsed.action,
        "stop": parsed.action == "stop",
        "missing": None if missing is None else parsed.action == missing,
        "useless": useless_test(item, parsed.action),
        "min_cost": parsed.valid and parsed.action == item.reference_action,
        "n_new_tokens": n_new,
    }


@contextmanager
def _intervention(handle: Any, plan: Plan, cond: Condition) -> Iterator[None]:
    """The hooks of one condition around the readout calls (nothing for the baseline)."""
    from hooks.ablate import ablate
    from hooks.steer import Steering, steer

    if cond.kind == "baseline":
        yield
        return
    assert cond.layer is not None
    d = plan.directions[cond.layer]
    if cond.kind == "ablation":
        with ablate(handle, d.vector, layers=[cond.layer]):
            yield
        return
    vector = d.vector if cond.kind == "probe" else plan.random[cond.index - 1]  # type: ignore[operator]
    spec = Steering.from_norm_units(vector, cond.layer, cond.alpha, d.mean_norm,  # type: ignore[arg-type]
                                    positions=plan.config.positions, schedule="every-step")
    with steer(handle, spec):
        yield


def _rows_for(handle: Any, plan: Plan, cond: Condition, batch: list[Item], images: list[list[Any]]) -> list[dict]:
    import hooks

    config = plan.config
    prompts = [build_prompt(it, "direct", config.regime) for it in batch]
    logp = gens = None
    with _intervention(handle, plan, cond):
        if "logprobs" in config.readouts:
            logp = hooks.next_token_logprobs(handle, prompts, images, list(LETTERS), batch_size=len(batch))  # (rows, 5)
        if "generate" in config.readouts:
            gens = hooks.generate(handle, prompts, images, max_new_tokens=plan.model.max_new_tokens_direct,
                                  batch_size=len(batch))
    rows = []
    for r, it in enumerate(batch):
        row: dict[str, Any] = {
            "item_id": it.item_id, "family_id": it.family_id, "system": it.system, "resolved": it.resolved,
            "variant": it.variant, "condition": cond.key, "kind": cond.kind, "layer": cond.layer,
            "alpha": cond.alpha, "direction_index": cond.index,
        }
        if logp is not None:
            row["logprobs"] = {letter: float(logp[r, i]) for i, letter in enumerate(LETTERS)}
            row["lp"] = logprob_readout(it, logp[r])
        if gens is not None:
            row["gen"] = generate_readout(it, gens[r].text, config.regime, gens[r].n_new_tokens)
        rows.append(row)
    return rows




def _load_handle(plan: Plan) -> Any:
    from experiments.config import load_model

    handle = load_model(plan.model)
    bad = [layer for layer in plan.layers if layer >= handle.n_layers]
    if bad:
        raise ConfigError(f"layer {bad[0]} is out of range: {plan.model.model} has {handle.n_layers} decoder "
                          f"layers; use 0 .. {handle.n_layers - 1}")
    if handle.d_model != plan.d_model:
        raise ConfigError(f"direction {plan.name} has width {plan.d_model} but {plan.model.model}'s residual "
                          f"width is {handle.d_model}; fit directions on this model's capture")
    return handle


def single_run_order(plan: Plan) -> list[tuple[str, str]]:
    """(item_id, condition) of every row in the order one uninterrupted run appends them."""
    return grid_order(plan.items, plan.conditions, plan.batch_size, key=lambda cond: cond.key)


def dose_response(config: DoseResponseConfig, *, progress: bool = True) -> dict[str, Any]:
    """Run (or finish) the experiment and write its reports; returns the summary.

    Summary keys: n_items, n_conditions, n_rows, computed (rows new in this session), reused
    (rows found in results.jsonl), seconds, files, and the paths of the outputs.
    """
    plan = make_plan(config)
    old_meta = _check_pinned(plan)
    results_path = plan.out / RESULTS_FILE
    done = load_results(results_path)
    todo = {it.item_id: [c for c in plan.conditions if (it.item_id, c.key) not in done] for it in plan.items}
    n_todo = sum(len(v) for v in todo.values())
    n_wanted = len(plan.items) * len(plan.conditions)
    started = time.perf_counter()
    if n_todo:
        handle = _load_handle(plan)  # the slow, failure-prone step, before anything is written
        plan.out.mkdir(parents=True, exist_ok=True)
        meta = _run_meta(plan)
        if old_meta is not None:  # keep the layers of earlier sessions
            meta["layer_directions"] = {**old_meta.get("layer_directions", {}), **meta["layer_directions"]}
        atomic_write_json(plan.out / RUN_META_FILE, meta)
        bar = Progress(progress_label("dose-response", plan.config.shard), n_todo) if progress else None
        fill_grid(plan.items, plan.conditions, todo, batch_size=plan.batch_size, bench=plan.bench,
                  results=results_path, done=done, bar=bar,
                  rows_for=lambda cond, sub, images: _rows_for(handle, plan, cond, sub, images))
    elapsed = time.perf_counter() - started
    result = aggregate(plan, done)
    files = write_reports(plan, result)
    summary = {
        "n_items": len(plan.items),
        "n_conditions": len(plan.conditions),
        "n_rows": n_wanted,
        "computed": n_todo,
        "reused": n_wanted - n_todo,
        "seconds": round(elapsed, 3),
        "rows_per_second": round(n_todo / elapsed, 3) if n_todo and elapsed > 0 else None,
        "out": str(plan.out),
        "files": files,
        "headline": result["headline"],
    }
    return summary


# ---------------------------------------------------------------- aggregation


def _values(readout: str, rows: list[dict[str, Any]]) -> np.ndarray:
    """(items, measures) float array of one condition's rows; NaN where a measure is undefined."""
    out = np.full((len(rows), len(MEASURES[readout])), np.nan)
    for i, row in enumerate(rows):
        r = row["lp"] if readout == "logprobs" else row["gen"]
        for j, m in enumerate(MEASURES[readout]):
            if m == "stop_rate":
                out[i, j] = float(r["stop"])
            elif m == "missing_test_rate":
                out[i, j] = np.nan if r["missing"] is None else float(r["missing"])
            elif m == "useless_test_rate":  # rows written before this measure existed have no value
                out[i, j] = np.nan if r.get("useless") is None else float(r["useless"])
            elif m == "min_cost_accuracy":
                out[i, j] = float(r["min_cost"])
            elif m == "log_odds":
                out[i, j] = r["log_odds"]
            elif m == "invalid_rate":
                out[i, j] = float(not r["valid"])
    return out


def _curve_conditions(plan: Plan) -> list[tuple[int | None, str, float | None, str]]:
    """(layer, kind label, alpha, row key) of every point reported; alpha 0 points read the baseline."""
    out: list[tuple[int | None, str, float | None, str]] = [(None, "baseline", 0.0, "base")]
    labels = ["probe"] + [f"random{k}" for k in range(1, plan.config.n_random + 1)]
    for layer in plan.layers:
        for alpha in sorted(plan.config.alphas):
            for label in labels:
                key = "base" if alpha == 0 else f"L{layer}.{label}.{alpha_key(alpha)}"
                out.append((layer, label, float(alpha), key))
        if plan.config.ablation:
            out.append((layer, "ablation", None, f"L{layer}.ablate"))
    return out


def _est(value: float, lo: float, hi: float, n: int) -> dict[str, Any]:
    if math.isnan(value):
        return {"value": None, "ci": [None, None], "n": 0}
    none = (lambda x: None if math.isnan(x) else float(x))
    return {"value": float(value), "ci": [none(lo), none(hi)], "n": int(n)}


Stats = dict[tuple[str, str, str, str], tuple[dict[str, Any], dict[str, Any]]]  # (key, group, system, measure)


def _ratios(readout: str, rows: list[dict[str, Any]], masks: dict[tuple[str, str], np.ndarray],
            boot: FamilyBootstrap, fam: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One condition's cells, ordered (group, system) x measure: observed ratios (C,), resampled
    ratios (B, C) (NaN where a resample's denominator is 0) and n (C,). Same ratio estimator as
    FamilyBootstrap.resample_many, on the bootstrap's one resample matrix."""
    V = _values(readout, rows)  # (items, measures)
    nums, dens = [], []
    for m in masks.values():
        for j in range(V.shape[1]):
            defined = m & ~np.isnan(V[:, j])
            nums.append(boot.per_family(fam, np.where(defined, V[:, j], 0.0)))
            dens.append(boot.per_family(fam, defined.astype(float)))
    NUM, DEN = np.stack(nums, axis=1), np.stack(dens, axis=1)  # (F, C) per-family sums
    top, bottom = NUM.sum(0), DEN.sum(0)
    draws_num, draws_den = boot.counts @ NUM, boot.counts @ DEN  # (B, C)
    with np.errstate(invalid="ignore", divide="ignore"):
        observed = np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0), np.nan)
        draws = np.where(draws_den > 0, draws_num / np.where(draws_den > 0, draws_den, 1.0), np.nan)
    return observed, draws, bottom.round().astype(int)


def _stats(plan: Plan, readout: str, done: dict[tuple[str, str], dict[str, Any]], row_keys: list[str],
           masks: dict[tuple[str, str], np.ndarray], boot: FamilyBootstrap, fam: np.ndarray) -> Stats:
    """(estimate, paired change against alpha = 0) of every cell of every condition.

    One condition at a time keeps memory at O(B x cells) however large the grid; the baseline's
    draws are kept to pair each change with alpha = 0 on the same resamples."""
    cells = [(g, s, m) for (g, s) in masks for m in MEASURES[readout]]

    def rows(key: str) -> list[dict[str, Any]]:
        return [done[(it.item_id, key)] for it in plan.items]

    base_obs, base_draws, _ = _ratios(readout, rows("base"), masks, boot, fam)
    stats: Stats = {}
    for key in row_keys:
        observed, draws, n = _ratios(readout, rows(key), masks, boot, fam)
        lo, hi = percentile_interval(draws)
        dlo, dhi = percentile_interval(draws - base_draws)
        for c, (group, system, measure) in enumerate(cells):
            stats[(key, group, system, measure)] = (
                _est(observed[c], lo[c], hi[c], n[c]),
                _est(observed[c] - base_obs[c], dlo[c], dhi[c], n[c]),
            )
    return stats


def _null_band(plan: Plan, readout: str, stats: Stats, masks: dict[tuple[str, str], np.ndarray]) -> list[dict]:
    """Mean and min-max envelope of the random directions' point estimates per layer x dose x cell."""
    config, out = plan.config, []
    if not config.n_random:
        return out
    for layer in plan.layers:
        for alpha in sorted(config.alphas):
            keys = ["base"] if alpha == 0 else [f"L{layer}.random{k}.{alpha_key(alpha)}"
                                                for k in range(1, config.n_random + 1)]
            for (group, system) in masks:
                for measure in MEASURES[readout]:
                    vals = [stats[(k, group, system, measure)][0] for k in keys]
                    xs = [v["value"] for v in vals if v["value"] is not None]
                    out.append({
                        "readout": readout, "layer": layer, "alpha": float(alpha), "group": group,
                        "system": system, "measure": measure,
                        "mean": float(np.mean(xs)) if xs else None, "min": min(xs) if xs else None,
                        "max": max(xs) if xs else None, "n_directions": config.n_random,
                        "n": max((v["n"] for v in vals), default=0),
                    })
    return out


def aggregate(plan: Plan, done: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    """All aggregates of the selected items: curves, null band, ablation, headline (JSON-able)."""
    config = plan.config
    families = sorted({it.family_id for it in plan.items})
    boot = FamilyBootstrap(families, config.n_boot, config.seed)
    fam = boot.family_index([it.family_id for it in plan.items])  # (items,)
    systems = sorted({it.system for it in plan.items})
    scopes = ["all", *systems] if len(systems) > 1 else ["all"]
    resolved = np.array([bool(it.resolved) for it in plan.items])
    masks = {}  # (group, system) -> (items,) bool
    for group in GROUPS:
        g = resolved if group == "resolved" else ~resolved if group == "unresolved" else np.ones_like(resolved)
        for system in scopes:
            masks[(group, system)] = g & np.array([system in ("all", it.system) for it in plan.items])
    points = _curve_conditions(plan)
    row_keys = sorted({key for *_, key in points}, key=lambda k: (k != "base", k))
    result: dict[str, Any] = {"rows": [], "null_band": [], "headline": []}
    for readout in config.readouts:
        stats = _stats(plan, readout, done, row_keys, masks, boot, fam)
        for layer, label, alpha, key in points:
            for (group, system) in masks:
                for measure in MEASURES[readout]:
                    value, change = stats[(key, group, system, measure)]
                    result["rows"].append({
                        "readout": readout, "layer": layer, "kind": label, "alpha": alpha, "group": group,
                        "system": system, "measure": measure, **value, "delta_vs_0": change,
                    })
        band = _null_band(plan, readout, stats, masks)
        result["null_band"] += band
        result["headline"] += _headline(plan, readout, stats, band)
    result["meta"] = _report_meta(plan, families, systems, scopes)
    return result


def _headline(plan: Plan, readout: str, stats: Stats, band: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per layer: stop rate of resolved items at the largest + dose (inducing measuring) and of
    unresolved items at the most negative dose (inducing stopping), against alpha = 0."""
    out = []
    alphas = sorted(plan.config.alphas)
    for layer in plan.layers:
        for goal, group, alpha in (("induce measuring", "resolved", alphas[-1]),
                                   ("induce stopping", "unresolved", alphas[0])):
            if (goal == "induce measuring" and alpha <= 0) or (goal == "induce stopping" and alpha >= 0):
                continue
            key = f"L{layer}.probe.{alpha_key(alpha)}"
            null = next((b for b in band if (b["layer"], b["alpha"], b["group"], b["system"], b["measure"])
                         == (layer, alpha, group, "all", "stop_rate")), None)
            value, change = stats[(key, group, "all", "stop_rate")]
            out.append({
                "readout": readout, "layer": layer, "goal": goal, "group": group, "alpha": alpha,
                "stop_rate_at_0": stats[("base", group, "all", "stop_rate")][0],
                "stop_rate": value, "change": change, "null_band": null,
            })
    return out


def _report_meta(plan: Plan, families: list[str], systems: list[str], scopes: list[str]) -> dict[str, Any]:
    n_res = sum(bool(it.resolved) for it in plan.items)
    return {
        "model": plan.model.model,
        "model_name": plan.model.name,
        "direction": plan.name,
        "direction_provenance": plan.provenance,
        "flipped": plan.flipped,
        "sign_convention": ("positive alpha = toward measuring (unresolved); the stored direction points toward "
                            f"{plan.provenance.get('label')}={plan.provenance.get('positive')} and was "
                            f"{'negated' if plan.flipped else 'used as stored'}"),
        "units": "alpha in multiples of the layer's mean residual norm (directions.json mean_norm)",
        "layers": {str(layer): {"name": d.name, "mean_norm": d.mean_norm, "n_fit_items": d.n_items}
                   for layer, d in plan.directions.items()},
        "alphas": sorted(plan.config.alphas),
        "n_random": plan.config.n_random,
        "random_seed": plan.config.random_seed,
        "ablation": plan.config.ablation,
        "readouts": list(plan.config.readouts),
        "positions": plan.config.positions,
        "regime": plan.config.regime,
        "n_items": len(plan.items),
        "n_resolved": n_res,
        "n_unresolved": len(plan.items) - n_res,
        "n_families": len(families),
        "systems": systems,
        "scopes": scopes,
        "scope_counts": {scope: {"n_items": sum(scope in ("all", it.system) for it in plan.items),
                                 "n_families": len({it.family_id for it in plan.items if scope in ("all", it.system)})}
                         for scope in scopes},
        "heldout": plan.config.heldout,
        "fit_families": plan.fit_families,
        "excluded_families": plan.excluded,
        "requests": list(plan.config.requests),
        "null_band_rule": ("mean and min-max envelope of the point estimates of n_random seeded random unit "
                           "directions at the same layer and raw dose"),
        "interval_method": INTERVAL_METHOD,
        "n_boot": plan.config.n_boot,
        "seed": plan.config.seed,
        "n_unit": "n = items in the denominator",
    }


# ---------------------------------------------------------------- reports


def _num(x: float, digits: int, sign: bool = False) -> str:
    text = f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"
    zero = f"{0:.{digits}f}"
    if text.lstrip("+-") == zero:  # never print -0.0
        text = f"+{zero}" if sign else zero
    return text


def fmt_estimate(e: dict[str, Any] | None, measure: str, sign: bool = False) -> str:
    """`58.3 [41.7, 75.0] (n=24)` for rates (percent), `+1.23 [0.40, 2.10] (n=24)` for log-odds (nats)."""
    if not e or e.get("value") is None:
        return "NA (n=0)"
    scale, digits = (100.0, 1) if measure in RATE_MEASURES else (1.0, 2)
    sign = sign or measure == "log_odds"
    lo, hi = e["ci"]
    ci = "[NA, NA]" if lo is None else f"[{_num(lo * scale, digits, sign)}, {_num(hi * scale, digits, sign)}]"
    return f"{_num(e['value'] * scale, digits, sign)} {ci} (n={e['n']})"


def fmt_band(b: dict[str, Any] | None, measure: str) -> str:
    """`mean 50.0 [min 45.8, max 54.2] (k=3, n=24)`: the random-direction null band."""
    if not b or b.get("mean") is None:
        return "NA (n=0)"
    scale, digits = (100.0, 1) if measure in RATE_MEASURES else (1.0, 2)
    sign = measure == "log_odds"
    return (f"mean {_num(b['mean'] * scale, digits, sign)} [min {_num(b['min'] * scale, digits, sign)}, "
            f"max {_num(b['max'] * scale, digits, sign)}] (k={b['n_directions']}, n={b['n']})")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|",
            *("| " + " | ".join(r) + " |" for r in rows)]


def _index(result: dict[str, Any]) -> tuple[dict[tuple, dict], dict[tuple, dict]]:
    rows = {(r["readout"], r["layer"], r["kind"], r["alpha"], r["group"], r["system"], r["measure"]): r
            for r in result["rows"]}
    band = {(b["readout"], b["layer"], b["alpha"], b["group"], b["system"], b["measure"]): b
            for b in result["null_band"]}
    return rows, band


def markdown(result: dict[str, Any]) -> str:
    meta = result["meta"]
    rows, band = _index(result)
    prov = meta["direction_provenance"]
    lines = [
        f"# Dose-response: {meta['direction']} on {meta['model_name']} ({meta['model']})",
        "",
        f"- Sign: {meta['sign_convention']}.",
        f"- Units: {meta['units']}; layers and norms: "
        + "; ".join(f"L{k} {v['name']} (mean norm {v['mean_norm']:.4g}, fitted on n={v['n_fit_items']} items)"
                    for k, v in meta["layers"].items()) + ".",
        (f"- Direction: label {prov.get('label')}={prov.get('positive')}, probe {prov.get('probe')}, position "
         f"{prov.get('position')}, condition {prov.get('condition')}, regimes {prov.get('regimes')}."),
        f"- Target items: n={meta['n_items']} {'/'.join(meta['requests'])} items ({meta['n_resolved']} resolved, "
        f"{meta['n_unresolved']} unresolved) from {meta['n_families']} families, systems "
        f"{', '.join(meta['systems'])}; "
        + (f"held out: the {len(meta['fit_families'])} families the directions were fitted on are excluded "
           f"({len(meta['excluded_families'])} of them are in this benchmark)."
           if meta["heldout"] else "IN-SAMPLE (heldout: false): fitted families are included."),
        (f"- Steering: every {'prompt position' if meta['positions'] == 'all' else 'last prompt position'} and "
         f"every generated token of the steered layer; regime {meta['regime']}, direct protocol; readouts "
         f"{', '.join(meta['readouts'])}."),
        (f"- Null band: {meta['null_band_rule']} (k={meta['n_random']}, seed {meta['random_seed']}). Ablation: "
         "the direction projected out of the layer's output (no dose)."),
        (f"- Intervals: {meta['interval_method']}; B={meta['n_boot']}, seed {meta['seed']}. {meta['n_unit']}; "
         "rates in percent, log-odds in nats, changes paired against alpha = 0 on the same resamples."),
        "",
        "## Headline",
        "",
    ]
    head_rows = []
    for h in result["headline"]:
        head_rows.append([h["readout"], f"L{h['layer']}", h["goal"], h["group"], alpha_key(h["alpha"]),
                          fmt_estimate(h["stop_rate_at_0"], "stop_rate"), fmt_estimate(h["stop_rate"], "stop_rate"),
                          fmt_estimate(h["change"], "stop_rate", sign=True), fmt_band(h["null_band"], "stop_rate")])
    if head_rows:
        lines += _table(["readout", "layer", "goal", "items", "alpha", "stop rate at 0", "stop rate at alpha",
                         "change (points)", "random null at alpha"], head_rows)
    else:
        lines.append("No dose of the needed sign in the grid (give both signs to read both goals).")
    for readout in meta["readouts"]:
        for measure in MEASURES[readout]:
            title, unit = MEASURE_TITLES[measure]
            lines += ["", f"## {readout}: {title}", "", f"Unit: {unit}{' in percent' if measure in RATE_MEASURES else ''}."]
            for layer in [int(k) for k in meta["layers"]]:
                for system in meta["scopes"]:
                    counts = meta["scope_counts"][system]
                    scope = "all systems" if system == "all" else system
                    heading = f"### L{layer}, {scope} (n={counts['n_items']} items, {counts['n_families']} families)"
                    lines += ["", heading, ""]
                    body = []
                    for alpha in meta["alphas"]:
                        cells = [rows.get((readout, layer, "probe", alpha, g, system, measure)) for g in GROUPS]
                        nulls = [band.get((readout, layer, alpha, g, system, measure)) for g in GROUPS]
                        body.append([alpha_key(alpha), *(fmt_estimate(c, measure) for c in cells),
                                     *(fmt_band(b, measure) if meta["n_random"] else "not run" for b in nulls)])
                    if meta["ablation"]:
                        cells = [rows.get((readout, layer, "ablation", None, g, system, measure)) for g in GROUPS]
                        body.append(["ablation", *(fmt_estimate(c, measure) for c in cells), "", "", ""])
                    lines += _table(["alpha", *(f"probe: {g}" for g in GROUPS), *(f"random null: {g}" for g in GROUPS)],
                                    body)
    return "\n".join(lines) + "\n"


def plot_curves(result: dict[str, Any], out: Path) -> list[str]:
    """One PNG per readout x measure x scope: rows = layers, columns = resolved / unresolved / all."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta = result["meta"]
    rows, band = _index(result)
    alphas = meta["alphas"]
    layers = [int(k) for k in meta["layers"]]
    written = []
    for readout in meta["readouts"]:
        for measure in MEASURES[readout]:
            title, unit = MEASURE_TITLES[measure]
            for system in meta["scopes"]:
                fig, axes = plt.subplots(len(layers), len(GROUPS), figsize=(4.2 * len(GROUPS), 3.2 * len(layers)),
                                         squeeze=False, sharey=measure in RATE_MEASURES)
                for li, layer in enumerate(layers):
                    for gi, group in enumerate(GROUPS):
                        ax = axes[li][gi]
                        pts = [rows[(readout, layer, "probe", a, group, system, measure)] for a in alphas]
                        y = np.array([np.nan if p["value"] is None else p["value"] for p in pts], dtype=float)
                        lo = np.array([np.nan if p["ci"][0] is None else p["ci"][0] for p in pts], dtype=float)
                        hi = np.array([np.nan if p["ci"][1] is None else p["ci"][1] for p in pts], dtype=float)
                        n = max(p["n"] for p in pts)
                        ax.fill_between(alphas, lo, hi, color="C0", alpha=0.25, label="probe 95% interval")
                        ax.plot(alphas, y, "o-", color="C0", label="probe direction")
                        if meta["n_random"]:
                            bs = [band[(readout, layer, a, group, system, measure)] for a in alphas]
                            bmin = np.array([np.nan if b["min"] is None else b["min"] for b in bs], dtype=float)
                            bmax = np.array([np.nan if b["max"] is None else b["max"] for b in bs], dtype=float)
                            bmean = np.array([np.nan if b["mean"] is None else b["mean"] for b in bs], dtype=float)
                            ax.fill_between(alphas, bmin, bmax, color="0.5", alpha=0.3,
                                            label=f"random null min-max (k={meta['n_random']})")
                            ax.plot(alphas, bmean, "--", color="0.35", label="random null mean")
                        if meta["ablation"]:
                            ab = rows[(readout, layer, "ablation", None, group, system, measure)]
                            if ab["value"] is not None:
                                ax.axhline(ab["value"], color="C3", ls=":", label="ablation (no dose)")
                                if ab["ci"][0] is not None:
                                    ax.axhspan(ab["ci"][0], ab["ci"][1], color="C3", alpha=0.08)
                        if measure in RATE_MEASURES:
                            ax.set_ylim(-0.03, 1.03)
                        ax.axvline(0.0, color="0.8", lw=0.8)
                        ax.set_title(f"L{layer}, {group} (n={n} items)", fontsize=9)
                        ax.set_xlabel(ALPHA_AXIS, fontsize=8)
                        ax.set_ylabel(unit, fontsize=8)
                axes[0][0].legend(fontsize=7, loc="best")
                scope = "all systems" if system == "all" else system
                counts = meta["scope_counts"][system]
                fig.suptitle(f"{title} ({readout}) vs dose: {meta['model_name']}, {scope}, n={counts['n_items']} "
                             f"items from {counts['n_families']} families", fontsize=10)
                fig.tight_layout()
                name = ("" if readout == "logprobs" else "generate.") + measure + ("" if system == "all" else f".{system}")
                fig.savefig(out / f"{name}.png", dpi=90)
                plt.close(fig)
                written.append(f"{name}.png")
    return written


def write_reports(plan: Plan, result: dict[str, Any]) -> list[str]:
    plan.out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(plan.out / JSON_FILE, (json.dumps(result, indent=1) + "\n").encode("utf-8"))
    atomic_write_bytes(plan.out / MD_FILE, markdown(result).encode("utf-8"))
    return [JSON_FILE, MD_FILE, *plot_curves(result, plan.out)]


# ---------------------------------------------------------------- command line


def add_dose_response_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `evprobe dose-response` on the CLI's subparsers; its handler is `run_dose_response`."""
    p = sub.add_parser(
        "dose-response",
        help="steer along a probe direction on held-out families: layers x doses, random null band, ablation",
        description="Add a direction from `evprobe directions` at chosen decoder layers and doses (multiples of "
        "the layer's mean residual norm; + = toward measuring) to the select prompts of the families it was not "
        "fitted on, beside random directions and ablation; write results.jsonl, dose_response.json/.md and "
        "PNG curves of stop rate, missing-property test rate, minimum-cost accuracy and log-odds with "
        "family-bootstrap intervals. Flags override the config. Resumable: rerun to continue or to reuse.",
    )
    p.add_argument("--config", required=True,
                   help="experiment YAML: a path or a name in configs/experiments (e.g. dose_response_tiny)")
    p.add_argument("--model", default=None, help="model config name or YAML, tiny:<arch> or hub id")
    p.add_argument("--bench", default=None, help="benchmark folder")
    p.add_argument("--directions", default=None, help="directions folder (evprobe directions --out)")
    p.add_argument("--direction", default=None, help="direction name in that folder (default: the first)")
    p.add_argument("--layers", type=int_list_or("from-direction"), default=None, help="from-direction or layers, e.g. 8,16")
    p.add_argument("--alphas", type=float_list, default=None,
                   help="doses, comma-separated; write --alphas=-1,0,1 when the first is negative")
    p.add_argument("--n-random", type=integer, default=None, help="random null directions (0 = none)")
    p.add_argument("--random-seed", type=integer, default=None, help="seed of the random directions")
    p.add_argument("--ablation", action=argparse.BooleanOptionalAction, default=None,
                   help="also project the direction out of each layer (--no-ablation to skip)")
    p.add_argument("--requests", type=str_list, default=None, help="select, select variant names or variants")
    p.add_argument("--systems", type=str_list, default=None, help="target systems, e.g. bouncing,spring")
    p.add_argument("--families", type=str_list, default=None, help="target families, e.g. spring-000,spring-001")
    p.add_argument("--heldout", action=argparse.BooleanOptionalAction, default=None,
                   help="drop the families the directions were fitted on (default); --no-heldout steers in-sample")
    p.add_argument("--limit", type=integer, default=None, help="only the first N target items")
    p.add_argument("--readout", choices=("logprobs", "generate", "both"), default=None)
    p.add_argument("--positions", choices=("all", "last"), default=None, help="prompt positions steered")
    p.add_argument("--regime", default=None, help="standard, guided or json")
    p.add_argument("--batch-size", type=integer, default=None, help="rows per forward (default: the model config's)")
    add_model_override_arguments(p)
    p.add_argument("--out", default=None, help="output folder")
    p.add_argument("--n-boot", type=integer, default=None, help="family bootstrap resamples")
    p.add_argument("--seed", type=integer, default=None, help="bootstrap seed")
    p.add_argument("--shard", default=None, metavar="K/N",
                   help="only the target items of shard K of N (0-based; whole families); combine the N folders "
                   "with `evprobe merge`")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(run=run_dose_response)
    return p


OVERRIDE_FLAGS = ("model", "bench", "directions", "direction", "layers", "alphas", "n_random", "random_seed",
                  "ablation", "requests", "systems", "families", "heldout", "limit", "readout", "positions",
                  "regime", "batch_size", "out", "n_boot", "seed", "shard")


def config_from_args(args: argparse.Namespace) -> DoseResponseConfig:
    """The config file named by --config with every given flag applied (None = flag not given)."""
    overrides = {key: getattr(args, key) for key in OVERRIDE_FLAGS}
    config = load_dose_response_config(args.config, overrides)
    return apply_model_overrides(config, args)


def run_dose_response(args: argparse.Namespace) -> int:
    from experiments.distributed import data_parallel, rank_placement

    config = config_from_args(args)

    def for_rank(c: DoseResponseConfig) -> DoseResponseConfig:  # the device map lives in the model config
        model = load_model_config(c.model)
        device_map, max_memory = rank_placement(model.device_map, model.max_memory)
        return replace(c, model=load_model_config(model, {"device_map": device_map, "max_memory": max_memory}))

    # torchrun / accelerate launch: this rank's items, then rank 0 merges
    if data_parallel(config, lambda c: dose_response(c, progress=not args.quiet), unit="items", for_rank=for_rank):
        return 0
    summary = dose_response(config, progress=not args.quiet)
    print(f"{summary['n_rows']} rows ({summary['n_items']} items x {summary['n_conditions']} conditions): "
          f"{summary['computed']} computed in {summary['seconds']} s, {summary['reused']} reused")
    for h in summary["headline"]:
        print(f"  {h['readout']} L{h['layer']} {h['goal']} ({h['group']} items, alpha {alpha_key(h['alpha'])}): "
              f"stop rate {fmt_estimate(h['stop_rate_at_0'], 'stop_rate')} -> "
              f"{fmt_estimate(h['stop_rate'], 'stop_rate')}")
    print(f"wrote {', '.join(summary['files'][:3])} ... ({len(summary['files'])} files) in {summary['out']}")
    return 0


__all__ = [
    "DEFAULT_ALPHAS",
    "MEASURES",
    "Condition",
    "DoseResponseConfig",
    "Plan",
    "add_dose_response_parser",
    "aggregate",
    "alpha_key",
    "conditions_for",
    "config_from_args",
    "dose_response",
    "load_dose_response_config",
    "load_results",
    "logprob_readout",
    "make_plan",
    "markdown",
    "measure_sign",
    "missing_test",
    "plot_curves",
    "run_dose_response",
    "single_run_order",
]
