"""Typed configs: frozen dataclasses filled from YAML, then overridden by command-line flags.

    from evprobe.experiments.config import ModelConfig, load_config, load_model_config
    cfg = load_config(DoseResponseConfig, "configs/experiments/dose_response.yaml", {"limit": 8})
    model = load_model_config("qwen2_5_vl_7b")      # configs/models/qwen2_5_vl_7b.yaml

Rules (each is tested in tests/experiments/test_config.py):

- A config file is a YAML mapping whose keys are exactly the dataclass's field names. An unknown
  key is an error naming the file, the key, the section and the valid keys; a missing required key
  is an error naming it. Nested dataclasses are nested mappings (their section is the dotted path).
- Values are type-checked against the field's annotation: int (not bool), float (an int is
  accepted and converted), str, bool, None, list[...] / tuple[...] (a YAML list; tuples are stored
  as tuples so configs stay hashable), Literal[...], unions (`X | None`) and nested dataclasses.
  A wrong type is an error naming the file and the key.
- Overrides (from CLI flags) are a dict of field -> value where None means "flag not given";
  dotted keys ("model.batch_size") reach nested sections. They go through the same checks, and an
  error in one names the command line instead of the file.
- The dataclass's own `__post_init__` checks (ranges, choices) surface as the same one-line error,
  prefixed with where the value came from.
- Limits (`core.yaml_files`): a config file is at most 128 KiB, takes no YAML aliases or merge
  keys (a 500-byte file of nested aliases expands to a billion values), and nests at most 100
  levels; each is refused in one line naming the file and line before anything is built.
- Names: `resolve_config(ref, "models")` takes a path to a YAML file, or a bare name found in the
  repository's `configs/<kind>/` folder (located from this package: `<repo>/configs`), with or
  without `.yaml`.

Every error is a `ConfigError` (a ValueError): `evprobe` prints it as one line and exits 2, and
nothing has been loaded or written when it is raised.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from evprobe.bench.model_config import (
    ATTN_IMPLEMENTATIONS,
    DTYPES,
    ModelConfig,
    check_loading_keys,
    load_model,
    model_source,
)
from evprobe.core.errors import ConfigError
from evprobe.core.flags import field_hints
from evprobe.experiments.config.names import (
    CONFIG_KINDS,
    CONFIGS_DIR,
    POLICY_PREFIX,
    YAML_SUFFIXES,
    UnknownModelError,
    check_model_name,
    config_names,
    find_config,
    known_model_names,
    plausible_hub_id,
    resolve_config,
)

COMMAND_LINE = "command line"

T = TypeVar("T")


# ---------------------------------------------------------------- the model config
# ModelConfig, the one spelling of a model, lives in bench.model_config (the runner's config holds
# it); it is imported here, where the loader resolves a model config's name to its file.


def check_positive(config: Any, *keys: str, optional: bool = False) -> None:
    """Each of `keys` of `config` is an integer >= 1 (or null, with `optional`): a count, a batch
    size, a limit. Checked at config time, so 0 is refused before a model loads."""
    for key in keys:
        value = getattr(config, key)
        if value is None and optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"key {key!r} must be a positive integer{' or null' if optional else ''}, got {value!r}")


def config_from_flags(cls: type[T], args: Any, **given: Any) -> T:
    """A config from the flags `core.flags.add_config_arguments` made for it (plus `given` values),
    checked by the same typed loader as a YAML file; an error names the command line. Its model
    (when it has one) is resolved with the model flags given (`resolve_model`)."""
    from evprobe.core.flags import config_overrides

    overrides = {**config_overrides(args, cls), **given}
    if takes_model_config(cls) and isinstance(overrides.get("model"), str):
        overrides["model"] = resolve_model(overrides["model"], model_flags(args), **_model_context(cls, args))
    return load_config(cls, {}, overrides, where=COMMAND_LINE)


def add_experiment_parser(sub: Any, name: str, cls: type, run: Any, *, help: str, description: str,  # noqa: A002
                          example: str, config_required: bool = True) -> Any:
    """Register `evprobe NAME`: --config, one flag per field of `cls` (a model field: --model and the
    model flags, core.flags) and --quiet; `run(args)` handles it."""
    p = sub.add_parser(name, help=help, description=description)
    add_experiment_arguments(p, cls, example=example, config_required=config_required)
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(run=run)
    return p


def add_experiment_arguments(parser: Any, cls: type, *, example: str, config_required: bool = True) -> None:
    """`--config` (an experiment YAML) and one flag per field of `cls` overriding it (core.flags)."""
    from evprobe.core.flags import add_config_arguments

    parser.add_argument("--config", required=config_required, default=None,
                        help=f"experiment YAML: a path or a name in configs/experiments (e.g. {example})")
    add_config_arguments(parser, cls, required=False, defaults=False)


def experiment_config(cls: type[T], args: Any) -> T:
    """The config `--config` names (none: the flags alone), with every given flag of `cls` applied on
    top, through the same typed loader; then the model flags given (--dtype, --device-map, ...)
    applied to its model (`resolve_model`)."""
    from evprobe.core.flags import config_overrides

    overrides = config_overrides(args, cls)
    if getattr(args, "config", None) is None:
        missing = [f"--{f.name.replace('_', '-')}" for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                   if f.name not in overrides and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]  # type: ignore[misc]
        if missing:
            raise ConfigError(f"give --config or {', '.join(missing)}")
        config = load_config(cls, {}, overrides, where=COMMAND_LINE)
    else:
        config = load_config(cls, resolve_config(args.config, "experiments"), overrides)
    flags = model_flags(args)
    if takes_model_config(cls) and flags:
        config = dataclasses.replace(config, model=resolve_model(config.model, flags))  # type: ignore[attr-defined]
    return config


# ---------------------------------------------------------------- one way to name a model


def takes_model_config(cls: type) -> bool:
    """Whether `cls` has a `model` field holding a ModelConfig (every model-driving config)."""
    return _dataclass_in(_field_hints(cls).get("model")) is ModelConfig


def model_flags(args: Any) -> dict[str, Any]:
    """The model flags given on the command line (ModelConfig.FLAGS: --dtype, --revision, ...)."""
    from evprobe.core.flags import nested_overrides

    return nested_overrides(args, ModelConfig)


def _model_context(cls: type, args: Any) -> dict[str, bool]:
    # evprobe run's model may be a scripted policy, or with a served backend (openai) the name a server serves
    from evprobe.bench.backends.registry import DEFAULT_BACKEND, backend_spec
    from evprobe.bench.runner import RunConfig

    if cls is not RunConfig:
        return {"policies": False, "served": False}
    return {"policies": True, "served": backend_spec(getattr(args, "backend", None) or DEFAULT_BACKEND).served}


def resolve_model(value: str | ModelConfig, flags: Mapping[str, Any] | None = None, *, policies: bool = False,
                  served: bool = False) -> ModelConfig:
    """The ModelConfig that a `--model` value (or a config's `model` key) names, with `flags` (the
    model flags given: ModelConfig.FLAGS) replacing its keys, checked by the typed loader.

    A value naming a model config (`model_config_path`: a YAML path, a name in configs/models) is
    that file's ModelConfig; any other model (tiny:<arch>, a folder, a registered name, a hub id;
    policy:<name> with `policies`) a ModelConfig with the defaults. A name that is no model (a typo)
    is refused first, in one line (`check_model_name`), except with `served` (a served backend: openai),
    where the model is the name a server serves (its /models refuses a typo, with the names it
    serves)."""
    if isinstance(value, ModelConfig):
        return load_model_config(value, flags) if flags else value
    if served:
        return load_config(ModelConfig, dataclasses.asdict(ModelConfig.of(value)), flags, where=f"model {value!r}")
    path = model_config_path(value, policies=policies)
    if path is not None:
        return load_config(ModelConfig, path, flags, defaults={"name": path.stem})
    return load_config(ModelConfig, dataclasses.asdict(ModelConfig.of(value)), flags, where=f"model {value!r}")


def model_config_path(model: str, *, policies: bool = True) -> Path | None:
    """The model config YAML a `--model` value names, or None when the value is a model itself.

    `check_model_name` refuses first what is no model at all (a typo), before any network. A value
    ending in .yaml/.yml is a model config (a path, or a name in configs/models). `tiny:<arch>`, an
    existing folder and a registered model name (e.g. `organism`, see hooks.loading.named_models)
    are models, as before; any other bare name is a model config when configs/models has it (e.g.
    `tiny_llava`), else a model (a hub id). `policies`: policy:<name> is a model too (evprobe run)."""
    check_model_name(model, policies=policies)
    if model.startswith("tiny:") or model.startswith(POLICY_PREFIX) or os.path.isdir(model):
        return None
    path = find_config(model, "models")
    if path is None:
        return None
    from evprobe.hooks.loading import named_models

    return None if model in named_models() else path


def load_model_config(ref: str | Path | ModelConfig, overrides: Mapping[str, Any] | None = None) -> ModelConfig:
    """A ModelConfig from a YAML path, a bare name in configs/models, or a direct model string.

    `tiny:llava`, a hub id (`Qwen/Qwen2.5-VL-7B-Instruct`) or a local folder becomes a ModelConfig
    with the defaults (name: the string with `/` and `:` made file-safe). Anything else that is not
    a config is an error listing the known names.
    """
    if isinstance(ref, ModelConfig):
        return ref if not overrides else load_config(ModelConfig, dataclasses.asdict(ref), overrides, where=ref.name)
    text = str(ref)
    path = find_config(text, "models")
    if path is not None:
        return load_config(ModelConfig, path, overrides, defaults={"name": path.stem})
    check_model_name(text)  # a typo: one line with the closest names, before any network
    if text.startswith(POLICY_PREFIX) or text.endswith(YAML_SUFFIXES):  # refused above; unreachable
        raise ConfigError(f"model {text!r} is no model")
    name = text.replace("/", "__").replace(":", "_")
    return load_config(ModelConfig, {"name": name, "model": text}, overrides, where=f"model {text!r}")


def check_tiny_layers(model: ModelConfig, layers: Sequence[int]) -> None:
    """For a tiny model (whose layer count is known without loading it), refuse a layer it lacks in one
    line, before anything loads; other models are checked once loaded."""
    if not model.is_tiny:
        return
    from evprobe.hooks.tiny_models import N_LAYERS

    bad = [x for x in layers if x >= N_LAYERS]
    if bad:
        raise ConfigError(f"layer {bad[0]} is out of range: {model.model} has {N_LAYERS} decoder layers; "
                          f"use 0 .. {N_LAYERS - 1}")


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML file's top-level mapping, read with limits (`core.yaml_files.read_yaml`: size, no
    aliases, nesting); every fault one ConfigError line. PyYAML is imported on first use."""
    from evprobe.core.yaml_files import read_yaml as read

    return read(path)


