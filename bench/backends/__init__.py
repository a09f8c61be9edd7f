"""Backends of `evprobe run` (`--backend`): where a model's replies come from.

One home per backend: a module that declares its settings (a `BackendOptions` subclass) and
registers its opener with `@register_backend` (`registry`: built-ins imported only when chosen, so
`hf` never imports vLLM or an HTTP client; plugins through the entry-point group `evprobe.backends`).
Every backend gets the same `ModelPrompt`s and returns the same `Reply`s, so the records, resume,
shards and pins of a run do not depend on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from evprobe.bench.backends.base import Backend, BackendOptions, ModelPrompt, Reply, Resources, Sampling
from evprobe.bench.backends.registry import (
    DEFAULT_BACKEND,
    BackendSpec,
    backend_names,
    backend_spec,
    backend_specs,
    register_backend,
    unregister_backend,
)

if TYPE_CHECKING:
    from evprobe.bench.runner import RunConfig


def open_backend(config: RunConfig, handle: Any = None) -> Backend:
    """The backend `config.backend` names, loaded (an engine started, a server checked)."""
    return backend_spec(config.backend).opener(config, handle)


__all__ = ["DEFAULT_BACKEND", "Backend", "BackendOptions", "BackendSpec", "ModelPrompt", "Reply", "Resources",
           "Sampling", "backend_names", "backend_spec", "backend_specs", "open_backend", "register_backend",
           "unregister_backend"]
