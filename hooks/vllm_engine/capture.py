"""Capture through vLLM: `hooks.capture`'s residual-stream reads, taken inside a vLLM engine.

    capture(llm, prompt_ids, layers=[0, 2], positions=["last", "all", -3]) -> (n, layers, positions, d_model)
    capture_prompts(llm, handle, prompts, layers=, positions=[..., Marker("Question:")]) -> hooks.capture.Capture
    capture_layers(llm, handle, prompts, layers=, positions=)  evprobe.capture(..., backend="vllm", engine=llm)

What is read: the residual stream after each decoder layer (`resid_post`, hf's layer output; the
last layer before the final norm), by the worker-side hooks of hooks.vllm_engine.capture_worker.
Sublayers (attn_out, mlp_out, resid_pre) are not read through the engine: refused in one line.

Positions: the same as hf's capture (hooks.positions). Each position becomes, per prompt, a group
of prompt token indices whose float32 mean is stored (one index: that token's row): "last" (the
prompt's last token), "all" (every token), token indices (an int or Token, negative from the end)
straight from the ids; markers, "text"/"text_mean" and the rest through `resolve_prompts`, which
runs hooks.positions' own resolution (`row_indices` on the handle's encoding of the prompts) and
hands the indices over as `PromptPositions`. The handle only renders and tokenizes: its weights may
be absent (`weightless_handle`).

One call is ONE batched `LLM.generate` with max_tokens=1 (the prompt pass; the one sampled token
is discarded, its decode step never read since groups hold prompt positions only). Each request
carries its groups in `SamplingParams(extra_args={"evprobe_capture": ...})`; the sums come back as
.npy files (allow_pickle=False) in a temporary folder, and a group whose token count falls short
(a token that never ran through the layer, e.g. served from a prefix cache) is an error, not a
smaller mean.

Images (a VLM, e.g. LLaVA): the handle's processor expands each image placeholder as hf does and
positions are resolved on those ids; the engine gets them with one placeholder an image plus the
images (hooks.vllm_engine.vision.engine_prompts) and the ids it ran are checked equal to hf's, so
"image", "image_mean", Frame(k) and every other position are hf's indices. The vision tower's blocks and the projector: hooks.vllm_engine.vision.

Refused in one line before any model call: what hooks.vllm_engine.steering.check_engine refuses
(prefix caching on, a compiled engine, a vLLM version the token map was not checked on, more than
one worker, an engine without evprobe's extension), a component other than resid_post, and a
position the token ids alone cannot place when no handle resolves it.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from evprobe.hooks.positions import Position, Token, position_label
from evprobe.hooks.vllm_engine.capture_worker import CAPTURE_KEY

if TYPE_CHECKING:
    from evprobe.hooks.capture import Capture
    from evprobe.hooks.handle import Handle

COMPONENTS: tuple[str, ...] = ("resid_post",)  # what the engine's hooks read (hooks.capture.COMPONENTS' first)
NO_IMAGES = ("images need a vision-language model (LLaVA) and this model's processor is a tokenizer: give "
             "text-only prompts, or load a vision-language model")


@dataclass(frozen=True)
class PromptPositions:
    """One position resolved on every prompt: `rows[r]` the prompt token indices of request r
    (0 is its first token) whose mean is read; `label` names it (hooks.positions.position_label)."""

    rows: tuple[tuple[int, ...], ...]
    label: str


def check_component(component: str) -> None:
    """Only resid_post is read through the engine; another component is one line naming it."""
    if component not in COMPONENTS:
        raise ValueError(f"component {component!r} is not read through vLLM (its engine capture reads the "
                         "residual stream after each decoder layer, resid_post); read it with backend 'hf'")


def prompt_groups(prompt_ids: Sequence[Sequence[int]],
                  positions: Sequence[str | int | Token | PromptPositions]) -> list[list[tuple[int, ...]]]:
    """Per request, per position: the prompt token indices to average (never empty)."""
    if isinstance(positions, (str, int, Token, PromptPositions)):
        raise TypeError("positions must be a list (e.g. ['last', -3]), not a single value")
    out: list[list[tuple[int, ...]]] = [[] for _ in prompt_ids]
    for p in positions:
        if isinstance(p, (int, np.integer)) and not isinstance(p, bool):
            p = Token(int(p))
        if isinstance(p, PromptPositions) and len(p.rows) != len(prompt_ids):
            raise ValueError(f"position {p.label!r} is resolved on {len(p.rows)} prompts, not {len(prompt_ids)}")
        for r, ids in enumerate(prompt_ids):
            n = len(ids)
            if p == "last":
                got: tuple[int, ...] = (n - 1,)
            elif p == "all":
                got = tuple(range(n))
            elif isinstance(p, Token):
                if not -n <= p.index < n:
                    raise ValueError(f"row {r}: position {position_label(p)!r}: token index {p.index} is out of "
                                     f"range: the row has {n} tokens")
                got = (p.index % n,)
            elif isinstance(p, PromptPositions):
                got = tuple(int(i) for i in p.rows[r])
                if not got or min(got) < 0 or max(got) >= n:
                    raise ValueError(f"row {r}: position {p.label!r}: indices {got[:5]} are not tokens of its "
                                     f"{n}-token prompt")
            else:
                raise ValueError(f"position {p!r} needs the prompt text to place; resolve it with "
                                 "resolve_prompts(handle, prompts, positions) (or capture_prompts)")
            out[r].append(got)
    return out


def capture(llm: Any, prompt_ids: Sequence[Sequence[int]], *, layers: Sequence[int],
            positions: Sequence[str | int | Token | PromptPositions],
            images: Sequence[Sequence[Any]] | None = None) -> np.ndarray:
    """float32 (len(prompt_ids), len(layers), len(positions), d_model): the mean resid_post of each
    position's tokens, from ONE batched generate (max_tokens=1) over every prompt. images: per
    prompt its PIL images, the prompt ids holding their placeholders already expanded
    (hooks.vllm_engine.vision.engine_prompts)."""
    from evprobe.hooks.vllm_engine.prompts import check_prompt_ids, engine_prompts
    from evprobe.hooks.vllm_engine.steering import check_engine
    from vllm import SamplingParams

    if isinstance(prompt_ids, str) or not prompt_ids or any(len(ids) == 0 for ids in prompt_ids):
        raise ValueError("prompt_ids must be a non-empty list of non-empty token id lists")
    layers = [int(x) for x in layers]
    if not layers or len(set(layers)) != len(layers):
        raise ValueError(f"layers {layers} must be one or more distinct decoder layer indices")
    groups = prompt_groups(prompt_ids, positions)
    check_engine(llm)  # before any model call: prefix caching, compiled, unchecked vLLM, no extension
    nonce = uuid.uuid4().hex[:12]
    keys = [f"{nonce}-{r}" for r in range(len(prompt_ids))]
    params = [SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True, detokenize=False,
                             extra_args={CAPTURE_KEY: {"key": key, "groups": [list(g) for g in row]}})
              for key, row in zip(keys, groups, strict=True)]
    inputs = engine_prompts(llm, prompt_ids, images)
    folder = Path(tempfile.mkdtemp(prefix="evprobe-vllm-capture-"))
    answers: list[Any] = []
    try:
        begun = llm.collective_rpc("evprobe_capture_begin", args=(layers,))
        try:
            check_prompt_ids(prompt_ids, llm.generate(inputs, params, use_tqdm=False))
        finally:
            answers = llm.collective_rpc("evprobe_capture_end", args=(str(folder),))
        return _assemble(folder, answers, keys, groups, layers, int(begun[0]["n_layers"]))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _assemble(folder: Path, answers: Sequence[dict[str, Any]], keys: list[str], groups: list[list[tuple[int, ...]]],
              layers: list[int], n_layers: int) -> np.ndarray:
    """The workers' sums -> means (rows, layers, positions, d_model); every layer from the first
    worker that holds it (tensor-parallel ranks hold the same full stream)."""
    out: np.ndarray | None = None
    seen: set[int] = set()
    for answer in answers:
        held = [int(x) for x in answer["held"]]
        if not held or seen.issuperset(held):
            continue
        for r, key in enumerate(keys):
            if key not in answer["files"]:
                raise RuntimeError(f"row {r}: the engine ran none of its tokens through layers {held} (served "
                                   "from a prefix cache?); start the engine with prefix caching off")
            sums = np.load(folder / answer["files"][key], allow_pickle=False)  # (len(held), groups, d)
            counts = np.asarray(answer["counts"][key], dtype=np.int64)  # (len(held), groups)
            want = np.array([len(g) for g in groups[r]], dtype=np.int64)
            if out is None:
                out = np.zeros((len(keys), len(layers), len(want), sums.shape[-1]), np.float32)
            for slot, layer in enumerate(held):
                if layer in seen or layer not in layers:
                    continue
                if not (counts[slot] == want).all():
                    g = int(np.flatnonzero(counts[slot] != want)[0])
                    raise RuntimeError(f"row {r}: layer {layer} read {counts[slot][g]} of the {want[g]} tokens of "
                                       f"position {g} (tokens served from a prefix cache never run the layer); "
                                       "start the engine with prefix caching off")
                out[r, layers.index(layer)] = sums[slot] / want[:, None].astype(np.float32)
        seen.update(held)
    missing = [layer for layer in layers if layer not in seen]
    if missing or out is None:
        raise RuntimeError(f"no worker held layers {missing or layers} of the model's {n_layers}")
    return out


def weightless_handle(folder: str, *, answer_prefix: str | None = None, prompt_format: str | None = None,
                      thinking: str | None = None, trust_remote_code: bool = False) -> Handle:
    """A Handle that renders, tokenizes (a VLM's processor expanding its image placeholders) and
    places positions, its structure on the meta device (no weights read): what the engine path
    needs of hf's side. The processor is AutoProcessor's, as hooks.load gives it."""
    import torch
    from evprobe.hooks.handle import Handle
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForImageTextToText,
        AutoProcessor,
    )

    config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
    auto = AutoModelForCausalLM if getattr(config, "vision_config", None) is None else AutoModelForImageTextToText
    with torch.device("meta"):
        model = auto.from_config(config, trust_remote_code=trust_remote_code)
    processor = AutoProcessor.from_pretrained(folder, trust_remote_code=trust_remote_code)
    return Handle.from_parts(model, processor, model_id=folder, answer_prefix=answer_prefix,
                             prompt_format=prompt_format, thinking=thinking)


def resolve_prompts(handle: Handle, prompts: Sequence[str], positions: Sequence[Position | int], *,
                    text_markers: Sequence[str | None] | None = None, images: Sequence[Sequence[Any]] | None = None):
    """hooks.positions' resolution of `positions` on the handle's encoding of `prompts` and their
    images (as hooks.capture encodes them: chat template, answer prefix, the processor's image
    placeholders expanded): (prompt token ids per row, one PromptPositions per position, the
    rows' Spans, their token counts)."""
    from evprobe.hooks.inputs import encode_inputs
    from evprobe.hooks.positions import check_positions, row_indices
    from evprobe.hooks.spans import batch_spans

    positions = check_positions(positions)
    images = [list(row) for row in images] if images is not None else [[] for _ in prompts]
    enc = encode_inputs(handle, list(prompts), images)  # left-padded, on the CPU
    n_images = [len(row) for row in images]
    sizes = [[getattr(im, "size", None) for im in row] for row in images]
    spans = batch_spans(handle, enc, list(prompts), n_images, text_markers)
    padded = row_indices(handle, enc, list(prompts), n_images, spans, positions, image_sizes=sizes)
    mask = enc["attention_mask"]
    pad = [int(mask.shape[1] - mask[r].sum()) for r in range(len(prompts))]  # left padding of each row
    ids = [enc["input_ids"][r, pad[r]:].tolist() for r in range(len(prompts))]
    resolved = [PromptPositions(rows=tuple(tuple(i - pad[r] for i in row) for r, row in enumerate(rows)),
                                label=position_label(p)) for p, rows in zip(positions, padded, strict=True)]
    return ids, resolved, spans, [len(row) for row in ids]


def capture_prompts(llm: Any, handle: Handle, prompts: Sequence[str], *, layers: Sequence[int],
                    positions: Sequence[Position | int], text_markers: Sequence[str | None] | None = None,
                    component: str = "resid_post", images: Sequence[Sequence[Any]] | None = None) -> Capture:
    """hooks.capture.capture_batch through the engine: the same positions (resolved by
    hooks.positions on the handle's tokens), the same Capture (acts float32 (rows, layers,
    positions, d_model))."""
    from evprobe.hooks.capture import Capture, check_layers

    check_component(component)
    layers = check_layers(layers, handle.n_layers)
    ids, resolved, spans, n_tokens = resolve_prompts(handle, prompts, positions, text_markers=text_markers,
                                                     images=images)
    acts = capture(llm, ids, layers=layers, positions=resolved, images=images)
    return Capture(acts=acts, spans=spans, n_tokens=n_tokens, by_component={component: acts})


def capture_layers(llm: Any, handle: Handle, prompts: Sequence[str], images: Sequence[Sequence[Any]] | None = None,
                   *, layers: Sequence[int], positions: Sequence[Position | int],
                   text_markers: Sequence[str | None] | None = None, batch_size: int | None = None,
                   component: str = "resid_post") -> np.ndarray:
    """hooks.capture.capture_layers through the engine (`evprobe.capture(..., backend="vllm",
    engine=llm)`): batch_size prompts per generate call (None: all in one)."""
    from evprobe.hooks.capture import check_rows
    from evprobe.hooks.inputs import takes_images

    if llm is None:
        raise ValueError("backend 'vllm' needs engine=, a vLLM engine from "
                         "evprobe.hooks.vllm_engine.steering.start_engine(model folder)")
    check_component(component)
    images = [[] for _ in prompts] if images is None else images
    step = check_rows(prompts, images, text_markers, batch_size)
    if any(len(row) for row in images) and not takes_images(handle.processor):
        raise ValueError(NO_IMAGES)
    parts = []
    for start in range(0, len(prompts), step):
        rows = slice(start, start + step)
        markers = None if text_markers is None else list(text_markers[rows])
        parts.append(capture_prompts(llm, handle, list(prompts[rows]), layers=layers, positions=positions,
                                     text_markers=markers, component=component, images=list(images[rows])).acts)
    return np.concatenate(parts, axis=0)


__all__ = ["COMPONENTS", "NO_IMAGES", "PromptPositions", "capture", "capture_layers", "capture_prompts",
           "check_component", "prompt_groups", "resolve_prompts", "weightless_handle"]
