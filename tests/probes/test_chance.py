"""The test against chance (probes.chance) and the batched primal solver it rides on (probes.multilabel).

Each check is paired with the broken input or plausible mutation it catches (named in the comment)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evprobe.core.bootstrap import Estimate
from evprobe.probes import multilabel
from evprobe.probes.captures import load_captures
from evprobe.probes.label_sets import labels
from evprobe.probes.chance import AMONG, FLIP, WITHIN, ChanceTest, adjust, chance_labels, scheme, step_down_maxt
from evprobe.probes.control_tasks import Selectivity
from evprobe.probes.engine import LogisticFitter, cv_scores
from evprobe.probes.multilabel import primal_logistic_many
from evprobe.probes.report import sweep_markdown
from evprobe.probes.solvers import primal_logistic
from evprobe.probes.splits import family_folds
from evprobe.probes.summary import position_sentence, sweep_paragraph
from evprobe.probes.sweep import SweepConfig, SweepRow, sweep
from evprobe.probes.synthetic import planted_acts, reference_rows, write_capture

FAST = {"n_boot": 200, "nested": False, "refits": 0, "control_tasks": 0, "leakage_shuffles": 2}


# -- the relabellings ----------------------------------------------------------------------------


def test_a_balanced_label_is_complemented_family_by_family(rows) -> None:
    """Sufficiency (history XOR level XOR a family flip): each relabelling gives every family either its own
    labels or their complement, the other value the flip could have had (a mutation permuting rows uniformly
    within families makes history- or level-aligned labels the observed one could never be)."""
    y = np.array([r["resolved"] for r in rows], dtype=np.int8)
    fam = np.array([r["family_id"] for r in rows], dtype=object)
    folds = family_folds(fam, 5, 1, y)
    perms = chance_labels(y, fam, folds, 20, seed=4)
    assert scheme(y, fam) == FLIP and perms.shape == (20, len(y))
    flipped = 0
    for p in perms:
        for f in np.unique(fam):
            same, other = np.array_equal(p[fam == f], y[fam == f]), np.array_equal(p[fam == f], 1 - y[fam == f])
            assert same or other
            flipped += other
        assert np.array_equal(family_folds(fam, 5, 1, p), folds)  # the stratified deal is unchanged
    assert 0.4 < flipped / (20 * len(np.unique(fam))) < 0.6  # each family complemented half the time
    assert np.array_equal(chance_labels(y, fam, folds, 20, seed=4), perms)  # seeded


def test_within_family_permutations_keep_each_family_s_positives_and_its_fold(rows) -> None:
    y = np.array([r["history"] == 1 and r["threshold_level"] == "low" for r in rows], dtype=np.int8)  # 1 of 4
    fam = np.array([r["family_id"] for r in rows], dtype=object)
    folds = family_folds(fam, 5, 1, y)
    perms = chance_labels(y, fam, folds, 20, seed=4)
    assert scheme(y, fam) == WITHIN and perms.shape == (20, len(y))
    for p in perms:
        for f in np.unique(fam):
            assert p[fam == f].sum() == y[fam == f].sum()  # a mutation permuting across all rows breaks this
        assert np.array_equal(family_folds(fam, 5, 1, p), folds)  # the stratified deal is unchanged
    assert any(not np.array_equal(p, y) for p in perms)  # and they do move the label
    assert np.array_equal(chance_labels(y, fam, folds, 20, seed=4), perms)  # seeded


def test_a_family_constant_label_moves_among_the_families_of_each_fold(rows) -> None:
    fam = np.array([r["family_id"] for r in rows], dtype=object)
    y = np.array([r["system"] == "sliding" for r in rows], dtype=np.int8)
    folds = family_folds(fam, 5, 1, y)
    perms = chance_labels(y, fam, folds, 30, seed=4)
    assert scheme(y, fam) == AMONG
    for p in perms:
        for f in np.unique(fam):
            assert len(set(p[fam == f])) == 1  # still constant within every family
        for k in range(5):
            # each fold keeps its count of positives: permuting across all families (the nested test's
            # rule) changes it, and the observed folds would then be unbalanced for the permuted labels
            assert p[folds == k].sum() == y[folds == k].sum()
    assert any(not np.array_equal(p, y) for p in perms)


# -- the multiplicity rule -------------------------------------------------------------------------


def test_step_down_maxt_by_hand() -> None:
    # three rows, four permutations; row 0 is large, rows 1 and 2 moderate
    observed = np.array([0.9, 0.62, 0.60])
    null = np.array([[0.50, 0.55, 0.48, 0.52],
                     [0.61, 0.50, 0.49, 0.63],
                     [0.58, 0.65, 0.47, 0.51]])
    adjusted = step_down_maxt(observed, null)
    # row 0: max over all rows per permutation = (.61, .65, .49, .63): none >= .9 -> 1/5
    # row 1: max over rows {1, 2} = (.61, .65, .49, .63): two >= .62 -> 3/5
    # row 2: row 2 alone = (.58, .65, .47, .51): one >= .60 -> 2/5, raised to row 1's 3/5 (monotone)
    assert adjusted == pytest.approx([0.2, 0.6, 0.6])
    # per row, unadjusted, row 2 would be 2/5: the adjustment is what the maximum adds
    assert ChanceTest(0.60, tuple(null[2])).p_value == pytest.approx(0.4)


def test_a_nan_null_value_counts_against_the_row() -> None:
    t = ChanceTest(0.7, (0.5, float("nan"), 0.6))
    assert t.p_value == pytest.approx(2 / 4)
    assert step_down_maxt(np.array([0.7]), np.array([[0.5, np.nan, 0.6]]))[0] == pytest.approx(2 / 4)


def test_decodable_is_the_test_s_verdict_never_the_interval_s() -> None:
    """The audit's L1/last: 0.517 [0.510, 0.524] with p = 0.25 is not decodable (mutation caught: reading
    `decodable` off the interval's low end, as before)."""
    narrow = Estimate(0.517, (0.510, 0.524), 1152)
    null = tuple(np.linspace(0.46, 0.55, 99))
    row = SweepRow(1, 1, "last", narrow, narrow, None, Selectivity.empty("none"), (), 1.0, False,
                   chance=ChanceTest(0.517, null))
    (row,) = adjust([row])
    assert row.chance.p_value > 0.05 and row.decodable is False
    text = position_sentence("resolved", "last", [row], "no controls")
    assert "is not decodable at any layer" in text and "is decodable from" not in text
    untested = position_sentence("resolved", "last", [SweepRow(1, 1, "last", narrow, narrow, None,
                                                               Selectivity.empty("none"), (), 1.0, False)], None)
    assert "not tested against chance" in untested and "decodable from" not in untested


