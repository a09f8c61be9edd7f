"""Run in the vLLM environment by tests/bench/test_vllm_steering.py: steered readouts on ONE engine.

`python vllm_steer_driver.py IN.json OUT.json`. IN holds the model folder, the readout prompts'
token ids (hf's `build_inputs` ids for option log-probs), the generation prompts' ids, the letters'
token ids and a list of steerings (direction, layer, alpha). The driver starts one steering engine
(bench.backends.vllm_steer: eager, no prefix caching, the steering worker extension) and writes:

- option: steered_option_logprobs for every steering (steerings x rows x letters);
- gen: per steering, the greedy tokens (max_new_tokens) of the generation prompts and the letters'
  log-probs at every generated position (the edit at decode steps too);
- option_again: the first steering's readout once more after all others (no edit left behind,
  nothing cached from another edit);
- unsteered_after: the readout with no steering after the hook was removed.
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> None:
    with open(argv[0], encoding="utf-8") as f:
        spec = json.load(f)
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from evprobe.bench.backends.vllm_steer import start_steering_engine, steered_option_logprobs
    from evprobe.hooks.direction_vectors import unit_direction

    t = time.perf_counter()
    llm = start_steering_engine(spec["model"])
    result: dict = {"engine_start_s": time.perf_counter() - t}
    try:
        steerings = [(s["direction"], s["layer"], s["alpha"]) for s in spec["steerings"]]
        letters = spec["letter_ids"]
        t = time.perf_counter()
        result["option"] = steered_option_logprobs(llm, spec["option_ids"], letters, steerings).tolist()
        result["option_s"] = time.perf_counter() - t
        params = SamplingParams(max_tokens=spec["max_new_tokens"], temperature=0.0, ignore_eos=True,
                                detokenize=False, logprob_token_ids=letters)
        inputs = [TokensPrompt(prompt_token_ids=ids) for ids in spec["gen_ids"]]
        gen = []
        t = time.perf_counter()
        for direction, layer, alpha in steerings:
            if alpha:
                llm.collective_rpc("evprobe_steer", args=(layer, (alpha * unit_direction(direction)).tolist()))
            outs = llm.generate(inputs, params, use_tqdm=False)
            llm.collective_rpc("evprobe_unsteer")
            gen.append({"token_ids": [list(o.outputs[0].token_ids) for o in outs],
                        "logprobs": [[[step[i].logprob for i in letters] for step in o.outputs[0].logprobs]
                                     for o in outs]})
        result["gen"] = gen
        result["gen_s"] = time.perf_counter() - t
        result["option_again"] = steered_option_logprobs(llm, spec["option_ids"], letters, steerings[:1]).tolist()
        result["unsteered_after"] = steered_option_logprobs(llm, spec["option_ids"], letters,
                                                            [(None, 0, 0.0)]).tolist()
    finally:
        core = getattr(llm.llm_engine, "engine_core", None)
        if core is not None:
            core.shutdown(timeout=30.0)
    with open(argv[1], "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1:])
