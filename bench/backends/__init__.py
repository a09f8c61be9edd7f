"""Backends of `evprobe run` (`--backend`): where a model's replies come from.

One home per backend: a module here with `open_backend(config, handle)` returning a
`base.Backend`, named once in BACKENDS (imported only when chosen, so `hf` never imports vLLM or
an HTTP client). Every backend gets the same `ModelPrompt`s and returns the same `Reply`s, so the
records, resume, shards and pins of a run do not depend on it.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from evprobe.bench.backends.base import Backend, ModelPrompt, Reply, Resources, Sampling

if TYPE_CHECKING:
    from evprobe.bench.runner import RunConfig

# name -> module holding its open_backend; the order is --backend's help.
BACKENDS: dict[str, str] = {
    "hf": "evprobe.bench.backends.hf",  # transformers in this process (capture and steering run here too)
    "vllm": "evprobe.bench.backends.vllm",  # a vLLM engine in this process (the `vllm` extra)
    "openai": "evprobe.bench.backends.openai",  # any OpenAI-compatible server over HTTP
}


def check_backend(name: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}")
    return name


def open_backend(config: RunConfig, handle: Any = None) -> Backend:
    """The backend `config.backend` names, loaded (an engine started, a server checked)."""
    return import_module(BACKENDS[check_backend(config.backend)]).open_backend(config, handle)


__all__ = ["BACKENDS", "Backend", "ModelPrompt", "Reply", "Resources", "Sampling", "check_backend", "open_backend"]
