"""Served judges asked for text (`bench.judges`' panels).

Each judge is an OpenAI-compatible server reached through the openai backend
(`bench.backends.openai_client`): bounded concurrency, retries, the size and time bounds of its
answers, a request cache (one per output folder; its key holds the served model, so judges never
share an answer) and a key read only from the environment. Every judge is opened (its server lists
the model, its key is accepted) before any judge is asked, so a bad last judge costs no request of
the first.

`Calls` says how a judge is called. The default is the four-way panel's (greedy, the direct
protocol's 16 tokens, free text). Seed 002's judges (Table 8: temperature 0.8, at most 512 output
tokens, structured output by JSON schema) are called with `Calls(temperature=0.8, max_tokens=512,
schemas=...)`: each prompt's key names its task (`TASK:ITEM`), and the task's JSON schema goes as the
request's `response_format` ({"type": "json_schema", ...}, as the OpenAI API and `vllm serve` take it;
a server that ignores the field answers in free text, which the strict readers then judge). The
schema is part of the request, so of its cache key too. A sampled request carries the backend's
per-call seed (`Sampling.call_seed` of the key), so a rerun asks the same requests.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from evprobe.bench.judge_inputs import Judge
from evprobe.bench.judge_reader import judge_words
from evprobe.core.errors import InputError
from evprobe.core.json_types import JsonObject

CACHE = "http-cache"


@dataclass(frozen=True)
class Calls:
    """How each judge request is made: temperature, max output tokens (None: the direct protocol's)
    and, per task, the JSON schema of the reply (sent as response_format; none: free text)."""

    temperature: float = 0.0
    max_tokens: int | None = None
    schemas: Mapping[str, JsonObject] = field(default_factory=dict)

    def response_format(self, key: str) -> JsonObject | None:
        """The response_format of the prompt keyed `TASK:ITEM`, or None."""
        task = key.split(":", 1)[0]
        schema = self.schemas.get(task) if ":" in key else None
        return None if schema is None else {"type": "json_schema",
                                            "json_schema": {"name": task, "strict": True, "schema": schema}}


@dataclass(frozen=True)
class Answer:
    """One judge's reading of one prompt: the decision its reader gives (None: none) and, when none,
    the judge's words (or the backend's error) as judgments keep them."""

    decision: Any
    words: JsonObject | None


def secrets_of(envs: list[str | None]) -> list[str]:
    """The keys the judges' variables hold (to scrub from any words kept; never written)."""
    return [os.environ[e].strip() for e in set(envs) if e is not None and os.environ.get(e, "").strip()]


def open_backends(judges: list[Judge], envs: list[str | None], out: Path, concurrency: int, stack: ExitStack,
                  calls: Calls = Calls()) -> list[Any]:
    """One openai backend per judge, each opened and checked before any judge is asked."""
    from evprobe.bench.backends.openai import open_backend
    from evprobe.bench.runner import RunConfig

    backends = []
    for judge, env in zip(judges, envs, strict=True):
        config = RunConfig.of(model=judge.model, bench=str(out), out=str(out), backend="openai",
                              base_url=judge.base_url, api_key_env=env, concurrency=concurrency,
                              http_cache=str(out / CACHE), temperature=calls.temperature)
        if calls.max_tokens is None and not calls.schemas:
            backends.append(stack.enter_context(closing(open_backend(config))))
        else:
            backends.append(stack.enter_context(closing(_shaped_class()(config, calls))))
    return backends


@lru_cache(maxsize=1)
def _shaped_class() -> type:
    """The openai backend with the judge's max tokens and per-task response_format: the request body
    (and the cache's keyed copy) gains the field; the answer's bounds follow max_tokens."""
    from evprobe.bench.backends import openai_client

    if openai_client.httpx is None:  # as open_backend says it
        raise InputError("the judges need httpx: pip install 'evprobe[openai]' (or pip install httpx)")

    class ShapedBackend(openai_client.OpenAIBackend):
        def __init__(self, config: Any, calls: Calls) -> None:
            super().__init__(config)
            self.calls = calls
            if calls.max_tokens is not None:
                self.limit = calls.max_tokens

        def _request(self, prompt: Any, images: Any, logprobs: bool) -> tuple[JsonObject, JsonObject]:
            body, keyed = super()._request(prompt, images, logprobs)
            fmt = self.calls.response_format(prompt.key)
            if fmt is None:
                return body, keyed
            return {**body, "response_format": fmt}, {**keyed, "response_format": fmt}

    return ShapedBackend


def ask(backend: Any, prompts: list[tuple[str, str]], secrets: list[str],
        read: Callable[[str, str], Any]) -> dict[str, Answer]:
    """key -> Answer for one judge; `read(key, text)` is the reader (None: no decision)."""
    from evprobe.bench.backends.base import ModelPrompt

    replies = backend([ModelPrompt(key=key, text=text) for key, text in prompts])
    out: dict[str, Answer] = {}
    for (key, _), r in zip(prompts, replies, strict=True):
        decision = None if r.error else read(key, r.text)
        words = None if decision is not None else {"error" if r.error else "reply": words_kept(r.error or r.text,
                                                                                                secrets)}
        out[key] = Answer(decision, words)
    return out


def words_kept(text: str, secrets: list[str]) -> str:
    """A judge's words as judgments keep them: no key (a server may echo it), cut, escaped."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return judge_words(text)


__all__ = ["CACHE", "Answer", "Calls", "ask", "open_backends", "secrets_of", "words_kept"]
