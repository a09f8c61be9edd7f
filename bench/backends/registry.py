"""The backends of `evprobe run`, each registered once under its name with its own settings.

    from dataclasses import dataclass
    from evprobe.bench.backends import BackendOptions, register_backend
    from evprobe.core.flags import setting

    @dataclass(frozen=True)
    class EchoOptions(BackendOptions):
        letter: str = setting("A", "echo backend: the reply to every prompt")   # becomes --letter

    @register_backend("echo", options=EchoOptions, help="the same letter for every prompt")
    class EchoBackend: ...   # EchoBackend(config, handle) is a base.Backend; config.backend_options an EchoOptions

Then `evprobe run --backend echo --letter B` and `RunConfig(backend="echo", backend_options=EchoOptions("B"))`
run it (docs/howto/add-backend.md is the whole example, tested).

Choices, and why:
- One home per backend: the module that declares its options (a `base.BackendOptions` subclass: its
  fields are its flags, `check` its refusals, `pins` and `recorded` what run.json holds of them) and
  registers its opener. The runner and the CLI read the spec (`BackendSpec`): no backend's name is
  spelled outside its module, and a backend's flags given to another backend are refused in one line.
- Lazy: the built-ins are module names imported on first use, and listing names imports nothing, so
  `import evprobe.bench` imports no HTTP client or vLLM. `evprobe run --help` imports every backend
  module to show its flags, so a backend module keeps its heavy imports inside its opener.
- Plugins: an installed package declares `echo = "mypkg.echo"` (the module whose decorator registers
  the name, or "module:object") in the entry-point group `evprobe.backends`, read when a name is not
  found among the loaded ones or when every name is listed (as probes: `probes.registry`).
- One flag, one owner: an options field named like a run or model flag, or like another backend's
  field, is refused at registration (argparse could not tell them apart).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from importlib import import_module
from typing import TYPE_CHECKING, Any

from evprobe.bench.backends.base import Backend, BackendOptions
from evprobe.core.errors import InputError
from evprobe.core.json_types import JsonObject

if TYPE_CHECKING:
    from evprobe.bench.runner import RunConfig

DEFAULT_BACKEND = "hf"
# Built-in backends: name -> the module that registers it, imported on first use; the order is
# --backend's help.
BUILTIN = {
    "hf": "evprobe.bench.backends.hf",  # transformers in this process (capture and steering run here too)
    "vllm": "evprobe.bench.backends.vllm",  # a vLLM engine in this process (the `vllm` extra)
    "openai": "evprobe.bench.backends.openai",  # any OpenAI-compatible server over HTTP
}
ENTRY_POINT_GROUP = "evprobe.backends"
Opener = Callable[["RunConfig", Any], Backend]

_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_REFS: dict[str, str] = dict(BUILTIN)  # name -> module (or module:object) not imported yet
_SPECS: dict[str, BackendSpec] = {}
# flag names no backend's options may take -> whose they are: RunConfig's fields, reserved by
# bench.runner when it is imported (`reserve_flags`: the runner imports this module, not the reverse)
_RESERVED: dict[str, str] = {}
_entry_points_read = False


@dataclasses.dataclass(frozen=True)
class BackendSpec:
    """A registered backend.

    opener: `opener(config, handle)` returns the loaded `base.Backend` (handle: a model in memory, or None).
    options: its settings' class (a `BackendOptions` subclass; `BackendOptions` itself for none).
    model_keys: model flags (ModelConfig keys) only this backend reads (hf: --device-map, ...): set for
        another backend, they are refused like its options.
    served: the model runs elsewhere: `--model` is the name a server serves, not resolved, hashed or
        loaded here (run.json pins `model_source: served`).
    takes_handle: runs a model already in memory (`run(config, handle=...)`).
    native_video: takes clips as videos (`--video-input native`); its backend has the `processor`
        whose video path is checked.
    thinking_budget: closes a reasoning block when its own budget runs out (`--thinking-budget`,
        bench.budgets)."""

    name: str
    opener: Opener
    options: type[BackendOptions]
    help: str = ""
    model_keys: tuple[str, ...] = ()
    served: bool = False
    takes_handle: bool = False
    native_video: bool = False
    thinking_budget: bool = False

    @property
    def settings(self) -> tuple[str, ...]:
        """Every setting only this backend reads: its options' fields, then its model keys."""
        return (*(f.name for f in dataclasses.fields(self.options)), *self.model_keys)


