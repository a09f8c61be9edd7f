"""Run in the vLLM environment by tests/hooks/test_vllm_engine_vlm.py: the tiny LLaVA on ONE engine.

`python vllm_vlm_driver.py IN.json OUT.json`. IN holds the model folder, each row's images (PNG
paths, read here with PIL), the hf processor's expanded prompt ids (`capture_ids`, `option_ids`,
`gen_ids`), the rendered prompt text (`texts`), the capture layers and position groups, the vision
sites, the letters' ids, `max_new_tokens` and `requests` (a row and a list of EngineEdit JSON). OUT:

- text_ids: the ids vLLM makes from the text prompt and images itself (its own placeholder expansion);
  expanded_twice: hf's expanded ids handed over as they are, and the ids vLLM ran (it expands again);
- capture: hooks.vllm_engine.capture.capture of every row in ONE call (rows, layers, positions, d_model);
- vision / vision_again: capture_vision at the vision sites, twice (fresh cache identifiers each call);
- option: option_logprobs of every request in ONE call; gen: run_requests with the letters' log-probs
  at each step (ignore_eos); replies: generate();
- refusals: a vision block vLLM does not build, a vision-site read of a row without images.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def refused(fn: Any, *args: Any, **kwargs: Any) -> str:
    try:
        fn(*args, **kwargs)
    except (ValueError, RuntimeError) as e:
        return str(e).splitlines()[-1] if "\n" in str(e) else str(e)
    return "NOT REFUSED"


def main(argv: list[str]) -> None:
    with open(argv[0], encoding="utf-8") as f:
        spec = json.load(f)
    from evprobe.hooks.vllm_engine.capture import PromptPositions, capture
    from evprobe.hooks.vllm_engine.steering import (
        EngineEdit,
        close_engine,
        generate,
        option_logprobs,
        run_requests,
        start_engine,
    )
    from evprobe.hooks.vllm_engine.vision import capture_vision, check_prompt_ids
    from PIL import Image
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    images = [[Image.open(p).convert("RGB") for p in row] for row in spec["images"]]
    letters = spec["letter_ids"]
    t = time.perf_counter()
    llm = start_engine(spec["model"], max_model_len=512, limit_mm_per_prompt={"image": 2})
    result: dict[str, Any] = {"engine_start_s": time.perf_counter() - t}
    try:
        imaged = [r for r, row in enumerate(images) if row]
        outs = llm.generate([{"prompt": spec["texts"][r], "multi_modal_data": {"image": images[r]}} for r in imaged],
                            SamplingParams(max_tokens=1, temperature=0.0), use_tqdm=False)
        result["text_ids"] = {str(r): list(o.prompt_token_ids) for r, o in zip(imaged, outs)}
        # hf's expanded ids handed over as they are: vLLM expands again, and check_prompt_ids refuses what ran
        first = spec["capture_ids"][imaged[0]]
        again = llm.generate([TokensPrompt(prompt_token_ids=first, multi_modal_data={"image": images[imaged[0]]})],
                             SamplingParams(max_tokens=1, temperature=0.0), use_tqdm=False)
        result["expanded_twice"] = [len(first), len(again[0].prompt_token_ids)]
        expanded_twice = refused(check_prompt_ids, [first], again)
        cap = spec["capture"]
        rows = cap["rows"]
        positions = [PromptPositions(rows=tuple(tuple(g[r]) for r in range(len(rows))), label=label)
                     for label, g in zip(cap["labels"], cap["groups"])]
        cap_images = [images[r] for r in rows]
        t = time.perf_counter()
        result["capture"] = capture(llm, [spec["capture_ids"][r] for r in rows], layers=cap["layers"],
                                    positions=positions, images=cap_images).tolist()
        result["capture_s"] = time.perf_counter() - t
        vision = capture_vision(llm, [spec["capture_ids"][r] for r in rows], cap_images, sites=spec["sites"])
        result["vision"] = {k: v.tolist() for k, v in vision.items()}
        again = capture_vision(llm, [spec["capture_ids"][r] for r in rows], cap_images, sites=spec["sites"])
        result["vision_again"] = {k: v.tolist() for k, v in again.items()}
        result["refusals"] = {"expanded_twice": expanded_twice,
            "deep_block": refused(capture_vision, llm, [spec["capture_ids"][rows[0]]], [cap_images[0]],
                                  sites=["vision_block.L1"]),
            "no_images": refused(capture_vision, llm, [spec["capture_ids"][rows[0]]], [[]], sites=["projector_out"])}
        reqs = spec["requests"]
        edits = [[EngineEdit.from_json(e) for e in r["edits"]] for r in reqs]
        req_images = [images[r["row"]] for r in reqs]
        option_ids = [spec["option_ids"][r["row"]] for r in reqs]
        gen_ids = [spec["gen_ids"][r["row"]] for r in reqs]
        result["option"] = option_logprobs(llm, option_ids, letters, edits, images=req_images).tolist()
        params = {"max_tokens": spec["max_new_tokens"], "temperature": 0.0, "ignore_eos": True, "detokenize": False,
                  "logprob_token_ids": letters}
        result["gen"] = [{"token_ids": list(o.outputs[0].token_ids),
                          "logprobs": [[step[i].logprob for i in letters] for step in o.outputs[0].logprobs]}
                         for o in run_requests(llm, gen_ids, edits, images=req_images, **params)]
        result["replies"] = generate(llm, gen_ids, edits, max_new_tokens=spec["max_new_tokens"], images=req_images)
        result["log"] = llm.collective_rpc("evprobe_steering_log")[0]
    finally:
        close_engine(llm)
    with open(argv[1], "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1:])
