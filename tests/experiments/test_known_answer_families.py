"""The known-answer readings of a capture say the families their intervals rest on (issue 52 item 5),
on a synthetic capture with a planted signal: 24 families, 4 per system x initial-test group, the
direction fitted on 8 of them and checked on the other 16. Each count differs from every other count
at hand, so a reading that carried the capture's, the group's or the fit's families in place of its
own fails."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evprobe.experiments.known_answer.capture import direction_check, group_readings
from evprobe.experiments.known_answer.counts import Expectations
from evprobe.probes.captures import load_captures
from evprobe.probes.label_sets import labels
from evprobe.probes.directions import Direction, fit_directions, write_directions
from evprobe.probes.synthetic import planted_acts, reference_rows, write_capture

FEW = "the interval may be too narrow"


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rows = reference_rows(24, seed=0)
    y = np.array([r["resolved"] for r in rows], dtype=int)
    acts, _ = planted_acts(y, 2, 1, 16, signal_layers=(1,), strength=4.0, seed=0, direction=np.eye(16)[0])
    return write_capture(tmp_path_factory.mktemp("ka") / "acts", acts, rows, positions=["last"])


def test_each_group_reading_says_its_families(capture: Path) -> None:
    """The AUROC scores a group's rows alone (its 4 families, printed with the warning below 8); the
    cosine compares the group's class means with the others', so its resamples draw all 24."""
    from evprobe.experiments.known_answer.capture import group_problems

    groups = group_readings(capture, {"aux_layer": 1}, n_boot=100)
    assert groups is not None and len(groups) == 6
    for r in groups:
        assert (r.n, r.families) == (16, 4)
        assert r.auroc["n_families"] == 4 and r.cosine["n_families"] == 24, r
    _, text = group_problems(groups)
    assert text.count(f"(only 4 families: {FEW}) (n=16, 4 families)") == 6  # each AUROC, not a cosine


def test_a_stored_direction_is_checked_on_its_held_out_families(capture: Path, tmp_path: Path) -> None:
    cs = load_captures([capture])
    (d,) = fit_directions(cs, labels(cs, "resolved"), [1], "last")
    fit = [r["item_id"] for r in cs.index if int(r["family_id"].split("-")[1]) < 8]  # 8 families' 32 rows
    write_directions(tmp_path / "dirs", [Direction(d.name, d.vector, {**d.provenance, "items": fit})])
    check = direction_check(capture, tmp_path / "dirs", {"aux_layer": 1}, Expectations(tmp_path), n_boot=100)
    assert "(n=64 in 16 families) (fitted on 32 items of 8 families)" in check.measured, check.measured