def register_backend(name: str, *, options: type[BackendOptions] = BackendOptions, help: str = "",  # noqa: A002
                     model_keys: tuple[str, ...] = (), served: bool = False, takes_handle: bool = False,
                     native_video: bool = False, thinking_budget: bool = False) -> Callable[[Opener], Opener]:
    """Decorator of a backend's opener (a function or a class called as `opener(config, handle)`):
    register it under `name` with its settings (`BackendSpec`); the opener is returned unchanged."""

    def add(opener: Opener) -> Opener:
        if name not in BUILTIN:  # a clash with a built-in's flag is the newcomer's, so load them first
            for builtin in BUILTIN:
                backend_spec(builtin)
        if name in BUILTIN and name not in _SPECS and BUILTIN[name] != getattr(opener, "__module__", None):
            backend_spec(name)  # the built-in's own module first: the newcomer is the clash
        listed = ", ".join(backend_names())
        if not _NAME.match(name):
            raise ValueError(f"backend name {name!r}: use lowercase letters, digits, '_' and '-' (registered: {listed})")
        old = _SPECS.get(name)
        if old is not None and _where(old.opener) != _where(opener):
            raise ValueError(f"backend {name!r} is already registered (registered: {listed}); pick another name")
        if not callable(opener):
            raise TypeError(f"backend {name!r}: {opener!r} is not callable; register a function or class taking "
                            "(config, handle) and returning a backend")
        _check_options(name, options, model_keys)
        _SPECS[name] = BackendSpec(name, opener, options, help, tuple(model_keys), served, takes_handle, native_video,
                                  thinking_budget)
        return opener

    return add


def reserve_flags(names: Iterable[str], whose: str) -> None:
    """Reserve flag names for `whose` (bench.runner: the settings of every run); a backend already
    registered with one of them is refused in one line, as a later one will be."""
    for name in names:
        for spec in _SPECS.values():
            if name in {f.name for f in dataclasses.fields(spec.options)}:
                raise ValueError(_clash(spec.name, spec.options, name, whose))
        _RESERVED[name] = whose


def unregister_backend(name: str) -> None:
    """Remove a backend registered with `register_backend` (tests; built-ins stay)."""
    if name in BUILTIN:
        raise ValueError(f"backend {name!r} is built in and cannot be unregistered")
    _SPECS.pop(name, None)
    _REFS.pop(name, None)


def backend_names() -> tuple[str, ...]:
    """Every registered backend's name, built-in first, then entry points and registrations in order;
    nothing is imported."""
    _read_entry_points()
    return tuple(dict.fromkeys([*BUILTIN, *_REFS, *_SPECS]))


def backend_spec(name: str) -> BackendSpec:
    """The spec registered as `name`, its module imported on first use; an unknown name is refused in
    one line listing the registered ones."""
    if name not in _SPECS and name not in _REFS:
        _read_entry_points()
    if name in _SPECS:
        return _SPECS[name]
    if not isinstance(name, str) or name not in _REFS:
        raise InputError(f"unknown backend {name!r}; choose from {', '.join(backend_names())} (a plugin registers "
                         f"more: entry-point group {ENTRY_POINT_GROUP}, docs/howto/add-backend.md)")
    ref = _REFS[name]
    module, _, attr = ref.partition(":")
    found = import_module(module)  # its @register_backend registers the name
    if attr:
        getattr(found, attr)
    if name not in _SPECS:
        raise InputError(f"backend {name!r}: {ref} registers no backend of that name; decorate its opener with "
                         f"@register_backend({name!r}, ...) (evprobe.bench.backends)")
    return _SPECS[name]


def backend_specs() -> tuple[BackendSpec, ...]:
    """Every registered backend's spec (each module imported), in `backend_names` order."""
    return tuple(backend_spec(name) for name in backend_names())


def backend_only() -> dict[str, tuple[str, ...]]:
    """name -> the settings only that backend reads (`BackendSpec.settings`), every backend."""
    return {spec.name: spec.settings for spec in backend_specs()}


def add_backend_arguments(parser: Any) -> None:
    """`--backend` (its choices: every registered name) and each backend's settings as flags, a group
    per backend (`core.flags.add_config_arguments` of its options; read back by `options_from_flags`)."""
    from evprobe.core.flags import add_config_arguments

    specs = backend_specs()
    parser.add_argument("--backend", default=None, choices=[s.name for s in specs],
                        help="where replies come from: " + "; ".join(f"{s.name} ({s.help})" for s in specs)
                        + f" (default: {DEFAULT_BACKEND}; plugins: entry-point group {ENTRY_POINT_GROUP})")
    for spec in specs:
        if dataclasses.fields(spec.options):
            add_config_arguments(parser.add_argument_group(f"--backend {spec.name} ({spec.help})"), spec.options)


def options_from_flags(args: Any) -> BackendOptions:
    """The chosen backend's options from the flags given (`add_backend_arguments`); a flag of another
    backend is refused in one line naming it, before any work."""
    from evprobe.core.flags import config_overrides

    backend = getattr(args, "backend", None) or DEFAULT_BACKEND
    spec = backend_spec(backend)
    for other in backend_specs():
        given = config_overrides(args, other.options)
        if other.name != backend and given:
            raise InputError(foreign(next(iter(given)), other.name, backend))
    return spec.options(**config_overrides(args, spec.options))


def foreign(setting: str, owner: str, backend: str) -> str:
    """The one line refusing `setting`, a setting of backend `owner`, on a run of `backend`."""
    return (f"--{setting.replace('_', '-')} is a setting of --backend {owner}; this run's backend is {backend}: "
            f"drop it or use --backend {owner}")


