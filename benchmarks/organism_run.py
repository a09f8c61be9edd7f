"""Benchmark: the organism's behavioural run on the main set with and without its per-sheet caches.

The organism's front end reads every attached sheet (pixel detector + least-squares fit); the main
set's 9,216 items show 864 distinct sheets, so the eye caches a reading on the sheet file's digest
(organism/eye.py), and `bench.manifest.load_item_images` caches the decoded image on the same digest
(any model's run loads the images). This runs `evprobe run --model organism` on the main set three
times in one process: both caches off (every sheet decoded and read again), the eye's cache on, then
both on (fresh caches each time), and prints the times, the ratios to the first and whether the record
files are identical.

    python benchmarks/organism_run.py [--bench DIR]   (default: generate the main set in a temp folder)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, default=None, help="an existing main-set folder")
    args = parser.parse_args()

    import evprobe.bench.manifest as manifest
    import evprobe.organism.eye as eye
    from evprobe.bench.generate import GenerateConfig, generate
    from evprobe.bench.runner import RunConfig, run

    with tempfile.TemporaryDirectory() as tmp:
        bench = args.bench
        if bench is None:
            bench = Path(tmp) / "bench"
            generate(bench, GenerateConfig(), force=True, progress=False)
        seconds, records = {}, {}
        modes = (("no caches", 0, 0), ("eye cache", 16384, 0), ("eye + decode caches", 16384, 48))
        for mode, readings, decoded in modes:
            eye._CACHE_SIZE, manifest._DECODED_SIZE = readings, decoded
            eye._READINGS.clear()
            manifest._DECODED.clear()
            out = Path(tmp) / mode.replace(" ", "_")
            start = time.perf_counter()
            run(RunConfig(model="organism", bench=str(bench), out=str(out), batch_size=64), progress=False)
            seconds[mode] = time.perf_counter() - start
            records[mode] = [line for line in (out / "records.jsonl").read_text().splitlines()]
    strip = [[_without_timing(line) for line in records[m]] for m in seconds]
    base = seconds["no caches"]
    times = ", ".join(f"{m} {t:.1f} s ({base / t:.2f}x)" for m, t in seconds.items())
    same = all(s == strip[0] for s in strip[1:])
    print(f"organism run on {len(records['no caches'])} items: {times}; records identical (timings aside): {same}")


def _without_timing(line: str) -> str:
    import json

    row = json.loads(line)
    for key in [k for k in row if "second" in k or "time" in k]:
        row.pop(key)
    return json.dumps(row, sort_keys=True)


if __name__ == "__main__":
    main()
