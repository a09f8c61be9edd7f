"""benchmarks/generated_readout_verdicts.py (docs/reference/benchmarks.md quotes its full run) runs in its --quick
mode: the size row stays below the rank test's 5%, power rises with the strength, the intervals cover; and its
check catches a deliberately anti-conservative setup (null directions at a quarter of the probe's dose)."""

from __future__ import annotations

import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "generated_readout_verdicts.py"


def _rates(out: str) -> dict[int, list[float]]:
    """Per strength of the quick rows: (random, label-free, joint, effects' coverage, gating's coverage) in %."""
    rows = {}
    for line in out.splitlines():
        words = line.replace("[", " ").replace("]", " ").replace(",", " ").split()
        if len(words) > 6 and words[5] == "as" and words[6] == "run":
            rows[int(words[3])] = [float(w.rstrip("%")) for w in words if w.endswith("%")][1:]
    return rows


def test_the_benchmark_runs_quick_and_its_numbers_hold(capsys) -> None:
    main = runpy.run_path(str(SCRIPT))["main"]
    assert main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "check: passed" in out
    rates = _rates(out)
    assert sorted(rates) == [0, 20, 40]
    size, mid, top = (rates[s] for s in (0, 20, 40))
    assert all(x <= 5.0 for x in size[:3])  # random, label-free, joint: none called specific beyond 5%
    assert size[2] < mid[2] < top[2] and top[2] >= 90.0  # the joint verdict's power rises with the effect
    assert all(r[3] >= 90.0 and r[4] >= 90.0 for r in rates.values())  # coverage of the paired change


def test_gatings_interval_covers_at_8_families() -> None:
    """Gating's paired change (experiments.gating.report.abstention_grid) covers the true change at 8 families
    near the floor, where the percentile interval of the paired draws alone, gating's before, covered 72.7%
    of these 150 data sets (the check then flags it: `gating's interval covers 72.7%`)."""
    ns = runpy.run_path(str(SCRIPT))
    res = ns["run_row"](ns["Row"](8, +1, 0.1, 0.0), 150, 200, 55)
    assert res.gating_cover / res.reps >= 0.90
    assert ns["check"]([res]) == []


def test_the_check_flags_an_anti_conservative_null() -> None:
    """Null directions steered at a quarter of the probe's dose: a probe with no effect beats them, and the
    benchmark's check says so; the same row as the commands run passes."""
    ns = runpy.run_path(str(SCRIPT))
    row = ns["Row"](24, +1, 0.5, 0.0, variant="unequal norm")
    bad = ns["check"]([ns["run_row"](row, 150, 200, 55)])
    assert bad and all(line.startswith("size above 5%") for line in bad)
    fair = ns["check"]([ns["run_row"](ns["Row"](24, +1, 0.5, 0.0), 150, 200, 55)])
    assert fair == []
