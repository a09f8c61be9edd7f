"""The PECS-space figure (experiments.pecs_space): written by `evprobe score`, drawn by `evprobe compare
--pecs-space`, refused in one line before any scoring where it cannot be drawn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from evprobe.experiments.cli import main
from evprobe.experiments.pecs_space import FIGURE, arrows_between, points_of
from PIL import Image


def _run(bench: Path, out: Path, policy: str, *extra: str) -> Path:
    assert main(["run", "--model", f"policy:{policy}", "--bench", str(bench), "--out", str(out), "--quiet",
                 *extra]) == 0
    return out


def test_score_writes_the_figure_of_its_datasets(small_bench: Path, tmp_path: Path) -> None:
    run_dir = _run(small_bench, tmp_path / "random", "random")
    assert main(["score", str(run_dir), "--quiet", "--n-boot", "200"]) == 0
    scores = json.loads((run_dir / "scores.json").read_text())
    points = points_of(scores)
    section = scores["pecs_datasets"]
    assert [p.label for p in points] == [*section["datasets"], "equal-weight mean", "pooled"]
    assert points[0].j == section["datasets"][points[0].label]["j"]
    assert points[-1].acc == scores["pecs_acc"]
    with Image.open(run_dir / FIGURE) as image:
        assert image.format == "PNG" and image.size[0] > 400


def test_a_run_without_answer_records_has_no_figure_and_loses_a_stale_one(small_bench: Path, tmp_path: Path) -> None:
    run_dir = _run(small_bench, tmp_path / "sel", "reference", "--requests", "select")
    (run_dir / FIGURE).write_bytes(b"an earlier scoring's figure")
    assert main(["score", str(run_dir), "--quiet", "--n-boot", "50"]) == 0
    assert not (run_dir / FIGURE).exists()
    assert points_of(json.loads((run_dir / "scores.json").read_text())) == []


def test_compare_draws_several_runs_and_refuses_what_it_cannot_draw(small_bench: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    a = _run(small_bench, tmp_path / "a", "reference")
    b = _run(small_bench, tmp_path / "b", "random")
    figure = tmp_path / "space.png"
    assert main(["compare", str(a), str(b), "--pecs-space", str(figure)]) == 0
    assert f"wrote {figure}" in capsys.readouterr().out
    with Image.open(figure) as image:
        assert image.format == "PNG"
    # refused before anything is scored: a path that is no PNG, a folder of runs, a run with no answers
    c = _run(small_bench, tmp_path / "c", "random")
    assert main(["compare", str(a), str(c), "--pecs-space", str(tmp_path / "space.pdf")]) == 2
    assert "give a path ending in .png" in capsys.readouterr().err
    assert not (c / "scores.json").exists()
    runs = tmp_path / "runs"
    assert main(["run", "--model", "policy:random", "--bench", str(small_bench), "--out", str(runs), "--runs", "2",
                 "--temperature", "0.5", "--quiet"]) == 0
    assert main(["compare", str(a), str(runs), "--pecs-space", str(figure)]) == 2
    assert "is a folder of runs" in capsys.readouterr().err
    sel = _run(small_bench, tmp_path / "sel", "reference", "--requests", "select")
    assert main(["compare", str(a), str(sel), "--pecs-space", str(figure)]) == 2
    assert "no PECS to draw (no answer records)" in capsys.readouterr().err


def test_arrows_join_consecutive_runs_of_one_model() -> None:
    assert arrows_between(["m1", "m1", "m2", "m1", "m1", None, None]) == [(0, 1), (3, 4)]


def test_compare_prints_pecs_per_dataset_and_says_where_a_run_lacks_it(small_bench: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    a = _run(small_bench, tmp_path / "a", "reference")
    b = _run(small_bench, tmp_path / "b", "random")
    for run in (a, b):
        assert main(["score", str(run), "--quiet", "--n-boot", "200"]) == 0
    capsys.readouterr()
    assert main(["compare", str(a), str(b)]) == 0
    table = capsys.readouterr().out
    systems = list(json.loads((a / "scores.json").read_text())["pecs_datasets"]["datasets"])
    for name in systems:
        assert f"| PECS: {name} | 1.000 (the same on every family resample, n=" in table
    assert "| PECS: equal-weight mean | 1.000 (the same on every family resample" in table
    assert f"| zero boundary (datasets with J <= 0) | 0 of {len(systems)} |" in table
    # scores written before PECS per dataset (still fresh for their records): NA, saying what to do
    scores = json.loads((b / "scores.json").read_text())
    del scores["pecs_datasets"]
    (b / "scores.json").write_text(json.dumps(scores))
    assert main(["compare", str(a), str(b)]) == 0
    assert "NA (not in this run's scores: rescore it)" in capsys.readouterr().out
