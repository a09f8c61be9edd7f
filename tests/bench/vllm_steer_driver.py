"""Run in the vLLM environment by tests/bench/test_vllm_steering.py: steered readouts on ONE engine.

`python vllm_steer_driver.py IN.json OUT.json`. IN holds the model folder, the readout prompts'
token ids (hf's `build_inputs` ids for option log-probs), the generation prompts' ids, the letters'
token ids and a list of steerings (direction, layer, alpha). The driver starts one steering engine
(bench.backends.vllm_steer: hooks.vllm_engine's, eager, no prefix caching) and writes:

- option: steered_option_logprobs for every steering (steerings x rows x letters);
- gen: per steering, the greedy tokens (max_new_tokens) of the generation prompts and the letters'
  log-probs at every generated position (the edit at decode steps too), all steerings x prompts as
  one batched call (hooks.vllm_engine.steering.run_requests, each request its own edit);
- option_again: the first steering's readout once more after all others (no edit left behind,
  nothing cached from another edit);
- unsteered_after: the readout with no steering after all steered calls.
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> None:
    with open(argv[0], encoding="utf-8") as f:
        spec = json.load(f)
    from evprobe.bench.backends.vllm_steer import start_steering_engine, steered_option_logprobs
    from evprobe.hooks.direction_vectors import unit_direction
    from evprobe.hooks.vllm_engine.steering import EngineEdit, close_engine, run_requests

    t = time.perf_counter()
    llm = start_steering_engine(spec["model"])
    result: dict = {"engine_start_s": time.perf_counter() - t}
    try:
        steerings = [(s["direction"], s["layer"], s["alpha"]) for s in spec["steerings"]]
        letters = spec["letter_ids"]
        t = time.perf_counter()
        result["option"] = steered_option_logprobs(llm, spec["option_ids"], letters, steerings).tolist()
        result["option_s"] = time.perf_counter() - t
        # every steering x prompt in one batched call, each request with its own edit
        edits = [EngineEdit(layer, alpha * unit_direction(direction)) if alpha else None
                 for direction, layer, alpha in steerings for _ in spec["gen_ids"]]
        t = time.perf_counter()
        outs = run_requests(llm, spec["gen_ids"] * len(steerings), edits, max_tokens=spec["max_new_tokens"],
                            temperature=0.0, ignore_eos=True, detokenize=False, logprob_token_ids=letters)
        n = len(spec["gen_ids"])
        gen = [{"token_ids": [list(o.outputs[0].token_ids) for o in outs[k * n:(k + 1) * n]],
                "logprobs": [[[step[i].logprob for i in letters] for step in o.outputs[0].logprobs]
                             for o in outs[k * n:(k + 1) * n]]} for k in range(len(steerings))]
        result["gen"] = gen
        result["gen_s"] = time.perf_counter() - t
        result["option_again"] = steered_option_logprobs(llm, spec["option_ids"], letters, steerings[:1]).tolist()
        result["unsteered_after"] = steered_option_logprobs(llm, spec["option_ids"], letters,
                                                            [(None, 0, 0.0)]).tolist()
    finally:
        close_engine(llm)
    with open(argv[1], "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1:])
