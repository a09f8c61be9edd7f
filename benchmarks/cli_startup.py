"""Benchmark: how long `evprobe --help` and every subcommand's `--help` take, in fresh processes.

Each --help runs --repeat times (default 5) as `python -m evprobe ... --help`; the rounds are
interleaved (each round runs every command once, in turn), so a load that comes and goes on a
shared machine falls on all commands alike. Prints, per command, the median and the fastest wall
time and the median CPU time (user + sys of the child, which a busy machine inflates less than
wall time), then the slowest median. What a command pays before it starts working is this plus
its own imports (a model command then imports torch in its run function).

    python benchmarks/cli_startup.py [--repeat 5]

The aim (issue 17) is under 1 s each; before, building the parser imported torch and
transformers (organism.train): 9-17 s wall, about 7.5 s CPU, for every command.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def helps() -> list[list[str]]:
    from evprobe.experiments.registry import names  # builds no parser: the names only

    COMMANDS = names()

    return [["--help"], *([name, "--help"] for name in COMMANDS), ["organism", "train", "--help"]]


def time_once(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one `python -m evprobe ARGV`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "evprobe", *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"evprobe {' '.join(argv)} failed ({done.returncode}): {done.stderr[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each command (median and fastest)")
    args = parser.parse_args()
    commands = helps()
    walls: dict[str, list[float]] = {" ".join(c): [] for c in commands}
    cpus: dict[str, list[float]] = {" ".join(c): [] for c in commands}
    for _ in range(args.repeat):
        for argv in commands:
            wall, cpu = time_once(argv)
            walls[" ".join(argv)].append(wall)
            cpus[" ".join(argv)].append(cpu)
    print(f"evprobe --help, {args.repeat} fresh processes each ({os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]})\n")
    width = max(len(k) for k in walls) + len("evprobe ")
    print(f"| {'command':<{width}} | median wall s | fastest s | median CPU s |")
    print(f"|{'-' * (width + 2)}|--------------:|----------:|-------------:|")
    for key in walls:
        print(f"| {'evprobe ' + key:<{width}} | {statistics.median(walls[key]):13.2f} | {min(walls[key]):9.2f} "
              f"| {statistics.median(cpus[key]):12.2f} |")
    slowest = max(walls, key=lambda k: statistics.median(walls[k]))
    print(f"\nslowest median: evprobe {slowest}: {statistics.median(walls[slowest]):.2f} s wall, "
          f"{statistics.median(cpus[slowest]):.2f} s CPU")


if __name__ == "__main__":
    main()
