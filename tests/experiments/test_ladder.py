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
from evprobe.core.estimate_text import count_text
from evprobe.experiments.cli import main
from evprobe.experiments.ladder import LadderConfig, behaviour_by_level, ladder
from evprobe.experiments.scoring_io import score_run
from evprobe.probes.synthetic import planted_acts, reference_rows, write_capture

STRENGTH = {0: 0.0, 1: 1.0, 2: 2.0, 3: 4.0}
FAST = dict(refits=20, n_boot=500, control_tasks=4)


def level_capture(path: Path, strengths: dict[int, float], n_families: int = 24,
                  jitter: dict[int, float] | None = None) -> Path:
    """Rows of `reference_rows` once per level (ids suffixed as bench.injection does), the label
    `resolved` planted along one direction at layer 1 with the level's strength. With `jitter`,
    a level is level 0's activations plus N(0, jitter^2) noise (a level almost identical to 0)."""
    base = reference_rows(n_families)
    y = np.array([r["resolved"] for r in base], dtype=np.int8)
    rows, acts = [], []
    for level, strength in strengths.items():
        a, _ = planted_acts(y, 2, 1, 16, signal_layers=(1,), strength=strength, seed=level, direction=np.eye(16)[0])
        if jitter and level in jitter:
            noise = np.random.default_rng(100 + level).standard_normal(acts[0].shape) * jitter[level]
            a = (acts[0].astype(np.float32) + noise).astype(acts[0].dtype)
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
    # paired differences against level 0: the probe's from the same refits, behaviour's from scores.json
    assert doc["reference_level"] == 0 and points[0]["difference"] is None
    d3 = points[3]["difference"]
    assert d3["vs"] == 0 and d3["value"] == pytest.approx(auc[3] - auc[0]) and d3["ci"][0] > 0.1
    assert points[2]["behaviour_difference"]["min_cost_choice"] == \
        scores["injection"]["differences"]["2"]["min_cost_choice"]
    assert "## Differences from level 0" in table
    # every interval says the families it rests on (issue 52): the level's 24 families for the probe's
    # refit intervals and their paired difference, the run's families for its behaviour
    assert d3["n_families"] == 24
    lines = table.splitlines()
    behaviour = points[3]["behaviour"]["min_cost_choice"]
    assert behaviour["n_families"] == 3  # the scored run's bench: one family per system
    rows = {level: next(line for line in lines if line.startswith(f"| {level} | {p['name']} |"))
            for level, p in points.items()}
    for row in rows.values():
        assert row.split(" | ")[2].endswith("(n=96 in 24 families)"), row  # the AUROC cell
    assert count_text(behaviour["n"], 3) in rows[3]
    difference = next(line for line in lines if line.startswith("| 3 | +"))  # the paired table's row
    assert difference.split(" | ")[1].endswith("(n=96 in 24 families)"), difference
    # `evprobe report` shows the ladder, and not each level's sweep again under "Probe sweeps"
    assert main(["report", str(tmp_path / "ladder"), "--out", str(tmp_path / "report")]) == 0
    page_one = (tmp_path / "report" / "report.md").read_text()
    assert "- [Information-injection ladder](details-information-injection-ladder.md)" in page_one
    assert "Probe sweeps" not in page_one  # each level's sweep is the ladder's, not shown again
    report = (tmp_path / "report" / "details-information-injection-ladder.md").read_text()
    headings = [line for line in report.splitlines() if line.startswith("#")]
    assert "## Information-injection ladder" in headings and "#### Differences from level 0" in headings
    assert "](ladder__ladder.png)" in report or "](ladder.png)" in report


def test_paired_probe_differences(tmp_path: Path) -> None:
    """A level identical to level 0 differs by exactly 0 on every refit: the interval is the MOVER
    combination of the two levels' intervals, never a point. A level that is level 0 plus a little
    noise differs on each refit by little, so the paired interval is far narrower than one that
    ignored the pairing (MOVER from the levels' own intervals), what two unpaired sweeps (another
    seed, other families per refit) would give."""
    acts = level_capture(tmp_path / "same", {0: 1.5, 1: 1.5}, jitter={1: 0.0})
    same = ladder(LadderConfig(acts=(str(acts),), out=str(tmp_path / "same_out"), **FAST), progress=False)
    d = same[1].difference
    assert same[1].auroc == same[0].auroc and d.value == 0.0 and d.ci[0] < 0.0 < d.ci[1]
    acts = level_capture(tmp_path / "near", {0: 1.5, 1: 1.5}, jitter={1: 0.1})
    near = ladder(LadderConfig(acts=(str(acts),), out=str(tmp_path / "near_out"), **FAST), progress=False)
    a, b, d = near[1], near[0], near[1].difference
    assert d.ci[0] <= d.value <= d.ci[1] and d.ci[0] < d.ci[1]
    mover = np.hypot(a.auroc - a.ci[0], b.ci[1] - b.auroc) + np.hypot(a.ci[1] - a.auroc, b.auroc - b.ci[0])
    assert d.ci[1] - d.ci[0] < 0.5 * mover
    none = ladder(LadderConfig(acts=(str(acts),), out=str(tmp_path / "none_out"), **{**FAST, "refits": 0}),
                  progress=False)
    assert none[1].difference.reason == "no refits (--refits 0): no paired difference"


def test_the_steering_panel_reads_one_dose_folder_per_level(tmp_path: Path) -> None:
    def dose(folder: str, level: int, nats: float) -> Path:
        est = {"value": nats, "ci": [nats - 1, nats + 1], "n": 40}
        doc = {"meta": {"injection": level}, "headline": [
            {"readout": "logprobs", "goal": "induce measuring", "group": "resolved", "choices": [
                {"layer": 3, "alpha": 0.875}, {"layer": 3, "alpha": 1.0}],
             "target": {"log_odds_change": est, "change": {"value": -0.5, "ci": [-0.6, -0.4], "n": 40}}}]}
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "dose_response.json").write_text(json.dumps(doc))
        return tmp_path / folder

    acts = level_capture(tmp_path / "acts", {0: 1.0, 2: 1.0})
    folders = (str(dose("d0", 0, -9.0)), str(dose("d2", 2, -4.0)))
    points = ladder(LadderConfig(acts=(str(acts),), out=str(tmp_path / "out"), dose=folders, **FAST), progress=False)
    steer = {p.level: p.steering["induce measuring"] for p in points}
    assert steer[0].log_odds_change["value"] == -9.0 and steer[2].log_odds_change["value"] == -4.0
    assert steer[2].setting == "L3 alpha +0.875, L3 alpha +1"
    md = (tmp_path / "out" / "ladder.md").read_text()
    assert "| 2 | induce measuring (resolved items) | L3 alpha +0.875, L3 alpha +1 | -4.000 [-5.000, -3.000] (n=40)" in md
    with pytest.raises(InputError, match="a second dose-response folder of injection level 0"):
        ladder(LadderConfig(acts=(str(acts),), out=str(tmp_path / "o2"), dose=(folders[0], folders[0]), **FAST),
               progress=False)


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
