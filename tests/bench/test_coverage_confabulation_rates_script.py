"""benchmarks/coverage_confabulation_rates.py (docs/reference/benchmarks.md quotes its table) runs in its --quick
mode: a row per setting with both bounds' coverage, and no zero-width interval."""

from __future__ import annotations

import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "coverage_confabulation_rates.py"


def test_the_benchmark_runs_quick(capsys) -> None:
    main = runpy.run_path(str(SCRIPT))["main"]
    assert main(["--quick"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.count("%") == 2]
    assert len(rows) == 5 and "zero-width intervals: 0" in out
