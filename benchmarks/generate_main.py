"""Benchmark: generate the full main set (144 families, 9,216 items, 864 images) and check it.

Prints wall time, images per second and peak memory for 1 and 2 rendering processes, measured
side by side in one run, plus the time of `evprobe check` on the result.

    python benchmarks/generate_main.py [--workers 1,2] [--out /tmp/evprobe-bench]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import json, resource, sys, time
from evprobe.bench.generate import GenerateConfig, generate
t = time.perf_counter()
meta = generate(sys.argv[1], GenerateConfig(), force=True, workers=int(sys.argv[2]), progress=False)
wall = time.perf_counter() - t
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
child_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"wall": wall, "images": meta["n_images"], "items": meta["n_items"],
                  "peak_mb": peak_mb, "worker_peak_mb": child_mb}))
"""


def run_one(out: Path, workers: int) -> dict:
    # A fresh process per measurement, so peak memory is this generation's alone.
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(out), str(workers)], check=True, capture_output=True, text=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="evprobe-bench-"))
    results = {}
    for w in (int(x) for x in args.workers.split(",")):
        r = run_one(root / f"main-w{w}", w)
        results[w] = r
        print(
            f"generate main set, {w} worker(s): {r['wall']:.2f} s wall, "
            f"{r['images'] / r['wall']:.1f} images/s, {r['items']} items, "
            f"peak RSS {r['peak_mb']:.0f} MB (render workers {r['worker_peak_mb']:.0f} MB)"
        )
    if len(results) > 1:
        base = results[min(results)]["wall"]
        for w, r in sorted(results.items())[1:]:
            print(f"speed-up of {w} worker(s) over {min(results)}: {base / r['wall']:.2f}x")
    first = root / f"main-w{min(results)}"
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "evprobe.experiments.cli", "check", str(first)], check=True, capture_output=True)
    print(f"evprobe check on the main set: {time.perf_counter() - t:.2f} s")
    if args.out is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
