"""Why a section cannot run: an evprobe API it needs is missing, or it does not apply to the model."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any


class Unavailable(Exception):
    """An evprobe API this section needs is missing (being added elsewhere)."""


class NotApplicable(Exception):
    """The section does not apply to this model (e.g. packed vision attention on CLIP)."""


def evprobe_api(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise Unavailable(f"{module}.{name} is missing ({err})") from None


def needs_parameter(fn: Callable, name: str) -> None:
    if name not in inspect.signature(fn).parameters:
        raise Unavailable(f"{fn.__module__}.{fn.__qualname__} has no {name!r} parameter")
