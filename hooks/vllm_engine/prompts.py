"""The prompts a vLLM engine gets from hf's ids: images attached, placeholders as vLLM wants them.

hf's processor expands each image placeholder into the image-feature tokens (LLaVA: one `<image>`
-> 16 of them) and hooks.positions places positions on those ids. vLLM 0.32.0 expands the
placeholders of a token prompt itself (handed already expanded ids it expands again: 59 tokens ran
as 74), so a request with images goes in with each image's run back to one placeholder
(`collapse_images`), and `check_prompt_ids` checks that the ids every request ran are hf's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def placeholder_id(llm: Any) -> int:
    """The engine model's image placeholder token id (LLaVA's config `image_token_index`), one line otherwise."""
    config = llm.llm_engine.model_config.hf_config
    got = getattr(config, "image_token_index", getattr(config, "image_token_id", None))
    if got is None:
        raise ValueError(f"{type(config).__name__} names no image token (image_token_index): evprobe hands images "
                         "to vLLM for LLaVA-style models only")
    return int(got)


def collapse_images(ids: Sequence[int], n_images: int, image_id: int) -> list[int]:
    """hf's expanded ids with each image's run of `image_id` tokens back to ONE placeholder (what vLLM expands)."""
    ids = [int(t) for t in ids]
    total = sum(t == image_id for t in ids)
    if n_images == 0 or total % n_images:
        raise ValueError(f"{total} image tokens do not split evenly among {n_images} images")
    per = total // n_images  # tokens of one image (LLaVA: every image the same)
    out, run = [], 0
    for t in ids + [None]:
        if t == image_id:
            run += 1
            continue
        if run:
            if run % per:
                raise ValueError(f"a run of {run} image tokens is no whole number of {per}-token images")
            out += [image_id] * (run // per)
            run = 0
        if t is not None:
            out.append(t)
    return out


def engine_prompts(llm: Any, prompt_ids: Sequence[Sequence[int]], images: Sequence[Sequence[Any]] | None = None,
                   uuids: Sequence[Sequence[str]] | None = None) -> list[Any]:
    """vLLM TokensPrompts: request r's ids and, when it has any, its images (and their cache identifiers).
    vLLM expands the placeholders of token prompts itself (0.32.0 expands an already expanded run again),
    so an image row's ids go in with one placeholder an image; `check_prompt_ids` then checks that what
    ran is the ids given."""
    from vllm.inputs import TokensPrompt

    if images is not None and len(images) != len(prompt_ids):
        raise ValueError(f"{len(images)} image rows for {len(prompt_ids)} prompts; give one list (maybe empty) a prompt")
    image_id = placeholder_id(llm) if images is not None and any(len(row) for row in images) else None
    out = []
    for r, ids in enumerate(prompt_ids):
        row = [] if images is None else list(images[r])
        prompt = TokensPrompt(prompt_token_ids=collapse_images(ids, len(row), image_id) if row else [int(t) for t in ids])
        if row:
            prompt["multi_modal_data"] = {"image": row}
            if uuids is not None:
                prompt["multi_modal_uuids"] = {"image": list(uuids[r])}
        out.append(prompt)
    return out


def check_prompt_ids(prompt_ids: Sequence[Sequence[int]], outputs: Sequence[Any]) -> Sequence[Any]:
    """Refuse a request whose ids vLLM changed (a placeholder it expanded again): positions would not be hf's."""
    for r, (ids, out) in enumerate(zip(prompt_ids, outputs, strict=True)):
        ran = list(out.prompt_token_ids)
        if ran != [int(t) for t in ids]:
            raise RuntimeError(f"request {r}: vLLM ran {len(ran)} prompt tokens, not the {len(ids)} of hf's processor "
                               "(its image placeholders expanded otherwise); positions would not be hf's")
    return outputs


__all__ = ["check_prompt_ids", "collapse_images", "engine_prompts", "placeholder_id"]
