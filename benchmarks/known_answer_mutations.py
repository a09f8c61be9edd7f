"""Benchmark: the known-answer suite under each injected fault, as the README's fault x check table.

Runs the reduced organism quickstart once clean, then each fault of experiments.known_answer.mutations (FAULTS,
which tests/experiments/test_known_answer_mutations.py requires to be caught, and BLIND_SPOTS, which
are measured and not caught), rerunning only the stages each fault feeds. Prints the markdown table
and the seconds each run took.

    python benchmarks/known_answer_mutations.py [--out DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args()

    from evprobe.experiments.known_answer.mutations import BLIND_SPOTS, FAULTS, SMALL_QUICKSTART, fault_table, run_with_fault
    from evprobe.experiments.quickstart import quickstart

    def run(out: Path) -> dict:
        return quickstart(out, **SMALL_QUICKSTART).known_answer.to_json()

    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        start = time.perf_counter()
        clean = run(root / "clean")
        seconds = {"clean": time.perf_counter() - start}
        by_fault = {}
        for fault in FAULTS + BLIND_SPOTS:
            start = time.perf_counter()
            by_fault[fault.name] = run_with_fault(root / "clean", root / fault.name.replace(" ", "_"), fault, run)
            seconds[fault.name] = time.perf_counter() - start
    print(fault_table(clean, by_fault))
    print("seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()))


if __name__ == "__main__":
    main()
