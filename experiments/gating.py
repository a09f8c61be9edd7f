"""`evprobe gating`: the TRAPS prompt-gating experiment (seed 002, section 5.5 and appendix I.2,
Table 4) on the answer requests and the selection requests.

    evprobe gating --config gating_tiny [--layer 2] [--alphas=-1,0,1] ...

A 2 x 2 matrix: direction regime (the prompt regime the direction was fitted under: standard /
guided) x inference regime (the prompt regime the steered model reads: standard / guided). Per
cell, answerable items (controls, `resolved`) get +alpha (toward abstaining) and unanswerable
items (voids) get -alpha (toward answering); the readout is the top option letter.

Steps (resumable; a rerun reuses finished work):

1. capture the chosen requests at every layer, position `last`, under `standard` and under
   `guided` into `out/acts/standard` and `out/acts/guided` (experiments.capture.capture);
2. split families: per system (sorted ids), a permutation from default_rng([split_seed, k]) for
   the k-th system; its first floor(n/2) families are the *fitting* families, the rest are
   *held out*. Directions (and the layer choice) see only fitting families; steering and every
   reported number only held-out ones;
3. `layer: best` = the nested best layer of a logistic sweep of `resolved` on the standard
   capture's fitting families at position `last` (folds = min(folds, fitting families)), written
   to `out/layer_sweep/`; or a given layer number;
4. one mass-mean `resolved` direction per regime at that layer, position `last`, on the fitting
   families (probes.directions.fit_directions; written to `out/directions/<regime>/`);
5. per held-out item, inference regime and condition: the option letters' next-token log-probs
   (hooks.next_token_logprobs, direct protocol, bench.protocols.build_prompt(item, "direct",
   regime)) with the direction added at that layer at every prompt position (hooks.steer);
   appended to `out/results.jsonl` by the job runner (`GatingJob` on core.jobs);
6. `gating.json`, `gating.md` (Table-4-style 2 x 2 tables per request kind and dose) and
   `gating.png` (rate vs dose per cell).

Sharding: `--shard K/N` steers only the held-out items of shard K's families (the held-out
families sorted, round robin). Steps 1-4 (`prepare`) are deterministic, so every shard runs them
itself into its own out (acts/, layer_sweep/, directions/), and its meta.json records what step 6
needs of them (the layer and its choice; the directions' names, sha256, mean norms, fitted items
and cosine). `evprobe merge OUT SHARD_DIR...` writes what one run writes from the shards' rows and
metas alone (no model, no preparation: OUT gets no acts/, layer_sweep/ or directions/); under
`torchrun --nproc_per_node N -m evprobe gating ...` each process runs OUT/.shards/shard-K-of-N and
rank 0 merges.

Conventions:

- **Sign** as dose-response: + = toward abstaining / measuring. Stored directions point toward
  resolved=True and are negated (experiments.steering_conventions.measure_sign).
- **Units**: alpha in multiples of the layer's mean residual norm at `last` over the fitting
  items *of the direction's own regime* (mean_norm in directions.json): raw vector added =
  alpha * mean_norm * unit direction.
- **alpha = 0** is the unsteered model (no hooks), computed once per item and inference regime
  and shared by both direction regimes.
- **Readout**: choice = argmax over the item's option letters (ties: the earlier letter).
  Answer requests: *abstain* = the choice is the `undetermined` option. Select requests: the
  analogue is *measure* = the choice is a test (not stop); 100 - measure is the stop rate.
- **Intervals**: one FamilyBootstrap over the held-out families (B = n_boot, seed) for every
  number, so steered - base changes are paired; n = items in the denominator.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np

from evprobe.core.decimals import fixed
from evprobe.core.estimate_text import estimate_text, missing_text
from evprobe.core.flags import setting
from evprobe.core.capture_schema import row_problem
from evprobe.core.bootstrap import (
    DEFAULT_N_BOOT,
    DEFAULT_SEED,
    INTERVAL_METHOD,
    FamilyBootstrap,
    Resampled,
)
from evprobe.bench.family import LETTERS  # the option letters, one home
from evprobe.bench.items import Item, item_units
from evprobe.bench.manifest import META_FILE as BENCH_META_FILE
from evprobe.core.errors import InputError
from evprobe.core.files import atomic_write_bytes, atomic_write_json
from evprobe.core.json_files import optional_json_object
from evprobe.bench.manifest import load_item_images, read_items, read_meta
from evprobe.core.jobs import Job, JsonlRows, Unit, run_job
from evprobe.core.job_summary import JobSummary
from evprobe.core.lock import folder_lock
from evprobe.core.shard import Shard, shard_of_ids
from evprobe.bench.protocols import GUIDED, build_prompt
from evprobe.experiments.config import (
    ConfigError,
    ModelConfig,
    add_experiment_parser,
    as_dict,
    experiment_config,
    load_config,
    load_model_config,
    resolve_config,
)
from evprobe.experiments.steering_conventions import alpha_key, measure_sign

REGIMES = ("standard", "guided")
REQUEST_KINDS = {"answer_initial": "answer", "answer_after_test": "answer", "select": "select"}
RESULTS_FILE = "results.jsonl"
RUN_META_FILE = "meta.json"
JSON_FILE = "gating.json"
MD_FILE = "gating.md"
PNG_FILE = "gating.png"
FORMAT = "evprobe-gating/1"
POSITION = "last"
# results.jsonl's schema: every field required, nothing else (core.capture_schema kinds)
ROW_TYPES = {"item_id": "id", "family_id": "id", "system": "str", "request": "str", "resolved": "bool",
             "condition": "str", "inference": "str", "direction": "str?", "alpha": "number", "logprobs": "scores",
             "choice": "str", "option": "str", "abstain": "bool"}
GROUPS = {"controls": True, "voids": False}  # group -> resolved
MEASURE = {"answer": ("abstention", "undetermined option chosen"),
           "select": ("measure rate", "a test chosen (100 - stop rate)")}
ALPHA_AXIS = "alpha (multiples of mean residual norm; + = toward abstaining/measuring)"


@dataclass(frozen=True)
class GatingConfig:
    """One prompt-gating experiment (configs/experiments/gating*.yaml); every field is also a flag."""

    model: str | ModelConfig = setting(help="model config name or YAML, tiny:<arch> or hub id (or an inline mapping)")
    bench: str = setting(help="benchmark folder")
    out: str = setting(help="output folder")
    requests: tuple[str, ...] = setting(("answer_initial",), "answer_initial, answer_after_test and/or select")
    layer: int | Literal["best"] = setting(
        "best", "a decoder layer, or best: the nested best of a resolved sweep on the standard capture's fitting "
        "families")
    alphas: tuple[float, ...] = setting(
        (-1.0, 0.0, 1.0), "doses in multiples of the layer's mean residual norm (+ = toward abstaining/measuring); "
        "write --alphas=-1,0,1 when the first is negative")
    split_seed: int = setting(0, "seed of the family split (half fitting, half held out, per system)")
    folds: int = setting(5, "folds of the layer-choosing sweep (capped at the fitting families)")
    limit: int | None = setting(None, "only the first N held-out items (manifest order)")
    batch_size: int | None = setting(None, "rows per forward (null: the model config's)")
    n_boot: int = setting(DEFAULT_N_BOOT, "family bootstrap resamples")
    seed: int = setting(DEFAULT_SEED, "bootstrap (and sweep fold) seed")
    shard: str | None = setting(None, "only the held-out items of shard K/N's families (0-based); combine the N "
                                "folders with `evprobe merge`. Under torchrun the rank picks the shard")

    def __post_init__(self) -> None:
        if self.shard is not None:
            Shard.parse(self.shard)  # a bad K/N fails here, naming the fix
        if not self.requests:
            raise ValueError("key 'requests' is empty; use [answer_initial] and/or [select]")
        bad = [r for r in self.requests if r not in REQUEST_KINDS]
        if bad:
            raise ValueError(f"key 'requests' has {bad[0]!r}; gating needs requests with an abstain-like option: "
                             f"{', '.join(REQUEST_KINDS)}")
        if self.layer != "best" and (isinstance(self.layer, bool) or self.layer < 0):
            raise ValueError(f"key 'layer' must be 'best' or a layer number >= 0, got {self.layer!r}")
        if not self.alphas or not all(math.isfinite(a) for a in self.alphas):
            raise ValueError(f"key 'alphas' must hold finite doses, e.g. [-1, 0, 1], got {list(self.alphas)}")
        keys = [alpha_key(a) for a in self.alphas]
        if len(set(keys)) != len(keys):
            raise ValueError(f"key 'alphas' repeats a dose ({', '.join(keys)})")
        if not any(a != 0 for a in self.alphas):
            raise ValueError("key 'alphas' has no nonzero dose; give e.g. [-1, 0, 1]")
        if self.folds < 2:
            raise ValueError(f"key 'folds' must be 2 or more, got {self.folds}")
        if self.n_boot < 1:
            raise ValueError(f"key 'n_boot' must be a positive integer, got {self.n_boot}")
        for key in ("limit", "batch_size"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ValueError(f"key {key!r} must be a positive integer or null, got {value}")

    @property
    def doses(self) -> list[float]:
        """The nonzero doses, ascending (alpha = 0 is the unsteered base)."""
        return sorted(float(a) for a in self.alphas if a != 0)


def load_gating_config(ref: str | Path, overrides: dict[str, Any] | None = None) -> GatingConfig:
    return load_config(GatingConfig, resolve_config(ref, "experiments"), overrides)


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
    if model.is_tiny and config.layer != "best":
        from evprobe.hooks.tiny import N_LAYERS

        if config.layer >= N_LAYERS:
            raise ConfigError(f"layer {config.layer} is out of range: {model.model} has {N_LAYERS} decoder layers; "
                              f"use 0 .. {N_LAYERS - 1}")
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
    from evprobe.probes.captures import labels, load_captures

    cs = load_captures([acts])
    ls = labels(cs, "resolved")
    return cs, ls.subset(np.isin(ls.families.astype(str), fit), reason="held-out family (gating split)")


def choose_layer(plan: Plan, acts: Path, progress: bool) -> tuple[int, dict[str, Any] | None]:
    """The configured layer, or the nested best of a resolved sweep on the fitting families."""
    from evprobe.probes.captures import load_capture
    from evprobe.experiments.summary_files import SweepSummary, read_summary

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
    return int(best["layer"]), {k: best[k] for k in ("layer", "position", "auroc", "ci", "n")}


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
    (d,) = fit_directions(cs, ls, [layer], POSITION, "massmean")
    write_directions(plan.out / "directions" / regime, [d])
    v = measure_sign(d.provenance, d.name) * d.vector.astype(np.float64)
    v /= np.linalg.norm(v)  # stored as float32; renormalise in float64
    sha = hashlib.sha256(np.ascontiguousarray(v, dtype="<f8").tobytes()).hexdigest()
    return GateDirection(regime, d.name, v, d.mean_norm, int(d.provenance["n_items"]), sha)


def prepare(plan: Plan, progress: bool) -> tuple[int, dict[str, Any] | None, dict[str, GateDirection]]:
    """Steps 1-4 into `plan.out` (deterministic; resumable): (layer, its choice, direction per regime)."""
    acts = {r: _capture(plan, r, progress) for r in REGIMES}
    layer, best = choose_layer(plan, acts["standard"], progress)
    return layer, best, {r: fit_direction(plan, r, acts[r], layer) for r in REGIMES}


# ---------------------------------------------------------------- steering and readout


def readout(item: Item, logp: np.ndarray) -> dict[str, Any]:
    """Top option letter and whether it abstains (answer: undetermined) or measures (select: a test)."""
    assert item.options is not None
    letters = sorted(item.options)
    values = [float(logp[LETTERS.index(x)]) for x in letters]
    choice = letters[int(np.argmax(values))]  # first maximum: ties go to the earlier letter
    option = item.options[choice]
    abstain = option == "undetermined" if REQUEST_KINDS[item.request] == "answer" else option != "stop"
    return {"choice": choice, "option": option, "abstain": abstain}


class GatingJob(Job):
    """Step 5 on the job runner: one row per held-out item x condition (`conditions_for`'s keys, in
    order); `finish` is step 6. `from_meta` rebuilds it from a shard's meta alone (`evprobe merge`)."""

    kind = "gating"
    meta_file = RUN_META_FILE

    def __init__(self, plan: Plan, layer: int, directions: dict[str, GateDirection],
                 best: dict[str, Any] | None = None, cosine: float | None = None) -> None:
        super().__init__(plan.out, plan.config.shard)
        self.plan, self.layer, self.directions, self.best = plan, layer, directions, best
        self.cosine = (float(directions["standard"].vector @ directions["guided"].vector)  # type: ignore[operator]
                       if cosine is None else cosine)
        self.by_key = {c[0]: c for c in plan.conditions}
        self.handle: Any = None

    def units(self) -> list[Unit]:
        return item_units(self.plan.targets)

    def all_families(self) -> list[str]:
        return self.plan.heldout_families  # balanced over the steered families, whatever the limit

    def conditions(self) -> list[str]:
        return list(self.by_key)

    @property
    def batch_size(self) -> int:
        return self.plan.batch_size

    def pinned(self) -> dict[str, Any]:
        plan = self.plan
        bench_meta = read_meta(plan.bench)
        out = {"format": FORMAT, "model": plan.model.model, "revision": plan.model.revision,
               "dtype": plan.model.dtype, "items_sha256": bench_meta.get("items_sha256"), "layer": self.layer,
               "split_seed": plan.config.split_seed,
               "directions": {r: {"name": d.name, "sha256": d.sha256, "mean_norm": d.mean_norm}
                              for r, d in self.directions.items()},
               "guided_text": GUIDED, "positions": "all", "protocol": "direct",
               "attn_implementation": plan.model.attn_implementation, **self.input_pins}
        if self.handle is not None:  # after open(): what only the loaded model tells
            from evprobe.experiments.pins import loaded_pins

            out.update(loaded_pins(self.handle))
        return out

    @cached_property
    def input_pins(self) -> dict[str, Any]:
        """Hashed once (pinned() is asked before and after open()): the direct protocol's prompt text
        under both regimes, the images of the captured items (the captures pin that selection) and
        the model's files (experiments.pins)."""
        from evprobe.experiments.pins import input_pins

        return input_pins(self.plan.model.model, templates={r: ("direct", r) for r in REGIMES},
                          images=(self.plan.bench, self.plan.captured))

    def meta(self) -> dict[str, Any]:
        return {**self.pinned(), "layer_choice": self.best,
                "n_fit_items": {r: d.n_items for r, d in self.directions.items()},
                "cosine_standard_guided": self.cosine,
                "config": as_dict(self.plan.config), "model_config": as_dict(self.plan.model)}

    def store_at(self, folder: Path) -> JsonlRows:
        return JsonlRows(folder / RESULTS_FILE, lambda row: (row["item_id"], row["condition"]), what="gating row",
                         check=lambda row: row_problem(row, ROW_TYPES, ROW_TYPES, "gating row"))

    def open(self) -> None:
        from evprobe.experiments.config import load_model

        self.handle = load_model(self.plan.model)

    def compute(self, batch: list[Unit], condition: str) -> list[dict[str, Any]]:
        from evprobe import hooks
        from evprobe.hooks.steer import Steering, steer

        key, inference, direction, alpha = self.by_key[condition]
        items: list[Item] = [u.value for u in batch]
        prompts = [build_prompt(it, "direct", inference) for it in items]
        images = [load_item_images(self.plan.bench, it.images) for it in items]
        if direction is None:  # alpha = 0: no hooks at all
            logp = hooks.next_token_logprobs(self.handle, prompts, images, list(LETTERS), batch_size=len(items))
        else:
            d = self.directions[direction]
            spec = Steering.from_norm_units(d.vector, self.layer, alpha, d.mean_norm, positions="all",
                                            schedule="every-step")
            with steer(self.handle, spec):
                logp = hooks.next_token_logprobs(self.handle, prompts, images, list(LETTERS), batch_size=len(items))
        return [{"item_id": it.item_id, "family_id": it.family_id, "system": it.system, "request": it.request,
                 "resolved": bool(it.resolved), "condition": key, "inference": inference, "direction": direction,
                 "alpha": alpha, "logprobs": {x: float(logp[r, i]) for i, x in enumerate(LETTERS)},
                 **readout(it, logp[r])} for r, it in enumerate(items)]

    def finish(self, rows: dict[tuple[str, str], dict[str, Any]], summary: JobSummary[Any]) -> GatingReport:
        plan = replace(self.plan, targets=[u.value for u in self.my_units()])  # a shard reports its own items
        result = aggregate(plan, rows, self.layer, self.best, self.directions, self.cosine)
        atomic_write_bytes(self.out / JSON_FILE, (json.dumps(result, indent=1) + "\n").encode("utf-8"))
        atomic_write_bytes(self.out / MD_FILE, markdown(result).encode("utf-8"))
        plot(result, self.out / PNG_FILE)
        return GatingReport(layer=self.layer, n_items=len(plan.targets), tables=tuple(result["tables"]),
                            files=(JSON_FILE, MD_FILE, PNG_FILE, RESULTS_FILE))

    @classmethod
    def from_meta(cls, meta: dict[str, Any], out: Path) -> GatingJob:
        config = load_config(GatingConfig, {**meta["config"], "out": str(out), "shard": None},
                             where=f"the shard's {RUN_META_FILE}")
        directions = {r: GateDirection(r, d["name"], None, d["mean_norm"], meta["n_fit_items"][r], d["sha256"])
                      for r, d in meta["directions"].items()}
        return cls(make_plan(config), meta["layer"], directions, meta["layer_choice"], meta["cosine_standard_guided"])



