"""`--backend openai`: any OpenAI-compatible chat-completions server over HTTP at `--base-url`.

This module is the backend's home in the registry (`bench.backends.registry`): its settings
(`OpenAIOptions`, the flags --base-url ... --max-response-mb), their checks and its registration.
The client itself (requests, retries, bounds, cache, keys) is `bench.backends.openai_client`,
imported only when a run opens the backend, so listing the flags imports no HTTP client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evprobe.bench.backends.base import BackendOptions
from evprobe.bench.backends.registry import register_backend
from evprobe.core.errors import InputError
from evprobe.core.flags import setting
from evprobe.core.json_types import JsonObject

if TYPE_CHECKING:
    from evprobe.bench.backends.openai_client import OpenAIBackend
    from evprobe.bench.runner import RunConfig


@dataclass(frozen=True)
class OpenAIOptions(BackendOptions):
    """Where the server is, how hard to try, and what to read back (bench.backends.openai_client)."""

    base_url: str | None = setting(None, "openai backend: the server's base URL, e.g. http://127.0.0.1:8000/v1")
    served_model: str | None = setting(None, "openai backend: the model name the server serves (default: --model)")
    api_key_env: str | None = setting(None, "openai backend: the environment variable holding the API key (never "
                                            "written anywhere); none = no key sent")
    concurrency: int = setting(4, "openai backend: requests in flight at once")
    request_timeout_s: float = setting(120.0, "openai backend: seconds one try of a request may take in all (connect, "
                                              "headers and body) before it is given up and retried")
    max_response_mb: float = setting(4.0, "openai backend: the largest answer body read, in MB (plus 1 KB per "
                                          "log-probability alternative asked); a larger one is an invalid record")
    max_retries: int = setting(5, "openai backend: retries of a request after a connection error, timeout, 429 or 5xx")
    http_cache: str | None = setting(None, "openai backend: folder of the request-hash cache (default RUN/http-cache); "
                                           "a request already answered is never sent again")
    top_logprobs: int = setting(20, "openai backend: alternatives asked per reply token with --option-logprobs (the "
                                    "OpenAI API allows 20; vllm serve up to its --max-logprobs)")
    usd_per_mtok: tuple[float, ...] | None = setting(
        None, "openai backend: prices per million prompt and generated tokens, 'IN,OUT', for run.json's cost")

    def check(self, config: Any) -> None:
        if config.model.prompt_format == "raw":
            raise InputError("--prompt-format raw needs a completion call; --backend openai sends chat turns "
                             "(the server applies its chat template): drop --prompt-format or use --backend hf/vllm")
        if not self.base_url:
            raise InputError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
        for name in ("concurrency", "max_retries"):
            value = getattr(self, name)
            if type(value) is not int or value < (1 if name == "concurrency" else 0):
                raise InputError(f"--{name.replace('_', '-')} must be a {'positive' if name == 'concurrency' else 'non-negative'} "
                                 f"integer, got {value!r}")
        if type(self.top_logprobs) is not int or self.top_logprobs < 1:
            raise InputError(f"--top-logprobs must be a positive integer, got {self.top_logprobs!r}")
        for name in ("request_timeout_s", "max_response_mb"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise InputError(f"--{name.replace('_', '-')} must be a positive number, got {value!r}")
        if self.usd_per_mtok is not None and (len(self.usd_per_mtok) != 2 or min(self.usd_per_mtok) < 0):
            raise InputError(f"--usd-per-mtok takes two non-negative prices, IN,OUT, got {self.usd_per_mtok!r}")

    def recorded(self) -> JsonObject:
        from evprobe.bench.backends.redact import shown_url

        # the URL's credentials (user:password@, ?api_key=) never on disk
        return {**super().recorded(), "base_url": shown_url(self.base_url)}


@register_backend("openai", options=OpenAIOptions, help="an OpenAI-compatible server at --base-url", served=True)
def open_backend(config: RunConfig, handle: Any = None) -> OpenAIBackend:
    if handle is not None:  # the runner refuses it first; a direct caller gets the same line
        raise InputError("a model in memory runs on the hf backend, not openai")
    from evprobe.bench.backends import openai_client

    if openai_client.httpx is None:
        raise InputError("--backend openai needs httpx: pip install 'evprobe[openai]' (or pip install httpx)")
    return openai_client.OpenAIBackend(config)


__all__ = ["OpenAIOptions", "open_backend"]
