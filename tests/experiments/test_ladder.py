"""`evprobe ladder` on a capture with a known answer: four injection levels of the same 24
families whose sufficiency signal is planted with growing strength (none at level 0), so the
ladder must rise; a ladder that pooled the levels, or read another level's rows, would be flat.
The behavioural panel reads a real run's scores.json level by level."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evprobe.bench.generate import GenerateConfig, generate
from evprobe.bench.runner import RunConfig, run
from evprobe.core.errors import InputError
from evprobe.experiments.cli import main
from evprobe.experiments.ladder import LadderConfig, behaviour_by_level, ladder
from evprobe.experiments.scoring_io import score_run
from evprobe.probes.synthetic import planted_acts, reference_rows, write_capture

STRENGTH = {0: 0.0, 1: 1.0, 2: 2.0, 3: 4.0}
FAST = dict(refits=20, n_boot=500, control_tasks=4)


def level_capture(path: Path, strengths: dict[int, float], n_families: int = 24) -> Path:
    """Rows of `reference_rows` once per level (ids suffixed as bench.injection does), the label
    `resolved` planted along one direction at layer 1 with the level's strength."""
    base = reference_rows(n_families)
    y = np.array([r["resolved"] for r in base], dtype=np.int8)
    rows, acts = [], []
    for level, strength in strengths.items():
        a, _ = planted_acts(y, 2, 1, 16, signal_layers=(1,), strength=strength, seed=level, direction=np.eye(16)[0])
        acts.append(a)
        sfx = f".L{level}" if level else ""
        for r in base:
            rows.append({**r, **{k: r[k] + sfx for k in ("item_id", "decision_id", "image_pair_id", "threshold_pair_id")},
                         **({"injection": level} if level else {})})
    return write_capture(path, np.concatenate(acts), rows, positions=["last"])


@pytest.fixture(scope="module")
def scored_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("run")
    generate(root / "bench", GenerateConfig(families_per_system=1, subset_per_cell=0, injection_levels=(1, 2, 3)),
             progress=False)
    run(RunConfig(model="policy:random", bench=str(root / "bench"), out=str(root / "run"), requests=("select",),
                  injection=(0, 1, 2, 3)), progress=False)
    score_run(root / "run", n_boot=50)
    return root / "run"


def test_the_ladder_rises_with_the_planted_signal(tmp_path: Path, scored_run: Path) -> None:
    acts = level_capture(tmp_path / "acts", STRENGTH)
    code = main(["ladder", "--acts", str(acts), "--out", str(tmp_path / "ladder"), "--scores", str(scored_run),
                 "--refits", "20", "--n-boot", "500", "--control-tasks", "4", "--quiet"])
    assert code == 0
    doc = json.loads((tmp_path / "ladder" / "ladder.json").read_text())
    points = {p["level"]: p for p in doc["levels"]}
    assert sorted(points) == [0, 1, 2, 3] and doc["same_families_at_every_level"]
    assert all(p["n"] == 96 and p["n_families"] == 24 for p in points.values())  # one level's rows each
    auc = {lv: p["auroc"] for lv, p in points.items()}
    assert auc[0] < 0.75 and auc[3] > 0.95 and auc[1] < auc[3]  # no signal at 0, full at 3
    assert points[3]["ci"][0] > 0.5 and points[3]["layer"] == 1  # the planted layer
    for p in points.values():  # every number with its interval, none of zero width
        assert p["ci"][0] < p["ci"][1]
    for level in (1, 2, 3):
        assert (tmp_path / "ladder" / f"L{level}" / "sweep.json").is_file()
    scores = json.loads((scored_run / "scores.json").read_text())
    assert points[0]["behaviour"]["min_cost_choice"] == scores["min_cost_choice"]
    assert points[2]["behaviour"]["min_cost_choice"] == scores["injection"]["levels"]["2"]["min_cost_choice"]
    table = (tmp_path / "ladder" / "ladder.md").read_text()
    assert "| 3 | oracle guidance |" in table and (tmp_path / "ladder" / "ladder.png").stat().st_size > 0


def test_a_ladder_that_ignored_the_level_would_be_caught(tmp_path: Path) -> None:
    """Levels swapped in the capture (strongest signal at level 0) reverse the ladder: the level
    is read from each row, not from the order of the rows."""
    acts = level_capture(tmp_path / "acts", {0: 4.0, 1: 0.0})
    points = ladder(LadderConfig(acts=(str(acts),), out=str(tmp_path / "out"), **FAST), progress=False)
    assert [p.level for p in points] == [0, 1] and points[0].auroc > 0.95 and points[1].auroc < 0.75


def test_missing_levels_and_one_class_levels_say_so(tmp_path: Path) -> None:
    acts = level_capture(tmp_path / "acts", {0: 1.0, 1: 1.0})
    with pytest.raises(InputError, match="no labelled rows of injection level 3"):
        ladder(LadderConfig(acts=(str(acts),), out=str(tmp_path / "out"), levels=(0, 3), **FAST), progress=False)
    few = level_capture(tmp_path / "few", {0: 1.0, 1: 1.0}, n_families=3)
    points = ladder(LadderConfig(acts=(str(few),), out=str(tmp_path / "few_out"), **FAST), progress=False)
    assert all(p.auroc is None and p.reason == "3 families, fewer than the 5 folds" for p in points)


def test_behaviour_of_a_level_the_run_did_not_score() -> None:
    scores = {"min_cost_choice": {"value": 0.5, "ci": [0.2, 0.8], "n": 12}, "injection": {"levels": {}}}
    assert behaviour_by_level(scores, 0)["min_cost_choice"]["n"] == 12
    assert behaviour_by_level(scores, 2)["min_cost_choice"] == {"reason": "not in scores.json"}
