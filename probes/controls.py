"""Controls reported beside every sweep.

1. Shuffled labels (selectivity, Hewitt and Liang 2019): the labels are permuted within each
   family (seeded), and the same probe, folds and scoring run on them. A probe that decodes
   real labels far better than shuffled ones is reading the representation, not its own
   capacity to fit noise; selectivity = AUROC - control AUROC. The permutation is balanced: it
   keeps the chance share of positives in place (a 2 + 2 family keeps exactly one positive),
   so the control labels are uncorrelated with the real ones on the sample rather than only in
   expectation. A label that is constant within every family (system, initial property) is
   unchanged by a within-family permutation, so for such labels the family labels are permuted
   across families instead, balanced the same way (`control_kind` says which).

2. Input-only baselines: a logistic model (C = 1) on the one-hot initial history alone, on the
   one-hot threshold level alone, and on the one-hot (history, threshold level) pair, with the
   same grouped folds and scoring. By construction sufficiency is the exclusive-or of history
   and threshold level within a family (each history is answerable at exactly one of the two
   thresholds), and which of the two XORs it is depends on the family's physics. Pooled over
   families every (history, level) cell is half resolved, so all three baselines sit at 0.5:
   a probe that beats them reads a conjunction of the measurement, the threshold and the
   family's values that the model computed; the prompt's surface variables do not give it.

3. Within-family variance: sum over families of the squared distances of a family's rows from
   their family mean, divided by the total sum of squares about the grand mean, per layer and
   position. When it is ~0 (< 1e-6) the model's state at that position is the same for every
   decision of a family (it ignores the measurement and the threshold, or the position sees
   neither, as image tokens before the question do), so every grouped probe of a label that
   varies within families scores exactly 0.5 by construction. The sweep then says so, loudly,
   instead of printing a row of chance values. The identical-pairs count does the same per
   pair: image pairs or threshold pairs whose two rows are bit-identical.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression

DEGENERATE_RATIO = 1e-6
BASELINES = {
    "history": ("history",),
    "threshold": ("threshold_level",),
    "history_threshold": ("history", "threshold_level"),
}


def _balanced_permutation(y: np.ndarray, rng: np.random.Generator, carry: list[float]) -> np.ndarray:
    """A permutation of one group's 0/1 labels whose overlap with the originals is as close to
    chance as integers allow.

    With k positives among m rows, a uniform permutation keeps on average k^2/m positives on
    positive rows; here exactly floor(k^2/m) or that plus one are kept, the choice carried over
    groups (`carry`) so the total matches chance. Within the group the kept positives and the
    moved ones are drawn uniformly. A plain uniform permutation of a 2 + 2 family reproduces the
    label or its negation one time in three, leaving a luck-dependent share of the real signal
    in the control; this one never does (it keeps exactly one of the two positives).
    """
    m, k = len(y), int(y.sum())
    if k in (0, m):
        return y.copy()
    target = k * k / m
    keep = int(np.floor(target))
    carry[0] += target - keep
    if carry[0] >= 0.5:
        keep += 1
        carry[0] -= 1.0
    keep = int(np.clip(keep, max(0, 2 * k - m), k))
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    new_pos = np.concatenate([rng.choice(pos, keep, replace=False), rng.choice(neg, k - keep, replace=False)])
    out = np.zeros_like(y)
    out[new_pos] = 1
    return out


def control_labels(y: np.ndarray, families: Sequence[str], seed: int) -> tuple[np.ndarray, str]:
    """Labels permuted within families (or, for a family-constant label, across families).

    The permutations are drawn uniformly among those that keep the chance share of positives
    in place (`_balanced_permutation`): the shuffled labels are uncorrelated with the real
    ones on the sample, whatever the luck of the draw. Families are visited in a seeded random
    order. Returns (shuffled y (n,), kind) with kind "within-family" or "across-families".
    """
    y = np.asarray(y).astype(np.int8)
    fam = np.asarray(families, dtype=object)
    unique, inverse = np.unique(fam, return_inverse=True)
    rng = np.random.default_rng([seed, 1])  # a stream of its own, apart from the folds
    members = [np.flatnonzero(inverse == f) for f in range(len(unique))]
    varies = any(y[idx].min() != y[idx].max() for idx in members)
    carry = [float(rng.random()) - 0.5]  # random start of the rounding carry
    if varies:
        out = y.copy()
        for f in rng.permutation(len(unique)):
            out[members[f]] = _balanced_permutation(y[members[f]], rng, carry)
        return out, "within-family"
    family_label = np.array([y[idx[0]] for idx in members], dtype=np.int8)
    return _balanced_permutation(family_label, rng, carry)[inverse], "across-families"


def one_hot(values: Sequence[Sequence[Any]]) -> np.ndarray:
    """(n, categories) one-hot of each row's tuple of values (None is a category of its own)."""
    keys = [tuple(str(v) for v in row) for row in values]
    cats = {k: i for i, k in enumerate(sorted(set(keys)))}
    out = np.zeros((len(keys), len(cats)))
    out[np.arange(len(keys)), [cats[k] for k in keys]] = 1.0
    return out


def baseline_scores(features: np.ndarray, y: np.ndarray, folds: np.ndarray, C: float = 1.0) -> np.ndarray:
    """Grouped out-of-fold decision values of a logistic model (C) on `features` (n, k)."""
    out = np.full(len(y), np.nan)
    for k in range(int(folds.max()) + 1):
        held = folds == k
        train = ~held
        if y[train].min() == y[train].max():
            continue
        model = LogisticRegression(C=C).fit(features[train], y[train])
        out[held] = model.decision_function(features[held])
    return out


def within_family_variance(X: np.ndarray, families: Sequence[str]) -> float:
    """Pooled within-family sum of squares / total sum of squares of rows X (n, d).

    Computed in float64: sums of float32 values are exact there, so rows identical within a
    family give exactly 0. All rows identical (total 0) also gives 0.
    """
    X = np.asarray(X, dtype=np.float64)
    _, inverse = np.unique(np.asarray(families, dtype=object), return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(inverse[order]) != 0])
    counts = np.bincount(inverse).astype(np.float64)
    means = np.add.reduceat(X[order], starts, axis=0) / counts[:, None]  # (families, d)
    within = float(np.sum((X - means[inverse]) ** 2))
    total = float(np.sum((X - X.mean(axis=0)) ** 2))
    return within / total if total > 0 else 0.0


def identical_pairs(X: np.ndarray, pair_ids: Sequence[Any]) -> tuple[int, int]:
    """(pairs whose two rows of X are bit-identical, pairs with two rows) for one pair field."""
    groups: dict[Any, list[int]] = {}
    for i, key in enumerate(pair_ids):
        if key is not None:
            groups.setdefault(key, []).append(i)
    pairs = [g for g in groups.values() if len(g) == 2]
    same = sum(bool(np.array_equal(X[a], X[b])) for a, b in pairs)
    return same, len(pairs)
