"""benchmarks/coverage_selectivity.py (the README quotes its table) runs, on a few replicates, the
sweep's own fits under both rules; its null really is exchangeable with the controls."""

from __future__ import annotations

import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "coverage_selectivity.py"


def test_the_benchmark_prints_both_rules(capsys) -> None:
    main = runpy.run_path(str(SCRIPT))["main"]
    assert main(["--reps", "3", "--families", "12", "--settings", "null,planted", "--strengths", "2", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "printed interval level 0.950" in out
    assert "null, 12 families" in out and "covers 0: printed" in out and "bootstrap" in out
    assert "planted 2, 12 families" in out and "selective: printed" in out
