"""Best layer chosen on validation folds only (nested cross-validation).

TRAPS reports, per transfer pair, the maximum AUROC over layers, so the layer is chosen with
the target labels and the reported number is biased upward. Here, for each outer fold k (held
out, never looked at while choosing):

1. every candidate (layer, position) g is scored by inner cross-validation on the training
   families only: the inner folds are the other outer folds j != k, and the inner fit for
   validation fold j trains on all folds except k and j. Those K(K-1)/2 training sets
   ("all but {k, j}") serve both outer folds k and j, so the engine fits each once;
2. g_k = the candidate with the highest pooled inner AUROC (ties: the earliest layer, then the
   first position; candidates with no inner AUROC, e.g. degenerate ones, are never chosen);
3. fold k's rows are scored by the outer fit at g_k (trained on all folds but k).

The outer scores of all folds are pooled into one AUROC with the family-bootstrap interval.
The most frequent g_k is reported as "the" best layer; the per-fold choices are listed, since a
nested estimate describes the selection procedure, not one layer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evprobe.core.bootstrap import Estimate, FamilyBootstrap
from evprobe.core.json_types import JsonObject
from evprobe.probes.metrics import accuracy_estimate, auroc, auroc_estimate

METHOD = (
    "nested grouped CV: per outer fold, the (layer, position) with the best pooled inner-CV AUROC on the "
    "training families only (inner folds = the other outer folds); that fold is then scored by the outer fit "
    "at the chosen candidate; outer scores pooled"
)


@dataclass(frozen=True)
class FoldChoice:
    fold: int
    layer: int
    position: str
    inner_auroc: float

    def to_json(self) -> JsonObject:
        return {"fold": self.fold, "layer": self.layer, "position": self.position, "inner_auroc": self.inner_auroc}


@dataclass(frozen=True)
class NestedResult:
    layer: int  # the most frequent choice
    position: str
    auroc: Estimate  # pooled outer test AUROC
    accuracy: Estimate
    choices: tuple[FoldChoice, ...]
    method: str = METHOD
    permutation: Any = None  # probes.inference.PermutationTest of `auroc`, when one was run
    # (n,) the pooled outer scores `auroc` is computed on (NaN outside the scored rows); not in JSON
    pooled: np.ndarray | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> JsonObject:
        return {
            "layer": self.layer,
            "position": self.position,
            "auroc": self.auroc.value,
            "ci": list(self.auroc.ci),
            "n": self.auroc.n,
            "n_families": self.auroc.n_families,  # the clusters its intervals were computed on
            "accuracy": self.accuracy.value,
            "accuracy_ci": list(self.accuracy.ci),
            "choices": [c.to_json() for c in self.choices],
            "method": self.method,
            "permutation_test": None if self.permutation is None else self.permutation.to_json(),
        }


def nested_select(
    inner: np.ndarray, y: np.ndarray, folds: np.ndarray, eval_mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Choose a candidate per outer fold from inner scores.

    inner: (G, K, n) with inner[g, k, i] the inner-validation score of row i for outer fold k
    (NaN on fold k's rows: they are never read). eval_mask (n,) limits the validation rows
    (a transfer's training condition). Returns (chosen (K,) candidate indices, -1 where no
    candidate has an inner AUROC; inner_auroc (G, K)).
    """
    G, K, _ = inner.shape
    ok_rows = np.ones(inner.shape[2], dtype=bool) if eval_mask is None else np.asarray(eval_mask, dtype=bool)
    table = np.full((G, K), np.nan)
    for k in range(K):
        rows = ok_rows & (folds != k)  # training families of outer fold k only
        for g in range(G):
            s = inner[g, k, rows]
            fine = np.isfinite(s)
            if fine.any():
                table[g, k] = auroc(s[fine], y[rows][fine])
    chosen = np.full(K, -1, dtype=np.int64)
    for k in range(K):
        col = table[:, k]
        if np.isfinite(col).any():
            chosen[k] = int(np.nanargmax(col))  # first maximum: earliest candidate on ties
    return chosen, table


def nested_estimate(
    oof: np.ndarray,
    inner: np.ndarray,
    y: np.ndarray,
    folds: np.ndarray,
    families: Sequence[str],
    boot: FamilyBootstrap,
    candidates: Sequence[tuple[int, str]],
    eval_mask: np.ndarray | None = None,
    test_mask: np.ndarray | None = None,
    test_oof: np.ndarray | None = None,
    test_y: np.ndarray | None = None,
) -> NestedResult | None:
    """Nested estimate from per-candidate outer scores `oof` (G, n) and inner scores (G, K, n).

    `candidates[g]` = (layer, position). For a transfer, `test_oof` (G, n) holds the scores of
    the test condition's rows (default: `oof`), `test_mask` (n,) selects them and `test_y` their
    labels. Returns None when no fold has a usable candidate.
    """
    chosen, table = nested_select(inner, y, folds, eval_mask)
    if (chosen < 0).all():
        return None
    scores_by_g = oof if test_oof is None else test_oof
    labels = y if test_y is None else test_y
    rows_ok = np.ones(len(labels), dtype=bool) if test_mask is None else np.asarray(test_mask, dtype=bool)
    pooled = np.full(len(labels), np.nan)
    choices = []
    for k, g in enumerate(chosen):
        if g < 0:
            continue
        held = (folds == k) & rows_ok
        pooled[held] = scores_by_g[g, held]
        layer, position = candidates[g]
        choices.append(FoldChoice(k, int(layer), str(position), float(table[g, k])))
    fam = np.asarray(families, dtype=object)
    auc = auroc_estimate(pooled[rows_ok], labels[rows_ok], fam[rows_ok], boot)
    correct = np.where(np.isfinite(pooled), ((pooled > 0) == labels.astype(bool)).astype(float), np.nan)
    acc = accuracy_estimate(correct[rows_ok], fam[rows_ok], boot)
    (layer, position), _ = Counter((c.layer, c.position) for c in choices).most_common(1)[0]
    return NestedResult(int(layer), str(position), auc, acc, tuple(choices), pooled=np.where(rows_ok, pooled, np.nan))
