"""Benchmark: render the main set's evidence as clips (`evprobe generate --evidence clip`, bench.clips)
against sheets, side by side in one run: wall time, images per second, disk and peak memory, with the
rendering worker processes the generator uses, then `evprobe check` on the clip set.

Each measurement is a fresh process (its peak memory is its own). Clips are cut the seed's way by
default (32 frames at 2 FPS); `--frames` adds other cuts.

    python benchmarks/render_clips.py [--workers 1,2] [--frames 32] [--out /tmp/evprobe-clips]
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
from evprobe.bench.clips import ClipSpec
from evprobe.bench.generate import GenerateConfig, generate
frames = int(sys.argv[3])
config = GenerateConfig() if frames == 0 else GenerateConfig(clip=ClipSpec(frames, 2.0))
t = time.perf_counter()
meta = generate(sys.argv[1], config, force=True, workers=int(sys.argv[2]), progress=False)
wall = time.perf_counter() - t
print(json.dumps({"wall": wall, "images": meta["n_images"], "items": meta["n_items"],
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "worker_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def run_one(out: Path, workers: int, frames: int) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(out), str(workers), str(frames)], check=True,
                          capture_output=True, text=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["disk_mb"] = sum(p.stat().st_size for p in (out / "images").rglob("*") if p.is_file()) / 2**20
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--frames", default="32", help="comma-separated frame counts (multiples of 4)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="evprobe-clips-"))
    cuts = [0] + [int(x) for x in args.frames.split(",")]  # 0: the sheets
    walls: dict[tuple[int, int], float] = {}
    for w in (int(x) for x in args.workers.split(",")):
        for frames in cuts:
            r = run_one(root / f"f{frames}-w{w}", w, frames)
            walls[(frames, w)] = r["wall"]
            what = "sheets" if frames == 0 else f"clips of {frames} frames at 2 fps"
            print(f"main set as {what}, {w} worker(s): {r['wall']:.2f} s wall, {r['images'] / r['wall']:.1f} files/s, "
                  f"{r['images']} files, {r['disk_mb']:.1f} MB on disk, peak RSS {r['peak_mb']:.0f} MB "
                  f"(render workers {r['worker_peak_mb']:.0f} MB)")
    for (frames, w), wall in sorted(walls.items()):
        if frames:
            print(f"clips of {frames} frames / sheets, {w} worker(s): {wall / walls[(0, w)]:.2f}x the wall time")
    first = root / f"f{cuts[1]}-w{min(w for _, w in walls)}"
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "evprobe.experiments.cli", "check", str(first)], check=True, capture_output=True)
    print(f"evprobe check on the clip set ({cuts[1]} frames): {time.perf_counter() - t:.2f} s")
    if args.out is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
