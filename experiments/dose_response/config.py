"""The dose-response config (configs/experiments/dose_response*.yaml), its run-folder constants and
the dose key. The conventions it serves are in experiments.dose_response's docstring."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from evprobe.bench.family import LETTERS as OPTION_LETTERS
from evprobe.bench.items import VARIANTS
from evprobe.bench.protocols import check_regime
from evprobe.core.bootstrap import DEFAULT_N_BOOT, DEFAULT_SEED
from evprobe.core.flags import setting
from evprobe.core.shard import Shard
from evprobe.experiments.config import ModelConfig, load_config, resolve_config
from evprobe.experiments.dose_response.relabel import DEFAULT_N_RELABEL
from evprobe.experiments.steering_conventions import ALPHA_UNITS_HELP, AlphaUnits, alpha_key, check_alpha_units

RESULTS_FILE = "results.jsonl"
RUN_META_FILE = "meta.json"
FORMAT = "evprobe-dose-response/1"
DEFAULT_ALPHAS = (-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0)
LETTERS = tuple(OPTION_LETTERS)  # the benchmark's option letters (bench.family.LETTERS), one home
READOUTS = ("logprobs", "generate")
BACKENDS = ("hf", "vllm")  # the forward behind the log-probs (experiments.dose_response.forward)
CONTROLS = ("history", "threshold_level", "shuffled")  # specificity controls (experiments.dose_response.controls)
DEFAULT_N_RANDOM = 50
SELECT_TYPES = ("select", *VARIANTS, "variants")


@dataclass(frozen=True)
class DoseResponseConfig:
    """One dose-response experiment (configs/experiments/dose_response*.yaml); every field is also a flag."""

    model: str | ModelConfig = setting(help="a model config name or YAML path, tiny:<arch> or a hub id (or a "
                                       "ModelConfig mapping inline)")
    bench: str = setting(help="benchmark folder")
    directions: str = setting(help="a folder written by `evprobe directions`")
    out: str = setting(help="output folder")
    direction: str | None = setting(None, "the direction's name in that folder (null: the first in sorted order)")
    layers: tuple[int, ...] | Literal["from-direction"] = setting(
        "from-direction", "decoder layers to steer, e.g. 8,16, or from-direction (every layer with a sibling "
        "direction)")
    alphas: tuple[float, ...] = setting(
        DEFAULT_ALPHAS, "doses in multiples of the layer's mean residual norm; + = toward measuring; write "
        "--alphas=-1,0,1 when the first is negative")
    alpha_units: AlphaUnits = setting("norm", ALPHA_UNITS_HELP + "; norm is measured at the steered positions")
    n_random: int = setting(DEFAULT_N_RANDOM, "random null directions of the probe's raw norm (0 = none; the "
                            "probe's percentile and z-score among them are reported)")
    n_relabel: int = setting(DEFAULT_N_RELABEL, "label-free null directions: fitted like the named one on its fit rows "
                             "with the label's line removed and each family's labels kept or flipped at random, at the "
                             "probe's raw norm (0 = none; the specificity verdict needs them, "
                             "experiments.dose_response.relabel)")
    random_seed: int = setting(0, "seed of the random directions, the label-free flips and the shuffled-label control")
    controls: tuple[str, ...] = setting(
        CONTROLS, "specificity controls at the same norm: directions of other labels (history, threshold_level, "
        "any capture index field) and shuffled (the named label, permuted); [] = none")
    null_batch_rows: int | None = setting(None, "rows per forward for the random and control directions (items x "
                                          "directions; null: batch_size)")
    split_seed: int = setting(0, "seed of the two halves of held-out families for cross-fitted choices")
    norm_items: int = setting(256, "items the alpha unit (mean residual norm at the steered positions) is "
                              "measured on")
    ablation: bool = setting(True, "also project the direction out of each layer (--no-ablation to skip)")
    requests: tuple[str, ...] = setting(("select",), "select, select variant names or variants")
    injection: int = setting(0, "information-injection level of the target items (seed 003: 0 the main items, "
                             "1-3 need `evprobe generate --injection`); directions and the alpha unit stay those "
                             "of the fit, so a dose is the same vector at every level")
    systems: tuple[str, ...] | None = setting(None, "target systems, e.g. bouncing,spring")
    families: tuple[str, ...] | None = setting(None, "target families, e.g. spring-000,spring-001")
    heldout: bool = setting(True, "drop the families the directions were fitted on (--no-heldout steers in-sample)")
    limit: int | None = setting(None, "only the first N target items (after the held-out filter)")
    readout: Literal["logprobs", "generate", "both"] = setting(
        "logprobs", "logprobs (option letters' next-token log-probs), generate (greedy direct reply) or both")
    generate_sets: bool = setting(
        True, "with readout both, also generate for the random and control directions; --no-generate-sets reads "
        "them by log-probs only (generation costs about n_random times the probe's), so the generated readout has "
        "no null band or controls")
    positions: Literal["all", "last"] = setting("all", "prompt positions steered (generated tokens always)")
    regime: str = setting("standard", "prompt regime: standard, guided or json")
    backend: Literal["hf", "vllm"] = setting(
        "hf", "hf (the model with hooks) or vllm (a vLLM engine with per-request edits: every condition of a batch "
        "in one engine call per readout; text-only items, no ablation)")
    batch_size: int | None = setting(None, "rows per forward (null: the model config's)")
    n_boot: int = setting(DEFAULT_N_BOOT, "family bootstrap resamples")
    seed: int = setting(DEFAULT_SEED, "bootstrap seed")
    shard: str | None = setting(None, "only the target items of shard K/N's families (0-based); combine the N "
                                "folders with `evprobe merge`. Under torchrun the rank picks the shard")

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
        if not self.generate_sets and self.readout != "both":
            raise ValueError("key 'generate_sets' is false but readout is not both: the random, relabelled and "
                             "control directions would be read by nothing; set readout: both, or n_random: 0, "
                             "n_relabel: 0 and controls: []")
        if self.positions not in ("all", "last"):
            raise ValueError(f"key 'positions' is {self.positions!r}; choose from all, last")
        check_alpha_units(self.alpha_units)
        if self.backend not in BACKENDS:
            raise ValueError(f"key 'backend' is {self.backend!r}; choose from {', '.join(BACKENDS)}")
        if self.backend == "vllm" and self.ablation:
            raise ValueError("key 'ablation' is true but backend vllm makes added edits only (projecting the "
                             "direction out is not one); set ablation: false (--no-ablation) or backend: hf")
        for key in ("n_random", "n_relabel"):
            if getattr(self, key) < 0:
                raise ValueError(f"key {key!r} must be 0 or more, got {getattr(self, key)}")
        for key in ("limit", "batch_size", "null_batch_rows"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ValueError(f"key {key!r} must be a positive integer or null, got {value}")
        if self.norm_items < 1:
            raise ValueError(f"key 'norm_items' must be a positive integer, got {self.norm_items}")
        if len(set(self.controls)) != len(self.controls) or any(not c for c in self.controls):
            raise ValueError(f"key 'controls' must name distinct labels, got {list(self.controls)}")
        if self.n_boot < 1:
            raise ValueError(f"key 'n_boot' must be a positive integer, got {self.n_boot}")
        if not self.requests:
            raise ValueError("key 'requests' is empty; use [select]")
        bad = [r for r in self.requests if r not in SELECT_TYPES]
        if bad:
            raise ValueError(f"key 'requests' has {bad[0]!r}: dose-response reads stop-or-test choices, so only "
                             f"select requests qualify ({', '.join(SELECT_TYPES)})")
        check_regime(self.regime)
        if self.injection not in (0, 1, 2, 3):
            raise ValueError(f"key 'injection' is {self.injection}; choose a level among 0, 1, 2, 3")

    @property
    def readouts(self) -> tuple[str, ...]:
        return READOUTS if self.readout == "both" else (self.readout,)

    def reads_sets(self, readout: str) -> bool:
        """Whether the random and control directions are read by `readout` (generate_sets)."""
        return readout in self.readouts and (readout == "logprobs" or self.generate_sets)


def load_dose_response_config(ref: str | Path, overrides: dict[str, Any] | None = None) -> DoseResponseConfig:
    """The config a path or a bare name in configs/experiments names, with CLI overrides applied."""
    return load_config(DoseResponseConfig, resolve_config(ref, "experiments"), overrides)


__all__ = [
    "BACKENDS",
    "CONTROLS",
    "DEFAULT_ALPHAS",
    "DEFAULT_N_RANDOM",
    "FORMAT",
    "LETTERS",
    "READOUTS",
    "RESULTS_FILE",
    "RUN_META_FILE",
    "SELECT_TYPES",
    "DoseResponseConfig",
    "load_dose_response_config",
]
