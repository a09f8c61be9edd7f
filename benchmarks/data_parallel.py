"""Benchmark: `evprobe run` in one process vs `torchrun --nproc_per_node 2` (gloo, CPU), same work.

Generates a small benchmark, then, in one invocation, times whole commands (process start, model
load, generation, and for torchrun the shard merge) on a tiny model, alternating the two setups
for --rounds rounds, and prints each wall time, the medians and the speed-up ratio (1 process /
2 processes), and the same for generation alone (run.json's last_session), with the items per
second of the single process and of each torchrun process (OUT/throughput.json). Each round
writes fresh folders, so nothing is resumed. Checks that both give the same records (every field
except the per-item `seconds`).

The single process uses torch's default threads (all cores); under torchrun each process uses
cores / 2 threads (experiments.distributed).

    python benchmarks/data_parallel.py [--arch llava] [--families-per-system 2] [--requests all] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(cmd: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(cmd, check=False, env=env, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stderr[-2000:]}")
    return seconds


def records(path: Path) -> list[str]:
    out = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        del row["seconds"]
        out.append(json.dumps(row))
    return out


def session_seconds(out: Path) -> float:
    """Generation wall time inside the run (run.json's last_session; a merge keeps the longest shard's)."""
    return json.loads((out / "run.json").read_text())["last_session"]["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="llava", help="tiny architecture (tiny:<arch>)")
    parser.add_argument("--families-per-system", type=int, default=2)
    parser.add_argument("--requests", default="all", help="comma-separated request types, or all")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    from evprobe.bench.generate import GenerateConfig, generate

    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT")}
    env.update(PYTHONPATH=str(ROOT), MASTER_ADDR="127.0.0.1", HF_HUB_OFFLINE="1")
    with tempfile.TemporaryDirectory() as tmp:
        bench = Path(tmp) / "bench"
        generate(bench, GenerateConfig(families_per_system=args.families_per_system, subset_per_cell=0), progress=False)
        common = ["-m", "evprobe", "run", "--model", f"tiny:{args.arch}", "--bench", str(bench),
                  "--batch-size", str(args.batch_size), "--quiet"]
        if args.requests != "all":
            common += ["--requests", args.requests]
        one_times, two_times, one_gen, two_gen = [], [], [], []
        for r in range(args.rounds):
            one, two = Path(tmp) / f"one{r}", Path(tmp) / f"two{r}"
            one_times.append(timed([sys.executable, *common, "--out", str(one)], env))
            torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                        "--master_addr", "127.0.0.1", "--master_port", str(free_port())]
            two_times.append(timed([*torchrun, *common, "--out", str(two)], env))
            one_gen.append(session_seconds(one))
            two_gen.append(session_seconds(two))
            same = records(one / "records.jsonl") == records(two / "records.jsonl")
            n_items = len(records(one / "records.jsonl"))
            print(f"round {r + 1}: 1 process {one_times[-1]:.2f} s, 2 processes {two_times[-1]:.2f} s "
                  f"({n_items} items, records identical except seconds: {same}); generation alone "
                  f"{one_gen[-1]:.2f} s vs {two_gen[-1]:.2f} s")
            single_rate = json.loads((one / "run.json").read_text())["last_session"]["items_per_second"]
            speed = json.loads((two / "throughput.json").read_text())  # each process's own rate (merge)
            rates = ", ".join(f"{p['shard']}: {p['per_second']:.2f}/s ({p['units']} items, {p['device']})"
                              for p in speed["processes"])
            print(f"  items per second: 1 process {single_rate:.2f}/s; per process under torchrun {rates}; "
                  f"all processes {speed['per_second']:.2f}/s")
            if not same:
                sys.exit("the two setups wrote different records")
    a, b = statistics.median(one_times), statistics.median(two_times)
    print(f"tiny:{args.arch}, {n_items} items, {os.cpu_count()} CPU cores: 1 process {a:.2f} s, "
          f"torchrun 2 processes {b:.2f} s (medians of {args.rounds}); speed-up {a / b:.2f}x")
    ga, gb = statistics.median(one_gen), statistics.median(two_gen)
    print(f"generation alone (without process start and model load): {ga:.2f} s vs {gb:.2f} s; "
          f"speed-up {ga / gb:.2f}x")


if __name__ == "__main__":
    main()
