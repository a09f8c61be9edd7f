"""Benchmark: coverage of the ladder's paired probe difference (experiments.ladder, level L minus
level 0 of the nested AUROC, probes.inference.refit_difference) where the truth is known.

Each replicate draws F families of four rows with the benchmark's structure
(probes.synthetic.reference_rows) at two injection levels. The levels are exchangeable: each
level's activations are a shared component (weight rho, the same draw at both levels: the same
families, the same images) plus a level's own noise (weight 1 - rho), and the same sufficiency
signal is planted at both (`--strength`, layer 1 of 2). So the two levels have the same expected
AUROC and the true difference is 0 exactly, whatever the pipeline's bias. The replicate is written
as a capture and run through `experiments.ladder.ladder` itself (refits, nested layer choice,
the paired difference); the check is whether 0 lies in the printed interval.

    python benchmarks/coverage_level_difference.py [--reps 100] [--families 30,144] [--rho 0.8]
                                                   [--strength 1.0] [--refits 50] [--jobs 2]

Prints per size: coverage of 0 with its binomial standard error, mean width of the paired
interval and of the unpaired one (MOVER from the two levels' own intervals), and the sd of the
observed differences across replicates (the spread the interval should match).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np


def one_replicate(args: tuple[int, int, float, float, int]) -> tuple[float, float, float, float]:
    """(difference, lo, hi, unpaired width) of one replicate."""
    from evprobe.experiments.ladder import LadderConfig, ladder
    from evprobe.probes.synthetic import reference_rows, write_capture

    n_families, rep, rho, strength, refits = args
    rng = np.random.default_rng([20261201, n_families, rep])
    base = reference_rows(n_families)
    y = np.array([r["resolved"] for r in base], dtype=np.float32)
    n, layers, d = len(base), 2, 16
    shared = rng.standard_normal((n, layers, 1, d)).astype(np.float32)
    signal = np.zeros((n, layers, 1, d), np.float32)
    signal[:, 1, 0, 0] = (2 * y - 1) * strength / 2  # class +-strength/2 along e0 at layer 1
    rows, acts = [], []
    for level in (0, 1):
        own = rng.standard_normal((n, layers, 1, d)).astype(np.float32)
        acts.append(np.sqrt(rho) * shared + np.sqrt(1 - rho) * own + signal)
        sfx = f".L{level}" if level else ""
        for r in base:
            rows.append({**r, **{k: r[k] + sfx for k in ("item_id", "decision_id", "image_pair_id",
                                                          "threshold_pair_id")},
                         **({"injection": level} if level else {})})
    with tempfile.TemporaryDirectory() as tmp:
        cap = write_capture(Path(tmp) / "acts", np.concatenate(acts).astype(np.float16), rows, positions=["last"])
        points = ladder(LadderConfig(acts=(str(cap),), out=str(Path(tmp) / "ladder"), refits=refits, n_boot=500,
                                     control_tasks=0, seed=rep), progress=False)
    a, b = points[1], points[0]
    diff = a.difference
    unpaired = (float(np.hypot(a.auroc - a.ci[0], b.ci[1] - b.auroc))
                + float(np.hypot(a.ci[1] - a.auroc, b.auroc - b.ci[0])))
    return diff["value"], diff["ci"][0], diff["ci"][1], unpaired


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--families", default="30,144")
    ap.add_argument("--rho", type=float, default=0.8)
    ap.add_argument("--strength", type=float, default=1.0)
    ap.add_argument("--refits", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    print(f"paired level difference, truth 0 (exchangeable levels, rho {args.rho}, strength {args.strength}, "
          f"refits {args.refits}, {args.reps} replicates)")
    for n_families in (int(x) for x in args.families.split(",")):
        started = time.perf_counter()
        work = [(n_families, rep, args.rho, args.strength, args.refits) for rep in range(args.reps)]
        with ProcessPoolExecutor(args.jobs) as pool:
            out = np.array(list(pool.map(one_replicate, work)))  # (reps, 4)
        diff, lo, hi, unpaired = out.T
        cover = float(np.mean((lo <= 0.0) & (0.0 <= hi)))
        se = float(np.sqrt(cover * (1 - cover) / len(out)))
        print(f"F={n_families:4d}: coverage {cover:.3f} (se {se:.3f}), mean width paired {np.mean(hi - lo):.3f} "
              f"vs unpaired {np.mean(unpaired):.3f}, sd of the differences {np.std(diff, ddof=1):.3f}, "
              f"zero-width {int(np.sum(hi - lo <= 0))}, {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
