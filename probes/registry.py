"""The probes, each registered once under its name, and `ProbeSpec`: a probe's name with its parameters,
the one value every sweep, control, refit, transfer matrix and direction fit receives.

    from evprobe.probes import LinearProbe, register_probe

    @register_probe("ridge")
    class RidgeProbe(LinearProbe):
        def __init__(self, alpha: float = 1.0) -> None:  # parameters declared once, scikit-learn style
            self.alpha = alpha
        def fit(self, X, y): ...               # sets direction_ (unit, residual basis) and classes_
        def decision_function(self, X): ...    # > 0 predicts the positive class

After that, `evprobe sweep --probe ridge --probe-params alpha=0.5`, `evprobe directions --probe ridge`
and `SweepConfig(probe="ridge")` use it; `check_probe(RidgeProbe)` (probes.probe_checks) is the test
to copy. A package can also declare probes as entry points in the group `evprobe.probes`
(`ridge = "mypkg.probes:RidgeProbe"`), found without importing anything else.

Built-in probes are listed as "module:Class" references, imported when first made, so listing the
names (the `--probe` choices) costs no scikit-learn import. A name registered twice, a class that is
not a `LinearProbe`, an `__init__` taking *args or **kwargs (scikit-learn cannot clone it), and an
unknown name or parameter are each refused in one line that lists what is valid.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evprobe.probes.engine import Fitter
    from evprobe.probes.protocol import LinearProbe

# Built-in probes: name -> "module:Class", imported on first use.
BUILTIN = {
    "logistic": "evprobe.probes.estimators:LogisticProbe",
    "massmean": "evprobe.probes.estimators:MassMeanProbe",
    "centroid": "evprobe.probes.estimators:NearestCentroidProbe",
}
ENTRY_POINT_GROUP = "evprobe.probes"
# Flags every probe command has had (--C, --pooled-covariance) and their defaults. Set away from its
# default, a flag goes to the probe when its class declares a parameter of that name, and is refused
# when it does not (it would be ignored silently); at its default the class's own default stands.
SHARED_KNOBS: dict[str, float | bool] = {"C": 1.0, "pooled_covariance": False}

_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_REFS: dict[str, str] = dict(BUILTIN)  # name -> "module:Class" not imported yet
_CLASSES: dict[str, type] = {}  # name -> class
_entry_points_read = False


def _read_entry_points() -> None:
    global _entry_points_read
    if not _entry_points_read:
        _entry_points_read = True
        from evprobe.core.entry_points import entry_point_refs

        _REFS.update(entry_point_refs(ENTRY_POINT_GROUP, [*_REFS, *_CLASSES], "probe"))


def probe_names() -> tuple[str, ...]:
    """Every registered probe name, built-in first, then in registration order."""
    _read_entry_points()
    return tuple(dict.fromkeys([*BUILTIN, *_REFS, *_CLASSES]))


def register_probe(name: str):  # noqa: ANN201 (a class decorator)
    """Class decorator: register a `LinearProbe` subclass under `name` (module docstring)."""

    def add(cls: type) -> type:
        from evprobe.probes.protocol import LinearProbe  # scikit-learn, imported only when a probe is

        listed = ", ".join(probe_names())
        if not _NAME.match(name):
            raise ValueError(f"probe name {name!r}: use lowercase letters, digits, '_' and '-' (registered: {listed})")
        if name in _CLASSES or (name in _REFS and _REFS[name] != f"{cls.__module__}:{cls.__qualname__}"):
            raise ValueError(f"probe {name!r} is already registered (registered: {listed}); pick another name")
        if not (isinstance(cls, type) and issubclass(cls, LinearProbe)):
            raise TypeError(f"probe {name!r}: {cls!r} is not a subclass of evprobe.probes.LinearProbe (fit, "
                            "decision_function, direction_); subclass it")
        missing = [m for m in ("fit", "decision_function") if getattr(cls, m) is getattr(LinearProbe, m)]
        if missing:  # the protocol base only declares them
            raise TypeError(f"probe {name!r}: {cls.__name__} does not define {' or '.join(missing)}; a probe fits "
                            "(setting direction_ and classes_) and scores (> 0: the positive class)")
        _check_init(name, cls)
        cls.name = name
        _CLASSES[name] = cls
        _REFS.pop(name, None)
        return cls

    return add


def unregister_probe(name: str) -> None:
    """Remove a probe registered with `register_probe` (tests; built-ins stay)."""
    if name in BUILTIN:
        raise ValueError(f"probe {name!r} is built in and cannot be unregistered")
    _CLASSES.pop(name, None)
    _REFS.pop(name, None)


def _check_init(name: str, cls: type) -> None:
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            star = "*" if p.kind == p.VAR_POSITIONAL else "**"
            raise TypeError(f"probe {name!r}: {cls.__name__}.__init__ takes {star}{p.name}; declare each parameter by name with "
                            "a default (scikit-learn's get_params and clone need them)")


def probe_class(name: str) -> type[LinearProbe]:
    """The class registered as `name`; an unknown name is refused listing the registered ones."""
    _read_entry_points()
    if name in _CLASSES:
        return _CLASSES[name]
    if name not in _REFS:
        raise ValueError(f"unknown probe {name!r}; use one of {', '.join(probe_names())}")
    ref = _REFS[name]
    module, _, attr = ref.partition(":")
    cls = getattr(import_module(module), attr)  # its module's @register_probe may have registered it already
    if name not in _CLASSES:
        register_probe(name)(cls)
    return _CLASSES[name]


def parameters(name: str) -> dict[str, Any]:
    """The parameters `name`'s class declares, with their defaults."""
    cls = probe_class(name)
    return {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items() if k != "self"}


