"""Per-request steering through vLLM (hooks.vllm_engine.steering) against hooks.steering on the hf model.

ONE batch in which every request carries a different edit (directions, layers 0-3, alphas -8 to 32,
positions "all" / "last" / explicit indices, schedules "every-step" / "prompt-only", two edits on one
request, none on another, the same prompt under several edits). vLLM runs in its own environment
(`vllm_python`): ONE subprocess, tests/hooks/vllm_engine_driver.py, starts one engine and runs the
batch, the same requests one at a time, and the refusals. This module computes each request with the
hf model one steering at a time (`option_logprobs`, `steered_generate` on the request's one prompt:
an unpadded row, so hf's indices are the prompt's) and compares within 1e-4 (float32).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.vllm_drivers import run_driver

DRIVER = Path(__file__).with_name("vllm_engine_driver.py")
LOGPROB_TOLERANCE = 1e-4  # as tests/bench/test_vllm_steering.py: unsteered hf vs vLLM differ by ~1.2e-5
LETTERS = ("A", "B", "C", "D")
PROMPTS = ("Which colour is the sky? A) red B) blue C) green D) black",
           "Pick a number. A) one B) two C) three D) four",
           "Is water wet? A) yes B) no C) sometimes D) never")
# per request: (prompt index, [(direction index, layer, alpha, positions, schedule), ...])
REQUESTS = [
    (0, []),
    (1, [(0, 1, 8.0, "all", "every-step")]),
    (2, [(1, 3, -8.0, "last", "every-step")]),
    (0, [(2, 2, 16.0, (0, 2, -2), "every-step")]),
    (1, [(0, 0, 16.0, "all", "prompt-only")]),
    (2, [(1, 1, 32.0, "last", "prompt-only")]),
    (0, [(2, 1, 8.0, "all", "every-step"), (0, 1, -4.0, (-1,), "prompt-only"), (1, 3, 8.0, "all", "every-step")]),
    (1, [(0, 0, 32.0, (1, -3), "prompt-only")]),
    (1, [(0, 0, 16.0, "all", "every-step")]),  # request 4's edit at every step: the schedule matters
    (0, [(0, 1, 32.0, "all", "every-step")]),  # large doses, to change greedy replies
    (2, [(0, 1, 32.0, "all", "every-step")]),
]
MAX_NEW = 6


def _steerings(edits: list, dirs: np.ndarray) -> list:
    from evprobe.hooks.steering import Steering

    return [Steering(dirs[d], layer, alpha, positions, schedule) for d, layer, alpha, positions, schedule in edits]


@pytest.fixture(scope="module")
def compared(vllm_python: Path, tiny_text_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    import torch

    from evprobe import hooks
    from evprobe.hooks.direction_vectors import random_directions
    from evprobe.hooks.generation import candidate_token_ids
    from evprobe.hooks.inputs import build_inputs
    from evprobe.hooks.steering import option_logprobs, steered_generate
    from evprobe.hooks.vllm_engine.edits import EngineEdit

    handle = hooks.load(str(tiny_text_folder), dtype="float32")
    dirs = random_directions(handle.d_model, 3, seed=0)

    def ids(for_generation: bool) -> list[list[int]]:
        return [build_inputs(handle, [p], [[]], position_ids=False, for_generation=for_generation)["input_ids"][0]
                .tolist() for p in PROMPTS]

    def as_json(edits: list) -> list[dict]:
        return [EngineEdit.from_steering(s).to_json() for s in _steerings(edits, dirs)]

    rng = np.random.default_rng(1)  # the timing batch: 48 requests, each its own random edit
    timing = [{"prompt": int(rng.integers(3)), "edits": as_json([(int(rng.integers(3)), int(rng.integers(4)),
                                                                  float(rng.normal() * 8), "all", "every-step")])}
              for _ in range(48)]
    letter_ids = candidate_token_ids(handle, LETTERS)
    folder = tmp_path_factory.mktemp("vllm_engine")
    spec = {"model": str(tiny_text_folder), "option_ids": ids(False), "gen_ids": ids(True), "letter_ids": letter_ids,
            "max_new_tokens": MAX_NEW, "timing": timing,
            "requests": [{"prompt": p, "edits": as_json(edits)} for p, edits in REQUESTS]}
    vllm = run_driver(vllm_python, DRIVER, spec, folder, timeout=600)

    hf_option, hf_gen = [], []
    for p, edits in REQUESTS:  # one steering (one request) at a time
        s = _steerings(edits, dirs) or None
        hf_option.append(option_logprobs(handle, [PROMPTS[p]], None, LETTERS, s)[0])
        run = steered_generate(handle, [PROMPTS[p]], None, s, MAX_NEW)
        logp = torch.log_softmax(run.scores.float(), dim=-1)[0][..., letter_ids].double().numpy()  # (new, letters)
        hf_gen.append({"token_ids": run.token_ids[0].tolist(), "logprobs": logp})
    plain_option = np.array([option_logprobs(handle, [p], None, LETTERS)[0] for p in PROMPTS])  # unsteered, unpadded
    plain_gen = [steered_generate(handle, [p], None, None, MAX_NEW).token_ids[0].tolist() for p in PROMPTS]
    return {"vllm": vllm, "hf_option": np.array(hf_option), "hf_gen": hf_gen, "eos": handle.tokenizer.eos_token_id,
            "plain_option": plain_option, "plain_gen": plain_gen}


def test_batched_option_logprobs_are_hfs_one_steering_at_a_time(compared: dict) -> None:
    v, h = np.array(compared["vllm"]["option"]), compared["hf_option"]  # (requests, letters)
    assert v.shape == h.shape == (len(REQUESTS), len(LETTERS))
    worst = np.abs(v - h).max(axis=1)
    assert worst.max() <= LOGPROB_TOLERANCE, worst.tolist()
    # not vacuous: each edit moves its prompt's readout by at least ten times the tolerance (an edit
    # away from the last token reaches it through attention only: request 3 moves it least)
    moved = [float(np.abs(h[r] - compared["plain_option"][p]).max()) for r, (p, _) in enumerate(REQUESTS)]
    assert moved[0] == 0.0 and min(moved[1:]) > 10 * LOGPROB_TOLERANCE, moved
    print(f"max |log p| hf vs batched vLLM per request: {[f'{w:.2g}' for w in worst]}; moved by the edit: "
          f"{[round(m, 4) for m in moved]}; driver {compared['vllm']['wall_s']:.0f} s "
          f"(engine start {compared['vllm']['engine_start_s']:.0f} s)")


def test_batched_generation_is_hfs_at_every_step(compared: dict) -> None:
    """Greedy tokens and the letters' log-probs at every generated position (hf's up to its first
    end-of-sequence token; the driver's run ignores it), each request with its own edit."""
    worst = 0.0
    for r, (v, h) in enumerate(zip(compared["vllm"]["gen"], compared["hf_gen"])):
        n = next((i + 1 for i, t in enumerate(h["token_ids"]) if t == compared["eos"]), MAX_NEW)
        assert v["token_ids"][:n] == h["token_ids"][:n], (r, REQUESTS[r])
        worst = max(worst, float(np.abs(np.array(v["logprobs"][:n]) - h["logprobs"][:n]).max()))
    assert worst <= LOGPROB_TOLERANCE, worst
    gen = compared["hf_gen"]
    # not vacuous: the schedule matters (request 4 is request 8's edit on the prompt pass only) and edits
    # change greedy replies
    assert np.abs(gen[4]["logprobs"][1:] - gen[8]["logprobs"][1:]).max() > 0.01
    changed = [r for r, (p, _) in enumerate(REQUESTS) if gen[r]["token_ids"] != compared["plain_gen"][p]]
    assert changed, "no edit changed a greedy reply"
    print(f"largest letter log-prob difference over {MAX_NEW} generated positions: {worst:.2g}; "
          f"requests whose greedy tokens the edit changed: {changed}")


