"""The one spelling of a model: `ModelConfig`, which every config, flag and job takes.

    from evprobe.bench.model_config import ModelConfig
    RunConfig(model=ModelConfig("tiny_llava", "tiny:llava", dtype="float32"), bench=..., out=...)
    RunConfig(model="tiny:llava", ...)      # a bare model string: a ModelConfig with the defaults

Every command takes it the same way: `--model` (a model config name or YAML, tiny:<arch>, a hub id,
a folder, a registered name) and the same model flags, `ModelConfig.FLAGS` (`--dtype`, `--revision`,
`--device-map`, ...), which override the model config's keys (experiments.config.resolve_model).
A job loads it in one place (`load_model`) and names it in its records by `model_source`.

It lives in bench because the runner's config holds it and bench imports no experiments; it needs
hooks only to check a name and load (inside functions, as bench imports hooks).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, fields
import functools
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from evprobe.core.errors import ConfigError
from evprobe.core.json_types import JsonObject

PROTOCOL_BUDGET_KEYS = {p: f"max_new_tokens_{p}" for p in ("direct", "brief", "free")}  # bench.protocols' protocols
DTYPES = ("auto", "float32", "bfloat16", "float16")
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


# hooks.handle.PROMPT_FORMATS, spelled here because bench imports hooks only inside functions
# (tests/bench/test_runner_speed.py checks they agree); a Literal gives the flag its choices.
PromptFormat = Literal["chat", "raw"]
Thinking = Literal["on", "off"]  # hooks.inputs.THINKING, likewise

@dataclass(frozen=True)
class ModelConfig:
    """How to load and drive one model.

    name: a short label used in output folders and reports (defaults to the YAML file's stem).
    model: a hub id (`owner/name`), a local folder, `tiny:<arch>` (hooks.TINY_ARCHS), a registered
        name (`organism`); `evprobe run` also takes policy:<name> and, with --backend openai, the
        name a server serves.
    dtype: auto (float32 on CPU, the checkpoint's dtype on GPU), float32, bfloat16, float16.
    attn_implementation: None = transformers' default; e.g. eager (Pixtral, seed 000 appendix I).
    device_map: None = CPU; "auto" spreads over the visible GPUs, then CPU, then disk (accelerate).
    max_memory: accelerate's budget per device with device_map, e.g. "0=70GiB,1=70GiB,cpu=200GiB".
    offload_folder: where modules that fit nowhere else are offloaded (with device_map).
    max_new_tokens_direct / _brief / _free: each protocol's reply budget (bench.budgets; `evprobe run
        --max-new-tokens` and `--budget` override them); max_new_tokens_json: the least a reply under
        the json regime gets (a JSON object with a reason does not fit in 16 tokens).
    max_thinking_tokens: a reasoning block's own budget (bench.budgets: the trace is closed when it
        runs out); None = the reply budget covers the reasoning.
    batch_size: rows per forward / generate call (of the experiments that read it from here).
    trust_remote_code: run a checkpoint's own code (never implied).
    revision: a hub commit / tag to pin; loaded through the local hub cache (see `model_source`).
    answer_prefix: what the reply starts with before its answer letter (e.g. "ANSWER:"), appended
        by the answer readouts (hooks.Handle.answer_prefix); None = the model's own (the
        organism's "ANSWER:"), else none.
    prompt_format: "chat" or "raw" (hooks.Handle.prompt_format); None = chat when the tokenizer
        has a chat template, else raw (a base model).
    thinking: "on" or "off": the chat template's thinking switch (`enable_thinking`, as Qwen3's
        templates take; hooks.Handle.thinking), for reasoning on/off pairs; None = the template's
        default. A template without the switch is refused before the model loads.
    notes: free text (why a setting is what it is).
    """

    name: str
    model: str
    dtype: str = "auto"
    attn_implementation: str | None = None
    device_map: str | None = None
    max_memory: str | None = None  # accelerate's budget per device, e.g. "0=70GiB,cpu=200GiB"
    offload_folder: str | None = None  # where layers that fit nowhere else go (device_map "disk")
    max_new_tokens_direct: int = 16
    max_new_tokens_brief: int = 256
    max_new_tokens_free: int = 96
    max_new_tokens_json: int = 256
    max_thinking_tokens: int | None = None
    batch_size: int = 8
    trust_remote_code: bool = False
    revision: str | None = None
    answer_prefix: str | None = None
    prompt_format: PromptFormat | None = None
    thinking: Thinking | None = None
    notes: str = ""

    # The keys every model-driving command has a flag for (--dtype, ...), overriding the model config's.
    FLAGS: ClassVar[tuple[str, ...]] = ("revision", "dtype", "attn_implementation", "trust_remote_code",
                                        "answer_prefix", "prompt_format", "thinking", "device_map", "max_memory",
                                        "offload_folder")

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise ValueError("key 'name' is empty; give the model a short label")
        if not self.model.strip():
            raise ValueError("key 'model' is empty; give a hub id, a local folder or tiny:<arch>")
        if self.model.startswith("tiny:"):
            from evprobe.hooks.tiny_models import TINY_ARCHS

            arch = self.model.removeprefix("tiny:")
            if arch not in TINY_ARCHS:
                raise ValueError(f"unknown tiny architecture {arch!r} in key 'model'{did_you_mean(arch, TINY_ARCHS)} "
                                 f"Choose from {', '.join(TINY_ARCHS)}")
        check_loading_keys(self)
        for key in ("max_new_tokens_direct", "max_new_tokens_brief", "max_new_tokens_free", "max_new_tokens_json",
                    "batch_size"):
            if getattr(self, key) < 1:
                raise ValueError(f"key {key!r} must be a positive integer, got {getattr(self, key)}")
        if self.max_thinking_tokens is not None and self.max_thinking_tokens < 1:
            raise ValueError(f"key 'max_thinking_tokens' must be a positive integer or null, got {self.max_thinking_tokens}")

    @classmethod
    def of(cls, model: str, **settings: Any) -> ModelConfig:
        """A bare model string as a ModelConfig with the defaults (its name made file-safe)."""
        return cls(name=model.replace("/", "__").replace(":", "_") or model, model=model, **settings)

    @property
    def source(self) -> str:
        """What hooks.load is given and the records name (`model_source`)."""
        return model_source(self)

    @property
    def is_tiny(self) -> bool:
        return self.model.startswith("tiny:")

    def max_new_tokens(self, protocol: str) -> int:
        """The reply budget of a protocol (`direct`, `brief` or `free`) under this config."""
        if protocol not in PROTOCOL_BUDGET_KEYS:
            raise ValueError(f"unknown protocol {protocol!r}; choose from {', '.join(PROTOCOL_BUDGET_KEYS)}")
        return getattr(self, PROTOCOL_BUDGET_KEYS[protocol])


def did_you_mean(name: str, names: Sequence[str]) -> str:
    """`; did you mean a, b or c?` (the closest of `names`), else `.`: a sentence's end."""
    close = difflib.get_close_matches(name, list(names), n=3, cutoff=0.6)
    return "." if not close else f"; did you mean {close[0]}?" if len(close) == 1 else \
        f"; did you mean {', '.join(close[:-1])} or {close[-1]}?"


def as_model_config(value: ModelConfig | str) -> ModelConfig:
    """`value` as a ModelConfig: itself, or a bare model string with the defaults (`ModelConfig.of`).
    A model config's name is resolved by the CLI and the config loader (experiments.config), not here."""
    if isinstance(value, ModelConfig):
        return value
    if isinstance(value, str):
        return ModelConfig.of(value)
    raise TypeError(f"model must be a ModelConfig or a model string, got {type(value).__name__}")


def model_from_record(config: JsonObject) -> dict[str, Any]:
    """A config as a job's meta recorded it (`asdict`), with its model a ModelConfig again. A meta
    written before the model was one key (a model string beside flat dtype, device_map, ... keys)
    is read too: those keys fold into the ModelConfig."""
    out = dict(config)
    model = out.get("model")
    if isinstance(model, dict):
        out["model"] = ModelConfig(**model)
    elif isinstance(model, str):
        flat = {key: out.pop(key) for key in ModelConfig.FLAGS if key in out}
        out["model"] = ModelConfig.of(model, **flat)
    return out


def check_loading_keys(config: Any) -> None:
    """The model-loading keys (dtype, attn_implementation, device_map, max_memory, offload_folder,
    prompt_format, thinking), checked at config time, before a model file is hashed or loaded."""
    from evprobe.hooks.handle import PROMPT_FORMATS
    from evprobe.hooks.inputs import THINKING

    prompt_format = getattr(config, "prompt_format", None)
    if prompt_format is not None and prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"key 'prompt_format' is {prompt_format!r}; choose from {', '.join(PROMPT_FORMATS)} "
                         "or null (chat when the tokenizer has a chat template, else raw)")
    thinking = getattr(config, "thinking", None)
    if thinking is not None and thinking not in THINKING:
        raise ValueError(f"key 'thinking' is {thinking!r}; choose from {', '.join(THINKING)} or null (the chat "
                         "template's default)")
    if thinking is not None and prompt_format == "raw":
        raise ValueError("keys 'thinking' and 'prompt_format: raw' do not go together: the thinking switch is the "
                         "chat template's, and a raw prompt has none; drop one")
    dtype = getattr(config, "dtype", "auto")
    if dtype not in DTYPES:
        raise ValueError(f"key 'dtype' is {dtype!r}; choose from {', '.join(DTYPES)}")
    attn = getattr(config, "attn_implementation", None)
    if attn is not None and attn not in ATTN_IMPLEMENTATIONS:
        raise ValueError(f"key 'attn_implementation' is {attn!r}; choose from "
                         f"{', '.join(ATTN_IMPLEMENTATIONS)} or null (transformers' default)")
    max_memory = getattr(config, "max_memory", None)
    if (max_memory is not None or getattr(config, "offload_folder", None) is not None) \
            and getattr(config, "device_map", None) is None:
        raise ValueError("keys 'max_memory' and 'offload_folder' need a device map; set device_map: auto")
    from evprobe.hooks.devices import parse_max_memory

    parse_max_memory(max_memory)  # a bad entry fails here, naming the fix


def model_source(cfg: ModelConfig) -> str:
    """What hooks.load is given and the records name: `cfg.model`, or for a pinned `revision` of a
    hub id the local snapshot folder of that revision (hooks.load takes no revision; huggingface_hub
    resolves it, from the local cache when HF_HUB_OFFLINE=1)."""
    if cfg.revision is None or cfg.is_tiny or os.path.isdir(cfg.model):
        return cfg.model
    return _snapshot(cfg.model, cfg.revision)


@functools.cache  # asked for every record and pin: the cache is looked up once per process
def _snapshot(model: str, revision: str) -> str:
    from huggingface_hub import snapshot_download

    # Weights as safetensors only (hooks.load uses use_safetensors=True), plus configs and tokenizer files.
    patterns = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.tiktoken", "*.py"]
    try:
        return snapshot_download(model, revision=revision, allow_patterns=patterns)
    except Exception as err:  # noqa: BLE001 - offline cache miss, unknown revision, gated repo ...
        raise ConfigError(f"model {model!r} at revision {revision!r} is not available "
                          f"({type(err).__name__}); download it first or set revision: null") from None


def load_model(cfg: ModelConfig, source: str | None = None):
    """hooks.load with every loading key of `cfg` (the one place a ModelConfig becomes a Handle);
    `source`: its `model_source` when the caller has it already."""
    from evprobe import hooks
    from evprobe.hooks.devices import placement_of

    return hooks.load(source or cfg.source, dtype=cfg.dtype, **placement_of(cfg),
                      trust_remote_code=cfg.trust_remote_code, attn_implementation=cfg.attn_implementation,
                      answer_prefix=cfg.answer_prefix, prompt_format=cfg.prompt_format, thinking=cfg.thinking)


def model_keys() -> tuple[str, ...]:
    """ModelConfig's keys, in its order."""
    return tuple(f.name for f in fields(ModelConfig))


__all__ = ["ATTN_IMPLEMENTATIONS", "DTYPES", "ModelConfig", "as_model_config", "did_you_mean", "check_loading_keys", "load_model",
           "model_from_record", "model_keys", "model_source"]
