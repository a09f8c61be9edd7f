"""benchmarks/coverage_catch_rates.py (docs/reference/probes.md quotes its numbers) runs in its --quick
mode through probes.catch_rates and prints both coverages and the zero-width count per group."""

from __future__ import annotations

import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "coverage_catch_rates.py"


def test_the_benchmark_runs_quick(capsys) -> None:
    main = runpy.run_path(str(SCRIPT))["main"]
    assert main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "conditional" in out and "unconditional" in out
    rows = [line.split() for line in out.splitlines() if line[:2] in ("g0", "g1", "g2")]
    assert [r[0] for r in rows] == ["g0", "g1", "g2"] and all(r[6] == "0" for r in rows)  # no zero-width interval
