"""`evprobe quickstart`: the main job, end to end, on a fresh machine with no download and no GPU.

Steps (each one resumable; a second run reuses finished work):
 1. generate a benchmark subset (`--families-per-system`, default 2: 6 families, 312 items);
 2. run the model through the behavioural runner (direct protocol) and score it;
 3. capture the residual stream of the selection and initial-answer prompts at every layer
    (last token, question text, image tokens);
 4. sweep logistic probes for sufficiency (`resolved`) with controls and baselines;
 5. fit difference-of-means directions for `resolved`, one per system (so steering can be tested
    on the families of other systems);
 6. a small dose-response: the first system's direction applied to held-out families of the
    others, with a random-direction null and ablation;
 7. pair patching on a few image pairs;
 8. one report, `OUT/report/report.md`, with every plot beside it.

The embedded default model is a tiny randomly initialised LLaVA (`tiny:llava`): it exercises every
code path in about a minute on 2 cores, and the report says plainly that its numbers describe an
untrained model. On a GPU machine, `--model configs/models/qwen2_5_vl_7b.yaml` runs the same job
on a real checkpoint.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.generate import GenerateConfig, generate
from bench.manifest import META_FILE, BenchError
from bench.runner import RunConfig, run

DEFAULT_MODEL = "tiny:llava"
UNTRAINED = (
    "The model is {model}: a tiny randomly initialised network of a real architecture, untrained. "
    "Every number below tests the toolkit's plumbing, not what any model knows."
)


def _step(n: int, title: str) -> float:
    print(f"[{n}/8] {title}", file=sys.stderr, flush=True)
    return time.perf_counter()


def _bench_ready(bench: Path, config: GenerateConfig) -> bool:
    meta_path = bench / META_FILE
    if not meta_path.is_file():
        return False
    meta = json.loads(meta_path.read_text())
    return (meta["seed"], meta["families_per_system"], meta["subset_per_cell"]) == (
        config.seed, config.families_per_system, config.subset_per_cell
    )


def quickstart(
    out: Path,
    *,
    model: str = DEFAULT_MODEL,
    families_per_system: int = 2,
    pairs: int = 4,
    n_boot: int = 1000,
    progress: bool = False,
) -> dict[str, Any]:
    """Run the whole pipeline into `out`; returns the timings and the report path."""
    from experiments.config import load_model_config

    cfg = load_model_config(model)  # a bad name or file fails here, before anything runs
    if families_per_system < 2:
        raise BenchError("--families-per-system must be at least 2 (folds and held-out systems need families)")
    out.mkdir(parents=True, exist_ok=True)
    bench, run_dir, acts = out / "bench", out / "run", out / "acts"
    directions, dose, patch = out / "directions", out / "dose_response", out / "patching"
    timings: dict[str, float] = {}

    t = _step(1, "generate the benchmark subset")
    gen = GenerateConfig(families_per_system=families_per_system, subset_per_cell=0)
    if not _bench_ready(bench, gen):
        generate(bench, gen, force=True, progress=progress)
    timings["generate"] = time.perf_counter() - t

    t = _step(2, f"run {cfg.model} on every item and score it")
    run(RunConfig(model=cfg.model, bench=str(bench), out=str(run_dir), batch_size=cfg.batch_size,
                  dtype=cfg.dtype, device_map=cfg.device_map, attn_implementation=cfg.attn_implementation,
                  trust_remote_code=cfg.trust_remote_code), progress=progress)
    from experiments.scoring_io import score_run

    score_run(run_dir, bench, n_boot=n_boot)
    timings["run+score"] = time.perf_counter() - t

    t = _step(3, "capture the residual stream")
    from experiments.capture import CaptureConfig, capture

    capture(CaptureConfig(model=cfg.model, bench=str(bench), out=str(acts), requests=("select", "answer_initial"),
                          positions=("last", "text_mean", "image_mean"), batch_size=cfg.batch_size,
                          dtype=cfg.dtype, device_map=cfg.device_map, attn_implementation=cfg.attn_implementation,
                          trust_remote_code=cfg.trust_remote_code), progress=progress)
    timings["capture"] = time.perf_counter() - t

    t = _step(4, "sweep probes for sufficiency")
    _probe_command("sweep", [str(acts), "--label", "resolved", "--n-boot", str(n_boot), "--quiet",
                             "--out", str(acts / "probes" / "resolved")])
    timings["sweep"] = time.perf_counter() - t

    t = _step(5, "fit directions per system")
    meta = json.loads((acts / "meta.json").read_text())
    layers = ",".join(str(i) for i in meta["layers"])
    _probe_command("directions", [str(acts), "--layer", layers, "--position", "last", "--label", "resolved",
                                  "--by", "system", "--out", str(directions)])
    timings["directions"] = time.perf_counter() - t

    t = _step(6, "dose-response on held-out families")
    from experiments.dose_response import DoseResponseConfig, dose_response

    dose_response(DoseResponseConfig(model=model, bench=str(bench), directions=str(directions), out=str(dose),
                                     layers="from-direction", alphas=(-1.0, -0.5, 0.0, 0.5, 1.0), n_random=2,
                                     n_boot=n_boot), progress=progress)
    timings["dose_response"] = time.perf_counter() - t

    t = _step(7, "pair patching")
    from experiments.patching import PatchingConfig, run_patching

    run_patching(PatchingConfig(model=cfg.model, bench=str(bench), out=str(patch), limit_pairs=pairs,
                                dtype=cfg.dtype, device_map=cfg.device_map,
                                attn_implementation=cfg.attn_implementation, n_boot=n_boot), progress=progress)
    timings["patching"] = time.perf_counter() - t

    t = _step(8, "write the report")
    from experiments.report import build_report

    banner = UNTRAINED.format(model=cfg.model) if cfg.model.startswith("tiny:") else None
    report = build_report(out, title=f"evprobe quickstart: {cfg.model}", banner=banner)
    timings["report"] = time.perf_counter() - t
    return {"report": str(report), "seconds": {k: round(v, 2) for k, v in timings.items()}}


def _probe_command(name: str, argv: list[str]) -> None:
    """Run `evprobe sweep` / `evprobe directions` through their own parsers (no CLI import)."""
    from probes.cli import add_directions_parser, add_sweep_parser

    parser = argparse.ArgumentParser(prog="evprobe")
    sub = parser.add_subparsers(dest="command", required=True)
    (add_sweep_parser if name == "sweep" else add_directions_parser)(sub)
    args = parser.parse_args([name, *argv])
    args.run(args)


def add_quickstart_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "quickstart",
        help="the main job: benchmark, behaviour, capture, probes, steering, patching, report",
        description="Generate a benchmark subset, run the model, score it, capture activations, sweep "
        "probes, fit directions, run a small dose-response and pair patching, and write one report "
        "(OUT/report/report.md). No download and no GPU with the default tiny model.",
    )
    p.add_argument("--out", type=Path, default=Path("out/quickstart"), help="output folder")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="tiny:<arch>, a config in configs/models (e.g. qwen2_5_vl_7b or its path), or a hub id")
    p.add_argument("--families-per-system", type=int, default=2)
    p.add_argument("--pairs", type=int, default=4, help="image pairs to patch")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--progress", action="store_true", help="show each step's progress line")
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    result = quickstart(args.out, model=args.model, families_per_system=args.families_per_system,
                        pairs=args.pairs, n_boot=args.n_boot, progress=args.progress)
    total = sum(result["seconds"].values())
    print(f"quickstart done in {total:.0f} s; report: {result['report']}")
    return 0
