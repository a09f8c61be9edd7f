"""Benchmark: pair patching with one patch per trace against one batch row per patch, side by side.

On the organism (5 layers x 3 position sets = 15 patches per pair direction), on the first N image
pairs of a small benchmark (both directions, as `evprobe patching` runs them); the two ways alternate
pair by pair so a load that comes and goes falls on both. Prints the seconds of each, the ratio, and
the largest difference between their log-probabilities (they must agree to float32 noise).

    python benchmarks/patching_speed.py [--pairs 8]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8)
    args = parser.parse_args()

    from evprobe.bench.generate import GenerateConfig, generate
    from evprobe.bench.manifest import load_item_images, read_items
    from evprobe.bench.protocols import build_prompt
    from evprobe.experiments.patching.job import image_pairs
    from evprobe.hooks.inputs import build_inputs
    from evprobe.hooks.loading import load
    from evprobe.hooks.patching import patch_pair
    from evprobe.hooks.spans import token_spans

    with tempfile.TemporaryDirectory() as tmp:
        bench = Path(tmp) / "bench"
        generate(bench, GenerateConfig(families_per_system=4, subset_per_cell=0), force=True, progress=False)
        items = read_items(bench)
        handle = load("organism")
        times = {1: 0.0, 16: 0.0}
        worst = 0.0
        for a, b in image_pairs(items)[: args.pairs]:
            for src_item, tgt_item in ((a, b), (b, a)):
                src, tgt = [(build_prompt(it, "direct"), load_item_images(bench, it.images)) for it in (src_item, tgt_item)]
                enc = build_inputs(handle, [tgt[0]], [tgt[1]])  # the position sets as `evprobe patching` takes them
                spans = token_spans(handle, enc["input_ids"][0], enc["attention_mask"][0], tgt[0], None,
                                    n_images=len(tgt[1]))
                sets = {"last": [spans.last], "text": list(spans.text), "image": list(spans.image)}
                got = {}
                for rows in (1, 16):
                    start = time.perf_counter()
                    got[rows] = patch_pair(handle, src, tgt, layers=list(range(handle.n_layers)), position_sets=sets,
                                           candidates=list("ABCDE"), max_rows=rows).patched
                    times[rows] += time.perf_counter() - start
                worst = max(worst, float(np.abs(got[1] - got[16]).max()))
    n = 2 * args.pairs
    print(f"{n} patched pair directions x {handle.n_layers} layers x 3 position sets on the organism")
    print(f"one patch per trace: {times[1]:.2f} s; 16 patches per trace: {times[16]:.2f} s; "
          f"ratio {times[1] / times[16]:.2f}x; largest log-prob difference {worst:.2e}")


if __name__ == "__main__":
    main()
