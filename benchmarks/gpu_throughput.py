"""Throughput of evprobe at the seeds' model sizes on a GPU, and the same code on CPU with tiny shapes.

    python benchmarks/gpu_throughput.py                          # GPU: Qwen2.5-VL 7B and 32B shapes, then
                                                                 #   the other shapes while the budget lasts
    python benchmarks/gpu_throughput.py --models qwen2_5_vl_7b --items 16 --batch-sizes 1,8
    python benchmarks/gpu_throughput.py --small                  # CPU: tiny qwen2_5_vl and llava, float32
    python benchmarks/gpu_throughput.py --small --models llava --out /tmp/x.json

Models. On a GPU each shape (SHAPES: the published config.json sizes of a seed's checkpoint) is built
with random bfloat16 weights: `hooks.tiny_models`'s builder of its architecture gives the tokenizer, chat
template, processor classes and special token ids, the transformers config gets the published shape,
the image processor the released resolution settings, and the model is instantiated on the device
(no checkpoint is read). Timings are real; replies are meaningless. `--small` runs `hooks.tiny_models`'s own
configs and processors unchanged, float32, on the CPU.

Items: a small benchmark generated into a temporary folder with `bench.generate` (one-image `select`
and `answer_initial` items; the runner section reads the first items of every request type).

Printed per model, one block per section (the JSON holds the same numbers, typed):
  throughput        direct and brief protocols (bench.protocols.build_prompt; max_new_tokens(protocol,
                    "standard") new tokens, FORCED with min_new_tokens so random weights cannot stop
                    early) at each --batch-sizes: seconds per call (one batch's wall / its rows),
                    generated tokens/s, the split processor (build_inputs) / prefill (generate's set-up
                    and its first forward, the prompt pass with use_cache) / decode (the rest), peak memory
  capture           hooks.capture.capture_batch of every layer (resid_post, last position) vs
                    build_inputs + one plain forward: ratio
  steering          hooks.steering.steered_generate with one Steering at the middle layer vs
                    steered_generate(steering=None): ratio
  dose_response     steered option log-probs at a few alphas (hooks.steer_rows.option_logprobs_rows, the
                    dose-response experiment's readout) per item, alpha 0 checked against option_logprobs
  decode_cache      hooks.generation.generate(decode_cache=) static / compiled vs dynamic: ratio, outputs
  vision_attention  hooks.vision_attention "packed" vs "stock" (archs it supports): ratio, outputs, SDPA calls
  sort_by_length    bench.runner.run(RunConfig(sort_by_length=True), handle=) vs False: ratio, records
  prefetch          bench.runner.run(RunConfig(prefetch=1), handle=) vs 0: ratio, records
  batch_invariance  batched vs batch-1 capture (max relative difference per layer) and greedy replies
                    (fraction of rows with identical token ids), then what to expect and how to get
                    bit-stable runs
  ratios            seconds per call / seed 000 Table 50 (A100); decode step vs weight bytes / memory
                    bandwidth and prefill vs 2 x params x prompt tokens / peak FLOP/s (--bandwidth-gbs,
                    --peak-tflops; H200 defaults on a GPU, on a CPU only when given)
A section that cannot run says why ("not applicable: ...", "error: ...",
"skipped: time budget ..."); a model that fails to build is reported with its error and the next runs.
Output: the table on stdout and one JSON file (--out; written atomically).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The measurement code is the package benchmarks/throughput (a namespace package `benchmarks` under the
# repository root, put on sys.path above, so the script runs from any folder).
from benchmarks.throughput.invariance import INVARIANCE_ADVICE  # noqa: E402
from benchmarks.throughput.items import make_bench  # noqa: E402
from benchmarks.throughput.model_run import Plan, build_and_run  # noqa: E402
from benchmarks.throughput.models import tiny_module  # noqa: E402
from benchmarks.throughput.output import model_lines, write_json  # noqa: E402
from benchmarks.throughput.protocol_timing import FORCED_NOTE  # noqa: E402
from benchmarks.throughput.ratios import H200_BANDWIDTH_GBS, H200_PEAK_TFLOPS  # noqa: E402
from benchmarks.throughput.results import ModelResult, Report, goal_of  # noqa: E402
from benchmarks.throughput.shapes import GPU_MODELS, GPU_REQUIRED, SHAPES, SMALL_MODELS  # noqa: E402
from benchmarks.throughput.timing import Budget  # noqa: E402


def _ints(text: str) -> tuple[int, ...]:
    values = tuple(int(x) for x in text.split(",") if x.strip())
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"need positive integers, got {text!r}")
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="tiny shapes, float32, CPU (hooks.tiny_models unchanged)")
    ap.add_argument("--models", default=None, help=f"comma list; GPU shapes: {', '.join(SHAPES)} (default: "
                    f"{', '.join(GPU_MODELS)}, the first {GPU_REQUIRED} sharing the budget, the rest while it lasts); "
                    f"--small: tiny archs (default {','.join(SMALL_MODELS)})")
    ap.add_argument("--items", type=int, default=None, help="benchmark rows (default: the largest batch size)")
    ap.add_argument("--batch-sizes", type=_ints, default=None, help="default GPU 1,8,32; --small 1,4")
    ap.add_argument("--repeats", type=int, default=None,
                    help="timed rounds after a warm-up call, medians (default GPU 2, --small 1)")
    ap.add_argument("--device", default=None, help="default: cuda when available; --small: cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch threads on a CPU (default 1 with --small)")
    ap.add_argument("--bandwidth-gbs", type=float, default=None,
                    help=f"memory bandwidth for the decode ratio (default on a GPU: H200 {H200_BANDWIDTH_GBS:.0f})")
    ap.add_argument("--peak-tflops", type=float, default=None,
                    help=f"peak TFLOP/s for the prefill ratio (default on a GPU: H200 bf16 dense "
                         f"{H200_PEAK_TFLOPS:.0f})")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="wall-clock budget; sections past it are skipped (default GPU 480, --small none; 0 = none)")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default: a file under the temp folder)")
    args = ap.parse_args(argv)
    if args.repeats is not None and args.repeats < 1:
        ap.error("--repeats must be >= 1")
    args.repeats = args.repeats or (1 if args.small else 2)
    if args.items is not None and args.items < 1:
        ap.error("--items must be >= 1")
    return args


def _resolve(args: argparse.Namespace) -> tuple[Any, list[str], tuple[int, ...], int]:
    import torch

    device = torch.device(args.device or ("cpu" if args.small or not torch.cuda.is_available() else "cuda"))
    if not args.small and device.type == "cpu" and args.device is None:
        raise SystemExit("no GPU here: the seeds' shapes need one; run with --small (tiny shapes on the CPU), "
                         "or --device cpu to build them on the CPU anyway")
    names = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else list(
        SMALL_MODELS if args.small else GPU_MODELS)
    known = tiny_module().TINY_ARCHS if args.small else tuple(SHAPES)
    bad = [n for n in names if n not in known]
    if bad:
        raise SystemExit(f"unknown model {bad[0]!r}; choose from {', '.join(known)}")
    sizes = args.batch_sizes or ((1, 4) if args.small else (1, 8, 32))
    items = args.items or max(sizes)
    kept = tuple(b for b in sizes if b <= items) or (items,)
    return device, names, kept, items


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    import transformers

    device, names, batch_sizes, n_items = _resolve(args)
    if device.type == "cpu":
        torch.set_num_threads(args.threads or (1 if args.small else torch.get_num_threads()))
    gpu = device.type == "cuda"
    bandwidth = args.bandwidth_gbs or (H200_BANDWIDTH_GBS if gpu else None)
    peak = args.peak_tflops or (H200_PEAK_TFLOPS if gpu else None)
    budget_s = args.budget_s if args.budget_s is not None else (None if args.small else 480.0)
    budget = Budget(budget_s or None)
    dtype = torch.float32 if args.small else torch.bfloat16
    out_path = args.out or Path(tempfile.gettempdir()) / "evprobe-gpu-throughput" / (
        "small.json" if args.small else "gpu.json")
    device_name = torch.cuda.get_device_name(device) if gpu else f"CPU ({os.cpu_count()} cores)"
    print(f"gpu_throughput: {device_name}, {'tiny shapes' if args.small else 'seed shapes, random weights'}, "
          f"{str(dtype).removeprefix('torch.')}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} CPU thread(s); models {', '.join(names)}; {n_items} items, batch sizes "
          f"{','.join(map(str, batch_sizes))}, {args.repeats} timed rounds after a warm-up"
          + (f"; budget {budget_s:.0f} s" if budget_s else ""), flush=True)
    print(f"note: {FORCED_NOTE}", flush=True)
    results: list[ModelResult] = []

    def report() -> Report:
        return Report(" ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]), args.small,
                      str(device), device_name, str(dtype).removeprefix("torch."), torch.__version__,
                      transformers.__version__, torch.get_num_threads(), n_items, batch_sizes,
                      min(max(batch_sizes), 8), args.repeats, budget_s or None, FORCED_NOTE, INVARIANCE_ADVICE,
                      tuple(results), goal_of(results), time.perf_counter() - budget.start)

    with tempfile.TemporaryDirectory(prefix="evprobe-gpu-throughput-") as tmp:
        bench, rows = make_bench(Path(tmp), n_items)
        section_batch = min(max(batch_sizes), 8)
        plan = Plan(rows, bench, Path(tmp) / "runs", batch_sizes, section_batch,
                     runner_items=min(len(rows.items), 2 * section_batch), repeats=args.repeats,
                     bandwidth_gbs=bandwidth, peak_tflops=peak, budget=budget)
        # Named models (or --small) share the budget equally; by default the first GPU_REQUIRED do, and
        # the others start only with a minute left.
        required_total = len(names) if args.small or args.models else min(GPU_REQUIRED, len(names))
        for i, name in enumerate(names):
            shape = None if args.small else SHAPES[name]
            required = i < required_total
            if budget.left() <= 0 or (not required and budget.left() < 60):
                results.append(ModelResult(name, shape.arch if shape else name, shape and shape.checkpoint,
                                           str(device), str(dtype).removeprefix("torch."),
                                           error="skipped: time budget spent"))
                print("\n".join(model_lines(results[-1])), flush=True)
                continue
            budget.start_model(required_total - i if required else 1)
            # The JSON is rewritten after every section: a run cut short (a device time limit) keeps
            # what it measured.
            partial = lambda m: write_json(out_path, dataclasses.replace(report(), models=(*results, m)))  # noqa: E731
            results.append(build_and_run(name, shape, plan, device, dtype, partial))
            print("\n".join(model_lines(results[-1])), flush=True)
            write_json(out_path, report())
    final = report()
    write_json(out_path, final)
    if final.goal:
        g = final.goal
        print(f"goal: {g.shape} direct {g.best_direct_s_per_call:.4f} s per call at batch {g.batch_size} vs "
              f"<= {g.target_s} s: {'met' if g.met else 'NOT met'}")
    print(f"batch invariance: {INVARIANCE_ADVICE}")
    print(f"wrote {out_path}; wall {final.wall_s:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
