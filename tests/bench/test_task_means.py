"""The unweighted mean over tasks (seed 003, Tables 2 and 4; bench.task_means): the seed's own rows,
the scripted policies' known values per level, intervals that are never points, paired differences
from level 0 and from the target-exclusive level, and refused inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evprobe.bench.generate import GenerateConfig, generate
from evprobe.bench.injection import TARGET_EXCLUSIVE
from evprobe.bench.runner import RunConfig, run
from evprobe.bench.task_means import task_mean
from evprobe.core.bootstrap import FamilyBootstrap, Resampled
from evprobe.experiments.scoring_io import score_run

# Seed 003's columns (Tables 2 and 4: Length, Area, Volume, Distance, Temp., Weight, Electricity,
# Kinematics, Remark, Env.) with each task's scored replies: Table 5's sample counts, twice (every
# cell of a model's row is a whole number of these: 44.29% of 70 is 31, 77.08% of 48 is 37).
SEED_UNITS = (70, 12, 24, 26, 42, 26, 18, 12, 48, 46)
SEED_ROWS = {  # (cells, the row's Average), in %
    "Table 2, Gemini-3-Pro, 5%": ((44.29, 25.00, 16.67, 11.54, 95.24, 80.77, 66.67, 75.00, 77.08, 91.30), 58.36),
    "Table 2, Gemini-3-Pro, 10%": ((54.29, 50.00, 29.17, 11.54, 97.62, 80.77, 66.67, 83.33, 77.08, 91.30), 64.18),
    "Table 4, Gemini-3-Pro, 20%": ((81.43, 58.33, 45.83, 23.08, 100.00, 88.46, 66.67, 100.00, 81.25, 91.30), 73.64),
    "Table 4, Gemini-3-Pro, 30%": ((81.43, 75.00, 54.17, 38.46, 100.00, 92.31, 66.67, 100.00, 81.25, 91.30), 78.06),
    "Table 2, InternVL3-2B, 5%": ((7.14, 0.00, 12.50, 3.85, 78.57, 42.31, 55.56, 41.67, 52.08, 54.35), 34.80),
}


def _seed_tasks(cells: tuple[float, ...]) -> list[Resampled]:
    """One rate per task, each unit its own family (the seed reports no clustering), all tasks on one
    bootstrap so their resamples are paired."""
    hits = [round(c * n / 100) for c, n in zip(cells, SEED_UNITS, strict=True)]
    assert [round(100 * h / n, 2) for h, n in zip(hits, SEED_UNITS, strict=True)] == list(cells)
    total = sum(SEED_UNITS)
    boot = FamilyBootstrap([f"u{i}" for i in range(total)], 200, 7)
    num, den, start = np.zeros((total, len(cells))), np.zeros((total, len(cells))), 0
    for t, (h, n) in enumerate(zip(hits, SEED_UNITS, strict=True)):
        den[start:start + n, t] = 1.0
        num[start:start + h, t] = 1.0
        start += n
    return boot.resample_many(num, den, binary=True)


@pytest.mark.parametrize("row", sorted(SEED_ROWS))
def test_the_seed_rows_average(row: str) -> None:
    cells, average = SEED_ROWS[row]
    parts = _seed_tasks(cells)
    mean = task_mean(parts)
    assert round(100 * mean.value, 2) == pytest.approx(average, abs=0.011)
    pooled = sum(p.shares[0].sum() for p in parts) / sum(SEED_UNITS)
    assert abs(100 * pooled - average) > 1.0  # the seed's Average is not the pooled share
    est = FamilyBootstrap.estimate(mean)
    assert est.ci[0] < mean.value < est.ci[1]


def test_a_saturated_mean_has_width_and_bad_parts_are_refused() -> None:
    parts = _seed_tasks((100.0,) * 10)
    est = FamilyBootstrap.estimate(task_mean(parts))
    assert est.value == 1.0 and est.ci[0] < 0.99 and est.ci[1] == 1.0
    with pytest.raises(ValueError, match="at least one task"):
        task_mean([])
    with pytest.raises(ValueError, match="averages proportions"):
        task_mean([Resampled(0.5, np.full(10, 0.5), 4)])
    empty = Resampled(float("nan"), np.full(10, np.nan), 0, shares=(np.zeros(3), np.zeros(3)))
    with pytest.raises(ValueError, match="needs units"):
        task_mean([parts[0], empty])


@pytest.fixture(scope="module")
def te_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("task_means") / "bench"
    generate(out, GenerateConfig(families_per_system=2, subset_per_cell=0, injection_levels=(TARGET_EXCLUSIVE, 1),
                                 numeric=True), progress=False)
    return out


def _score(bench: Path, tmp_path: Path, policy: str) -> dict:
    out = tmp_path / policy
    run(RunConfig(model=f"policy:{policy}", bench=str(bench), out=str(out)), progress=False)
    return score_run(out, n_boot=200)[0]


def test_the_exact_reader_is_perfect_on_every_task_at_every_level(te_bench: Path, tmp_path: Path) -> None:
    block = _score(te_bench, tmp_path, "exact-reader")["injection"]["task_means"]
    assert set(block["levels"]) == {"-1", "0", "1"}
    for level in block["levels"].values():
        assert level["decisions"]["tasks"] == ["sliding", "bouncing", "spring"]
        assert len(level["estimates"]["tasks"]) == 7 and len(level["all"]["tasks"]) == 10
        for name in ("min_cost_choice", "resolved_and_correct"):
            e = level["decisions"][name]
            assert e["value"] == 1.0 and e["ci"][0] < 1.0 and e["n"] == 24 and e["n_families"] == 6
        for block_name in ("estimates", "all"):
            for acc in ("acc_5", "acc_10", "acc_20", "acc_30"):
                e = level[block_name][acc]
                assert e["value"] == 1.0 and e["ci"][0] < 1.0
    for key in ("differences", "differences_target_exclusive"):
        for diffs in block[key].values():
            d = diffs["all"]["acc_10"]
            assert d["value"] == 0.0 and d["ci"][0] < 0.0 < d["ci"][1]


def test_the_mean_is_the_mean_of_the_tasks_printed_beside_it(te_bench: Path, tmp_path: Path) -> None:
    """On the random policy (values strictly inside (0, 1)): level 0's decision mean is the mean of
    scores.json's by_system rows, each level's estimate mean the mean of its numeric `by` rows, and
    `all` the mean of both kinds of task; the paired differences are the levels' differences."""
    s = _score(te_bench, tmp_path, "random")
    block = s["injection"]["task_means"]
    systems = ("sliding", "bouncing", "spring")
    by_system = [s["by_system"][x]["min_cost_choice"]["value"] for x in systems]
    assert block["levels"]["0"]["decisions"]["min_cost_choice"]["value"] == pytest.approx(np.mean(by_system))
    for level, numeric in (("0", s["numeric"]), *((L, s["injection"]["levels"][L]["numeric"]) for L in ("-1", "1"))):
        groups = [numeric[r]["by"][g]["acc_10"]["value"] for r in ("estimate_property", "estimate_outcome")
                  for g in numeric[r]["by"]]
        assert len(groups) == 7
        got = block["levels"][level]["estimates"]["acc_10"]["value"]
        assert got == pytest.approx(np.mean(groups))
        if level == "0":
            assert block["levels"]["0"]["all"]["acc_10"]["value"] == pytest.approx(np.mean(groups + by_system))
    mean = {L: block["levels"][L]["estimates"]["acc_20"]["value"] for L in ("-1", "0", "1")}
    assert block["differences"]["1"]["estimates"]["acc_20"]["value"] == pytest.approx(mean["1"] - mean["0"])
    d = block["differences_target_exclusive"]["1"]["estimates"]["acc_20"]
    assert d["value"] == pytest.approx(mean["1"] - mean["-1"]) and d["ci"][0] <= d["value"] <= d["ci"][1]
    headline = s["injection"]["differences_target_exclusive"]["0"]["min_cost_choice"]
    te = s["injection"]["levels"]["-1"]["min_cost_choice"]["value"]
    assert headline["value"] == pytest.approx(s["min_cost_choice"]["value"] - te)


def test_a_level_without_estimates_has_no_estimate_mean(te_bench: Path, tmp_path: Path) -> None:
    out = tmp_path / "select"
    run(RunConfig(model="policy:always-stop", bench=str(te_bench), out=str(out), requests=("select",)),
        progress=False)
    block = score_run(out, n_boot=100)[0]["injection"]["task_means"]
    for level in block["levels"].values():
        assert set(level) == {"decisions"}
        assert level["decisions"]["min_cost_choice"]["value"] == pytest.approx(0.5)  # half the decisions resolved


def test_the_coverage_benchmark_runs_quick(capsys) -> None:
    """benchmarks/coverage_task_mean.py --quick: every setting covers the truth in most replicates and
    no interval is a point (the full run's figures are in docs/reference/benchmark.md)."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "coverage_task_mean.py"
    spec = importlib.util.spec_from_file_location("coverage_task_mean", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    assert module.main(["--quick"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.endswith(" s]")]
    assert len(rows) == 3
    for r in rows:
        coverage, points = float(r[-6]), int(r[-3])
        assert coverage >= 0.8 and points == 0, r