# -- on a sweep ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def planted_sweep(tmp_path_factory: pytest.TempPathFactory):
    rows = reference_rows(48, seed=5)
    y = np.array([r["resolved"] for r in rows], dtype=int)
    acts, _ = planted_acts(y, 4, 1, 24, signal_layers=[2], strength=1.5, seed=9)
    cs = load_captures([write_capture(tmp_path_factory.mktemp("chance") / "acts", acts, rows)])
    return cs, labels(cs, "resolved")


def test_the_planted_layer_is_decodable_and_the_others_are_not(planted_sweep) -> None:
    cs, ls = planted_sweep
    res = sweep(cs, ls, SweepConfig(**FAST))
    verdicts = {r.layer: r.decodable for r in res.rows}
    assert verdicts == {0: False, 1: False, 2: True, 3: False}
    planted = res.rows[2]
    assert planted.chance.p_adjusted <= 0.05 and planted.chance.permutations == 99
    # the observed statistic is the row's AUROC, fitted in the permutations' batch
    assert planted.chance.observed == pytest.approx(planted.auroc.value, abs=1e-3)
    js = res.to_json()
    assert js["chance_test"]["permuted"] == FLIP and js["chance_test"]["rows_tested"] == 4
    assert js["rows"][2]["chance_test"]["decodable"] is True and js["rows"][0]["chance_test"]["decodable"] is False
    assert "'resolved' is decodable from L2" in sweep_paragraph(res)
    md = sweep_markdown(res)
    assert "| chance p (adjusted) |" in md and "**decodable**" in md and "expected held-out AUROC" in md
    off = sweep(cs, ls, SweepConfig(**FAST, chance_permutations=0))
    assert all(r.chance is None and r.decodable is None for r in off.rows) and off.to_json()["chance_test"] is None
    assert "decodable from" not in sweep_paragraph(off) and "not tested against chance" in sweep_paragraph(off)


def test_a_label_nothing_carries_is_not_called_decodable(tmp_path: Path) -> None:
    rows = reference_rows(48, seed=6)
    rng = np.random.default_rng(0)
    acts = rng.standard_normal((len(rows), 3, 1, 24)).astype(np.float16)
    cs = load_captures([write_capture(tmp_path / "acts", acts, rows)])
    res = sweep(cs, labels(cs, "resolved"), SweepConfig(**FAST))
    assert not any(r.decodable for r in res.rows)
    assert all(r.chance.p_adjusted >= r.chance.p_value for r in res.rows)  # adjusted never below the row's p


# -- the batched primal solver --------------------------------------------------------------------


@pytest.mark.parametrize("budget", [multilabel.PRIMAL_Q_BYTES, 0])  # shared outer products, or one product per label
def test_many_labels_in_the_primal_solve_the_same_problem_as_one_at_a_time(monkeypatch, budget: int) -> None:
    monkeypatch.setattr(multilabel, "PRIMAL_Q_BYTES", budget)
    rng = np.random.default_rng(2)
    Z = rng.standard_normal((300, 20))
    Y = rng.integers(0, 2, (300, 5)).astype(float)
    Y[:, 0] = (Z[:, 0] > 0)  # separable along one axis: many Newton steps, a saturated fit
    W, b, steps = primal_logistic_many(Z, Y, 1.0, tol=1e-12)
    for j in range(5):
        w1, b1, it = primal_logistic(Z, Y[:, j], 1.0, tol=1e-12)
        assert np.abs(Z @ (W[:, j] - w1) + b[j] - b1).max() < 1e-5
        assert steps[j] == it  # the same Newton iterates, label by label
    warm = primal_logistic_many(Z, Y, 1.0, W, b, tol=1e-12)[2]
    assert (warm <= 1).all()  # started at the optimum, every label stops at once


def test_batched_chance_labels_score_like_one_label_at_a_time(rows) -> None:
    y = np.array([r["resolved"] for r in rows], dtype=np.int8)
    fam = np.array([r["family_id"] for r in rows], dtype=object)
    X = planted_acts(y, 1, 1, 16, signal_layers=[0], strength=2.0, seed=4)[0][:, 0, 0].astype(np.float32)
    folds = family_folds(fam, 5, 1, y)
    ys = {"chance:observed": y, **{f"chance:{i:03d}": p for i, p in enumerate(chance_labels(y, fam, folds, 6, 1))}}
    one = cv_scores(X, LogisticFitter(), folds, {f"one:{k}": v for k, v in ys.items()}, key=0)  # m >= d: the primal
    many = cv_scores(X, LogisticFitter(), folds, ys, key=0)
    for name in ys:
        assert np.abs(one.oof[f"one:{name}"] - many.oof[name]).max() < 1e-5 * max(1.0, np.abs(many.oof[name]).mean())