@dataclass(frozen=True)
class GatingReport:
    """What a finished gating job wrote: the steered layer, its held-out items, gating.json's tables
    (per kind, group and dose: the stop rate of each direction x inference cell, base and steered)
    and its files."""

    layer: int
    n_items: int
    tables: tuple[dict[str, Any], ...]
    files: tuple[str, ...]


def gating(config: GatingConfig, *, progress: bool = True) -> JobSummary[GatingReport]:
    """Run (or finish) the experiment (or its shard) and write gating.json / .md / .png; returns its
    counts, its meta (the chosen layer and directions) and, once complete, its report."""
    plan = make_plan(config)
    with folder_lock(plan.out, "evprobe gating"):  # steps 1-4 write into OUT before the job runner's own lock
        layer, best, directions = prepare(plan, progress)
        return run_job(GatingJob(plan, layer, directions, best), progress=progress)


# ---------------------------------------------------------------- aggregation


def _est(part: Resampled) -> dict[str, Any]:
    return FamilyBootstrap.estimate(part).to_json()


def aggregate(plan: Plan, done: dict[tuple[str, str], dict[str, Any]], layer: int, best: dict[str, Any] | None,
              directions: dict[str, GateDirection], cos: float) -> dict[str, Any]:
    """Every number of the reports over `plan.targets`; `cos` = cosine(standard, guided direction)."""
    config = plan.config
    families = sorted({it.family_id for it in plan.targets})
    boot = FamilyBootstrap(families, config.n_boot, config.seed)
    fam = boot.family_index([it.family_id for it in plan.targets])
    kinds = [k for k in ("answer", "select") if any(REQUEST_KINDS[it.request] == k for it in plan.targets)]
    resolved = np.array([bool(it.resolved) for it in plan.targets])
    masks = {(k, g): np.array([REQUEST_KINDS[it.request] == k for it in plan.targets]) & (resolved == want)
             for k in kinds for g, want in GROUPS.items()}

    def parts(key: str) -> dict[tuple[str, str], Resampled]:
        x = np.array([float(done[(it.item_id, key)]["abstain"]) for it in plan.targets])
        cells = list(masks)
        num = np.stack([boot.per_family(fam, x * masks[c]) for c in cells], axis=1)
        den = np.stack([boot.per_family(fam, masks[c].astype(float)) for c in cells], axis=1)
        return dict(zip(cells, boot.resample_many(num, den, binary=True)))  # abstain shares (core.proportion)

    by_key = {c[0]: parts(c[0]) for c in plan.conditions}
    rows = []
    for key, inference, direction, alpha in plan.conditions:
        base = by_key[f"{inference}.base"]
        for (kind, group), part in by_key[key].items():
            for d in ([direction] if direction else list(REGIMES)):  # the base belongs to both direction rows
                rows.append({"kind": kind, "group": group, "inference": inference, "direction": d, "alpha": alpha,
                             "rate": _est(part), "change": FamilyBootstrap.difference(part, base[(kind, group)])
                             .to_json()})
    tables = []
    for kind in kinds:
        for a in sorted({abs(x) for x in config.doses}):
            for group, alpha in (("controls", a), ("voids", -a)):
                if alpha not in config.doses:
                    continue
                cells = {}
                for d in REGIMES:
                    for inf in REGIMES:
                        part = by_key[f"{inf}.dir_{d}.{alpha_key(alpha)}"][(kind, group)]
                        base = by_key[f"{inf}.base"][(kind, group)]
                        cells[f"{d}|{inf}"] = {"base": _est(base), "steered": _est(part),
                                               "change": FamilyBootstrap.difference(part, base).to_json()}
                tables.append({"kind": kind, "group": group, "alpha": alpha, "cells": cells})
    return {
        "meta": {
            "model": plan.model.model, "model_name": plan.model.name, "layer": layer, "layer_choice": best,
            "position_fitted": POSITION, "steered_positions": "all prompt positions",
            "requests": list(config.requests), "alphas": sorted(float(a) for a in config.alphas),
            "directions": {r: {"name": d.name, "mean_norm": d.mean_norm, "n_fit_items": d.n_items}
                           for r, d in directions.items()},
            "cosine_standard_guided": cos,
            "fit_families": plan.fit_families, "heldout_families": plan.heldout_families,
            "n_items": len(plan.targets), "n_families": len(families),
            "n_controls": int(resolved.sum()), "n_voids": int((~resolved).sum()),
            "split": f"per system, first floor(n/2) of default_rng([{config.split_seed}, k]).permutation fit",
            "sign": "+ alpha = toward abstaining / measuring (resolved=True directions negated)",
            "units": "alpha in multiples of the layer's mean residual norm (each direction's own regime)",
            "interval_method": INTERVAL_METHOD, "n_boot": config.n_boot, "seed": config.seed,
            "n_unit": "n = items in the denominator",
        },
        "rows": rows,
        "tables": tables,
    }


