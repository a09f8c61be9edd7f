"""Control tasks (random cell functions), selectivity, the batched solver and the leakage check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evprobe.core.capture_schema import BENCHMARK_CELL_FIELDS as CELL_FIELDS
from evprobe.probes.captures import load_captures
from evprobe.probes.label_sets import labels
from evprobe.probes.control_tasks import (
    DEFAULT_CONTROL_TASKS,
    default_cell_fields,
    draw_control_tasks,
    fmt_selectivity,
    row_cells,
    selectivity,
)
from evprobe.probes.controls import leakage_check, leakage_labels
from evprobe.probes.engine import LogisticFitter, cv_scores
from evprobe.probes.solvers import kernel_logistic
from evprobe.probes.metrics import auroc
from evprobe.probes.multilabel import kernel_logistic_many
from evprobe.probes.registry import ProbeSpec
from evprobe.probes.report import sweep_markdown
from evprobe.probes.splits import family_folds
from evprobe.probes.sweep import SweepConfig, sweep
from evprobe.probes.synthetic import planted_acts, reference_rows, write_capture

FAST = {"n_boot": 400, "nested": False}


def cell_rows(n_families: int = 72, seed: int = 3) -> list[dict]:
    """reference_rows with sufficiency a function of the cell, as in the benchmark: the family's
    flip is fixed by (system, initial property) instead of drawn per family."""
    rows = reference_rows(n_families, seed)
    for r in rows:
        flip = (len(r["system"]) + (r["initial_property"] == "mass")) % 2
        r["resolved"] = bool(r["history"] ^ (r["threshold_level"] == "high") ^ flip)
    return rows


def cells_of(rows: list[dict]) -> np.ndarray:
    return row_cells(rows, CELL_FIELDS)[0]


# -- drawing control tasks --------------------------------------------------------------------


def test_defaults_and_balance() -> None:
    assert DEFAULT_CONTROL_TASKS == 39 and SweepConfig().control_tasks == DEFAULT_CONTROL_TASKS
    assert SweepConfig().cell_fields is None  # the capture's own: the benchmark's on the benchmark's rows
    rows = cell_rows()
    assert default_cell_fields(rows) == ("system", "initial_property", "history", "threshold_level")
    cells, y = cells_of(rows), np.array([r["resolved"] for r in rows], dtype=np.int8)
    assert cells.max() + 1 == 24
    tasks = draw_control_tasks(cells, y, 20, seed=7)
    assert tasks.k == 20 and tasks.reason is None and tasks.labels.shape == (20, len(rows))
    for lab in tasks.labels:
        per_cell = np.array([lab[cells == c].max() for c in range(24)])
        assert all(lab[cells == c].min() == per_cell[c] for c in range(24))  # a function of the cell
        assert per_cell.sum() == 12 and lab.mean() == 0.5  # half the cells; equal cells: half the rows
        assert not np.array_equal(lab, y) and not np.array_equal(lab, 1 - y)
    keys = {lab.tobytes() for lab in tasks.labels} | {(1 - lab).tobytes() for lab in tasks.labels}
    assert len(keys) == 40  # no control repeats another or its negation
    assert np.array_equal(draw_control_tasks(cells, y, 20, seed=7).labels, tasks.labels)  # seeded
    assert not np.array_equal(draw_control_tasks(cells, y, 20, seed=8).labels, tasks.labels)


def test_target_and_negation_are_excluded_when_few_cells_leave_little_choice() -> None:
    cells = np.repeat(np.arange(4), 5)  # 4 cells: 3 balanced functions up to negation
    y = (cells < 2).astype(np.int8)  # the target is one of them
    tasks = draw_control_tasks(cells, y, 20, seed=1)
    assert tasks.k == 2  # the other two, each once
    for lab in tasks.labels:
        assert not np.array_equal(lab, y) and not np.array_equal(lab, 1 - y)
    odd = draw_control_tasks(np.repeat(np.arange(5), 3), np.tile([0, 1, 0], 5).astype(np.int8), 20, seed=1)
    assert odd.k > 0 and all(len(set(lab[::3])) == 2 for lab in odd.labels)
    assert {int(lab[::3].sum()) for lab in odd.labels} <= {2, 3}  # floor or ceil of 5 / 2 cells
    few = draw_control_tasks(np.repeat(np.arange(3), 4), np.tile([0, 1], 6).astype(np.int8), 20, seed=1)
    assert few.k == 0 and "only 3 distinct cells" in few.reason


def test_missing_cell_fields_skip_control_tasks_loudly(tmp_path: Path) -> None:
    rows = reference_rows(20, seed=1)
    assert row_cells(rows, CELL_FIELDS)[1] is None
    bare = [{k: v for k, v in r.items() if k not in ("system", "history")} for r in rows]
    cells, reason = row_cells(bare, CELL_FIELDS)
    assert cells is None and "lacks the cell field(s) history, system" in reason
    acts = planted_acts(np.zeros(len(rows)), 1, 1, 8, seed=1)[0]
    cs = load_captures([write_capture(tmp_path / "bare", acts, bare)])
    res = sweep(cs, labels(cs, "resolved"), SweepConfig(**FAST))
    assert res.control_tasks.k == 0 and "lacks the cell field" in res.control_tasks.skipped
    assert any(w.startswith("CONTROL TASKS SKIPPED") for w in res.warnings)
    assert all(r.controls is None and r.selectivity.estimate.value is None for r in res.rows)
    assert res.cell_baseline.value is None and "control tasks: **skipped** (see the warning above)" in sweep_markdown(res)
    # other cell fields make it run again
    ok = sweep(cs, labels(cs, "resolved"), SweepConfig(cell_fields=("initial_property", "threshold_level"), **FAST))
    assert ok.control_tasks.n_cells == 8 and ok.control_tasks.k >= 1  # 4 initial properties x 2 levels


# -- selectivity against the controls' own distribution ---------------------------------------


def test_selectivity_interval_is_the_target_against_the_controls_range() -> None:
    summary, sel = selectivity(0.9, [0.6, 0.7, np.nan, 0.8], n=40)  # a NaN control (one class) is left out
    assert summary.k == 3 and summary.mean == pytest.approx(0.7) and (summary.min, summary.max) == (0.6, 0.8)
    assert sel.estimate.value == pytest.approx(0.2) and sel.estimate.ci == pytest.approx((0.1, 0.3))
    assert sel.estimate.n == 40 and sel.beaten == 3 and sel.level == pytest.approx(0.5)
    assert sel.p_value == pytest.approx(1 / 4)
    assert sel.selective is None  # 3 controls: a random label beats them all 1 time in 4, too often for a verdict
    many = np.linspace(0.6, 0.8, DEFAULT_CONTROL_TASKS)
    _, above = selectivity(0.81, many, n=40)
    assert above.selective is True and above.estimate.ci[0] > 0 and above.level == pytest.approx(0.95)
    assert above.p_value == pytest.approx(1 / 40)
    _, tied = selectivity(0.8, many, n=40)  # a tie with the best control counts against the target
    assert tied.selective is False and tied.estimate.ci[0] == 0.0 and tied.beaten == DEFAULT_CONTROL_TASKS - 1
    _, inside = selectivity(0.75, many, n=40)
    assert inside.selective is False and inside.estimate.ci[0] < 0 < inside.estimate.ci[1]
    assert selectivity(0.9, [np.nan], n=40)[1].estimate.reason == "no control tasks"
    assert selectivity(np.nan, many, n=40)[1].selective is None
    js = above.to_json()
    assert js["selective"] is True and js["k"] == 39 and js["beaten"] == 39 and js["level"] == pytest.approx(0.95)
    assert fmt_selectivity(above).endswith("(beats 39 of 39 control tasks)")
    assert fmt_selectivity(js) == fmt_selectivity(above)  # the same text from the object or its JSON
    assert "a 50.0% interval" in fmt_selectivity(sel)


def test_selectivity_coverage_and_false_verdicts_when_the_target_is_one_more_control() -> None:
    """The promise behind the rule, on exchangeable values (any distribution): the interval covers 0
    with probability (k - 1) / (k + 1) and the target beats every control 1 time in k + 1."""
    rng = np.random.default_rng(0)
    reps, k = 4000, DEFAULT_CONTROL_TASKS
    values = rng.beta(8, 2, size=(reps, k + 1))  # skewed toward 1, as AUROCs of a well-read cell are
    covers = selective = 0
    for v in values:
        _, sel = selectivity(v[0], v[1:], n=100)
        lo, hi = sel.estimate.ci
        covers += lo <= 0 <= hi
        selective += bool(sel.selective)
    se = np.sqrt(0.05 * 0.95 / reps)
    assert abs(covers / reps - 0.95) < 3.5 * se
    assert abs(selective / reps - 1 / (k + 1)) < 3.5 * np.sqrt(0.025 * 0.975 / reps)


# -- the batched solver -----------------------------------------------------------------------


def test_many_labels_solve_the_same_problem_as_one_at_a_time() -> None:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((120, 300)).astype(np.float32)
    X[:, 0] += 2.0 * (np.arange(120) % 2)
    Z = (X - X.mean(0)) / X.std(0)
    K = (Z @ Z.T).astype(np.float64)
    Y = rng.integers(0, 2, (120, 6)).astype(float)
    Y[:, 0] = np.arange(120) % 2
    A, b, steps = kernel_logistic_many(K, Y, 1.0, tol=1e-12)
    for j in range(6):
        a1, b1, _ = kernel_logistic(K, Y[:, j], 1.0, tol=1e-12)
        assert np.abs(K @ (A[:, j] - a1) + b[j] - b1).max() < 1e-5
    assert (steps >= 1).all()


def test_batched_control_labels_score_like_one_label_at_a_time(rows) -> None:
    y = np.array([r["resolved"] for r in rows], dtype=np.int8)
    fam = [r["family_id"] for r in rows]
    X = planted_acts(y, 1, 1, 400, signal_layers=[0], strength=3.0, seed=4)[0][:, 0, 0].astype(np.float32)
    folds = family_folds(fam, 5, 1, y)
    tasks = draw_control_tasks(cells_of(rows), y, 5, seed=2)
    ys = {"y": y, **tasks.as_labels(), "leakage:0": leakage_labels(y, fam, 1)[0]}
    # without their prefixes the same labels are solved one by one (probes.multilabel.BATCHED)
    a = cv_scores(X, LogisticFitter(), folds, {f"one:{k}": v for k, v in ys.items()}, key=0)
    b = cv_scores(X, LogisticFitter(), folds, ys, key=0)
    assert np.array_equal(a.oof["one:y"], b.oof["y"])  # the target takes the per-label path either way
    for name in ys:
        assert np.abs(a.oof[f"one:{name}"] - b.oof[name]).max() < 1e-3 * np.abs(a.oof[f"one:{name}"]).mean()


# -- selectivity on planted data --------------------------------------------------------------


def _sweep(tmp_path: Path, name: str, acts: np.ndarray, rows: list[dict], **kw) -> object:
    cs = load_captures([write_capture(tmp_path / name, acts, rows)])
    return sweep(cs, labels(cs, "resolved"), SweepConfig(**{**FAST, **kw}))


def test_selective_when_only_the_target_is_encoded(tmp_path: Path) -> None:
    rows = cell_rows()
    y = np.array([r["resolved"] for r in rows], dtype=int)
    acts = planted_acts(y, 1, 1, 32, signal_layers=[0], strength=4.0, seed=5)[0]
    res = _sweep(tmp_path, "sel", acts, rows, probe="massmean", nested=True)
    row = res.rows[0]
    assert res.cell_baseline.value > 0.99  # the label is a function of the cell
    assert row.auroc.value > 0.95 and row.controls.mean < 0.8 and row.controls.k == DEFAULT_CONTROL_TASKS
    lo, hi = row.selectivity.estimate.ci
    assert row.selective and 0 < lo < row.selectivity.estimate.value < hi  # the truth (> 0) is inside and 0 is not
    assert row.selectivity.estimate.value == pytest.approx(row.auroc.value - row.controls.mean)
    assert (lo, hi) == pytest.approx((row.auroc.value - row.controls.max, row.auroc.value - row.controls.min))
    md = sweep_markdown(res)
    assert "selective: 'resolved' is decoded there" in md and "beats 39 of 39 control tasks" in md
    assert "'resolved' is decodable from L0" in md  # the paragraph: the test against chance rejects there
    assert "decoded better than every random function of the cell from L0" in md


@pytest.mark.parametrize("probe", ["logistic", "massmean"])
def test_not_selective_when_the_representation_carries_the_cell(tmp_path: Path, probe: str) -> None:
    """Representation = one-hot cell + noise: every function of the cell decodes, sufficiency too."""
    rows = cell_rows()
    cells = cells_of(rows)
    d = 256  # > training rows: the logistic probe takes the kernel path and the batched solver
    rng = np.random.default_rng(6)
    acts = rng.standard_normal((len(rows), 1, 1, d)).astype(np.float32)
    acts[np.arange(len(rows)), 0, 0, cells] += 12.0  # the cell read along 24 of 256 axes
    res = _sweep(tmp_path, f"cell-{probe}", acts.astype(np.float16), rows, probe=probe, nested=True)
    row = res.rows[0]
    assert row.auroc.value > 0.95 and row.controls.mean > 0.9 and row.controls.min > 0.8
    lo, hi = row.selectivity.estimate.ci
    assert lo <= 0 <= hi and abs(row.selectivity.estimate.value) < 0.05 and row.selective is False
    md = sweep_markdown(res)
    assert "**not selective**" in md
    assert "the probe is not selective at last; the representation carries the cell" in md  # the paragraph


# -- the leakage check ------------------------------------------------------------------------


def _leakage_values(X_by_row: list[np.ndarray], y, fam, folds, shuffles: int = 4) -> np.ndarray:
    out = []
    for X in X_by_row:
        ys = {f"leakage:{c}": leakage_labels(y, fam, 3, c)[0] for c in range(shuffles)}
        res = cv_scores(X, ProbeSpec.of("massmean").fitter(), folds, ys)
        out.append([auroc(res.oof[k], v) for k, v in ys.items()])
    return np.array(out)


def test_leakage_check_fires_when_folds_split_families(rows) -> None:
    """Features carry each family's identity; with folds of rows instead of families a probe learns
    a family's shuffled labels from the held-out row's mates, and the check fires."""
    y = np.array([r["resolved"] for r in rows], dtype=np.int8)
    fam = np.array([r["family_id"] for r in rows], dtype=object)
    _, inv = np.unique(fam, return_inverse=True)
    rng = np.random.default_rng(9)
    offsets = rng.standard_normal((inv.max() + 1, 48)) * 3.0
    X_rows = [(offsets[inv] + rng.standard_normal((len(y), 48))).astype(np.float32) for _ in range(4)]
    grouped = family_folds(fam, 5, 1, y)
    ungrouped = np.arange(len(y)) % 5  # rows dealt to folds: families split
    ok = leakage_check(_leakage_values(X_rows, y, fam, grouped))
    bad = leakage_check(_leakage_values(X_rows, y, fam, ungrouped))
    assert not ok.fires.any() and (ok.lo <= 0.5).all() and (ok.hi >= 0.5).all()
    assert bad.fires.all() and (bad.auroc < 0.4).all()


def test_leakage_check_fires_in_the_sweep_on_features_that_encode_the_shuffles(tmp_path: Path, rows) -> None:
    """A pipeline bug that wrote family-specific label information (each shuffle's labels) into one
    layer: the sweep flags that row, warns, and writes it to JSON and markdown."""
    y = np.array([r["resolved"] for r in rows], dtype=int)
    fam = [r["family_id"] for r in rows]
    seed = 11
    acts = planted_acts(y, 3, 1, 32, seed=seed)[0].astype(np.float32)
    from evprobe.probes.sweep import SweepConfig

    for c in range(SweepConfig().leakage_shuffles):  # every shuffle's labels, one dimension each
        acts[:, 1, 0, c] += 3.0 * (2 * leakage_labels(y, fam, seed, c)[0] - 1)
    res = _sweep(tmp_path, "leak", acts.astype(np.float16), rows, probe="massmean", control_tasks=0, seed=seed)
    assert [r.leakage_fires for r in res.rows] == [False, True, False]
    assert res.rows[1].leakage.value > 0.9
    assert any(w.startswith("LEAKAGE CHECK FIRED at 1 of 3") for w in res.warnings)
    assert res.to_json()["rows"][1]["leakage_fires"] is True and "**LEAK**" in sweep_markdown(res)


def test_leakage_check_false_alarms_are_rare_on_sound_sweeps(tmp_path: Path, rows) -> None:
    """20 noise sweeps of 4 layer/positions: at most 5% false alarms per sweep is promised; more
    than 3 of 20 would happen with probability < 2% if that holds."""
    y = np.array([r["resolved"] for r in rows], dtype=int)
    fired = 0
    for seed in range(20):
        acts = planted_acts(y, 2, 2, 16, seed=100 + seed)[0]
        res = _sweep(tmp_path, f"noise{seed}", acts, rows, probe="massmean", control_tasks=0, seed=seed)
        fired += any(r.leakage_fires for r in res.rows)
    assert fired <= 3
