"""Renamed config fields: the old name still works, for a while, with a DeprecationWarning.

A setting has one name everywhere: the Python field, the YAML key and the flag (`--folds` is the
field `folds`). Where a field was renamed to agree, `@renamed(n_splits="folds")` on the frozen
dataclass keeps the old keyword working (`SweepConfig(n_splits=3)` warns once per call site with a
DeprecationWarning naming the new name, then means `folds=3`) and keeps the old attribute readable
(`config.n_splits` is `config.folds`, silently: reading cannot mislead). Giving both the old and
the new name is a TypeError naming the new one. `renamed_keys(cls, mapping)` does the same for a
YAML mapping or a dict of overrides.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping
from typing import Any, TypeVar

from evprobe.core.flags import flag_name

V = TypeVar("V")  # the values, whatever they are: only their keys are renamed


def _message(cls: type, old: str, new: str) -> str:
    return (f"{cls.__name__}: '{old}' is now '{new}' (one name for the field, the YAML key and the flag "
            f"{flag_name(new)}); '{old}' still works for now")


def renamed_keys(cls: type, values: Mapping[str, V], *, stacklevel: int = 2) -> dict[str, V]:
    """`values` with `cls`'s old field names replaced by the new ones (a DeprecationWarning each)."""
    out = dict(values)
    for old, new in getattr(cls, "RENAMED", {}).items():
        if old not in out:
            continue
        if new in out:
            raise TypeError(f"{cls.__name__}: give '{new}' only ('{old}' is its old name)")
        warnings.warn(_message(cls, old, new), DeprecationWarning, stacklevel=stacklevel + 1)
        out[new] = out.pop(old)
    return out


def renamed(**old_to_new: str) -> Any:
    """Class decorator: accept (and read) each old field name as the new one (module docstring)."""

    def wrap(cls: type) -> type:
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **renamed_keys(cls, kwargs, stacklevel=2))

        cls.__init__ = __init__  # type: ignore[misc]
        cls.RENAMED = {**getattr(cls, "RENAMED", {}), **old_to_new}  # type: ignore[attr-defined]
        for old, new in old_to_new.items():
            setattr(cls, old, property(lambda self, name=new: getattr(self, name), doc=f"old name of `{new}`"))
        return cls

    return wrap
