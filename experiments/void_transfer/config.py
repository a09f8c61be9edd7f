"""`evprobe void-transfer`'s settings and files (experiments.void_transfer)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evprobe.core.bootstrap import DEFAULT_N_BOOT, DEFAULT_SEED
from evprobe.core.flags import setting
from evprobe.experiments.config import ModelConfig, load_config, resolve_config
from evprobe.experiments.steering_conventions import ALPHA_UNITS_HELP, AlphaUnits, check_alpha_units

POSITION = "last"
JUDGED = "judged"  # core.judged_replies.JUDGED: where evprobe judge writes the decisions
JSON_FILE = "void_transfer.json"
MD_FILE = "void_transfer.md"
REPLIES_FILE = "replies.jsonl"
READOUTS = ("letters", "free")
FREE_MEASURES = ("abstained", "invalid")
FREE_REGIME = "standard"  # the letters readout's regime too (build_prompt's default)
FORMAT = "evprobe-void-transfer/1"
GROUPS = ("twin", "void")


@dataclass(frozen=True)
class VoidTransferConfig:
    """One cross-void experiment (configs/experiments/void_transfer*.yaml); every field is also a flag."""

    model: str | ModelConfig = setting(help="model config name or YAML, tiny:<arch> or hub id (or an inline mapping)")
    bench: str = setting(help="benchmark folder generated with --voids occluded,unstated")
    out: str = setting(help="output folder")
    layers: tuple[int, ...] = setting((1, 2), "decoder layers steered (each its own direction per void type)")
    alphas: tuple[float, ...] = setting((-1.0, -0.5, 0.0, 0.5, 1.0), "doses in multiples of the layer's mean residual "
                                        "norm (+ = toward abstaining); write --alphas=-1,0,1 when the first is negative")
    alpha_units: AlphaUnits = setting("norm", ALPHA_UNITS_HELP + "; norm is measured at the steered positions")
    readout: str = setting("letters", "letters: the menu's log-probs (direct protocol); free: greedy free-form replies "
                           "(free protocol, max_new_tokens_free tokens) read by the rule reader, seed 002's readout")
    n_random: int = setting(50, "random directions of the null, per path")
    n_relabel: int = setting(50, "label-free null directions per path (analysis.label_null: fitted like the source's "
                             "direction on its fit rows once the label carries nothing); 0 = none, and no verdict")
    split_seed: int = setting(0, "seed of the family split (half fitting, half held out, per system)")
    folds: int = setting(5, "folds of the probe sweep and transfer matrix (capped at the families)")
    batch_size: int = setting(8, "prompts per forward")
    n_boot: int = setting(DEFAULT_N_BOOT, "family bootstrap resamples")
    seed: int = setting(DEFAULT_SEED, "bootstrap, fold and null seed")

    def __post_init__(self) -> None:
        if not self.layers or any(isinstance(x, bool) or x < 0 for x in self.layers):
            raise ValueError(f"key 'layers' must hold decoder layers >= 0, e.g. [1, 2], got {list(self.layers)}")
        if not any(a != 0 for a in self.alphas) or not all(np.isfinite(self.alphas)):
            raise ValueError(f"key 'alphas' must hold finite doses with a nonzero one, e.g. [-1, 0, 1], got "
                             f"{list(self.alphas)}")
        check_alpha_units(self.alpha_units)
        if self.readout not in READOUTS:
            raise ValueError(f"key 'readout' must be one of {', '.join(READOUTS)}, got {self.readout!r}")
        for key in ("n_random", "n_relabel", "folds", "batch_size", "n_boot"):
            low = {"n_random": 0, "n_relabel": 0, "folds": 2}.get(key, 1)
            if getattr(self, key) < low:
                raise ValueError(f"key {key!r} must be {low} or more, got {getattr(self, key)}")


def load_void_transfer_config(ref: str | Path, overrides: dict[str, Any] | None = None) -> VoidTransferConfig:
    return load_config(VoidTransferConfig, resolve_config(ref, "experiments"), overrides)


