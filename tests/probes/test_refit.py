"""Refit inference (probes.refit, probes.inference): weighted fits, resamples, intervals, the test."""

from __future__ import annotations

import numpy as np
import pytest

from evprobe.core.bootstrap import FamilyBootstrap
from evprobe.probes.solvers import kernel_logistic, primal_logistic
from evprobe.core.proportion import clopper_pearson
from evprobe.probes.inference import permutation_test, refit_interval
from evprobe.probes.metrics import ClusterReading, auroc_estimate, auroc_reading
from evprobe.probes.refit import Design, Resample, draw_resamples, refit_bootstrap, refit_one


def families_and_labels(n_families: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    fam = np.repeat([f"f{i:03d}" for i in range(n_families)], 4).astype(object)
    y = np.tile([1, 0, 0, 1], n_families).astype(np.int8)
    flip = np.repeat(rng.integers(2, size=n_families), 4)
    return fam, np.where(flip == 1, 1 - y, y).astype(np.int8)


def data(n_families: int, d: int, strength: float, seed: int = 0, layers: int = 2) -> tuple:
    fam, y = families_and_labels(n_families, seed)
    rng = np.random.default_rng(seed + 1)
    offset = np.repeat(rng.standard_normal((n_families, d)), 4, axis=0)
    u = np.ones(d) / np.sqrt(d)
    X = np.stack([offset + rng.standard_normal((len(y), d)) + strength * (y[:, None] - 0.5) * 2 * u * (l >= 1)
                  for l in range(layers)], axis=1).astype(np.float32)  # (n, layers, d)
    return X, y, fam


@pytest.mark.parametrize("solver", ["kernel", "primal"])
def test_weights_equal_duplicated_rows(solver: str) -> None:
    rng = np.random.default_rng(3)
    Z = rng.standard_normal((50, 20 if solver == "primal" else 80))
    y = (rng.random(50) < 0.5).astype(float)
    w = rng.integers(1, 4, 50)
    dup = np.repeat(np.arange(50), w)
    if solver == "kernel":
        a, b, _ = kernel_logistic(Z @ Z.T, y, 1.0, weight=w)
        a2, b2, _ = kernel_logistic((Z @ Z.T)[np.ix_(dup, dup)], y[dup], 1.0)
        m, m2 = Z @ Z.T @ a + b, (Z @ Z[dup].T) @ a2 + b2
    else:
        v, b, _ = primal_logistic(Z, y, 1.0, weight=w)
        v2, b2, _ = primal_logistic(Z[dup], y[dup], 1.0)
        m, m2 = Z @ v + b, Z @ v2 + b2
    np.testing.assert_allclose(m, m2, atol=1e-7)


def test_kernel_and_primal_designs_score_alike() -> None:
    rng = np.random.default_rng(4)
    X = rng.standard_normal((60, 30)).astype(np.float32)
    y = (rng.random(60) < 0.5).astype(np.float64)
    primal = Design.of(X)  # d < n: the rows themselves
    assert primal.Z is not None and primal.gram is None
    kernel = Design(primal.Z @ primal.Z.T, None)
    rows, train = np.arange(60), np.arange(60) < 45
    w = np.ones(45)
    s1, _ = primal.fit_score(rows, train, y[train], w, 1.0, None)
    s2, _ = kernel.fit_score(rows, train, y[train], w, 1.0, None)
    np.testing.assert_allclose(s1, s2, atol=1e-6)


def test_resamples_keep_copies_of_a_family_in_one_fold() -> None:
    fam, y = families_and_labels(20)
    counts = FamilyBootstrap(sorted(set(fam)), 30, 7).counts
    for b, res in enumerate(draw_resamples(y, fam, 30, 7, 5, 0)):
        drawn = {f: c for f, c in zip(sorted(set(fam)), counts[b]) if c > 0}
        assert sorted(set(fam[res.rows])) == sorted(drawn)  # every drawn family, once, with its weight
        for f, c in drawn.items():
            rows = fam[res.rows] == f
            assert rows.sum() == 4 and (res.weight[rows] == c).all()
            assert len(set(res.folds[rows])) == 1  # copies are never on both sides of a split


def test_identity_resample_reproduces_a_plain_cross_validation() -> None:
    # weight 1 everywhere and the original folds: the refit machinery is then ordinary grouped CV
    X, y, fam = data(20, 40, 1.5)
    from evprobe.probes.splits import family_folds

    folds = family_folds(fam, 5, 0, y)
    design = Design.of(X[:, 1])
    oof, inner_auc = refit_one(design, y, Resample(np.arange(len(y)), np.ones(len(y)), folds), 5, 1.0, True)
    assert np.isfinite(oof).all() and np.isfinite(inner_auc).all()
    for k in range(5):  # each held-out fold is scored by a fit that never saw it
        train = folds != k
        s, _ = design.fit_score(np.arange(len(y)), train, y[train].astype(float), np.ones(train.sum()), 1.0, None)
        np.testing.assert_allclose(oof[folds == k], s[folds == k], atol=1e-6)


def test_refits_spread_wider_than_fixed_models_on_null_data() -> None:
    """The defect the refits fix: with the fold models held fixed, the bootstrap misses the
    training variance; refitting shows it. On null data the refit spread must exceed it."""
    X, y, fam = data(30, 64, 0.0, seed=5)
    draws = refit_bootstrap(lambda li: X[:, li][:, None, :], [0, 1], 1, y, fam, n_splits=5, n_refits=40, seed=1)
    from evprobe.probes.engine import LogisticFitter, cv_scores
    from evprobe.probes.splits import family_folds

    folds = family_folds(fam, 5, 0, y)
    oof = cv_scores(X[:, 1], LogisticFitter(), folds, {"y": y}).oof["y"]
    boot = FamilyBootstrap(sorted(set(fam)), 400, 1)
    fixed = auroc_estimate(oof, y, fam, boot)
    fixed_half = (fixed.ci[1] - fixed.ci[0]) / 2
    refit_sd = np.nanstd(draws.per_candidate[:, 1], ddof=1)
    assert 1.96 * refit_sd > 1.15 * fixed_half
    assert draws.nested is not None and np.isfinite(draws.nested).all()


def test_refit_interval_is_centred_on_the_estimate_and_never_a_point() -> None:
    draws = np.array([0.50, 0.55, 0.60, 0.65, 0.70])
    mid = ClusterReading((0.55, 0.65), 30.0)  # a cluster interval inside the refits' one
    lo, hi = refit_interval(0.6, draws, n_families=30, reading=mid)  # centred on 0.6, not on the draws' mean
    assert lo < 0.6 < hi and pytest.approx((lo + hi) / 2) == 0.6
    from scipy import stats

    assert pytest.approx(hi - 0.6) == stats.t.ppf(0.975, 4) * draws.std(ddof=1)
    lo, hi = refit_interval(0.7, draws, n_families=30, reading=ClusterReading((0.65, 0.75), 30.0))
    assert pytest.approx((lo + hi) / 2) == 0.7  # the refits give the spread, the estimate the centre
    fam, y = families_and_labels(144)
    perfect = auroc_reading(y.astype(float), y, np.unique(fam, return_inverse=True)[1])
    lo, hi = refit_interval(1.0, np.ones(50), n_families=144, reading=perfect)  # every refit separates perfectly
    assert (lo, hi) == pytest.approx(clopper_pearson(144, 144), abs=1e-12) and lo < 0.98 and hi == 1.0
    assert refit_interval(0.99, np.array([0.9, 1.0, 1.0]), 30, reading=mid)[1] == 1.0  # clipped to [0, 1]
    assert refit_interval(None, draws, 30, reading=mid) == (None, None)


def test_permutation_test_is_exact_on_null_data_and_finds_a_signal() -> None:
    """A cheap statistic stands in for the pipeline: the machinery's size is what is tested."""
    def mean_gap(x: np.ndarray) -> callable:
        return lambda labels: float(x[labels == 1].mean() - x[labels == 0].mean())

    fam, y = families_and_labels(15)
    rejections = 0
    for seed in range(200):
        x = np.random.default_rng(seed).standard_normal(len(y))
        test = permutation_test(mean_gap(x)(y), mean_gap(x), y, fam, 19, seed)
        rejections += test.p_value <= 0.05
    assert 3 <= rejections <= 20  # 5% of 200 = 10; binomial 99.9% range
    x = np.random.default_rng(0).standard_normal(len(y)) + 1.5 * y
    assert permutation_test(mean_gap(x)(y), mean_gap(x), y, fam, 19, 0).p_value == 0.05


def test_sweep_prints_refit_intervals_and_the_permutation_test(tmp_path) -> None:
    from evprobe.probes.captures import load_captures
    from evprobe.probes.label_sets import labels
    from evprobe.probes.report import sweep_markdown
    from evprobe.probes.sweep import FIXED_MODEL_WARNING, SweepConfig, sweep
    from evprobe.probes.synthetic import planted_acts, reference_rows, write_capture

    rows = reference_rows(20, seed=2)
    y = np.array([r["resolved"] for r in rows], dtype=int)
    acts = planted_acts(y, 3, 1, 40, signal_layers=[1, 2], strength=2.5, seed=3)[0]
    cs = load_captures([write_capture(tmp_path / "cap", acts, rows)])
    ls = labels(cs, "resolved")
    cfg = {"n_boot": 300, "control_tasks": 0}
    on = sweep(cs, ls, SweepConfig(refits=20, permutations=19, **cfg))
    off = sweep(cs, ls, SweepConfig(refits=0, **cfg))
    assert on.intervals is not None and on.intervals.n_refits == 20
    assert not any(w.startswith("INTERVALS HOLD") for w in on.warnings)
    assert any(w == FIXED_MODEL_WARNING.format(why="refits are off (--refits 0)") for w in off.warnings)
    for a, b in zip(on.rows, off.rows, strict=True):  # same estimates, other intervals
        assert a.auroc.value == b.auroc.value and a.auroc.ci != b.auroc.ci
    assert on.best is not None and on.best.permutation is not None
    assert on.best.permutation.p_value == 1 / 20  # a strong planted signal beats every permutation
    assert max(on.best.permutation.null) < 0.75
    js = on.to_json()
    assert js["intervals"]["refits"] == 20 and js["best"]["permutation_test"]["permutations"] == 19
    md = sweep_markdown(on)
    assert "permutation p = 0.05 (19 relabellings under chance" in md
    assert "refit family bootstrap" in md


def test_worker_processes_threads_and_one_job_agree(tmp_path) -> None:
    """The refits give the same numbers in spawned worker processes (reading through a
    BlockReader), in threads and in one job; the reader reads what was written, across two
    captures."""
    from evprobe.probes.blocks import BlockReader
    from evprobe.probes.captures import load_captures
    from evprobe.probes.label_sets import labels
    from evprobe.probes.refit import Replicate, rerun
    from evprobe.probes.synthetic import planted_acts, reference_rows, write_capture

    rows = reference_rows(12, seed=4)
    y = np.array([r["resolved"] for r in rows], dtype=int)
    acts = planted_acts(y, 5, 2, 24, signal_layers=[2], strength=2.0, seed=5)[0]
    cs = load_captures([write_capture(tmp_path / "a", acts[:20], rows[:20]),
                        write_capture(tmp_path / "b", acts[20:], rows[20:])])
    ls = labels(cs, "resolved")
    reader = BlockReader.of(cs, ls.rows, [1, 0])
    for li in range(5):  # against the arrays written, not against another reader
        np.testing.assert_array_equal(reader(li), acts[ls.rows][:, li][:, [1, 0]].astype(np.float32))
    reps = [Replicate(r, ls.y) for r in draw_resamples(ls.y, ls.families, 4, 1, 3, 0)]
    runs = [rerun(reader, list(range(5)), 2, reps, n_splits=3, n_jobs=jobs, processes=proc)
            for jobs, proc in ((1, False), (2, False), (2, True))]
    for other in runs[1:]:
        np.testing.assert_array_equal(runs[0].per_candidate, other.per_candidate)
        np.testing.assert_array_equal(runs[0].nested, other.nested)


def test_a_bootstrap_where_every_resample_agrees_prints_no_point() -> None:
    """Perfect separation: every family resample gives AUROC 1.0. The interval is the exact one on
    the families instead of [1.0, 1.0] (probes.metrics, as refit_interval does)."""
    fam, y = families_and_labels(24)
    boot = FamilyBootstrap(sorted(set(fam)), 300, 0)
    est = auroc_estimate(y.astype(float), y, fam, boot)
    assert est.value == 1.0 and est.ci == pytest.approx(clopper_pearson(24, 24), abs=1e-12) and est.ci[0] < 0.9
