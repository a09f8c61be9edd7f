"""Benchmark: what the second hardening round's checks cost, side by side in one run.

Prints, best of --repeat rounds (each round times every case once, in turn, so a load that comes
and goes on a shared machine falls on all alike):
- the finite check of a capture at read (`probes.nonfinite.nonfinite_rows` over every committed
  row) beside the whole `load_capture` that runs it, for a capture of the quickstart's shape
  (1,152 rows x 5 layers x 3 positions x 64) and one of a 7B model's width (1,152 x 28 x 1 x 3584);
- the one-writer lock (`core.lock.folder_lock`): one take and release of a folder's lock;
- the reply parser on adversarial replies (`bench.parse.parse_reply`, a select item): 2,000 and 5,000 blank lines
  between two letters, and 100 KB of newlines, tabs and markup, with the 10 KB -> 100 KB time ratio
  (linear: about 10x; quadratic: about 100x).

    python benchmarks/read_checks.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np


def best_of(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def capture_cases(root: Path) -> dict[str, Callable[[], object]]:
    from evprobe.probes.captures import load_capture
    from evprobe.probes.nonfinite import nonfinite_rows
    from evprobe.probes.synthetic import reference_rows, write_capture

    cases: dict[str, Callable[[], object]] = {}
    rows = reference_rows(288)  # 1,152 select rows
    rng = np.random.default_rng(0)
    for name, shape in (("quickstart shape 1152x5x3x64", (1152, 5, 3, 64)),
                        ("7B width 1152x28x1x3584", (1152, 28, 1, 3584))):
        acts = rng.standard_normal(shape).astype(np.float16)
        folder = write_capture(root / name.split()[0], acts, rows, positions=["last", "image_mean", "text_mean"][:shape[2]])
        cap = load_capture(folder)
        size = acts.nbytes / 2**20
        cases[f"finite check, {name} ({size:.0f} MiB)"] = lambda cap=cap: nonfinite_rows(cap.acts, cap.rows)
        cases[f"load_capture with it, {name}"] = lambda folder=folder: load_capture(folder)
    return cases


def lock_cases(root: Path) -> dict[str, Callable[[], object]]:
    from evprobe.core.lock import folder_lock

    folder = root / "locked"
    folder.mkdir()

    def take_and_release() -> None:
        with folder_lock(folder, "benchmark"):
            pass

    return {"folder_lock take + release": take_and_release}


def parse_cases() -> dict[str, Callable[[], object]]:
    from evprobe.bench.generate import GenerateConfig, build
    from evprobe.bench.parse import parse_reply

    _, items = build(GenerateConfig(families_per_system=1, subset_per_cell=0))
    item = next(it for it in items if it.request == "select")

    def markup(n_bytes: int) -> str:
        unit = "\n\t **# > - `` ANSWER: \n\n 1.2.3 \t\n"
        return (unit * (n_bytes // len(unit) + 1))[:n_bytes]

    return {
        "parse 'A' + 2,000 newlines + 'B'": lambda: parse_reply(item, "A" + "\n" * 2000 + "B"),
        "parse 'A' + 5,000 newlines + 'B'": lambda: parse_reply(item, "A" + "\n" * 5000 + "B"),
        "parse 10 KB of markup": lambda: parse_reply(item, markup(10_000)),
        "parse 100 KB of markup": lambda: parse_reply(item, markup(100_000)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cases = {**capture_cases(root), **lock_cases(root), **parse_cases()}
        best = {name: float("inf") for name in cases}
        for _ in range(args.repeat):
            for name, fn in cases.items():
                best[name] = min(best[name], best_of(fn, 1))
    width = max(map(len, best))
    for name, seconds in best.items():
        print(f"{name:<{width}}  {seconds * 1000:9.2f} ms")
    for shape in ("quickstart shape 1152x5x3x64", "7B width 1152x28x1x3584"):
        check = next(v for k, v in best.items() if k.startswith("finite check") and shape in k)
        load = best[f"load_capture with it, {shape}"]
        print(f"finite check's share of load_capture, {shape}: {check / load:.0%}")
    ratio = best["parse 100 KB of markup"] / best["parse 10 KB of markup"]
    print(f"parse time 100 KB / 10 KB: {ratio:.1f}x (linear ~10x, quadratic ~100x)")


if __name__ == "__main__":
    main()
