"""Steering through vLLM (bench.backends.vllm_steer) against hooks.steering on the hf model.

The edit: alpha * v added to the residual stream after a decoder layer at every position, prompt and
generated tokens alike (`Steering(v, layer, alpha)`, positions "all", schedule "every-step"), v a
random unit direction. vLLM runs in its own environment (`vllm_python`): ONE subprocess,
tests/bench/vllm_steer_driver.py, starts one engine and reads every steering; this module computes
the same with the hf model (`hooks.steering.option_logprobs`, `steered_generate`) and compares:
option-letter log-probs at the readout position, and the greedy tokens and letters' log-probs at
every generated position. Layer 3 is the last layer (the edit then meets the final norm).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.vllm_drivers import run_driver

DRIVER = Path(__file__).with_name("vllm_steer_driver.py")
# As tests/bench/test_backend_vllm.py: unsteered hf vs vLLM differ by up to ~1.2e-5 (float32 sums in
# another order); the steered readouts are held to the same bound.
LOGPROB_TOLERANCE = 1e-4
LETTERS = ("A", "B", "C", "D")
PROMPTS = ("Which colour is the sky? A) red B) blue C) green D) black",
           "Pick a number. A) one B) two C) three D) four",
           "Is water wet? A) yes B) no C) sometimes D) never")
# (direction index, layer, alpha); layer 3 is the last
STEERINGS = [(0, 1, 0.0), (0, 1, 2.0), (0, 1, 8.0), (1, 3, 2.0), (1, 3, 8.0), (2, 2, -8.0), (0, 1, 32.0)]
MAX_NEW = 6


@pytest.fixture(scope="module")
def compared(vllm_python: Path, tiny_text_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    from evprobe import hooks
    from evprobe.hooks.generation import candidate_token_ids
    from evprobe.hooks.inputs import build_inputs
    from evprobe.hooks.direction_vectors import random_directions
    from evprobe.hooks.steering import Steering, option_logprobs, steered_generate

    handle = hooks.load(str(tiny_text_folder), dtype="float32")
    dirs = random_directions(handle.d_model, 3, seed=0)
    images = [[] for _ in PROMPTS]

    def ids(for_generation: bool) -> list[list[int]]:
        return [build_inputs(handle, [p], [[]], position_ids=False, for_generation=for_generation)["input_ids"][0]
                .tolist() for p in PROMPTS]

    letter_ids = candidate_token_ids(handle, LETTERS)
    folder = tmp_path_factory.mktemp("vllm_steer")
    spec = {"model": str(tiny_text_folder), "option_ids": ids(False), "gen_ids": ids(True), "letter_ids": letter_ids,
            "max_new_tokens": MAX_NEW,
            "steerings": [{"direction": dirs[d].tolist(), "layer": layer, "alpha": alpha}
                          for d, layer, alpha in STEERINGS]}
    vllm = run_driver(vllm_python, DRIVER, spec, folder, timeout=300)

    import torch

    hf_option, hf_gen = [], []
    for d, layer, alpha in STEERINGS:
        s = Steering(dirs[d], layer, alpha)
        hf_option.append(option_logprobs(handle, PROMPTS, images, LETTERS, s))
        run = steered_generate(handle, PROMPTS, images, s, MAX_NEW)
        logp = torch.log_softmax(run.scores.float(), dim=-1)[..., letter_ids].double().numpy()  # (rows, new, letters)
        hf_gen.append({"token_ids": run.token_ids.tolist(), "logprobs": logp})
    unsteered = option_logprobs(handle, PROMPTS, images, LETTERS)
    return {"vllm": vllm, "hf_option": np.stack(hf_option), "hf_gen": hf_gen, "unsteered": unsteered,
            "eos": handle.tokenizer.eos_token_id}


def test_steered_option_logprobs_are_hfs(compared: dict) -> None:
    v, h = np.array(compared["vllm"]["option"]), compared["hf_option"]  # (steerings, rows, letters)
    assert v.shape == h.shape == (len(STEERINGS), len(PROMPTS), len(LETTERS))
    worst = np.abs(v - h).max(axis=(1, 2))
    assert worst.max() <= LOGPROB_TOLERANCE, dict(zip(map(str, STEERINGS), worst.tolist()))
    # not vacuous: the larger doses move the readout by far more than the tolerance
    moved = np.abs(h - compared["unsteered"]).max(axis=(1, 2))
    assert moved[0] == 0.0 and (moved[[2, 4, 5, 6]] > 0.05).all(), moved.tolist()
    print("max |log p| hf vs vllm per steering:", {str(s): f"{w:.2g}" for s, w in zip(STEERINGS, worst)},
          "; moved by the edit:", [round(float(m), 3) for m in moved],
          f"; driver {compared['vllm']['wall_s']:.1f} s (engine start {compared['vllm']['engine_start_s']:.1f} s)")


def test_steered_generation_is_hfs_at_every_step(compared: dict) -> None:
    """The edit at decode steps too: the same greedy tokens, and the letters' log-probs at every
    generated position (hf's up to its first end-of-sequence token; vLLM ignores it)."""
    worst = 0.0
    for k, (v, h) in enumerate(zip(compared["vllm"]["gen"], compared["hf_gen"])):
        for r in range(len(PROMPTS)):
            hf_ids = h["token_ids"][r]
            n = next((i + 1 for i, t in enumerate(hf_ids) if t == compared["eos"]), len(hf_ids))
            assert v["token_ids"][r][:n] == hf_ids[:n], (STEERINGS[k], r)
            worst = max(worst, float(np.abs(np.array(v["logprobs"][r][:n]) - h["logprobs"][r, :n]).max()))
    assert worst <= LOGPROB_TOLERANCE
    # not vacuous: the largest dose changes some greedy reply
    changed = [k for k, h in enumerate(compared["hf_gen"]) if h["token_ids"] != compared["hf_gen"][0]["token_ids"]]
    assert len(STEERINGS) - 1 in changed, changed
    print(f"steerings whose greedy tokens differ from the unsteered ones: {[STEERINGS[k] for k in changed]}; "
          f"largest letter log-prob difference over {MAX_NEW} generated positions: {worst:.2g}")


def test_no_edit_is_left_behind(compared: dict) -> None:
    """The hook goes when the readout ends, and no KV of one edit is read under another."""
    v = compared["vllm"]
    assert v["option_again"][0] == v["option"][0]  # bit for bit, after five other edits
    assert np.abs(np.array(v["unsteered_after"][0]) - compared["unsteered"]).max() <= LOGPROB_TOLERANCE
