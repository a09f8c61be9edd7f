"""Vision-language models through vLLM: prompts with images, image positions, the vision sites.

    ids, groups, spans, n = capture.resolve_prompts(handle, prompts, ["image_mean", "last"], images=images)
    acts = capture.capture(llm, ids, layers=[0, 3], positions=groups, images=images)      # resid_post
    got = capture_vision(llm, ids, images, sites=["vision_block.L0", "projector_out"])   # {site: (rows, 1, width)}
    edits = [image_edit(edit, ids[r], image_ids(handle)) for r, edit in ...]              # steer at "image"

Prompts: hf's processor expands each image placeholder into the image-feature tokens (LLaVA: one
`<image>` -> 16 of them), and positions are resolved on those ids. vLLM 0.32.0 expands the
placeholders of a token prompt itself (handed hf's expanded ids it expands the first run again:
59 tokens became 74), so the engine gets hf's ids with each image's run back to one placeholder
(`collapse_images`) plus the images (`TokensPrompt(prompt_token_ids=..., multi_modal_data={"image":
[...]})`), and every call checks that the ids each request ran are hf's expanded ids
(`check_prompt_ids`): every position, "image" and Frame(k) included, is hf's index.

Steering at "image": hf edits a row's image-feature tokens in the prompt pass and never a decode
step (a generated token is no image token), whatever the schedule; `image_edit` gives the engine
the same: the explicit prompt positions of the request's image tokens, schedule "prompt-only".

Vision sites (`vision_block.L<k>`, `projector_out`) are read at "image_mean" (hf's capture_sites: the
mean over every token the site outputs for the row's images) by hooks.vllm_engine.vision_worker, one
fresh `multi_modal_uuids` identifier per image per call so that vLLM's encoder cache (keyed by that
identifier, or the image's hash) never serves an item whose tower did not run in the call. Steering
a vision site is refused (hooks.vllm_engine.edits): the encoder cache keys an output by its image,
not by an edit, so one request's steered tower output would be served to another request with the
same image, or to a later call.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from evprobe.hooks.vllm_engine.edits import EngineEdit
from evprobe.hooks.vllm_engine.prompts import (
    check_prompt_ids,
    collapse_images,
    engine_prompts,
    placeholder_id,
)
from evprobe.hooks.vllm_engine.vision_worker import UUID_PREFIX, check_sites

VISION_SITES_HELP = "vision_block.L<k> or projector_out"


def image_positions(prompt_ids: Sequence[int], image_ids: frozenset[int]) -> tuple[int, ...]:
    """The prompt indices holding an image-feature token (hooks.positions' "image" on an unpadded row)."""
    got = tuple(i for i, t in enumerate(prompt_ids) if int(t) in image_ids)
    if not got:
        raise ValueError("position 'image': the request has no image tokens; give it images or use another position")
    return got


def image_edit(edit: EngineEdit, prompt_ids: Sequence[int], image_ids: frozenset[int]) -> EngineEdit:
    """`edit` at the request's image tokens as hf's positions="image" edits them: those prompt positions,
    prompt pass only (hf never edits a generated token at "image", whatever the schedule)."""
    return EngineEdit(edit.layer, edit.delta, image_positions(prompt_ids, image_ids), "prompt-only")


def check_vision_sites(sites: Sequence[str]) -> list[str]:
    from evprobe.hooks.sites.vocabulary import Site

    out = []
    for s in sites:
        site = Site.parse(s)
        if site.stream != "vision":
            raise ValueError(f"site {site} is on the text stream; read it with hooks.vllm_engine.capture ({VISION_SITES_HELP} here)")
        out.append(str(site))
    if not out or len(set(out)) != len(out):
        raise ValueError(f"sites {list(sites)} must be one or more distinct vision sites ({VISION_SITES_HELP})")
    return out


def capture_vision(llm: Any, prompt_ids: Sequence[Sequence[int]], images: Sequence[Sequence[Any]], *,
                   sites: Sequence[str]) -> dict[str, np.ndarray]:
    """{site: float32 (rows, 1, width)}: each row's "image_mean" at each vision site (the mean over every
    token the site outputs for the row's images, as hooks.site_capture.capture_sites). ONE generate call
    (max_tokens=1); every image a fresh cache identifier, so its tower runs in this call."""
    sites = check_vision_sites(sites)
    if len(images) != len(prompt_ids) or any(len(row) == 0 for row in images):
        empty = next((r for r, row in enumerate(images) if len(row) == 0), len(images))
        raise ValueError(f"row {empty}: a vision site is read at image_mean, so every row needs images; give it "
                         "images or drop it")
    from evprobe.hooks.vllm_engine.steering import check_engine
    from vllm import SamplingParams

    check_engine(llm)
    facts = llm.collective_rpc("evprobe_vision_facts")[0]
    check_sites(facts["model"], facts["blocks"], sites)  # a block vLLM does not build: one line, no request
    nonce = uuid.uuid4().hex[:12]
    uuids = [[f"{UUID_PREFIX}{nonce}-{r}-{i}" for i in range(len(row))] for r, row in enumerate(images)]
    params = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True, detokenize=False)
    folder = Path(tempfile.mkdtemp(prefix="evprobe-vllm-vision-"))
    try:
        llm.collective_rpc("evprobe_vision_begin", args=(sites,))
        try:
            outs = llm.generate(engine_prompts(llm, prompt_ids, images, uuids), params, use_tqdm=False)
        finally:
            answer = llm.collective_rpc("evprobe_vision_end", args=(str(folder),))[0]
        check_prompt_ids(prompt_ids, outs)
        index = {item: k for k, item in enumerate(answer["items"])}
        counts = np.asarray(answer["counts"], dtype=np.int64).reshape(len(index), len(sites))
        out = {}
        for s, site in enumerate(sites):
            sums = np.load(folder / answer["files"][s], allow_pickle=False) if answer["files"] else None  # (items, width)
            rows = []
            for r, ids in enumerate(uuids):
                ran = [index.get(u) for u in ids]
                if None in ran or sums is None:
                    raise RuntimeError(f"row {r}: the vision tower never ran on image {ran.index(None) if ran else 0} "
                                       "in this call (served from vLLM's encoder cache?)")
                rows.append(sums[ran].sum(axis=0) / np.float32(counts[ran, s].sum()))
            out[site] = np.stack(rows)[:, None, :].astype(np.float32)
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


__all__ = ["VISION_SITES_HELP", "capture_vision", "check_prompt_ids", "check_vision_sites", "collapse_images",
           "engine_prompts", "image_edit", "image_positions", "placeholder_id"]
