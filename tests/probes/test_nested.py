"""Nested selection never looks at the held-out fold."""

from __future__ import annotations

import numpy as np

from evprobe.core.bootstrap import FamilyBootstrap
from evprobe.probes.nested import nested_estimate, nested_select


def _setup(seed: int = 0):
    rng = np.random.default_rng(seed)
    n, K, G = 120, 4, 3
    folds = np.repeat(np.arange(K), n // K)
    fams = np.array([f"f{i // 4:02d}" for i in range(n)])
    y = np.tile([0, 1], n // 2)
    inner = rng.standard_normal((G, K, n))
    inner[1] += 1.5 * y  # candidate 1 separates on inner folds
    for k in range(K):
        inner[:, k, folds == k] = np.nan  # the engine never scores fold k for outer fold k
    oof = rng.standard_normal((G, n)) + 2.0 * y * (np.arange(G)[:, None] == 1)
    return n, K, folds, fams, y, inner, oof


def test_selection_uses_training_folds_only() -> None:
    n, K, folds, fams, y, inner, oof = _setup()
    chosen, table = nested_select(inner, y, folds)
    assert chosen.tolist() == [1] * K
    assert np.isfinite(table).all()
    # changing the labels of fold 0 changes nothing about fold 0's choice
    y2 = y.copy()
    y2[folds == 0] = 1 - y2[folds == 0]
    assert nested_select(inner, y2, folds)[0][0] == chosen[0]
    np.testing.assert_array_equal(nested_select(inner, y2, folds)[1][:, 0], table[:, 0])


def test_nested_estimate_reports_outer_scores_of_the_chosen_candidate() -> None:
    n, K, folds, fams, y, inner, oof = _setup(1)
    boot = FamilyBootstrap(sorted(set(fams)), 300, seed=0)
    res = nested_estimate(oof, inner, y, folds, fams, boot, [(0, "last"), (5, "last"), (9, "text_mean")])
    assert (res.layer, res.position) == (5, "last") and len(res.choices) == K
    assert res.auroc.value > 0.85 and res.auroc.n == n
    # a candidate never scored (degenerate) is never chosen
    inner[1] = np.nan
    chosen, _ = nested_select(inner, y, folds)
    assert 1 not in chosen.tolist()
    inner[:] = np.nan
    assert nested_estimate(oof, inner, y, folds, fams, boot, [(0, "a"), (1, "a"), (2, "a")]) is None
