"""benchmarks/coverage_void_sub_scenarios.py (docs/reference/benchmarks.md quotes its table) runs in its
--quick mode and prints coverage, false verdicts and zero-width intervals for every sub-scenario."""

from __future__ import annotations

import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "coverage_void_sub_scenarios.py"


def test_the_benchmark_runs_quick(capsys) -> None:
    main = runpy.run_path(str(SCRIPT))["main"]
    assert main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert sum(" gap " in line and "%" in line and not line.startswith(("pooled", "false")) for line in out.splitlines()) == 6
    assert "pooled textual:" in out and "zero-width intervals: 0" in out
    assert "false verdicts at a true gap of 0" in out