def test_generate_stops_as_hf(compared: dict) -> None:
    """generate(): greedy ids up to and including the end-of-sequence token, as hf's rows before padding."""
    for r, (v, h) in enumerate(zip(compared["vllm"]["replies"], compared["hf_gen"])):
        ids = h["token_ids"]
        n = next((i + 1 for i, t in enumerate(ids) if t == compared["eos"]), MAX_NEW)
        assert v == ids[:n], (r, v, ids)


def test_batched_equals_one_request_at_a_time(compared: dict) -> None:
    v = compared["vllm"]
    assert np.abs(np.array(v["option"]) - np.array(v["option_single"])).max() <= LOGPROB_TOLERANCE
    for b, s in zip(v["gen"], v["gen_single"]):
        assert b["token_ids"] == s["token_ids"]
        assert np.abs(np.array(b["logprobs"]) - np.array(s["logprobs"])).max() <= LOGPROB_TOLERANCE
    assert v["timing_max_diff"] <= LOGPROB_TOLERANCE
    print(f"{v['timing_requests']} requests, each its own edit: one batched call {v['timing_batched_s']:.2f} s, "
          f"one call per request {v['timing_single_s']:.2f} s; worker log {v['log']}")


def test_each_refusal_names_its_input(compared: dict) -> None:
    r = compared["vllm"]["refusals"]
    assert "vLLM 0.31.0 is not a version" in r["version"] and r["version_ok"] == "NOT REFUSED"
    assert "GPT2Block.forward takes no residual" in r["layer_class"] and r["llama_layer"] == "NOT REFUSED"
    assert r["good"] == "NOT REFUSED"
    assert "enable_prefix_caching=False" in r["prefix_caching"] and "enforce_eager=True" in r["compiled"]
    assert "lack evprobe's extension" in r["no_extension"]
    assert "'enable_prefix_caching': True" in r["start_prefix_caching"] and "'enforce_eager': False" in r["start_compiled"]
    assert "layer 99 is out of range" in r["layer"] and "4 decoder layers" in r["layer"]
    assert "shape (7,)" in r["width"] and "width is 128" in r["width"]
    assert "[999] are outside" in r["index"]
    assert "1 edits for 2 prompts" in r["count"]
    assert all("\n" not in m for m in r.values())
    assert compared["vllm"]["refused_forwards"] == [0, 0]  # refused before any edited forward
