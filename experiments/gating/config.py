"""`evprobe gating`'s settings, files and vocabulary (regimes, groups, measures)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from evprobe.core.flags import setting
from evprobe.core.bootstrap import DEFAULT_N_BOOT, DEFAULT_SEED
from evprobe.core.shard import Shard
from evprobe.experiments.config import ModelConfig, load_config, resolve_config
from evprobe.experiments.steering_conventions import ALPHA_UNITS_HELP, AlphaUnits, alpha_key, check_alpha_units

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
# a free readout's row: the steered reply as generated and the rule reader's reading of it (bench.parse)
FREE_ROW_TYPES = {**{k: v for k, v in ROW_TYPES.items() if k not in ("logprobs", "choice", "option", "abstain")},
                  "reply": "str", "valid": "bool", "route": "str", "answer": "str?", "abstain": "bool"}
READOUTS = ("letters", "free")
HELP_READOUT = ("how a reply is read: letters (the top option letter of the next-token log-probs, direct protocol) or "
                "free (a generated free-form reply, free protocol, read by the rule reader with seed 002's rubric: "
                "abstains when it says the evidence cannot settle it; answer requests only; seed 002 section 5.5)")
GROUPS = {"controls": True, "voids": False}  # group -> resolved
MEASURE = {"answer": ("abstention", "undetermined option chosen"),
           "select": ("measure rate", "a test chosen (100 - stop rate)")}
ALPHA_AXIS = "alpha (multiples of mean residual norm; + = toward abstaining/measuring)"
RAW_ALPHA_AXIS = "alpha (raw: norm of the vector added; + = toward abstaining/measuring)"


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
    alpha_units: AlphaUnits = setting("norm", ALPHA_UNITS_HELP + "; norm is each direction's mean norm (directions.json)")
    readout: Literal["letters", "free"] = setting("letters", HELP_READOUT)
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
        check_alpha_units(self.alpha_units)
        if self.readout not in READOUTS:
            raise ValueError(f"key 'readout' is {self.readout!r}; choose from {', '.join(READOUTS)}")
        if self.readout == "free" and any(REQUEST_KINDS[r] != "answer" for r in self.requests):
            raise ValueError(f"key 'readout' is free, which asks the answer requests only (the free protocol), and key "
                             f"'requests' has {', '.join(r for r in self.requests if REQUEST_KINDS[r] != 'answer')}; "
                             "use requests: [answer_initial]")
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
