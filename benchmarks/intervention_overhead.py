"""The intervention core's cost, side by side in one run with a plain forward, plain generation and
the substrates it replaced (hooks.intervention; issue 27's target: within 1.1x of today's).

Per architecture (tiny models, and the model organism), interleaved rounds after a warm-up, medians
and minima (on a shared machine the minima are the steadier ratio):

  forward            model(**enc), inputs prebuilt (every layer computed, the LM head included)
  capture core       hooks.capture.trace_sites: every layer's residual stream reduced to the last
                     token inside the forward, which stops after the last layer (the core's Reads)
  capture nnsight    tests/hooks/nnsight_twins.trace_sites_nnsight: the same through one nnsight trace (what
                     capture ran on before the core)
  generate           greedy generation of --tokens tokens (min_new_tokens pins the count)
  steer core         the same under hooks.steering (the core's Add), every step, at the middle layer
  steer bare hook    the same under one bare torch forward hook `output + delta` (what steering
                     ran on before the core: the least a hook can cost)
  steer nnsight      tests/hooks/nnsight_twins.steered_generate_nnsight (tracer.iter editing every step)

Ratios printed: capture core / capture nnsight and steer core / steer bare hook (the targets,
<= 1.10, judged on the median of the per-round ratios: each round runs every variant back to back,
so both sides of a ratio see the same load), and each against its plain run.

    python benchmarks/intervention_overhead.py [--archs organism,llava,qwen2_5_vl,gemma3] [--rows 4] [--tokens 8]
                                               [--rounds 15] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET = 1.10


def _handle(arch: str):
    from evprobe import hooks

    return hooks.load("organism") if arch == "organism" else hooks.tiny(arch)


def _bench(folder: Path) -> Path:
    from evprobe.bench.generate import GenerateConfig, generate

    generate(folder / "bench", GenerateConfig(families_per_system=2, subset_per_cell=0), progress=False)
    return folder / "bench"


def _inputs(h, bench: Path, rows: int):
    """The first `rows` selection requests of the benchmark (prompt + sheets), as the pipeline feeds them."""
    from evprobe.bench.manifest import load_item_images, read_items
    from evprobe.bench.protocols import build_prompt
    from evprobe.hooks import build_inputs

    items = [it for it in read_items(bench) if it.request == "select"][:rows]
    prompts = [build_prompt(it, "direct", "standard") for it in items]
    images = [load_item_images(bench, it.images) for it in items]
    return prompts, images, build_inputs(h, prompts, images)


def measure(arch: str, bench: Path, rows: int, tokens: int, rounds: int) -> dict[str, list[float]]:
    import numpy as np
    import torch

    from evprobe.hooks.capture import position_plan, reduce_at, trace_sites
    from evprobe.hooks.steering import Steering, steer, steered_generate
    from tests.hooks.nnsight_twins import steered_generate_nnsight, trace_sites_nnsight

    h = _handle(arch)
    prompts, images, enc = _inputs(h, bench, rows)
    layers = list(range(h.n_layers))
    last = int(enc["input_ids"].shape[1]) - 1  # left padding: every row's last token
    plan = position_plan([[(last,)] * rows], h.device)
    middle = h.n_layers // 2
    s = Steering(np.random.default_rng(0).normal(size=h.d_model), layer=middle, alpha=2.0)
    delta = s.delta(h.dtype, h.device)
    gen = dict(max_new_tokens=tokens, min_new_tokens=tokens)

    def forward():
        with torch.no_grad():
            h.model(**enc, use_cache=False)

    def bare_hook():
        remover = h.layers[middle].register_forward_hook(lambda m, a, o: o + delta)
        try:
            steered_generate(h, prompts, images, None, **gen)
        finally:
            remover.remove()

    def steer_core():
        with steer(h, s):
            steered_generate(h, prompts, images, None, **gen)

    variants = {
        "forward": forward,
        "capture core": lambda: trace_sites(h, enc, layers, ["resid_post"], lambda out: reduce_at(out, plan)),
        "capture nnsight": lambda: trace_sites_nnsight(h, enc, layers, ["resid_post"], lambda out: reduce_at(out, plan)),
        "generate": lambda: steered_generate(h, prompts, images, None, **gen),
        "steer core": steer_core,
        "steer bare hook": bare_hook,
        "steer nnsight": lambda: steered_generate_nnsight(h, prompts, images, s, **gen),
    }
    for fn in variants.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return times


def ratios(times: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
    """(median of the per-round ratios, ratio of the minima) of each comparison. The variants of a
    round run back to back, so a round's ratio sees the same machine load on both sides."""
    low = {k: min(v) for k, v in times.items()}
    pairs = {"capture core / capture nnsight": ("capture core", "capture nnsight"),
             "steer core / steer bare hook": ("steer core", "steer bare hook"),
             "capture core / forward": ("capture core", "forward"),
             "capture nnsight / forward": ("capture nnsight", "forward"),
             "steer core / generate": ("steer core", "generate"),
             "steer nnsight / generate": ("steer nnsight", "generate")}
    return {name: (statistics.median(x / y for x, y in zip(times[a], times[b], strict=True)), low[a] / low[b])
            for name, (a, b) in pairs.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--archs", default="organism,llava,qwen2_5_vl,gemma3")
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--tokens", type=int, default=8)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    import tempfile

    worst = 0.0
    scratch = tempfile.TemporaryDirectory()
    bench = _bench(Path(scratch.name))
    print(f"{args.rows} rows, {args.tokens} new tokens, {args.rounds} rounds, {args.threads} thread(s); "
          "medians (ms), then ratios: median of per-round ratios / ratio of minima")
    for arch in args.archs.split(","):
        times = measure(arch, bench, args.rows, args.tokens, args.rounds)
        print(f"\n{arch}: " + ", ".join(f"{k} {1000 * statistics.median(v):.1f}" for k, v in times.items()))
        for name, (med, low) in ratios(times).items():
            target = name.endswith("nnsight") and name.startswith("capture core") or name.endswith("bare hook")
            if target:
                worst = max(worst, med)
            print(f"  {name:32s} {med:5.2f} / {low:5.2f}" + (f"   (target <= {TARGET:.2f})" if target else ""))
    print(f"\nworst target ratio (median of per-round ratios): {worst:.2f}; "
          f"{'within' if worst <= TARGET else 'OVER'} {TARGET:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
