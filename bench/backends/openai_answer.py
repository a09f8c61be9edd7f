"""A chat-completion answer read into a `Reply`, checked against what the request allows.

The same reader takes a live answer and an http-cache entry (`bench.backends.http_cache`), so an
edited entry meets the checks a server's answer does: a reply longer than the tokens asked for can
hold, a token count beyond what was asked (or not a count at all), and log-probabilities that are
no log-probability (not a number, NaN, infinite or above 0) are refused, never read as 0.0.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evprobe.bench.backends.base import Reply
from evprobe.core.errors import shown
from evprobe.core.json_types import JsonObject, JsonValue

ERROR_CHARS = 500  # the server's words kept in a record or a message
# The longest text one token can stand for: tokenizers hold tokens of up to a few dozen characters
# (runs of spaces, dashes); 256 leaves room for any and still refuses a 40 MB reply to 16 tokens.
CHARS_PER_TOKEN = 256
# Prompt tokens a request can have: a template around the text (a few thousand), at most 4 tokens a
# character (byte fallback of non-Latin text) and an image's tokens (the largest native-resolution
# encoders give 16k a frame); a count beyond it is no count of this prompt.
TEMPLATE_TOKENS, TOKENS_PER_CHAR, TOKENS_PER_IMAGE = 16_384, 4, 65_536


@dataclass(frozen=True)
class AnswerBounds:
    """What a request allows its answer: generated tokens (max_tokens) and prompt tokens."""

    max_new_tokens: int
    max_prompt_tokens: int

    @classmethod
    def of(cls, max_new_tokens: int, prompt_chars: int, n_images: int) -> AnswerBounds:
        return cls(max_new_tokens, TEMPLATE_TOKENS + TOKENS_PER_CHAR * prompt_chars + TOKENS_PER_IMAGE * n_images)

    @property
    def max_chars(self) -> int:
        return self.max_new_tokens * CHARS_PER_TOKEN


def read_answer(answer: Any, letters: tuple[str, ...] | None, bounds: AnswerBounds,
                snippet: Callable[[str], str] | None = None) -> Reply:
    """A chat-completion answer as a Reply: the first choice's text, usage's tokens and the letters'
    first-token log-probabilities; an answer without them, or beyond `bounds`, is a Reply with the
    server's words (`snippet` shortens and redacts them)."""
    def words() -> str:
        text = json.dumps(answer, ensure_ascii=False)
        return snippet(text) if snippet is not None else text[:ERROR_CHARS]

    if not isinstance(answer, dict):
        return Reply("", error=f"the answer is not a JSON object: {words()}")
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        what = "an error" if "error" in answer else "no choices"
        return Reply("", error=f"the answer holds {what}: {words()}")
    choice = choices[0]
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else None
    if not isinstance(text, str):
        return Reply("", error=f"the answer's choices[0].message holds no text (finish_reason "
                               f"{shown(choice.get('finish_reason'))}): {words()}")
    if len(text) > bounds.max_chars:  # its words would be the reply itself: the first ones only
        head = snippet(text[:ERROR_CHARS]) if snippet is not None else text[:ERROR_CHARS]
        return Reply("", error=f"the reply holds {len(text):,} characters, more than the {bounds.max_chars:,} that "
                               f"max_tokens {bounds.max_new_tokens} can hold ({CHARS_PER_TOKEN} a token); not kept: "
                               f"{head[:200]}...")
    usage = answer.get("usage") if isinstance(answer.get("usage"), dict) else {}
    counts = []
    for name, limit in (("prompt_tokens", bounds.max_prompt_tokens), ("completion_tokens", bounds.max_new_tokens)):
        value = usage.get(name)
        count = _count(value, limit)
        if value is not None and count is None:
            return Reply("", error=f"the answer's usage.{name} is {shown(value)}, not a count from 0 to {limit:,} "
                                   f"(what this request allows): {words()}")
        counts.append(count)
    n_prompt, n_new = counts
    cut = choice.get("finish_reason") == "length"  # the budget (max_tokens) ran out: bench.budgets
    if letters is None:
        return Reply(text, n_prompt, n_new, cut_off=cut)
    found, missing = _letter_logprobs(choice, letters)
    return Reply(text, n_prompt, n_new, option_logprobs=found, logprobs_missing=missing, cut_off=cut)


def _count(value: Any, limit: int) -> int | None:
    """A token count (an integer, or a float that is one) from 0 to `limit`, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None
    return int(value) if 0 <= value <= limit else None


def _logprob(value: Any) -> float | None:
    """A log-probability as the server gave it: a number in (-inf, 0], else None (true, "NaN", 5.0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value <= 0 else None


_MARKERS = re.compile("[\u2581\u0120]")  # SentencePiece's and byte-level BPE's word-start markers


def _letter_logprobs(choice: JsonObject, letters: tuple[str, ...]) -> tuple[dict[str, float] | None, str | None]:
    """Each letter's log p at the first generated token, from the answer's alternatives there, and
    why some or all are missing (None when every letter is there): not among the alternatives, or
    given a value that is no log-probability (left out, never clipped to 0.0)."""
    lp = choice.get("logprobs")
    positions = lp.get("content") if isinstance(lp, dict) else None
    if not isinstance(positions, list) or not positions or not isinstance(positions[0], dict):
        return None, ("the server returned no log-probabilities (it ignores or does not support `logprobs`); "
                      "the record holds the generated reply only")
    first = positions[0]
    tops = first.get("top_logprobs") if isinstance(first.get("top_logprobs"), list) else []
    pairs = [(t.get("token"), t.get("logprob")) for t in (*tops, first) if isinstance(t, dict)]
    pairs = [(tok, v) for tok, v in pairs if isinstance(tok, str)]
    exact = dict(pairs)  # the token itself; the first token's own entry last, as the server states it
    loose: dict[str, float] = {}  # after a word-start marker or space: the likeliest such token
    loose_bad: dict[str, JsonValue] = {}
    for tok, v in pairs:
        bare, value = _MARKERS.sub(" ", tok).strip(), _logprob(v)
        if value is None:
            loose_bad.setdefault(bare, v)
        else:
            loose[bare] = max(value, loose.get(bare, -math.inf))
    found: dict[str, float] = {}
    bad: dict[str, JsonValue] = {}
    for x in letters:
        if x in exact:
            value = _logprob(exact[x])
            if value is None:
                bad[x] = exact[x]
            else:
                found[x] = value
        elif x in loose:
            found[x] = loose[x]
        elif x in loose_bad:
            bad[x] = loose_bad[x]
    absent = [x for x in letters if x not in found and x not in bad]
    why = []
    if bad:
        why.append("the server's log-probability of " + ", ".join(f"{x} is {shown(v, 24)}" for x, v in bad.items())
                   + ", not a number in (-inf, 0]: left out")
    if absent:
        why.append(f"{', '.join(absent)} not among the server's {len(tops)} most likely first tokens (--top-logprobs)")
    return found or None, "; ".join(why) or None


__all__ = ["AnswerBounds", "CHARS_PER_TOKEN", "ERROR_CHARS", "read_answer"]
