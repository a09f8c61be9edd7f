"""Run in the vLLM environment by tests/hooks/test_vllm_engine_steering.py: per-request edits on ONE engine.

`python vllm_engine_driver.py IN.json OUT.json`. IN holds the model folder, the readout prompts'
token ids (`option_ids`, hf's build_inputs ids), the generation prompts' ids (`gen_ids`), the
letters' ids, `max_new_tokens`, `requests` (each a prompt index and a list of EngineEdit JSON) and
`timing` (more such requests for the batched vs per-call timing). It writes:

- refusals: the one-line messages of each refused input (no engine needed for most: the version
  string, the VllmConfig of a prefix-caching / non-eager / extension-less engine built by
  EngineArgs, a decoder layer class without a residual, start_engine's own refusal), then on the
  engine: a layer out of range, a delta of the wrong width, a position outside the prompt;
- option: hooks.vllm_engine.steering.option_logprobs of every request in ONE call; option_single:
  the same one request per call;
- gen: run_requests (ignore_eos, letters' log-probs at each step) in one call; gen_single: one
  request per call; replies: generate() (stops at the end-of-sequence token) in one call;
- log: the worker's [forwards that edited, rows edited]; timing_s: batched vs per-call readouts.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np


def refused(fn: Any, *args: Any, **kwargs: Any) -> str:
    try:
        fn(*args, **kwargs)
    except ValueError as e:
        return str(e)
    return "NOT REFUSED"


def config_refusals(model: str) -> dict[str, str]:
    """check_config on the VllmConfig that EngineArgs builds (no engine started) for each bad setting."""
    from vllm.engine.arg_utils import EngineArgs

    from evprobe.hooks.vllm_engine.steering import EXTENSION, check_config

    base = dict(model=model, dtype="float32", max_model_len=512, enforce_eager=True, enable_prefix_caching=False,
                worker_extension_cls=EXTENSION)
    out = {"good": refused(check_config, EngineArgs(**base).create_engine_config())}
    for name, change in (("prefix_caching", {"enable_prefix_caching": True}), ("compiled", {"enforce_eager": False}),
                         ("no_extension", {"worker_extension_cls": ""})):
        out[name] = refused(check_config, EngineArgs(**{**base, **change}).create_engine_config())
    return out


def main(argv: list[str]) -> None:
    with open(argv[0], encoding="utf-8") as f:
        spec = json.load(f)
    from vllm.model_executor.models.gpt2 import GPT2Block
    from vllm.model_executor.models.llama import LlamaDecoderLayer

    from evprobe.hooks.vllm_engine.steer_worker import check_layer_class
    from evprobe.hooks.vllm_engine.steering import (EngineEdit, check_version, close_engine, generate,
                                                    option_logprobs, run_requests, start_engine)

    model, letters = spec["model"], spec["letter_ids"]
    result: dict[str, Any] = {"refusals": {
        "version": refused(check_version, "0.31.0"), "version_ok": refused(check_version, "0.32.0"),
        "layer_class": refused(check_layer_class, GPT2Block), "llama_layer": refused(check_layer_class, LlamaDecoderLayer),
        "start_prefix_caching": refused(start_engine, model, enable_prefix_caching=True),
        "start_compiled": refused(start_engine, model, enforce_eager=False),
        **config_refusals(model)}}

    def edits_of(requests: list[dict]) -> list[list[EngineEdit]]:
        return [[EngineEdit.from_json(e) for e in r["edits"]] for r in requests]

    t = time.perf_counter()
    llm = start_engine(model, max_model_len=512)
    result["engine_start_s"] = time.perf_counter() - t
    try:
        reqs = spec["requests"]
        edits = edits_of(reqs)
        option_ids = [spec["option_ids"][r["prompt"]] for r in reqs]
        gen_ids = [spec["gen_ids"][r["prompt"]] for r in reqs]
        bad = EngineEdit(0, [1.0] * 128)
        result["refusals"].update(
            layer=refused(option_logprobs, llm, option_ids[:1], letters, [EngineEdit(99, bad.delta)]),
            width=refused(option_logprobs, llm, option_ids[:1], letters, [EngineEdit(0, [1.0] * 7)]),
            index=refused(option_logprobs, llm, option_ids[:1], letters, [EngineEdit(0, bad.delta, (0, 999))]),
            count=refused(option_logprobs, llm, option_ids[:2], letters, [None]))
        log_before = llm.collective_rpc("evprobe_steering_log")[0]
        result["refused_forwards"] = log_before  # the refusals above ran no edited forward
        result["option"] = option_logprobs(llm, option_ids, letters, edits).tolist()
        result["option_single"] = [option_logprobs(llm, [ids], letters, [e])[0].tolist()
                                   for ids, e in zip(option_ids, edits)]
        params = dict(max_tokens=spec["max_new_tokens"], temperature=0.0, ignore_eos=True, detokenize=False,
                      logprob_token_ids=letters)

        def gen_rows(outs: list) -> list[dict]:
            return [{"token_ids": list(o.outputs[0].token_ids),
                     "logprobs": [[step[i].logprob for i in letters] for step in o.outputs[0].logprobs]} for o in outs]

        result["gen"] = gen_rows(run_requests(llm, gen_ids, edits, **params))
        result["gen_single"] = [gen_rows(run_requests(llm, [ids], [e], **params))[0] for ids, e in zip(gen_ids, edits)]
        result["replies"] = generate(llm, gen_ids, edits, max_new_tokens=spec["max_new_tokens"])
        result["log"] = llm.collective_rpc("evprobe_steering_log")[0]
        timing = spec["timing"]
        t_ids, t_edits = [spec["option_ids"][r["prompt"]] for r in timing], edits_of(timing)
        option_logprobs(llm, t_ids[:2], letters, t_edits[:2])  # warm
        t = time.perf_counter()
        batched = option_logprobs(llm, t_ids, letters, t_edits)
        result["timing_batched_s"] = time.perf_counter() - t
        t = time.perf_counter()
        single = [option_logprobs(llm, [i], letters, [e])[0] for i, e in zip(t_ids, t_edits)]
        result["timing_single_s"] = time.perf_counter() - t
        result["timing_requests"] = len(timing)
        result["timing_max_diff"] = float(np.abs(batched - np.array(single)).max())
    finally:
        close_engine(llm)
    with open(argv[1], "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1:])