# ---------------------------------------------------------------- reports


def pct(e: dict[str, Any], sign: bool = False) -> str:
    """`54.0 [40.0, 68.0] (n=50)` in percent; `NA (n=0)` when the denominator is empty (core.estimate_text)."""
    return estimate_text(e, 1, scale=100.0, sign=sign)


def pct_value(e: dict[str, Any]) -> str:
    """The value alone in percent (`54.0`), where the line gives its interval elsewhere."""
    return missing_text("n=0") if e.get("value") is None else fixed(100 * e["value"], 1)


def markdown(result: dict[str, Any]) -> str:
    meta = result["meta"]
    choice = meta["layer_choice"]
    how = ("given in the config" if choice is None else
           f"nested best of a resolved sweep on the fitting families (held-out AUROC {choice['auroc']:.3f} "
           f"[{choice['ci'][0]:.3f}, {choice['ci'][1]:.3f}], n={choice['n']})")
    lines = [
        f"# Prompt gating: {meta['model_name']} ({meta['model']}), layer {meta['layer']}",
        "",
        f"- Layer {meta['layer']}: {how}.",
        f"- Directions: mass-mean resolved at position {meta['position_fitted']}, "
        + "; ".join(f"{r}: {d['name']} (mean norm {d['mean_norm']:.4g}, fitted on n={d['n_fit_items']} items)"
                    for r, d in meta["directions"].items())
        + f"; cosine(standard, guided) = {fixed(meta['cosine_standard_guided'], 3, sign=True)}.",
        (f"- Split: {meta['split']}; fitted on {len(meta['fit_families'])} families, steered and scored on "
        f"{meta['n_families']} held-out families (n={meta['n_items']} items: {meta['n_controls']} controls, "
        f"{meta['n_voids']} voids)."),
        f"- Sign: {meta['sign']}; units: {meta['units']}; steering at {meta['steered_positions']}.",
        ("- Readout: the top option letter of the next-token log-probs (direct protocol). Answer requests: "
        "abstention = the undetermined option; select requests: measure rate = a test (100 - stop rate)."),
        (f"- Cells: `base% -> steered% [95% interval of steered] (n)`; base = alpha 0 under the same inference "
        f"regime. Intervals: {meta['interval_method']}; B={meta['n_boot']}, seed {meta['seed']}. {meta['n_unit']}."),
    ]
    for t in result["tables"]:
        name, what = MEASURE[t["kind"]]
        who = "controls (answerable)" if t["group"] == "controls" else "voids (unanswerable)"
        lines += ["", f"## {t['kind']} requests: {name} on {who}, alpha = {alpha_key(t['alpha'])}", "",
                  f"{what}, percent. Rows: direction regime; columns: inference regime.", "",
                  "| direction \\ inference | standard | guided |", "|---|---|---|"]
        for d in REGIMES:
            cells = [t["cells"][f"{d}|{inf}"] for inf in REGIMES]
            lines.append(f"| {d} | " + " | ".join(
                f"{pct_value(c['base'])} -> {pct(c['steered'])}" for c in cells) + " |")
        lines += ["", "Paired change (steered - base, points):", "", "| direction \\ inference | standard | guided |",
                  "|---|---|---|"]
        for d in REGIMES:
            lines.append(f"| {d} | " + " | ".join(pct(t["cells"][f"{d}|{inf}"]["change"], sign=True)
                                                 for inf in REGIMES) + " |")
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> Path:
    """Rate vs dose: one panel per request kind x group, a line per direction x inference regime."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["kind"], r["group"]) for r in result["rows"]})
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.0), squeeze=False)
    styles = {("standard", "standard"): ("C0", "-"), ("standard", "guided"): ("C0", "--"),
              ("guided", "standard"): ("C1", "-"), ("guided", "guided"): ("C1", "--")}
    for ax, (kind, group) in zip(axes[0], panels):
        n = 0
        for (d, inf), (color, ls) in styles.items():
            pts = sorted((r for r in result["rows"] if (r["kind"], r["group"], r["direction"], r["inference"])
                          == (kind, group, d, inf)), key=lambda r: r["alpha"])
            x = [r["alpha"] for r in pts]
            y = [np.nan if r["rate"]["value"] is None else 100 * r["rate"]["value"] for r in pts]
            lo = [np.nan if r["rate"]["ci"][0] is None else 100 * r["rate"]["ci"][0] for r in pts]
            hi = [np.nan if r["rate"]["ci"][1] is None else 100 * r["rate"]["ci"][1] for r in pts]
            n = max([n, *(r["rate"]["n"] for r in pts)])
            ax.plot(x, y, marker="o", color=color, ls=ls, label=f"direction {d}, inference {inf}")
            ax.fill_between(x, lo, hi, color=color, alpha=0.1)
        ax.axvline(0.0, color="0.8", lw=0.8)
        ax.set_ylim(-3, 103)
        ax.set_xlabel(ALPHA_AXIS, fontsize=8)
        ax.set_ylabel(f"{MEASURE[kind][0]} (% of items)", fontsize=8)
        ax.set_title(f"{kind} requests, {group} (n={n} items)", fontsize=9)
    axes[0][0].legend(fontsize=7, loc="best")
    meta = result["meta"]
    fig.suptitle(f"Prompt gating: {meta['model_name']}, layer {meta['layer']}, {meta['n_families']} held-out families; "
                 "bands: 95% family-bootstrap intervals", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


# ---------------------------------------------------------------- command line


def add_gating_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    return add_experiment_parser(
        sub, "gating", GatingConfig, run_gating, example="gating_tiny",
        help="TRAPS prompt gating: standard/guided directions x standard/guided inference, +alpha on controls, "
             "-alpha on voids",
        description="Capture the answer (and/or select) prompts under the standard and guided regimes, fit a "
        "mass-mean resolved direction from each on half the families, steer the other half under each regime and "
        "report abstention (answer) or measure rate (select) in Table-4-style 2x2 tables with family-bootstrap "
        "intervals: gating.json, gating.md, gating.png. Flags override the config. Resumable.",
    )


def config_from_args(args: argparse.Namespace) -> GatingConfig:
    return experiment_config(GatingConfig, args)


def run_gating(args: argparse.Namespace) -> int:
    from evprobe.experiments.distributed import data_parallel

    config = config_from_args(args)
    # torchrun / accelerate launch: this rank's shard, then rank 0 merges
    if data_parallel(config, lambda c: gating(c, progress=not args.quiet), unit="rows", job=GatingJob):
        return 0
    s = gating(config, progress=not args.quiet)
    report, session = s.report, s.last_session
    assert report is not None and session is not None  # one run computes every row it selects
    print(f"layer {report.layer}: {s.n_rows} rows ({report.n_items} held-out items x {s.n_conditions} conditions): "
          f"{s.computed} computed in {session.seconds} s, {s.reused} reused")
    for t in report.tables:
        cells = "; ".join(f"dir {k.split('|')[0]}/inf {k.split('|')[1]}: {pct_value(c['base'])} -> "
                          f"{pct(c['steered'])}" for k, c in t["cells"].items())
        print(f"  {t['kind']} {t['group']} alpha {alpha_key(t['alpha'])}: {cells}")
    print(f"wrote {', '.join(report.files)} in {s.out}")
    return 0


__all__ = ["GatingConfig", "GatingJob", "GatingReport", "add_gating_parser", "aggregate", "conditions_for", "gating",
           "load_gating_config", "make_plan", "prepare", "readout", "run_gating", "split_families"]
