"""The label against the design's factors (probes.factors), on the sweep, its report and page one.

Each check is paired with the broken input or plausible mutation it catches (named in the comment)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from evprobe.core.bootstrap import FamilyBootstrap
from evprobe.probes.captures import load_captures
from evprobe.probes.label_sets import labels
from evprobe.core.capture_schema import BENCHMARK_CELL_FIELDS as CELL_FIELDS
from evprobe.probes.factors import compare_factors, factor_labels, fmt_factors
from evprobe.probes.report import sweep_markdown
from evprobe.probes.summary import sweep_paragraph
from evprobe.probes.sweep import SweepConfig, sweep
from evprobe.probes.synthetic import reference_rows, write_capture

FAST = {"n_boot": 300, "nested": False, "refits": 0, "control_tasks": 19, "leakage_shuffles": 2,
        "chance_permutations": 19}


def test_factor_labels_binarise_each_field_as_stated(rows) -> None:
    y = np.array([r["resolved"] for r in rows], dtype=np.int8)
    factors = factor_labels(rows, CELL_FIELDS, y)
    got = {f.field: [v for v, _, _ in f.labels] for f in factors.factors}
    # two values: one label (the second sorted value); three systems: each against the rest (a mutation
    # keeping only the first value of a many-valued field would compare the label with one system only)
    assert got["history"] == ["1"] and got["threshold_level"] == ["low"]
    assert got["system"] == ["bouncing", "sliding", "spring"]
    assert got["initial_property"] == ["friction", "mass", "restitution", "stiffness"]
    sliding = dict((v, lab) for v, _, lab in next(f for f in factors.factors if f.field == "system").labels)["sliding"]
    assert np.array_equal(sliding, [r["system"] == "sliding" for r in rows])
    # a field equal to the label is left out with its reason, as is a constant one
    as_label = factor_labels(rows, ("history",), np.array([r["history"] for r in rows], dtype=np.int8))
    assert not as_label.factors and "equal to the label" in as_label.skipped["history"]
    one = factor_labels([{**r, "system": "sliding"} for r in rows], ("system",), y)
    assert not one.factors and "one value" in one.skipped["system"]


def _scores(y: np.ndarray, strength: float, rng: np.random.Generator) -> np.ndarray:
    return strength * (2.0 * y - 1.0) + rng.standard_normal(len(y))


def test_a_stronger_label_beats_a_weaker_factor_and_a_weaker_one_does_not(rows) -> None:
    rng = np.random.default_rng(0)
    fam = np.array([r["family_id"] for r in rows], dtype=object)
    y = np.array([r["resolved"] for r in rows], dtype=np.int8)
    factors = factor_labels(rows, ("threshold_level",), y)
    z = factors.factors[0].labels[0][2]
    boot = FamilyBootstrap(sorted(set(fam)), 500, 1)
    strong = compare_factors(_scores(y, 2.0, rng), y, {"factor:threshold_level=low": _scores(z, 0.3, rng)}, factors,
                             fam, boot)
    (r,) = strong.readings
    assert r.verdict == "better" and strong.singled_out and r.ci[0] > 0 and not r.at_ceiling
    weak = compare_factors(_scores(y, 0.3, rng), y, {"factor:threshold_level=low": _scores(z, 2.0, rng)}, factors,
                           fam, boot)
    assert weak.readings[0].verdict == "worse" and weak.singled_out is False
    assert "not singled out" in fmt_factors(weak) and "threshold_level" in fmt_factors(weak)
    assert fmt_factors(strong).startswith("decoded better than each of the design's factors")


def test_at_the_ceiling_the_label_is_not_singled_out_and_the_interval_is_no_point(rows) -> None:
    """Both perfectly separated: the paired bootstrap's differences are all 0 (a mutation dropping the MOVER
    widening prints [0, 0] and would call neither better nor the same honestly)."""
    fam = np.array([r["family_id"] for r in rows], dtype=object)
    y = np.array([r["resolved"] for r in rows], dtype=np.int8)
    factors = factor_labels(rows, ("threshold_level",), y)
    z = factors.factors[0].labels[0][2]
    boot = FamilyBootstrap(sorted(set(fam)), 500, 1)
    cmp = compare_factors(10.0 * (2.0 * y - 1), y, {"factor:threshold_level=low": 10.0 * (2.0 * z - 1)}, factors, fam,
                          boot)
    (r,) = cmp.readings
    assert r.difference == 0.0 and r.at_ceiling and r.verdict == "same" and cmp.singled_out is False
    lo, hi = r.ci
    assert lo < 0 < hi and hi - lo > 0.04  # 72 families: each AUROC's perfect interval is ~0.05 wide
    assert "at the ceiling with it" in fmt_factors(cmp)
    # a factor just short of perfect, its few discordant pairs spread over many families, so its bootstrap
    # interval's upper end is below 1 (the organism's threshold level at L3: 0.9997): still at the ceiling
    near = 2.0 * (2.0 * z - 1) + np.random.default_rng(1).standard_normal(len(z))
    (r,) = compare_factors(10.0 * (2.0 * y - 1), y, {"factor:threshold_level=low": near}, factors, fam, boot).readings
    assert 0.99 < r.auroc < 1.0 and r.auroc_ci[1] < 1.0 and r.at_ceiling and r.verdict == "same"


@pytest.fixture(scope="module")
def ceiling_sweep(tmp_path_factory: pytest.TempPathFactory):
    """The audit's case: the label and threshold level both written strongly, so both decode at ceiling
    and the label beats every random cell function."""
    rows = reference_rows(48, seed=2)
    y = np.array([r["resolved"] for r in rows], dtype=float)
    z = np.array([r["threshold_level"] == "low" for r in rows], dtype=float)
    rng = np.random.default_rng(3)
    u, v = np.linalg.qr(rng.standard_normal((16, 2)))[0].T
    acts = rng.standard_normal((len(rows), 1, 1, 16)) * 0.3
    acts[:, 0, 0] += 6.0 * np.outer(2 * y - 1, u) + 6.0 * np.outer(2 * z - 1, v)
    cs = load_captures([write_capture(tmp_path_factory.mktemp("ceiling") / "acts", acts.astype(np.float16), rows)])
    return sweep(cs, labels(cs, "resolved"), SweepConfig(**FAST))


def test_the_sweep_reports_the_factors_beside_the_selectivity(ceiling_sweep) -> None:
    (row,) = ceiling_sweep.rows
    assert row.auroc.value > 0.99 and row.decodable
    assert {r.field for r in row.factors.readings} == set(CELL_FIELDS)
    threshold = next(r for r in row.factors.readings if r.field == "threshold_level")
    assert threshold.auroc > 0.99 and threshold.verdict == "same" and threshold.at_ceiling
    assert row.factors.singled_out is False
    others = [r for r in row.factors.readings if r.field != "threshold_level"]
    assert all(r.verdict == "better" for r in others)  # system, initial property, history: not written
    js = json.loads(json.dumps(ceiling_sweep.to_json()))
    assert js["factors"]["labels"]["system"] == ["bouncing", "sliding", "spring"]
    assert js["rows"][0]["factors"]["singled_out"] is False
    text = sweep_paragraph(ceiling_sweep)
    assert "not singled out from the design's factors" in text and "threshold_level" in text
    md = sweep_markdown(ceiling_sweep)
    assert "| vs factors |" in md and "vs threshold_level (ceiling)" in md and "The design's factors (the" in md


def test_page_one_claims_only_what_was_shown(ceiling_sweep) -> None:
    from evprobe.experiments.report.summary import headline_rows, sentences

    js = json.loads(json.dumps(ceiling_sweep.to_json()))
    js["best"] = {"layer": 0, "position": "last", "auroc": js["rows"][0]["auroc"], "ci": js["rows"][0]["ci"],
                  "n": js["rows"][0]["n"]}
    (text,) = sentences(None, js, None)
    assert "is decodable at AUROC" not in text and "decodable" in text  # the row's test, not the interval
    assert "not singled out from the design's factors" in text
    assert "not that the representation is about it rather than about the design's factors" in text
    rows = {r[0]: r for r in headline_rows(None, js, None, None)}
    closest = rows["AUROC minus the closest design factor (threshold_level)"]
    assert "not singled out" in closest[2]
    assert "does not compare the label with the design's own factors" in rows["selectivity (AUROC minus control tasks)"][2]
    # no test anywhere: page one says so instead of reading the interval
    for r in js["rows"]:
        r["chance_test"] = None
    (untested,) = sentences(None, js, None)
    assert "not tested against chance" in untested


def test_controls_off_means_no_factors(tmp_path: Path, rows) -> None:
    acts = np.random.default_rng(0).standard_normal((len(rows), 1, 1, 8)).astype(np.float16)
    cs = load_captures([write_capture(tmp_path / "acts", acts, rows)])
    res = sweep(cs, labels(cs, "resolved"), SweepConfig(**{**FAST, "controls": False}))
    assert res.factors is None and res.rows[0].factors is None and res.to_json()["factors"] is None


def test_refits_widen_the_comparison_by_the_label_s_training_spread(tmp_path: Path) -> None:
    """Fixed fold models miss the training spread (6-8% false verdicts each way, benchmarks/coverage_factors.py):
    with refits the sweep scales every half-width by the label's refit-over-fixed width (a mutation that skips
    this leaves the scale at 1)."""
    rows = reference_rows(48, seed=4)
    y = np.array([r["resolved"] for r in rows], dtype=float)
    z = np.array([r["threshold_level"] == "low" for r in rows], dtype=float)
    rng = np.random.default_rng(5)
    u, v = np.linalg.qr(rng.standard_normal((16, 2)))[0].T
    acts = rng.standard_normal((len(rows), 1, 1, 16))
    acts[:, 0, 0] += 0.6 * np.outer(2 * y - 1, u) + 0.6 * np.outer(2 * z - 1, v)  # mid-range, not at the ceiling
    cs = load_captures([write_capture(tmp_path / "acts", acts.astype(np.float16), rows)])
    res = sweep(cs, labels(cs, "resolved"), SweepConfig(**{**FAST, "refits": 20}))
    (row,) = res.rows
    scale = (row.auroc.ci[1] - row.auroc.ci[0]) / (row.factors.target_ci[1] - row.factors.target_ci[0])
    assert scale > 1.05
    for r in row.factors.readings:
        assert r.scale == pytest.approx(scale)
        fixed = replace(r, scale=1.0).ci
        assert r.ci[0] < fixed[0] and r.ci[1] > fixed[1]  # wider on both sides
    assert json.loads(json.dumps(res.to_json()))["rows"][0]["factors"]["factors"][0]["training_scale"] == pytest.approx(scale)
