"""Cross-validation folds that keep every family on one side.

Items of a family share worlds, images and thresholds, and both members of each image pair and
threshold pair belong to it; a split that puts some of a family's items in training and others
in test lets a probe recognise the family instead of reading the label (a test shows ungrouped
splits leaking). So folds are made of whole families.

`family_folds` is deterministic: families are sorted, shuffled with
`np.random.default_rng(seed)`, then dealt round-robin to folds within strata. The stratum of a
family is its share of positive rows, so a label that is constant within families (system,
initial property) gets both classes in every fold, and a balanced label (resolved: 2 + 2 in
every family) deals families evenly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DEFAULT_FOLDS = 5


class LeakError(ValueError):
    """A family appears on both sides of a split."""


def family_folds(
    families: Sequence[str], n_splits: int = DEFAULT_FOLDS, seed: int = 0, y: np.ndarray | None = None
) -> np.ndarray:
    """Fold number (0..n_splits-1) of each row; rows of one family share a fold."""
    fam = np.asarray(families, dtype=object)
    unique, inverse = np.unique(fam, return_inverse=True)
    if n_splits < 2:
        raise ValueError(f"cross-validation needs at least 2 folds, got {n_splits}")
    if len(unique) < n_splits:
        raise ValueError(f"only {len(unique)} families for {n_splits} folds; use --folds {max(len(unique), 2)} "
                         "or more families")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(unique))  # family f's place in the deal
    if y is None:
        strata = np.zeros(len(unique))
    else:
        share = np.bincount(inverse, weights=np.asarray(y, dtype=float), minlength=len(unique))
        strata = np.round(share / np.bincount(inverse, minlength=len(unique)), 6)
    fold_of_family = np.empty(len(unique), dtype=np.int64)
    dealt = 0
    for stratum in np.unique(strata):
        members = np.flatnonzero(strata == stratum)
        members = members[np.argsort(order[members])]
        # continue the deal where the last stratum stopped so fold sizes stay even overall
        fold_of_family[members] = (dealt + np.arange(len(members))) % n_splits
        dealt += len(members)
    return fold_of_family[inverse]


def check_grouped(families: Sequence[str], train: np.ndarray, test: np.ndarray) -> None:
    """Raise LeakError naming a family that has rows in both `train` and `test` (index arrays or
    boolean masks over `families`)."""
    fam = np.asarray(families, dtype=object)
    shared = set(fam[train]) & set(fam[test])
    if shared:
        raise LeakError(f"{len(shared)} families on both sides of the split, e.g. {sorted(shared)[0]!r}; "
                        "split by family (probes.splits.family_folds)")


def fold_pairs(n_splits: int) -> list[tuple[int, int]]:
    """(k, j), k < j: the held-out fold pairs whose complements are the inner training sets of
    nested cross-validation (see probes.nested)."""
    return [(k, j) for k in range(n_splits) for j in range(k + 1, n_splits)]
