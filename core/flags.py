"""Command-line flags from a typed config: each field is written once.

A config is a frozen dataclass; each field carries its help in `field(metadata={"help": ...})`
(use `setting(default, "help")`). `add_config_arguments(parser, Config)` adds one flag per field
(`--batch-size` for `batch_size`), typed by the field's annotation; `config_overrides(args,
Config)` reads back the flags that were given. Those overrides go through the same typed loader as
YAML (`evprobe.experiments.config.load_config`), so a flag and a YAML key are checked by one path.

Flag types from annotations: int, float, str; `X | None` as X; `tuple[int, ...]` /
`tuple[str, ...]` / `tuple[float, ...]` as comma-separated lists; `Literal[...]` as choices;
`tuple[int, ...] | Literal["word"]` as integers or the word; bool as `--flag` / `--no-flag`.
Every flag defaults to None ("not given"): the YAML's value or the field's default stands, and
`--help` shows the field's default (unless its help already says it). A hand-written option's
default is shown by the CLI's help formatter (experiments.cli). A field without a default is a required flag when there is
no YAML to give it (`required=True`).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeAlias, TypedDict, Union, get_args, get_origin

from evprobe.core.argtypes import float_list, int_list, int_list_or, int_or, integer, str_list

MISSING = dataclasses.MISSING

# Where a model runs (accelerate's placement), not what it computes: these may differ between the
# shards of one job (core.jobs.Job.config_free) and are overridable on every model-driving command.
PLACEMENT_KEYS = ("device_map", "max_memory", "offload_folder")

# Help of settings that several configs share (each config still declares its own field).
HELP = {
    "dtype": "auto (float32 on CPU, the checkpoint's dtype on GPU), float32, bfloat16 or float16",
    "device_map": "the model's device map: auto (GPUs, then CPU, then disk), cpu, cuda:0",
    "max_memory": "memory budget per device with --device-map, e.g. 0=70GiB,1=70GiB,cpu=200GiB",
    "offload_folder": "folder for modules offloaded to disk with --device-map",
    "trust_remote_code": "allow a model's own code (off by default)",
    "revision": "a hub commit or tag of the model to pin (loaded from the local hub cache)",
    "attn_implementation": "e.g. eager (Pixtral, seed 000 appendix I) or sdpa",
    "answer_prefix": "text the reply starts with before its answer letter (e.g. 'ANSWER:'), appended to the "
                     "generation prompt by the answer readouts (log-probs, capture, patching); default: the "
                     "model's own (the organism's ANSWER:), else none",
    "prompt_format": "chat (one user turn through the model's chat template) or raw (the prompt string itself, "
                     "for a base model); default: chat when the tokenizer has a chat template, else raw",
    "thinking": "on or off: the chat template's thinking switch (enable_thinking, as Qwen3's templates take), "
                "for reasoning on/off pairs; default: the template's own. Refused for a template without it",
    "shard": "only shard K/N (0-based; whole families, sorted ids round robin); combine the N folders with "
             "`evprobe merge`. Under torchrun the rank picks the shard",
    "regime": ("prompt regime: standard, guided or json; seed002-standard, seed002-guided or seed002-json for seed "
               "002's own prompts (appendix C, verbatim)"),
    "protocol": "direct (short reply), brief (a few sentences, then the answer line) or free (answer requests "
                "only: no option letters, a reply in words)",
}


def setting(default: Any = MISSING, help: str = "", **kwargs: Any) -> Any:  # noqa: A002 - argparse's word
    """A dataclass field with its flag help (`default` may be omitted for a required field)."""
    metadata = {"help": help}
    if default is MISSING:
        return dataclasses.field(metadata=metadata, **kwargs)
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: default, metadata=metadata, **kwargs)
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


# What a given flag parses to (core.argtypes): a number, a word, a switch or a list of them.
FlagValue: TypeAlias = str | int | float | bool | tuple[int, ...] | tuple[float, ...] | tuple[str, ...]


class FlagOptions(TypedDict, total=False):
    """The keyword arguments of argparse's add_argument that a field's flag is given."""

    default: None
    help: str
    type: Callable[[str], FlagValue]
    required: bool
    choices: list[str | int | float | bool]
    metavar: str
    action: type[argparse.Action]


def field_hints(cls: type, namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    """The resolved annotations of a dataclass's fields (strings under `from __future__ import
    annotations` are resolved in the defining module, then in `namespace`)."""
    import sys
    from typing import get_type_hints

    module = sys.modules.get(cls.__module__)
    return get_type_hints(cls, globalns={**(namespace or {}), **(vars(module) if module else {})})


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def _flag_type(hint: Any) -> tuple[Callable[[str], FlagValue] | None, FlagOptions]:
    """(argparse type, extra add_argument kwargs) for an annotation; (None, {}) for a nested config."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        literals = [a for a in rest if get_origin(a) is Literal]
        others = [a for a in rest if get_origin(a) is not Literal and not dataclasses.is_dataclass(a)]
        words = [w for lit in literals for w in get_args(lit)]
        if literals and not others:  # e.g. prompt_format: "chat" | "raw" | None (None = the flag's absence)
            return type(words[0]), {"choices": words}
        if len(words) == 1 and others == [int]:  # e.g. layer: a number or "best"
            return int_or(words[0]), {"metavar": f"INT|{words[0]}"}
        if len(words) == 1 and len(others) == 1 and get_origin(others[0]) is tuple and get_args(others[0])[0] is int:
            return int_list_or(words[0]), {"metavar": f"INTS|{words[0]}"}
        if str in others:  # e.g. layers: "all" or a tuple of ints: the job parses the text
            return str, {}
        if len(others) == 1 and not literals:
            return _flag_type(others[0])
        if all(a is str or dataclasses.is_dataclass(a) for a in rest):
            return str, {}
        raise TypeError(f"no flag type for the annotation {hint!r}; give the field a simpler type")
    if origin is Literal:
        return None if not args else type(args[0]), {"choices": list(args)}
    if origin is tuple:
        inner = args[0] if args else str
        parse = {int: int_list, float: float_list, str: str_list}.get(inner)
        if parse is None:
            raise TypeError(f"no flag type for the annotation {hint!r}")
        return parse, {"metavar": {int: "INTS", float: "NUMBERS", str: "NAMES"}[inner]}
    if hint is bool:
        return None, {"action": argparse.BooleanOptionalAction}
    if hint is int:
        return integer, {}
    if hint in (float, str):
        return hint, {}
    raise TypeError(f"no flag type for the annotation {hint!r}")


def _default_text(f: dataclasses.Field) -> str:
    if f.default is not MISSING:
        value = f.default
    elif f.default_factory is not MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
    else:
        return ""
    if value is None:
        return ""
    if isinstance(value, tuple):
        value = ",".join(str(v) for v in value)
    return f" (default: {value})"


def add_config_arguments(parser: argparse.ArgumentParser, cls: type, *, skip: Sequence[str] = (),
                         required: bool = True, defaults: bool = True) -> None:
    """One flag per field of the frozen dataclass `cls` (except `skip`), with the field's help.

    required: a field without a default is a required flag (False when a YAML config may give it).
    defaults: append the field's default to its help (False when a YAML config sets the values).
    """
    hints = field_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        needed = required and f.default is MISSING and f.default_factory is MISSING  # type: ignore[misc]
        text = f.metadata.get("help", "")
        flagged = flagged_config(hints[f.name])
        if flagged is not None:  # e.g. the model: --model NAME and the model's own flags (--dtype, ...)
            parser.add_argument(flag_name(f.name), default=None, help=text, **({"required": True} if needed else {}))
            add_nested_arguments(parser, flagged)
            continue
        parse, extra = _flag_type(hints[f.name])
        if defaults and "default" not in text.lower():  # a help that says its default says it once
            text += _default_text(f)
        kwargs: FlagOptions = {"default": None, "help": text, **extra}
        if parse is not None:
            kwargs["type"] = parse
        if needed:
            kwargs["required"] = True
        parser.add_argument(flag_name(f.name), **kwargs)


def flagged_config(hint: Any) -> type | None:
    """The dataclass in a field's annotation that declares flags of its own (a `FLAGS` tuple of its
    field names, e.g. bench.model_config.ModelConfig), else None."""
    for candidate in (hint, *get_args(hint)):
        if dataclasses.is_dataclass(candidate) and isinstance(getattr(candidate, "FLAGS", None), tuple):
            return candidate  # type: ignore[return-value]
    return None


def add_nested_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One flag per name in `cls.FLAGS` (typed by its annotation, helped by HELP): each given flag
    replaces that key of the config the field names (read back with `nested_overrides`)."""
    hints = field_hints(cls)
    for name in cls.FLAGS:  # type: ignore[attr-defined]
        parse, extra = _flag_type(hints[name])
        kwargs: FlagOptions = {"default": None, "help": HELP.get(name, ""), **extra}
        if parse is not None:
            kwargs["type"] = parse
        parser.add_argument(flag_name(name), **kwargs)


def nested_overrides(args: argparse.Namespace, cls: type) -> dict[str, FlagValue]:
    """name -> value of every flag of `cls.FLAGS` that was given."""
    return {name: getattr(args, name) for name in cls.FLAGS  # type: ignore[attr-defined]
            if getattr(args, name, None) is not None}


def config_overrides(args: argparse.Namespace, cls: type, *, skip: Sequence[str] = ()) -> dict[str, FlagValue]:
    """field -> value of every flag of `cls` that was given (None values are left out)."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
            if f.name not in skip and getattr(args, f.name, None) is not None}