# ---------------------------------------------------------------- filling dataclasses


def load_config(
    cls: type[T],
    source: str | Path | Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
    *,
    where: str | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> T:
    """Fill the frozen dataclass `cls` from a YAML file (or a mapping), then apply `overrides`.

    source: a YAML path, or a mapping (named `where` in errors).
    overrides: field -> value from CLI flags; None values are "not given" and skipped; dotted keys
        reach nested dataclass sections.
    defaults: values used only where the file gives none (e.g. a model config's name = file stem).
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    if isinstance(source, Mapping):
        raw, label = dict(source), where or "config"
    else:
        raw, label = read_yaml(source), where or str(source)
    for key, value in (defaults or {}).items():
        raw.setdefault(key, value)
    origin: dict[str, str] = {}  # top-level key -> where its (overridden) value came from
    _check_keys(cls, raw, label, cls.__name__)
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        _apply_override(cls, raw, key, value)
        origin[key.split(".")[0]] = COMMAND_LINE
    return _build(cls, raw, label, "", origin)


def _field_hints(cls: type) -> dict[str, Any]:
    # this module's names as a fallback for ModelConfig references in other modules
    return field_hints(cls, globals())


def _section_name(cls: type, path: str) -> str:
    return cls.__name__ if not path else f"'{path}' ({cls.__name__})"


def _check_keys(cls: type, raw: Mapping[str, Any], label: str, section: str) -> None:
    names = [f.name for f in dataclasses.fields(cls)]
    for key in raw:
        if key not in names and key in ModelConfig.FLAGS and takes_model_config(cls):
            raise ConfigError(f"{label}: key {key!r} in {section} is a key of its model now; move it under "
                              f"'model' (e.g. model: {{model: tiny:llava, {key}: ...}}) or pass --{key.replace('_', '-')}")
        if key not in names:
            raise ConfigError(f"{label}: unknown key {key!r} in {section}; valid keys: {', '.join(names)}")


def _apply_override(cls: type, raw: dict[str, Any], key: str, value: Any) -> None:
    head, _, rest = key.partition(".")
    names = [f.name for f in dataclasses.fields(cls)]
    if head not in names:
        raise ConfigError(f"{COMMAND_LINE}: unknown key {head!r} in {cls.__name__}; valid keys: {', '.join(names)}")
    if not rest:
        raw[head] = value
        return
    sub = _dataclass_in(_field_hints(cls)[head])
    if sub is None:
        raise ConfigError(f"{COMMAND_LINE}: key {key!r}: {head!r} has no sub-keys")
    current = raw.get(head)
    if not isinstance(current, Mapping):
        current = {}  # a section given by reference (or absent) is replaced by its overridden mapping
    raw[head] = dict(current)
    _apply_override(sub, raw[head], rest, value)


def _dataclass_in(hint: Any) -> type | None:
    if dataclasses.is_dataclass(hint):
        return hint
    for arg in get_args(hint):
        if dataclasses.is_dataclass(arg):
            return arg
    return None


def _build(cls: type[T], raw: Mapping[str, Any], label: str, path: str, origin: Mapping[str, str]) -> T:
    hints = _field_hints(cls)
    kwargs: dict[str, Any] = {}
    missing = []
    for f in dataclasses.fields(cls):
        if f.name not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:  # type: ignore[misc]
                missing.append(f.name)
            continue
        where = origin.get(f.name, label) if not path else label
        key = f"{path}.{f.name}" if path else f.name
        kwargs[f.name] = _check_value(raw[f.name], hints[f.name], where, key)
    if missing:
        raise ConfigError(f"{label}: missing key {missing[0]!r} in {_section_name(cls, path)}; add it "
                          f"(required: {', '.join(missing)})")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as err:  # the dataclass's own checks; its message names the key
        overridden = not path and bool(set(kwargs) & set(origin)) and label != COMMAND_LINE
        raise ConfigError(f"{label}{' with ' + COMMAND_LINE + ' overrides' if overridden else ''}: {err}") from None


_SIMPLE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
                 type(None): "null"}


def describe(hint: Any) -> str:
    """A reader's phrase for a type: 'an integer', 'a list of numbers', 'one of a, b or null'."""
    if hint in _SIMPLE_NAMES:
        return _SIMPLE_NAMES[hint]
    origin, args = get_origin(hint), get_args(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(describe(a) for a in args)
    if origin in (list, tuple):
        inner = args[0] if args else Any
        return f"a list of {describe(inner).removeprefix('an ').removeprefix('a ')}s"
    if origin in (dict, Mapping) or hint is dict:
        return "a mapping"
    if dataclasses.is_dataclass(hint):
        return f"a mapping of {hint.__name__} keys"
    return getattr(hint, "__name__", str(hint))


def _check_value(value: Any, hint: Any, where: str, key: str) -> Any:
    """`value` validated against `hint` by pydantic in strict JSON mode: a YAML list becomes a tuple
    where the hint says tuple, an int a float where it says float, and nothing else is converted
    (no "false" -> False, no 1 -> True, no 2.5 -> 2). Nested configs are built section by section
    (`_nested`) so an error inside one names its dotted key."""
    sub = _dataclass_in(hint)
    if sub is not None and (isinstance(value, Mapping) or isinstance(value, sub)):
        return _nested(sub, value, where, key)
    if hint is ModelConfig and isinstance(value, str):  # a model config's name, or a model: resolved here
        try:
            return resolve_model(value)
        except ConfigError as err:
            raise ConfigError(f"{where}: key {key!r}: {err}") from None
    from pydantic import ValidationError

    try:
        return _adapter(hint).validate_json(json.dumps(value), strict=True)
    except (ValidationError, TypeError, ValueError) as err:
        item = _bad_item(err, value, hint)
        got = f"; item {item} is {value[item]!r}" if item is not None else f", got {value!r}"
        raise ConfigError(f"{where}: key {key!r} must be {describe(hint)}{got}") from None


@functools.cache
def _adapter(hint: Any) -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(hint)


def _bad_item(err: Exception, value: Any, hint: Any) -> int | None:
    """The index of the first bad element when `value` is a list of the right kind, else None."""
    from pydantic import ValidationError

    if not isinstance(err, ValidationError) or not isinstance(value, (list, tuple)):
        return None
    lists = [h for h in (hint, *get_args(hint)) if get_origin(h) in (list, tuple)]
    if not lists:
        return None
    for error in err.errors():
        loc = [part for part in error["loc"] if isinstance(part, int)]
        if loc and loc[0] < len(value):
            return loc[0]
    return None


def _nested(cls: type, value: Mapping[str, Any], where: str, key: str) -> Any:
    if isinstance(value, cls):
        return value
    _check_keys(cls, value, where, _section_name(cls, key))
    return _build(cls, value, where, key, {})


def as_dict(config: Any) -> dict[str, Any]:
    """A config as plain JSON-able data (tuples become lists), for meta files and reports."""
    def plain(x: Any) -> Any:
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        if isinstance(x, Mapping):
            return {str(k): plain(v) for k, v in x.items()}
        return x

    return plain(config)


__all__ = [
    "ATTN_IMPLEMENTATIONS",
    "CONFIGS_DIR",
    "CONFIG_KINDS",
    "DTYPES",
    "ConfigError",
    "ModelConfig",
    "UnknownModelError",
    "check_model_name",
    "known_model_names",
    "plausible_hub_id",
    "as_dict",
    "check_tiny_layers",
    "check_loading_keys",
    "check_positive",
    "config_names",
    "describe",
    "load_config",
    "load_model",
    "load_model_config",
    "model_config_path",
    "model_flags",
    "model_source",
    "read_yaml",
    "resolve_config",
    "resolve_model",
    "takes_model_config",
]
