"""What every backend of `evprobe run` takes and gives: one prompt per item, one reply per prompt.

A backend (hf in-process, a vLLM engine, an OpenAI-compatible server) sees `ModelPrompt`s, never
benchmark items: the runner renders the item's text (`bench.protocols.build_prompt`) and names its
images; the backend turns them into its own request and returns a `Reply` per prompt, in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evprobe.core.json_types import JsonObject


@dataclass(frozen=True)
class ModelPrompt:
    """One model call: the user turn's text and its images, in prompt order.

    letters: the option letters whose log-probabilities are read at the first reply token, when the
    run asks for them (`--option-logprobs`) and the item has options; else None.
    key: a stable name of the prompt (the item id), for caches and seeds."""

    key: str
    text: str
    images: tuple[Path, ...] = ()
    letters: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Reply:
    """One prompt's reply.

    text: the generated text, never edited ("" when `error` is set).
    option_logprobs: log p(letter) at the first reply token for the prompt's letters; None when not
        asked, or when the backend could not read them (`logprobs_missing` says why).
    error: the server's or engine's own words when it returned no readable reply (a malformed or
        truncated response); the record is kept, invalid, with these words.
    cut_off: the reply's budget ran out before it ended (no end-of-sequence token within it; a
        server's finish_reason "length"); thinking_closed: a reasoning block was closed by its own
        budget (bench.budgets)."""

    text: str
    n_prompt_tokens: int | None = None
    n_new_tokens: int | None = None
    option_logprobs: dict[str, float] | None = None
    logprobs_missing: str | None = None
    error: str | None = None
    cut_off: bool = False
    thinking_closed: bool = False


@dataclass(frozen=True)
class Sampling:
    """Decoding settings shared by every backend: temperature 0 is greedy (top_p then unused).

    seed: the run's seed; a backend derives each call's seed from it and the prompts' keys, so a
    rerun of the same batch draws the same tokens where the backend honours seeds."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, (int, float)) and self.temperature >= 0):
            raise ValueError(f"--temperature must be a number >= 0, got {self.temperature!r}")
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise ValueError(f"--top-p must be in (0, 1], got {self.top_p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def call_seed(self, keys: Sequence[str]) -> int:
        """A 31-bit seed for one call from the run's seed and its prompts' keys (stable across
        processes, unlike hash())."""
        import hashlib

        digest = hashlib.sha256("\0".join([str(self.seed), *keys]).encode("utf-8")).digest()
        return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class BackendOptions:
    """A backend's own settings: a frozen dataclass subclass, one `setting(default, help)` field per
    flag (`--base-url` for base_url), each with a default. `evprobe run` shows every registered
    backend's fields as flags; a field given for another backend than the chosen one is refused in one
    line (`bench.backends.registry`). The base has no fields (a backend with no settings uses it)."""

    def check(self, config: Any) -> None:
        """Refuse, with an InputError of one line naming the flag and the fix, settings that cannot run
        (`config`: the whole RunConfig, for checks across settings); called before any work."""

    def pins(self) -> JsonObject:
        """What these settings pin in run.json before the backend loads (a rerun must agree); the
        loaded backend's `pins()` adds what only it can tell."""
        return {}

    def recorded(self) -> JsonObject:
        """These settings as run.json's `config` records them, flat beside the run's own keys (a
        backend overrides it to hide secrets, e.g. credentials in a URL)."""
        from dataclasses import asdict

        return asdict(self)


@dataclass
class Resources:
    """What a backend spent in this session (seed 000 Table 50's columns): model calls, tokens,
    seconds inside calls and the peak memory it could measure (None where it cannot)."""

    calls: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0
    peak_memory_bytes: int | None = None
    extra: JsonObject = field(default_factory=dict)  # backend-specific counts (retries, cache hits, cost)

    def add(self, replies: Sequence[Reply], seconds: float, calls: int = 1) -> None:
        self.calls += calls
        self.seconds += seconds
        self.prompt_tokens += sum(r.n_prompt_tokens or 0 for r in replies)
        self.generated_tokens += sum(r.n_new_tokens or 0 for r in replies)

    def to_json(self) -> JsonObject:
        tps = self.generated_tokens / self.seconds if self.seconds > 0 else None
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens, "generated_tokens": self.generated_tokens,
                "seconds": round(self.seconds, 3), "generated_tokens_per_s": None if tps is None else round(tps, 2),
                "peak_memory_bytes": self.peak_memory_bytes, **self.extra}


def add_resources(before: JsonObject | None, session: JsonObject) -> JsonObject:
    """run.json's `resources` after one more session that called the model: calls, tokens, seconds
    and the backend's own counts (retries and their reasons, cache hits, cost) summed, peak memory
    the largest of any session, tokens/s recomputed from the sums; `sessions` counts the sessions
    summed. A session that ends in an error writes no run.json summary, so its spend is not in it."""
    if not before or before.get("backend") != session.get("backend"):  # the first (or a run.json before them)
        return {**session, "sessions": 1}
    out = {**before, **session}
    for key, value in session.items():
        old = before.get(key)
        if key == "peak_memory_bytes":
            out[key] = max((v for v in (old, value) if v is not None), default=None)
        elif key not in ("generated_tokens_per_s", "backend"):
            out[key] = _summed(old, value)
    seconds = out.get("seconds") or 0
    out["generated_tokens_per_s"] = round(out["generated_tokens"] / seconds, 2) if seconds > 0 else None
    out["sessions"] = int(before.get("sessions", 1)) + 1
    return out


def _summed(old: Any, new: Any) -> Any:
    """Two sessions' value of one count: numbers added (None is no number: the other stands), counts
    by name added name by name; anything else is the latest session's."""
    def number(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    if number(old) and number(new):
        total = old + new
        return round(total, 6) if isinstance(total, float) else total
    if isinstance(old, dict) and isinstance(new, dict):
        return {k: _summed(old.get(k), new.get(k)) if k in old and k in new else new.get(k, old.get(k))
                for k in {**old, **new}}
    return old if new is None else new


class Backend(Protocol):
    """A loaded backend. `prepare` (optional) runs on the prefetch thread, `prefetch` (optional, an
    int) batches ahead; `check_context(prompt)` (optional) refuses a prompt that cannot fit before any
    call; `__call__` returns one Reply per prompt, in order; `pins` is what run.json pins for it (a
    rerun must agree); `close` releases engines, sessions and worker processes."""

    name: str
    resources: Resources
    takes_images: bool  # False for a text-only model: the runner refuses items with images up front

    def __call__(self, prompts: list[ModelPrompt], prepared: Any = None) -> list[Reply]: ...

    def pins(self) -> JsonObject: ...

    def close(self) -> None: ...