def options_for(backend: str, given: BackendOptions | None) -> BackendOptions:
    """The settings a run of `backend` gets from `given` (RunConfig.__post_init__): its own options
    as given, its defaults for None or for another backend's options left at their defaults (as
    `dataclasses.replace(config, backend=...)` leaves them); another backend's changed setting is
    refused in one line naming it."""
    spec = backend_spec(backend)
    if given is None:
        return spec.options()
    if type(given) is spec.options:
        return given
    if not isinstance(given, BackendOptions):
        raise InputError(f"backend_options must be a {spec.options.__name__} (the settings of --backend {backend}), "
                         f"got {type(given).__name__}")
    changed = [f.name for f in dataclasses.fields(given) if getattr(given, f.name) != _default(f)]
    if not changed:
        return spec.options()
    owner = next((s.name for s in _SPECS.values() if s.options is type(given)), type(given).__name__)
    raise InputError(foreign(changed[0], owner, backend))


def recorded_config(config: RunConfig) -> JsonObject:
    """run.json's `config`: the run's settings with the backends' flat beside them, every built-in
    backend's (the others' at their defaults), then the chosen one's own (`BackendOptions.recorded`:
    secrets hidden). The built-ins' keys are kept because they were RunConfig fields: a run.json
    reads, merges and compares (evprobe parity) as it did, whatever plugins are installed."""
    out = dataclasses.asdict(config)
    out.pop("backend_options")
    for name in BUILTIN:
        out.update(backend_spec(name).options().recorded())
    return {**out, **config.backend_options.recorded()}  # type: ignore[union-attr]


def split_settings(backend: str, settings: Mapping[str, Any]) -> tuple[dict[str, Any], BackendOptions]:
    """Flat settings, spelled as the flags and run.json's config spell them, split into the run's own
    and `backend`'s options (JSON lists back to tuples). Another backend's setting is refused in one
    line when it differs from its default, and left out at its default (run.json's config lists every
    built-in backend's); a key no backend owns is the run's (RunConfig refuses an unknown one)."""
    spec = backend_spec(backend)
    own = {f.name for f in dataclasses.fields(spec.options)}
    others = {f.name: (s.name, _default(f)) for s in backend_specs() if s is not spec
              for f in dataclasses.fields(s.options)}
    rest, mine = {}, {}
    for key, value in settings.items():
        if key in own:
            mine[key] = tuple(value) if isinstance(value, list) else value
        elif key in others:
            owner, default = others[key]
            if value != default:
                raise InputError(foreign(key, owner, backend))
        else:
            rest[key] = value
    return rest, spec.options(**mine)


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default  # type: ignore[misc]


def _where(opener: Any) -> str:
    return f"{getattr(opener, '__module__', '')}:{getattr(opener, '__qualname__', repr(opener))}"


def _check_options(name: str, options: Any, model_keys: tuple[str, ...]) -> None:
    """The options class is a frozen BackendOptions dataclass whose fields have defaults and take no
    flag that is already another's (module docstring)."""
    from evprobe.bench.model_config import ModelConfig

    # its own @dataclass(frozen=True): an undecorated subclass inherits the base's (no) fields
    if not (isinstance(options, type) and issubclass(options, BackendOptions)
            and "__dataclass_params__" in vars(options) and options.__dataclass_params__.frozen):  # type: ignore[attr-defined]
        raise TypeError(f"backend {name!r}: options={options!r} is not a frozen dataclass subclassing "
                        "evprobe.bench.backends.BackendOptions; declare @dataclass(frozen=True) class ...(BackendOptions)")
    taken = {**_RESERVED, **{k: "a model flag" for k in ModelConfig.FLAGS}}
    for spec in _SPECS.values():
        if spec.name != name:
            taken.update({f.name: f"a setting of --backend {spec.name}" for f in dataclasses.fields(spec.options)})
    for f in dataclasses.fields(options):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:  # type: ignore[misc]
            raise TypeError(f"backend {name!r}: {options.__name__}.{f.name} has no default; give every setting "
                            "one (a run of another backend leaves it unset)")
        if f.name in taken:
            raise ValueError(_clash(name, options, f.name, taken[f.name]))
    bad = [k for k in model_keys if k not in ModelConfig.FLAGS]
    if bad:
        raise ValueError(f"backend {name!r}: model_keys {bad[0]!r} is no model flag; choose from "
                         f"{', '.join(ModelConfig.FLAGS)}")


def _clash(name: str, options: type, field: str, whose: str) -> str:
    return f"backend {name!r}: {options.__name__}.{field} would be --{field.replace('_', '-')}, already {whose}; rename the field"


def _read_entry_points() -> None:
    global _entry_points_read
    if not _entry_points_read:
        _entry_points_read = True
        from evprobe.core.entry_points import entry_point_refs

        _REFS.update(entry_point_refs(ENTRY_POINT_GROUP, [*BUILTIN, *_SPECS], "backend"))
