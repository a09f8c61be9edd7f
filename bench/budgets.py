"""Reply budgets: how many new tokens a reply (and a thinking model's reasoning) may take.

A run's reply budget, first that applies:

1. `--max-new-tokens N`: N for the run's protocol and regime, as given;
2. `--budget PRESET`: a seed's published setting (`PRESETS`; the table in docs/reference/running.md);
3. the model config's `max_new_tokens_<protocol>` (direct 16, brief 256, free 96 unless the config
   says otherwise), and under the json regime at least its `max_new_tokens_json` (256): a JSON
   object with a reason does not fit in 16 tokens.

A thinking budget (`--thinking-budget N`, else the model config's `max_thinking_tokens`) gives the
reasoning block (`<think> ... </think>`) its own N tokens, its tags included, on top of the reply's
budget: a trace still open after N - len(close) tokens is closed by writing `</think>` for it (the
"budget forcing" of Qwen3's model cards), and the reply that follows gets the reply budget
(`hooks.thinking_budget`). Without one, the reply budget covers the reasoning too, as before. Only
the hf backend can close a trace mid-generation; the others refuse the setting in one line.

A reply that its budget cut off (no end-of-sequence token within it; a server's finish_reason
"length") is recorded with `cut_off: true`; unreadable, its route is `invalid:cut_off`, counted in
every denominator like any invalid reply, never folded into another route (`bench.runner`). A trace
closed by its budget is recorded with `thinking_closed: true`.

Both numbers are pinned in run.json (`max_new_tokens`, and `thinking_budget` when set), so a folder
never mixes budgets.
"""

from __future__ import annotations

from dataclasses import dataclass

from evprobe.bench.model_config import ModelConfig, did_you_mean
from evprobe.bench.protocols import is_json_regime
from evprobe.core.errors import InputError

CUT_OFF_ROUTE = "invalid:cut_off"  # the route of an unreadable reply its budget cut off (bench.runner)


@dataclass(frozen=True)
class BudgetPreset:
    """A seed's reply budget per protocol (None: the seed sets none for it), and where it says so."""

    name: str
    limits: dict[str, int]  # protocol -> reply tokens
    source: str

    def reply(self, protocol: str) -> int:
        if protocol not in self.limits:
            raise InputError(f"--budget {self.name} sets the {', '.join(self.limits)} protocols' limits ({self.source}), "
                             f"not protocol {protocol}'s; give --max-new-tokens N instead")
        return self.limits[protocol]


_EVERY = ("direct", "brief", "free")
PRESETS: dict[str, BudgetPreset] = {p.name: p for p in (
    BudgetPreset("seed000", {"direct": 16, "brief": 256},
                 "seed 000 section 4 and appendix B: the direct cap is 16 tokens, the brief limit 256"),
    BudgetPreset("seed002-api", dict.fromkeys(_EVERY, 8000),
                 "seed 002 section 4 and Table 8: API-served models, max_completion_tokens = 8,000"),
    BudgetPreset("seed002-qwen8b", dict.fromkeys(_EVERY, 1024),
                 "seed 002 section 4: Qwen3-VL 8B, run locally, generates up to 1,024 tokens"),
    BudgetPreset("seed002-local", dict.fromkeys(_EVERY, 512),
                 "seed 002 section 4 and appendix A: the local replication models, max_new_tokens = 512"),
)}


@dataclass(frozen=True)
class Budget:
    """A run's budgets: `reply` new tokens for the reply; `thinking` for a reasoning block of its
    own (None: the reply's budget covers it)."""

    reply: int
    thinking: int | None = None

    @property
    def total(self) -> int:
        """The most new tokens one generation can take."""
        return self.reply + (self.thinking or 0)


def reply_budget(model: ModelConfig, protocol: str, regime: str, *, max_new_tokens: int | None = None,
                 preset: str | None = None) -> int:
    """The reply budget (module docstring: flag, preset, model config)."""
    if max_new_tokens is not None and preset is not None:
        raise InputError(f"--max-new-tokens {max_new_tokens} and --budget {preset} both set the reply budget; give one")
    if max_new_tokens is not None:
        if type(max_new_tokens) is not int or max_new_tokens < 1:
            raise InputError(f"--max-new-tokens must be a positive integer, got {max_new_tokens!r}")
        return max_new_tokens
    if preset is not None:
        if preset not in PRESETS:
            raise InputError(f"unknown --budget {preset!r}{did_you_mean(preset, list(PRESETS))} "
                             f"Choose from {', '.join(PRESETS)}")
        return PRESETS[preset].reply(protocol)
    limit = model.max_new_tokens(protocol)
    return max(limit, model.max_new_tokens_json) if is_json_regime(regime) else limit


def default_reply_budget(protocol: str, regime: str) -> int:
    """A protocol's reply budget under a regime with a model config's defaults (a run's own:
    `reply_budget` with its model config and flags)."""
    from evprobe.bench.protocols import get_protocol

    get_protocol(protocol)
    return reply_budget(ModelConfig("defaults", "defaults"), protocol, regime)


def thinking_budget(model: ModelConfig, given: int | None) -> int | None:
    """The reasoning block's own budget: `given` (the flag), else the model config's, else None."""
    value = given if given is not None else model.max_thinking_tokens
    if value is None:
        return None
    if type(value) is not int or value < 1:
        what = "--thinking-budget" if given is not None else "key 'max_thinking_tokens'"
        raise InputError(f"{what} must be a positive integer, got {value!r}")
    if model.thinking == "off":
        raise InputError(f"a thinking budget ({value}) with thinking off: the model writes no reasoning block; "
                         "drop the budget or set --thinking on")
    return value
