"""`evprobe run --runs R`, `evprobe score OUT` on a folder of runs and `evprobe compare A B --paired`
through the command line (bench.repeats, bench.repeats_scoring)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evprobe.experiments.cli import main


@pytest.fixture(scope="module")
def settings(small_bench: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("cli_runs")
    for name, seed, runs in (("a", 0, 3), ("b", 100, 2)):
        assert main(["run", "--model", "policy:random", "--bench", str(small_bench), "--out", str(root / name),
                     "--seed", str(seed), "--runs", str(runs), "--quiet"]) == 0
    return root / "a", root / "b"


def test_run_runs_prints_its_runs(settings, capsys, small_bench: Path, tmp_path: Path) -> None:
    assert main(["run", "--model", "policy:random", "--bench", str(small_bench), "--out", str(tmp_path / "r"),
                 "--runs", "2", "--limit", "6", "--quiet"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"2 runs in {tmp_path / 'r'}: run-1 6/6 (seed 0), run-2 6/6 (seed 1) records")
    assert f"evprobe score {tmp_path / 'r'}" in line


def test_refusals_are_one_line(settings, capsys, small_bench: Path, tmp_path: Path) -> None:
    a, _ = settings
    cases = [
        (["run", "--model", "tiny:llava", "--bench", str(small_bench), "--out", str(tmp_path / "g"), "--runs", "3"],
         "greedy decoding"),
        (["run", "--model", "policy:random", "--bench", str(small_bench), "--out", str(a), "--quiet"],
         "folder of 3 runs"),
        (["compare", str(a), str(a / "run-1")], "is a folder of runs: compare two settings with --paired"),
        (["compare", "--paired", str(a)], "--paired compares two settings"),
    ]
    for argv, words in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err
    assert not (tmp_path / "g").exists() and not (a / "records.jsonl").exists()


def test_score_a_folder_of_runs(settings, capsys) -> None:
    a, _ = settings
    assert main(["score", str(a), "--n-boot", "300"]) == 0
    out = capsys.readouterr().out
    assert "| measure | run-1 (seed 0) | run-2 (seed 1) | run-3 (seed 2) | mean | sd | pooled over runs |" in out
    assert f"wrote {a / 'scores.json'}" in out
    scores = json.loads((a / "scores.json").read_text())
    assert scores["kind"] == "repeated_runs" and [r["seed"] for r in scores["runs"]] == [0, 1, 2]
    for r in (1, 2, 3):  # every run scored as a run is
        assert json.loads((a / f"run-{r}" / "scores.json").read_text())["meta"]["n_boot"] == 300
    block = scores["headline"]["min_cost_choice"]
    assert block["n_runs"] == 3 and block["values"] == [e["value"] for e in block["runs"]]
    assert block["mean"] == pytest.approx(np.mean(block["values"]))
    assert block["sd"] == pytest.approx(np.std(block["values"], ddof=1))
    assert block["pooled"]["n"] == 72 and block["pooled"]["value"] == pytest.approx(block["mean"])
    assert (a / "scores.md").read_text().startswith("# policy:random direct/standard: 3 runs (seeds 0 ... 2)")


def test_compare_paired(settings, capsys, tmp_path: Path) -> None:
    a, b = settings
    assert main(["compare", str(a), str(b), "--paired", "--n-boot", "300", "--out", str(tmp_path / "p.md")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Paired comparison: B - A")
    assert "| measure | A | B | B - A |" in out
    row = next(line for line in out.splitlines() if line.startswith("| Minimum cost choice |"))
    few = "families: the interval may be too narrow)"  # the small bench has 6 families: warned
    assert row.count(f"(n=72 in only 6 {few}") == 1 and row.count(f"(n=48 in only 6 {few}") == 1
    assert row.endswith(f"(n=24 in only 6 {few} |")
    assert (tmp_path / "p.md").read_text() == out.rstrip("\n") + "\n"
