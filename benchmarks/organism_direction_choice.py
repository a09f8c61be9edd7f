"""Benchmark: which rows the quickstart fits the organism's steering directions on, chosen on a
development benchmark (seed 777), never the main set.

Generates 24 families per system under seed 777, captures the organism's last position for the
selections and the initial answers, fits `resolved` directions on each half of the families twice
(pooled over both request types, and on the selections only), and steers the other half's selections
at layer 3 with each. Prints, per direction and dose, the stop, missing-test and useless-test rates of
resolved and unresolved items (the steering check's quantities; it breaks above 10% useless tests).
`--alphas` and `--directions` choose the doses and the direction kinds (the quickstart's dose grid was
chosen with `--directions selections --alphas -1,-0.875,-0.75,-0.625,-0.5,0,0.5,0.625,0.75,0.875,1`).

    python benchmarks/organism_direction_choice.py [--out DIR] [--alphas A,A,...] [--directions pooled,selections]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

ALPHAS = (-1.0, -0.875, -0.75, 0.0, 0.75, 0.875, 1.0, 1.125, 1.25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--alphas", default=",".join(f"{a:g}" for a in ALPHAS), help="comma-separated doses")
    parser.add_argument("--directions", default="pooled,selections", help="pooled, selections or both")
    args = parser.parse_args()
    alphas = tuple(float(a) for a in args.alphas.split(","))
    kinds = {"pooled": None, "selections": ("select",)}
    chosen = [k.strip() for k in args.directions.split(",")]
    if not chosen or any(k not in kinds for k in chosen):
        parser.error(f"--directions: choose from {', '.join(kinds)}")

    from evprobe.bench.generate import GenerateConfig, generate
    from evprobe.experiments.capture.config import CaptureConfig
    from evprobe.experiments.capture.job import capture
    from evprobe.experiments.dose_response.config import DoseResponseConfig
    from evprobe.experiments.dose_response import dose_response
    from evprobe.probes.runs import directions_to_folder, labelled

    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        bench, acts = root / "bench", root / "acts"
        generate(bench, GenerateConfig(seed=777, families_per_system=24, subset_per_cell=0), force=True,
                 progress=False)
        capture(CaptureConfig(model="organism", bench=str(bench), out=str(acts),
                              requests=("select", "answer_initial"), positions=("last",), batch_size=64),
                progress=False)
        layers = json.loads((acts / "meta.json").read_text())["layers"]
        for name, requests in ((k, kinds[k]) for k in chosen):
            captures, label = labelled([acts], "resolved", requests=requests)
            directions_to_folder(captures, label, root / f"directions_{name}", layers, position="last", by="half")
            out = root / f"dose_{name}"
            dose_response(DoseResponseConfig(
                model="organism", bench=str(bench), directions=str(root / f"directions_{name}"), out=str(out),
                layers=(3,), alphas=alphas, n_random=8, controls=(), positions="last", null_batch_rows=2048,
                n_boot=200, ablation=False), progress=False)
            rows = json.loads((out / "dose_response.json").read_text())["rows"]
            for group in ("resolved", "unresolved"):
                cells = []
                for a in alphas:
                    v = {r["measure"]: r["value"] for r in rows if r["kind"] == "probe" and r["alpha"] == a
                         and r["group"] == group and r["system"] == "all" and r["readout"] == "logprobs"}
                    cells.append(f"{a:+g}: stop {v['stop_rate']:.2f} missing {v['missing_test_rate']:.2f} "
                                 f"useless {v['useless_test_rate']:.2f}")
                print(f"{name} direction, L3, {group} items:\n  " + "\n  ".join(cells))


if __name__ == "__main__":
    main()
