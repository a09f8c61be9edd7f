"""The layer sweep's config (every field a flag, checked before any model is loaded) and its plan
(the config checked against the files it names: the benchmark, the requests, the layers)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from evprobe.bench.manifest import META_FILE as BENCH_META_FILE
from evprobe.bench.manifest import read_items
from evprobe.bench.protocols import check_regime
from evprobe.core.bootstrap import DEFAULT_N_BOOT, DEFAULT_SEED
from evprobe.core.errors import InputError
from evprobe.core.flags import setting
from evprobe.experiments.config import (
    ConfigError,
    ModelConfig,
    check_tiny_layers,
    load_config,
    load_model_config,
    resolve_config,
)

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
# Transfer kinds of probes.transfer that work on one capture (regime needs several captures); the void
# kinds need the voids captured too (requests naming voids or void-<type>: checked with the config).
TRANSFER_KINDS = ("system", "initial", "pairs", "half", "request", "void", "void_system")
VOID_TRANSFERS = ("void", "void_system")
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
        if len({label_dir(x) for x in self.labels}) != len(self.labels):
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
            if kind in VOID_TRANSFERS and not any(r == "voids" or r.startswith("void-") for r in self.requests):
                raise ValueError(f"key 'transfer' has {kind!r}, which pairs voids with their twins, and key 'requests' "
                                 f"captures no voids ({', '.join(self.requests)}); add voids (a benchmark generated "
                                 "with --voids occluded,unstated)")
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


def label_dir(label: str) -> str:
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
