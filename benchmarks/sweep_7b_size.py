"""Benchmark: a full probe sweep at the size of a 7B model.

40 layers x 576 items x 3,584 dimensions (Qwen2.5-VL-7B's d_model), float16, one position by
default: the 576 base selections of the main set (their real index rows, built in memory by
`bench.generate.build`, so families, pairs and the XOR structure are the benchmark's), with a
sufficiency direction planted at layer 20. Times `probes.sweep.sweep` with everything a CLI
sweep computes: grouped 5-fold CV AUROC and accuracy per layer with family-bootstrap intervals
(B = 2,000), 39 control tasks (random cell functions, probes.control_tasks) with the
selectivity interval against their range, the leakage check (4 within-family shuffles), the input-only baselines, the
variance diagnostic and nested best-layer selection (10 inner fits per layer). `--control-tasks 0`
leaves the control tasks out (the sweep as it was before them, but for the leakage shuffles);
`--no-controls` leaves out every control, check and baseline. Prints wall time, CPU
time, peak RSS (ru_maxrss; it includes the memory-mapped pages of acts.npy that were touched)
and the number of BLAS threads.

    python benchmarks/sweep_7b_size.py [--layers 40] [--items 576] [--d-model 3584] [--positions 1]
                                       [--probe logistic] [--n-boot 2000] [--structure walk|independent]
                                       [--jobs N] [--keep DIR] [--control-tasks 39] [--no-controls]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from numpy.lib.format import open_memmap

from evprobe.bench.generate import GenerateConfig, build
from evprobe.core.capture_schema import CAPTURE_FORMAT
from evprobe.probes.captures import INDEX_FILE, META_FILE, load_captures
from evprobe.probes.label_sets import labels
from evprobe.core.bootstrap import DEFAULT_REFITS
from evprobe.probes.control_tasks import DEFAULT_CONTROL_TASKS, fmt_selectivity
from evprobe.probes.sweep import SweepConfig, sweep

INDEX_FIELDS = (
    "request", "variant", "family_id", "system", "initial_property", "decision_id", "history", "threshold_level",
    "test", "hidden_world", "image_pair_id", "threshold_pair_id", "resolved", "reference_action", "reference_answer",
)


def write_big_capture(
    out: Path, n_items: int, n_layers: int, n_positions: int, d: int, signal_layer: int, structure: str = "walk"
) -> None:
    """The capture folder. `walk`: each item's residual stream is a random walk over layers
    (h_l = h_{l-1} + N(0, 0.25^2) per coordinate, h_0 ~ N(0, 1)), the sufficiency signal
    (+-3 along a unit direction) enters at `signal_layer` and stays, as a residual stream keeps
    what a layer writes; adjacent layers are correlated as in real models. `independent`: fresh
    N(0, 1) noise at every layer and the signal at `signal_layer` only (no warm-start help)."""
    import json

    _, items = build(GenerateConfig())
    rows = [it for it in items if it.request == "select" and it.variant is None][:n_items]
    rng = np.random.default_rng(0)
    u = rng.standard_normal(d).astype(np.float32)
    u /= np.linalg.norm(u)
    y = np.array([1.0 if it.resolved else -1.0 for it in rows], dtype=np.float32)
    shape = (len(rows), n_layers, n_positions, d)
    mm = open_memmap(out / "acts.npy", mode="w+", dtype=np.float16, shape=shape)
    h = rng.standard_normal((len(rows), n_positions, d), dtype=np.float32)
    for layer in range(n_layers):  # one layer at a time: never the whole array in memory
        if structure == "walk":
            h += 0.25 * rng.standard_normal(h.shape, dtype=np.float32)
            if layer == signal_layer:
                h += 3.0 * y[:, None, None] * u
            x = h
        else:
            x = rng.standard_normal(h.shape, dtype=np.float32)
            if layer == signal_layer:
                x += 3.0 * y[:, None, None] * u
        mm[:, layer] = x.astype(np.float16)
    mm.flush()
    del mm
    meta = {"format": CAPTURE_FORMAT, "model": "synthetic-7b-size", "layers": list(range(n_layers)),
            "positions": ["last", "image_mean", "text_mean"][:n_positions], "d_model": d, "regime": "standard",
            "requests": ["select"], "n_items": len(rows), "shape": list(shape), "acts_dtype": "float16"}
    (out / META_FILE).write_text(json.dumps(meta))
    with (out / INDEX_FILE).open("w") as fh:
        for i, it in enumerate(rows):
            fh.write(json.dumps({"row": i, "item_id": it.item_id, **{f: getattr(it, f) for f in INDEX_FIELDS}}) + "\n")


def run_sweep_only(folder: Path, probe: str, n_boot: int, jobs: int | None, control_tasks: int, controls: bool,
                   refits: int = DEFAULT_REFITS) -> None:
    """The measured part, in its own process: load, label, sweep; print the figures."""
    t_start = time.perf_counter()
    captures = load_captures([folder])
    labelset = labels(captures, "resolved")
    config = SweepConfig(probe=probe, n_boot=n_boot, jobs=jobs, control_tasks=control_tasks, controls=controls,
                         refits=refits)
    cpu0, t0 = time.process_time(), time.perf_counter()
    result = sweep(captures, labelset, config)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    d_model = captures.d_model
    what = (f"{result.control_tasks['k']} control tasks, {config.leakage_shuffles} leakage shuffles, baselines"
            if controls else "no controls or baselines")
    print(f"probe={probe}, jobs={jobs or 'all CPUs'}: sweep of {len(result.rows)} layer/positions x {labelset.n} items x "
          f"{d_model} dims with {what}, diagnostic and nested selection, B={n_boot}")
    print(f"sweep wall {wall:.1f} s (CPU {cpu:.1f} s); process total {time.perf_counter() - t_start:.1f} s")
    if result.intervals is not None:
        print(f"  of which the {result.intervals.n_refits} refits of the whole pipeline (the printed AUROC/accuracy "
              f"intervals): {result.intervals.seconds:.1f} s wall")
    print(f"peak RSS of the sweep process {peak:.0f} MB (python + numpy/scipy/sklearn + touched pages of the "
          "memory-mapped acts.npy + work arrays)")
    sig = next((r for r in result.rows if r.layer == 20), None)
    best = result.best
    if sig is not None and best is not None:
        print(f"planted layer 20: AUROC {sig.auroc.value:.3f} [{sig.auroc.ci[0]:.3f}, {sig.auroc.ci[1]:.3f}]; nested best "
              f"L{best.layer}/{best.position} {best.auroc.value:.3f} [{best.auroc.ci[0]:.3f}, {best.auroc.ci[1]:.3f}]")
        if sig.controls is not None:
            c = sig.controls
            print(f"  control tasks mean {c.mean:.3f} [min {c.min:.3f}, max {c.max:.3f}] (k={c.k}); selectivity "
                  f"{fmt_selectivity(sig.selectivity)}; leakage check {sig.leakage.value:.3f} "
                  f"[{sig.leakage.ci[0]:.3f}, {sig.leakage.ci[1]:.3f}]")
        print(f"one-hot cell baseline {result.cell_baseline.value}; warnings: {len(result.warnings)}")
        for w in result.warnings:
            print(f"  WARNING: {w[:160]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=40)
    ap.add_argument("--items", type=int, default=576)
    ap.add_argument("--d-model", type=int, default=3584)
    ap.add_argument("--positions", type=int, default=1)
    ap.add_argument("--probe", default="logistic")
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--structure", choices=("walk", "independent"), default="walk",
                    help="layers as a residual random walk (default) or independent noise (worst case)")
    ap.add_argument("--jobs", type=int, default=None, help="threads over layer chunks (default: all CPUs)")
    ap.add_argument("--keep", type=Path, default=None, help="write the capture here and keep it")
    ap.add_argument("--control-tasks", type=int, default=DEFAULT_CONTROL_TASKS, help="control tasks per row (0: none)")
    ap.add_argument("--refits", type=int, default=DEFAULT_REFITS, help="refits for the intervals (0: fixed-model intervals)")
    ap.add_argument("--no-controls", action="store_true", help="no control tasks, leakage check or baselines")
    ap.add_argument("--sweep-only", type=Path, default=None, help=argparse.SUPPRESS)  # the child process
    args = ap.parse_args()
    if args.sweep_only is not None:
        run_sweep_only(args.sweep_only, args.probe, args.n_boot, args.jobs, args.control_tasks, not args.no_controls,
                       args.refits)
        return 0
    import os
    import subprocess

    print(f"CPUs available: {len(os.sched_getaffinity(0))}; load average {os.getloadavg()[0]:.2f} "
          "(other processes share these CPUs)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        write_big_capture(folder, args.items, args.layers, args.positions, args.d_model, 20, args.structure)
        print(f"wrote a {args.items} x {args.layers} x {args.positions} x {args.d_model} float16 capture "
              f"({args.structure}) in {time.perf_counter() - t0:.1f} s")
        child = [sys.executable, __file__, "--sweep-only", str(folder), "--probe", args.probe,
                 "--n-boot", str(args.n_boot), "--control-tasks", str(args.control_tasks), "--refits", str(args.refits)]
        child += (["--jobs", str(args.jobs)] if args.jobs else []) + (["--no-controls"] if args.no_controls else [])
        return subprocess.run(child, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
