"""Interventions at engine speed, measured side by side in one run: plain vLLM, vLLM with one steering,
with a batch of per-request steerings, with capture, and the hf path doing the same work; then a
full-null dose-response (steering_dose_response) through the engine and through hf.

    python benchmarks/engine_interventions.py [--quick] [--model FOLDER] [--prompts 32] [--directions 50]
                                              [--tokens 16] [--rounds 3]

Run it in the vLLM environment (vLLM and transformers in one process). Without --model it saves the tiny
text Llama (hooks.tiny_text: 4 layers, d_model 128, 2 heads of 64) and measures on it. Each row is the
median of `rounds` timed calls (after one untimed warm-up), float32:

- generate: greedy `tokens` new tokens for `prompts` prompts; plain (no edit), one steering (every
  request the same edit), on hf (hooks.generate; with hooks.steering.steer).
- logprobs: option-letter log-probs at the answer position; plain, one steering, hf
  (hooks.next_token_logprobs; steered: hooks.steer_rows.option_logprobs_rows with one vector).
- null band: `directions` raw vectors x `prompts` prompts: ONE engine call of per-request edits, the same
  as one engine call per direction, and hf's option_logprobs_rows (forwards of 256 rows).
- capture: the residual stream after one layer at the last token (hooks.vllm_engine.capture; hf:
  hooks.capture.capture_layers).
- dose-response: steering_dose_response with `directions` random directions, 2 doses each side, letter
  readout, norm units, 200 resamples, backend "vllm" vs "hf" (everything it does, estimates included).
Ratios: each vLLM row over plain vLLM's for the same number of requests (the overhead of the
intervention; the null band over `directions` plain calls), and hf's time over vLLM's (the engine's
speedup). The largest |log p| difference between engine and hf on the null band is
printed beside it (parity). --quick: 8 prompts, 8 directions, 4 tokens, 1 round (a test runs it).

Goals (issue 56): capture and steering within 1.15x of plain vLLM; a full-null dose-response at least
5x faster than hf at 7B on one GPU. A tiny CPU model measures overheads of Python and scheduling,
not of a GPU's kernels: the goals are judged on a GPU run of this same script with --model at 7B.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

LETTERS = ["A", "B", "C"]


def _timed(fn: Callable[[], Any], rounds: int) -> tuple[float, Any]:
    fn()  # warm-up (first-call allocations, the engine's first schedule)
    times, out = [], None
    for _ in range(rounds):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def _prompts(n: int) -> list[str]:
    return [f"Case {i}: the ball fell {i % 7 + 1} metres in {i % 3 + 1} seconds. Is that enough to know its mass? "
            f"Answer A (yes), B (no) or C (measure again)." for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--model", default=None, help="a saved text model folder (default: the tiny text Llama)")
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--directions", type=int, default=50)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--layer", type=int, default=None, help="steered / captured layer (default: the middle one)")
    a = p.parse_args(argv)
    if a.quick:
        a.prompts, a.directions, a.tokens, a.rounds = 8, 8, 4, 1
    from evprobe import hooks
    from evprobe.analysis.engine_model import edit_rows, open_engine
    from evprobe.hooks.capture import capture_layers
    from evprobe.hooks.steer_rows import option_logprobs_rows
    from evprobe.hooks.steering import Steering, steer
    from evprobe.hooks.vllm_engine.capture import capture
    from evprobe.hooks.vllm_engine.steering import generate, option_logprobs

    tmp = tempfile.TemporaryDirectory()
    folder = a.model
    if folder is None:
        from evprobe.hooks.tiny_text import save_tiny_text_model

        folder = str(save_tiny_text_model(Path(tmp.name) / "model"))
    t = time.perf_counter()
    engine = open_engine(folder)
    start_s = time.perf_counter() - t
    try:
        hf = hooks.load(folder, dtype=engine.dtype)
        n_layers, d = engine.n_layers, engine.d_model
        layer = n_layers // 2 if a.layer is None else a.layer
        prompts = _prompts(a.prompts)
        images: list[list[Any]] = [[] for _ in prompts]
        ids, letters = engine.prompt_ids(prompts), engine.letter_ids(LETTERS)
        rng = np.random.default_rng(0)
        dirs = rng.standard_normal((a.directions, d))
        dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
        deltas = 2.0 * dirs  # (K, d_model) raw
        one = deltas[:1]
        n, llm = len(prompts), engine.llm
        print(f"model {folder if a.model else 'tiny text Llama'}: {n_layers} layers, d_model {d}, {engine.dtype}; "
              f"vLLM {engine.version} (engine start {start_s:.1f} s); {n} prompts of "
              f"{min(map(len, ids))}-{max(map(len, ids))} tokens, {a.directions} directions, {a.tokens} new tokens, "
              f"layer {layer}, median of {a.rounds}")
        # (group, work, vLLM s, hf s, plain calls of work it holds: the null band is `directions` x plain's)
        rows: list[tuple[str, str, float, float | None, int]] = []

        def row(group: str, work: str, engine_fn: Callable[[], Any], hf_fn: Callable[[], Any] | None,
                scale: int = 1) -> Any:
            te, got = _timed(engine_fn, a.rounds)
            th = None if hf_fn is None else _timed(hf_fn, a.rounds)[0]
            rows.append((group, work, te, th, scale))
            return got

        def hf_steered_generate() -> Any:
            with steer(hf, Steering(one[0] / 2.0, layer, 2.0)):
                return hooks.generate(hf, prompts, images, max_new_tokens=a.tokens, batch_size=n)

        row("generate", "plain", lambda: generate(llm, ids, [None] * n, max_new_tokens=a.tokens),
            lambda: hooks.generate(hf, prompts, images, max_new_tokens=a.tokens, batch_size=n))
        row("generate", "one steering", lambda: generate(llm, ids, edit_rows(layer, one, n, "all"),
                                                         max_new_tokens=a.tokens), hf_steered_generate)
        row("logprobs", "plain", lambda: option_logprobs(llm, ids, letters, [None] * n),
            lambda: hooks.next_token_logprobs(hf, prompts, images, LETTERS, batch_size=n))
        row("logprobs", "one steering", lambda: option_logprobs(llm, ids, letters, edit_rows(layer, one, n, "all")),
            lambda: option_logprobs_rows(hf, prompts, images, LETTERS, layer, one))
        band = row("logprobs", f"{a.directions} x {n} per-request, one call",
                   lambda: option_logprobs(llm, ids * a.directions, letters, edit_rows(layer, deltas, n, "all")),
                   lambda: option_logprobs_rows(hf, prompts, images, LETTERS, layer, deltas), a.directions)
        row("logprobs", f"{a.directions} calls of {n}",
            lambda: [option_logprobs(llm, ids, letters, edit_rows(layer, d_[None], n, "all")) for d_ in deltas], None,
            a.directions)
        row("capture", "last token, one layer", lambda: capture(llm, ids, layers=[layer], positions=["last"]),
            lambda: capture_layers(hf, prompts, images, layers=[layer], positions=["last"], batch_size=n))
        ref = option_logprobs_rows(hf, prompts, images, LETTERS, layer, deltas).reshape(-1, len(LETTERS))
        parity = float(np.abs(np.asarray(band) - ref).max())
        _dose_rows(rows, engine, hf, prompts, layer, a)
    finally:
        engine.close()
        tmp.cleanup()
    _print(rows, parity)
    return 0


def _dose_rows(rows: list, engine: Any, hf: Any, prompts: list[str], layer: int, a: argparse.Namespace) -> None:
    """One full-null steering_dose_response per backend (timed once each: seconds, not sub-second)."""
    from evprobe.analysis.dose_response import steering_dose_response

    rng = np.random.default_rng(1)
    kw = dict(direction=rng.standard_normal(engine.d_model), layer=layer, candidates=LETTERS, target="C",
              families=[f"f{i // 2}" for i in range(len(prompts))], alphas=(-1.0, -0.5, 0.0, 0.5, 1.0),
              n_random=a.directions, n_relabel=0, n_boot=200)
    took = {}
    for backend, handle in (("vllm", engine), ("hf", hf)):
        t = time.perf_counter()
        steering_dose_response(handle, prompts, None, backend=backend, **kw)
        took[backend] = time.perf_counter() - t
    rows.append(("dose-response", f"{a.directions} random directions x 4 doses", took["vllm"], took["hf"], 0))


def _print(rows: list, parity: float) -> None:
    plain = {g: te for g, w, te, _, _ in rows if w == "plain"}
    print("| group | work | vLLM s | x plain vLLM (same work) | hf s | hf / vLLM |")
    print("|---|---|---|---|---|---|")
    for g, w, te, th, scale in rows:
        over = f"{te / (plain[g] * scale):.2f}" if g in plain and scale else "-"
        hf_s = "-" if th is None else f"{th:.3f}"
        speed = "-" if th is None else f"{th / te:.2f}"
        print(f"| {g} | {w} | {te:.3f} | {over} | {hf_s} | {speed} |")
    by = {w: te for g, w, te, _, _ in rows}
    one_call = next(te for g, w, te, _, _ in rows if w.endswith("one call"))
    many = next(te for g, w, te, _, _ in rows if "calls of" in w)
    print(f"null band: one call of per-request edits vs one call per direction: {many / one_call:.2f}x faster")
    print(f"parity: largest |log p| difference engine vs hf on the null band: {parity:.2e}")
    assert by  # every row printed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
