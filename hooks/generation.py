"""Generation (greedy, or sampled when asked) and next-token log-probabilities on a Handle.

Both batch rows through `build_inputs` (one processor call, left padding) and
are written so that a row gives the same result batched as alone.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import numpy as np

from evprobe.core.errors import InputError, OneLineWarning
from evprobe.hooks.inputs import build_inputs, image_rows

if TYPE_CHECKING:
    from PIL import Image

    from evprobe.hooks.handle import Handle


class GenerateOptions(TypedDict):
    """The options of a steered generation (hooks.steering), as transformers' generate takes them: greedy,
    one beam, sampling settings cleared, the scores returned."""

    max_new_tokens: int
    do_sample: bool
    num_beams: int
    pad_token_id: int | None
    temperature: None
    top_p: None
    top_k: None
    output_scores: bool
    return_dict_in_generate: bool
    min_new_tokens: NotRequired[int]


@dataclass(frozen=True)
class Generation:
    """One row's greedy continuation.

    text: the new tokens decoded, special tokens skipped.
    token_ids: the new token ids, up to and including the first end-of-sequence
        token (padding after it removed).
    n_prompt_tokens: prompt length in tokens, padding excluded (image tokens included).
    n_new_tokens: len(token_ids).
    cut_off: the reply's budget ran out before an end-of-sequence token (hooks.thinking_budget for
        a reply after a reasoning block); thinking_closed: a reasoning block was closed by its budget.
    """

    text: str
    token_ids: tuple[int, ...]
    n_prompt_tokens: int
    n_new_tokens: int
    first_logprobs: tuple[float, ...] | None = None  # generate_encoded(first_token_ids=...) only
    cut_off: bool = False
    thinking_closed: bool = False


def _eos_ids(handle: Handle) -> set[int]:
    eos = handle.model.generation_config.eos_token_id
    if eos is None:
        eos = handle.tokenizer.eos_token_id
    if eos is None:
        return set()
    return {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])}


def _batches(n: int, batch_size: int):
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    for start in range(0, n, batch_size):
        yield slice(start, min(start + batch_size, n))


# How the KV cache of greedy decoding is kept (`generate(decode_cache=...)`):
# dynamic   transformers' default: the cache grows by one position per step.
# static    a cache of fixed size (prompt + max_new_tokens) allocated once, no compilation.
# compiled  the static cache and the decoding step compiled with torch.compile (mode
#           "reduce-overhead", CUDA graphs, on a GPU; "default" elsewhere). The first call of each
#           (batch, length) shape pays for compilation; later calls reuse it.
DECODE_CACHES: tuple[str, ...] = ("dynamic", "static", "compiled")


def check_decode_cache(name: str) -> str:
    if name not in DECODE_CACHES:
        raise ValueError(f"unknown decode cache {name!r}; choose from {', '.join(DECODE_CACHES)}")
    return name


def _cache_kwargs(handle: Handle, decode_cache: str) -> dict:
    """generate() keywords for `decode_cache` (check_decode_cache'd)."""
    if decode_cache == "dynamic":
        return {}
    if decode_cache == "static":
        return {"cache_implementation": "static", "disable_compile": True}
    from transformers import CompileConfig

    on_gpu = handle.device.type == "cuda"
    config = CompileConfig(mode="reduce-overhead" if on_gpu else "default")
    # transformers compiles the decoding step by itself only on accelerators; this private switch
    # (read by GenerationMixin._valid_auto_compile_criteria) asks for it on every device, so the
    # setting is the same code on CPU, where the tests check it against the dynamic cache.
    config._compile_all_devices = True
    return {"cache_implementation": "static", "compile_config": config}


def generate(
    handle: Handle,
    prompts: Sequence[str],
    images: Sequence[Sequence[Image.Image]] | None = None,
    *,
    max_new_tokens: int,
    batch_size: int = 1,
    decode_cache: str = "dynamic",
) -> list[Generation]:
    """Greedy (do_sample=False) continuation of each (prompt, images) row.

    decode_cache: how decoding keeps its KV cache (DECODE_CACHES); greedy tokens are the same for
    every choice up to floating-point reassociation (tests/hooks/test_generation_speed.py)."""
    images = image_rows(prompts, images)
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    check_decode_cache(decode_cache)
    out: list[Generation] = []
    for rows in _batches(len(prompts), batch_size):
        # generate() derives position ids from the mask itself (same function).
        enc = build_inputs(handle, list(prompts[rows]), list(images[rows]), position_ids=False, for_generation=True)
        out.extend(generate_encoded(handle, enc, max_new_tokens=max_new_tokens, decode_cache=decode_cache))
    return out


def generate_encoded(handle: Handle, enc, *, max_new_tokens: int, decode_cache: str = "dynamic",
                     min_new_tokens: int | None = None, temperature: float = 0.0, top_p: float = 1.0,
                     seed: int | None = None, first_token_ids: Sequence[int] | None = None,
                     thinking_budget: int | None = None) -> list[Generation]:
    """`generate` on inputs already built (`build_inputs(..., position_ids=False,
    for_generation=True)`, on the model's device): one model.generate call for all rows of `enc`.
    min_new_tokens forces that many tokens (a timing of random weights that never stop).
    temperature 0 is greedy; above 0 samples (top_p nucleus), seeded by `seed` (torch's global
    generator: `generate` takes no generator of its own). first_token_ids: also read these tokens'
    log-probabilities at the first new position (Generation.first_logprobs), from the model's
    logits before any sampling setting. thinking_budget: a reasoning block's own budget, on top of
    max_new_tokens, which is then the reply's after the block (hooks.thinking_budget)."""
    import torch

    from evprobe.hooks.thinking_budget import ThinkingBudget

    if temperature < 0 or not 0 < top_p <= 1:
        raise ValueError(f"temperature must be >= 0 and top_p in (0, 1], got {temperature} and {top_p}")
    eos = _eos_ids(handle)
    prompt_len = enc["input_ids"].shape[1]
    sampled = temperature > 0
    if sampled and seed is not None:
        torch.manual_seed(seed)
    budget = None if thinking_budget is None else ThinkingBudget(handle.tokenizer, enc["input_ids"],
                                                                  thinking=thinking_budget, reply=max_new_tokens, eos=eos)
    extra = {} if budget is None else {"logits_processor": [budget.processor], "stopping_criteria": [budget.criteria]}
    with torch.inference_mode():
        result = handle.model.generate(
            **enc,
            **extra,
            max_new_tokens=max_new_tokens if budget is None else budget.max_new_tokens,
            min_new_tokens=min_new_tokens,
            do_sample=sampled,
            num_beams=1,
            pad_token_id=handle.tokenizer.pad_token_id,
            temperature=temperature if sampled else None,
            top_p=top_p if sampled else None,
            top_k=None if not sampled else 0,  # no top-k cut: temperature and top_p alone
            output_logits=first_token_ids is not None,
            return_dict_in_generate=True,
            **_cache_kwargs(handle, check_decode_cache(decode_cache)),
        )
    ids = result.sequences  # (batch, prompt_len + new)
    first = None
    if first_token_ids is not None:
        logp = torch.log_softmax(result.logits[0].float(), dim=-1)  # (batch, vocab): the first new position
        first = logp[:, list(first_token_ids)].double().cpu().numpy()  # (batch, candidates)
    new = ids[:, prompt_len:].tolist()
    n_prompt = enc["attention_mask"].sum(dim=1).tolist()
    out = []
    for row, (row_ids, n) in enumerate(zip(new, n_prompt)):
        stopped = None if budget is None else budget.rows[row].stopped_at  # the reply's budget stopped it there
        if stopped is not None:
            row_ids = row_ids[:stopped]  # what follows is padding
        end = next((i + 1 for i, t in enumerate(row_ids) if t in eos), None)
        row_ids = row_ids[:end] if end is not None else row_ids
        limit = max_new_tokens if budget is None else budget.max_new_tokens
        cut_off = end is None and (stopped is not None or len(row_ids) == limit)
        text = handle.tokenizer.decode(row_ids, skip_special_tokens=True)
        out.append(Generation(text=text, token_ids=tuple(row_ids), n_prompt_tokens=int(n),
                              n_new_tokens=len(row_ids),
                              first_logprobs=None if first is None else tuple(float(x) for x in first[row]),
                              cut_off=cut_off,
                              thinking_closed=budget is not None and budget.rows[row].closed_by_budget))
    return out


IN_VOCABULARY = "use words in the tokenizer's vocabulary (tokenizer.get_vocab())"


class MultiTokenCandidateWarning(OneLineWarning):
    """A candidate spans several tokens and is read by its first (one line naming its tokens)."""


def candidate_tokens(handle: Handle, candidates: Sequence[str]) -> list[list[int]]:
    """Each candidate's tokens as the model would write them at the readout position.

    Without an answer prefix: the candidate string's tokens (no special tokens added). With one
    (Handle.answer_prefix, e.g. "ANSWER:"): the tokens that `prefix + " " + candidate` has beyond
    the prefix's own, i.e. the letter as it continues "ANSWER:" (" B" for a byte-level BPE, "▁B" for
    SentencePiece, "B" for the organism's word-level vocabulary). A prefix ending in whitespace is
    taken as given (no space is added)."""
    prefix = handle.answer_prefix
    if prefix:  # the prefix's own tokens, once for every candidate
        head = handle.tokenizer(prefix, add_special_tokens=False)["input_ids"]
        sep = "" if prefix[-1].isspace() else " "
    out = []
    for c in candidates:
        if not prefix:
            toks = handle.tokenizer(c, add_special_tokens=False)["input_ids"]
        else:
            whole = handle.tokenizer(prefix + sep + c, add_special_tokens=False)["input_ids"]
            if whole[: len(head)] != head:
                raise InputError(f"answer prefix {prefix!r} tokenizes differently before candidate {c!r}; "
                                 "choose a prefix that ends at a token boundary (e.g. without a trailing space)")
            toks = whole[len(head):]
        if not toks:
            raise InputError(f"candidate {c!r} tokenizes to nothing; give a non-empty candidate")
        out.append(list(toks))
    return out


def _token_text(tokenizer: Any, token_id: int) -> str:
    """A token as text, `'<unk>' (not in the vocabulary)` for the unknown token."""
    text = repr(tokenizer.convert_ids_to_tokens(int(token_id)))
    unk = getattr(tokenizer, "unk_token_id", None)
    return f"{text} (not in the vocabulary)" if unk is not None and token_id == unk else text


def candidate_notes(handle: Handle, candidates: Sequence[str],
                    tokens: Sequence[Sequence[int]] | None = None) -> tuple[str, ...]:
    """One note per candidate that spans several tokens: its tokens and the one read (the first),
    for a result's `notes` (candidate_token_ids warns the same text)."""
    tok = handle.tokenizer
    tokens = candidate_tokens(handle, candidates) if tokens is None else tokens
    return tuple(f"candidate {c!r} spans {len(t)} tokens ({', '.join(repr(x) for x in tok.convert_ids_to_tokens(list(t)))}) "
                 f"and is read by its first, {_token_text(tok, t[0])}"
                 for c, t in zip(candidates, tokens, strict=True) if len(t) > 1)


def candidate_token_ids(handle: Handle, candidates: Sequence[str]) -> list[int]:
    """Id of each candidate's first token as the model would write it at the readout position
    (`candidate_tokens`). Refused in one line: two candidates read by the same token (each one's
    token named as text, the unknown token said to be outside the vocabulary) and a candidate read
    by the unknown token. A candidate of several tokens is read by its first: a
    MultiTokenCandidateWarning names its tokens (`candidate_notes`)."""
    tok, prefix = handle.tokenizer, handle.answer_prefix
    tokens = candidate_tokens(handle, candidates)
    ids = [t[0] for t in tokens]
    unk = getattr(tok, "unk_token_id", None)
    where = f" after the answer prefix {prefix!r}" if prefix else ""
    if len(set(ids)) != len(ids):
        seen: dict[int, list[str]] = {}
        for c, i in zip(candidates, ids, strict=True):
            seen.setdefault(i, []).append(c)
        clashes = {i: cs for i, cs in seen.items() if len(cs) > 1}
        shared = "; ".join(f"{' and '.join(map(repr, cs))} {'both' if len(cs) == 2 else 'all'} start with "
                           f"{_token_text(tok, i)}" for i, cs in clashes.items())
        space = prefix and all(tok.decode([i]).strip() == "" for i in clashes)  # " B" is a space, then B
        fix = (IN_VOCABULARY if unk in clashes else
               f"end the prefix with that space (answer_prefix={prefix + ' '!r})" if space
               else "give candidates whose first tokens differ")
        raise InputError(f"candidates {list(candidates)} cannot be told apart{where}: {shared}; {fix}")
    lost = [c for c, i in zip(candidates, ids, strict=True) if unk is not None and i == unk]
    if lost:
        which = f"candidate {lost[0]!r} starts" if len(lost) == 1 else f"candidates {', '.join(map(repr, lost))} start"
        raise InputError(f"{which} with {_token_text(tok, unk)}{where}, so its log-probability would be the unknown "
                         f"token's; {IN_VOCABULARY}")
    notes = candidate_notes(handle, candidates, tokens)
    if notes:  # one warning per call, every such candidate in it
        warnings.warn("; ".join(notes), MultiTokenCandidateWarning, stacklevel=2)
    return ids


def next_token_logprobs(
    handle: Handle,
    prompts: Sequence[str],
    images: Sequence[Sequence[Image.Image]] | None = None,
    candidates: Sequence[str] | None = None,
    *,
    batch_size: int | None = None,
) -> np.ndarray:
    """log p(first token of candidate | row) at the position after each prompt.

    Log-softmax over the full vocabulary at the last position, then restricted to
    the candidates' first tokens (so rows need not sum to 1).
    Returns float64 array (rows, candidates). batch_size None = all rows at once.
    """
    images = image_rows(prompts, images)
    if candidates is None:
        raise TypeError("next_token_logprobs needs candidates (e.g. candidates=['A', 'B'])")
    cand = candidate_token_ids(handle, candidates)
    step = batch_size or len(prompts)
    out = [answer_logprobs(handle, build_inputs(handle, list(prompts[rows]), list(images[rows])), cand)
           for rows in _batches(len(prompts), step)]
    return np.concatenate(out, axis=0)


def answer_logprobs(handle: Handle, enc: Any, cand: Sequence[int]) -> np.ndarray:
    """The one readout every log-prob path shares (next_token_logprobs, hooks.steer_rows'
    option_logprobs_rows, the dose-response's conditions, the unsteered one included): one forward of
    the encoded rows, the log-softmax over the whole vocabulary at the last position, restricted to
    the token ids `cand`. Whatever edits are active (an intervention around the call) apply.
    Returns (rows, len(cand)) float64."""
    import torch

    with torch.inference_mode():
        logits = handle.model(**enc, use_cache=False, logits_to_keep=1).logits  # (rows, 1, vocab)
    logp = torch.log_softmax(logits[:, -1, :].float(), dim=-1)  # (rows, vocab)
    return logp[:, list(cand)].double().cpu().numpy()
