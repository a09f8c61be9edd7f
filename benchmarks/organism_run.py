"""Benchmark: the organism's behavioural run on the main set with and without the eye's per-sheet cache.

The organism's front end reads every attached sheet (pixel detector + least-squares fit); the main
set's 9,216 items show 864 distinct sheets, so the eye caches a reading on the sheet file's digest
(organism/eye.py). This runs `evprobe run --model organism` on the main set twice in one process,
first with the cache off (every sheet read again), then on (a fresh cache), and prints both times,
their ratio and whether the two record files are identical.

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

    import evprobe.organism.eye as eye
    from evprobe.bench.generate import GenerateConfig, generate
    from evprobe.bench.runner import RunConfig, run

    with tempfile.TemporaryDirectory() as tmp:
        bench = args.bench
        if bench is None:
            bench = Path(tmp) / "bench"
            generate(bench, GenerateConfig(), force=True, progress=False)
        seconds, records = {}, {}
        for mode, size in (("cache off", 0), ("cache on", 16384)):
            eye._CACHE_SIZE = size
            eye._READINGS.clear()
            out = Path(tmp) / mode.replace(" ", "_")
            start = time.perf_counter()
            run(RunConfig(model="organism", bench=str(bench), out=str(out), batch_size=64), progress=False)
            seconds[mode] = time.perf_counter() - start
            records[mode] = [line for line in (out / "records.jsonl").read_text().splitlines()]
    strip = [[_without_timing(line) for line in records[m]] for m in seconds]
    print(f"organism run on {len(records['cache on'])} items: cache off {seconds['cache off']:.1f} s, "
          f"cache on {seconds['cache on']:.1f} s ({seconds['cache off'] / seconds['cache on']:.2f}x); "
          f"records identical (timings aside): {strip[0] == strip[1]}")


def _without_timing(line: str) -> str:
    import json

    row = json.loads(line)
    for key in [k for k in row if "second" in k or "time" in k]:
        row.pop(key)
    return json.dumps(row, sort_keys=True)


if __name__ == "__main__":
    main()
