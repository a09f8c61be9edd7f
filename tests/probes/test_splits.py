"""Family folds: whole families on one side, deterministic, stratified; ungrouped splits leak."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.model_selection import KFold

from evprobe.core.bootstrap import FamilyBootstrap
from evprobe.probes.engine import LogisticFitter, cv_scores
from evprobe.probes.metrics import auroc, auroc_estimate
from evprobe.probes.splits import LeakError, check_grouped, family_folds, fold_pairs


def test_family_folds_keep_families_together_and_are_deterministic(rows) -> None:
    fams = [r["family_id"] for r in rows]
    y = np.array([r["resolved"] for r in rows], dtype=int)
    folds = family_folds(fams, 5, seed=7, y=y)
    assert np.array_equal(folds, family_folds(fams, 5, seed=7, y=y))
    assert not np.array_equal(folds, family_folds(fams, 5, seed=8, y=y))
    for f in set(fams):
        assert len({folds[i] for i, g in enumerate(fams) if g == f}) == 1  # both pairs of a family together
    for k in range(5):
        check_grouped(fams, folds != k, folds == k)
        assert abs((folds == k).sum() - len(fams) / 5) <= 4  # one family of 4 rows at most
    # a family-constant label: both classes in every fold
    sliding = np.array([r["system"] == "sliding" for r in rows], dtype=int)
    folds = family_folds(fams, 5, seed=1, y=sliding)
    assert all(0 < sliding[folds == k].sum() < (folds == k).sum() for k in range(5))
    with pytest.raises(ValueError, match="--folds"):
        family_folds(fams[:8], 5)
    assert fold_pairs(3) == [(0, 1), (0, 2), (1, 2)]


def test_check_grouped_names_a_leaking_family() -> None:
    fams = ["a", "a", "b", "b"]
    with pytest.raises(LeakError, match="'a'"):
        check_grouped(fams, np.array([0, 2]), np.array([1, 3]))


def test_ungrouped_splits_leak_and_grouped_ones_do_not() -> None:
    """Each family has its own offset and a family-level label, and nothing else carries the
    label. Row-level folds put a family on both sides and the probe recognises the family;
    family folds leave it at chance."""
    rng = np.random.default_rng(0)
    n_fam, per = 60, 4
    fams = np.repeat([f"fam-{i:02d}" for i in range(n_fam)], per)
    offsets = rng.standard_normal((n_fam, 40)) * 3.0
    X = (np.repeat(offsets, per, axis=0) + rng.standard_normal((n_fam * per, 40))).astype(np.float32)
    y = np.repeat(rng.permutation(np.arange(n_fam) % 2), per)
    boot = FamilyBootstrap(sorted(set(fams)), 500, seed=0)
    ungrouped = np.empty(len(y), dtype=np.int64)
    for k, (_, test) in enumerate(KFold(5, shuffle=True, random_state=0).split(X)):
        ungrouped[test] = k
    leaky = cv_scores(X, LogisticFitter(), ungrouped, {"y": y}).oof["y"]
    grouped_folds = family_folds(fams, 5, seed=0, y=y)
    grouped = cv_scores(X, LogisticFitter(), grouped_folds, {"y": y}).oof["y"]
    with pytest.raises(LeakError):
        check_grouped(fams, ungrouped != 0, ungrouped == 0)
    assert auroc(leaky, y) > 0.9
    est = auroc_estimate(grouped, y, fams, boot)
    assert est.ci[0] < 0.5 < est.ci[1] and abs(est.value - 0.5) < 0.15