def _coerce(name: str, key: str, value: Any, default: Any) -> Any:
    """A --probe-params value given as text, typed by the parameter's default."""
    if not isinstance(value, str) or isinstance(default, str):
        return value
    text = value.strip()
    try:
        if isinstance(default, bool):
            if text.lower() not in ("true", "false"):
                raise ValueError
            return text.lower() == "true"
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float) or default is None:
            return float(text)
    except ValueError:
        kind = "true or false" if isinstance(default, bool) else type(default).__name__ if default is not None else "a number"
        raise ValueError(f"probe {name!r}: parameter {key}={value!r} is not {kind} (default {default!r})") from None
    return value


@dataclass(frozen=True)
class ProbeSpec:
    """A registered probe's name and the parameters it is made with (only those that differ from the
    class's defaults, so equal probes have equal specs). `make()` builds a fresh estimator, `fitter()` the fold engine's fitter."""

    name: str
    params: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, probe: str | ProbeSpec | LinearProbe, params: Mapping[str, Any] | Iterable[str] = (),
           **shared: Any) -> ProbeSpec:
        """The spec of a name (with `params`, a mapping or "NAME=VALUE" strings, and the shared knobs
        C / pooled_covariance where the class declares them), of a spec, or of an estimator instance
        (its get_params()). Unknown names and parameters are refused in one line."""
        from evprobe.probes.protocol import LinearProbe

        if isinstance(probe, ProbeSpec):
            base, name = dict(probe.params), probe.name
        elif isinstance(probe, LinearProbe):
            name = type(probe).name
            if name not in probe_names() or probe_class(name) is not type(probe):
                raise ValueError(f"{type(probe).__name__} is not registered; decorate it with @register_probe(NAME)")
            base = probe.get_params(deep=False)
        elif isinstance(probe, str):
            base, name = {}, probe
        else:
            raise TypeError(f"probe must be a name, a ProbeSpec or a LinearProbe, got {type(probe).__name__}")
        declared = parameters(name)  # refuses an unknown name
        given = dict(base)
        pairs = params.items() if isinstance(params, Mapping) else (_split(name, p) for p in params)
        for key, value in pairs:
            if key not in declared:
                raise ValueError(f"probe {name!r} has no parameter {key!r} (its parameters: "
                                 f"{', '.join(declared) or 'none'})")
            given[key] = _coerce(name, key, value, declared[key])
        for key, value in shared.items():
            if key not in SHARED_KNOBS:
                raise TypeError(f"unknown shared probe setting {key!r} (shared: {', '.join(SHARED_KNOBS)})")
            if value == SHARED_KNOBS[key]:
                continue  # the flag at its default: the class's own default stands
            if key in declared:
                if key in given and given[key] != value:
                    raise ValueError(f"probe {name!r}: {key} is given twice ({given[key]!r} and {value!r}); give it once")
                given[key] = value
            else:
                owners = [n for n in probe_names() if n in BUILTIN and key in parameters(n)]
                raise ValueError(f"{key}={value!r} applies to the {' and '.join(owners)} probe; probe {name!r} has no "
                                 f"parameter {key!r} (its parameters: {', '.join(declared) or 'none'})")
        # canonical: only values that differ from the class's defaults, so equal probes make equal specs
        return cls(name, tuple(sorted((k, v) for k, v in given.items() if not _same(v, declared[k]))))

    def make(self) -> LinearProbe:
        return probe_class(self.name)(**dict(self.params))

    def fitter(self) -> Fitter:
        return self.make().fitter()

    def get(self, key: str) -> Any:
        """A parameter's value: given, or the class's default."""
        return dict(self.params).get(key, parameters(self.name).get(key))

    @property
    def capabilities(self) -> Any:
        return self.make().capabilities

    def __str__(self) -> str:
        return self.name + (f"({', '.join(f'{k}={v!r}' for k, v in self.params)})" if self.params else "")


def _same(a: Any, b: Any) -> bool:
    """a equals the default b (1 == 1.0; True is not 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 (e.g. an array compares elementwise): not the default
        return False


def _split(name: str, text: str) -> tuple[str, str]:
    key, eq, value = str(text).partition("=")
    if not eq or not key.strip():
        raise ValueError(f"probe {name!r}: --probe-params {text!r} is not NAME=VALUE (e.g. C=0.5)")
    return key.strip(), value
