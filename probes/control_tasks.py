"""Control tasks (Hewitt and Liang 2019) and the selectivity they give, on every sweep.

A control task is a random label that is a fixed function of the input's *type*. Here the type
is the cell: (system, initial property, history, threshold level), 24 cells in the benchmark
(`CELL_FIELDS`, a `SweepConfig` setting). Sufficiency (`resolved`) is itself a function of the
cell, so a representation that encodes the cell decodes *every* cell function, sufficiency
included; what is special about sufficiency shows only as selectivity = target AUROC - mean
AUROC of random cell functions fitted and scored the same way.

Choices (the science leaves them open; each is tested):

- Balance: each control labels half of the cells present among the labelled rows 1 (with an odd
  number of cells, floor or ceil at random), the cells drawn uniformly (seeded,
  `np.random.default_rng([seed, 2])`). Balanced by cells, not rows: the control is a function of
  the type, as in Hewitt and Liang; on the benchmark every cell holds the same number of rows
  (24 of 576), so it is balanced by rows as well. AUROC does not depend on the class shares.
- Exclusions: a draw is redrawn when, on the labelled rows, it is constant, equals the target
  label or its negation, or equals (or negates) an accepted control (a logistic probe scores a
  label and its negation alike, so such a pair would count one task twice). Draws stop after
  `200 k` attempts; fewer than k accepted controls (few cells) is said in a warning.
- Cells: a row's cell is the tuple of its index fields (None is a category of its own). A field
  missing from any labelled row's index (a capture written from user arrays) skips the control
  tasks with that reason, loudly (`SweepResult.warnings`); fewer than 4 distinct cells likewise.
- Mean over controls: pair-weighted, i.e. sum over controls of correctly ordered
  (positive, negative) pairs / sum of their pairs (ties count one half). With equal-size cells
  every control has the same number of pairs and this is the plain mean; otherwise controls with
  more pairs weigh more. It is what the bootstrap can compute for every resample at the cost of
  one (B, F) x (F, F) product, which keeps 20 controls x 40 layers cheap.
- Interval: paired. Selectivity on resample b is target AUROC_b - mean control AUROC_b with the
  *same* `FamilyBootstrap` counts (the weighted Mann-Whitney formula of probes.metrics, written
  here per family pair: AUROC_b = c_b^T N c_b / ((c_b . P)(c_b . Q)) with N[f, g] the correctly
  ordered pairs of a positive of family f and a negative of family g, P and Q the positives and
  negatives per family). Pointwise 95% percentile interval; n = scored rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from evprobe.core.bootstrap import Estimate, FamilyBootstrap, percentile_interval

CELL_FIELDS = ("system", "initial_property", "history", "threshold_level")
DEFAULT_CONTROL_TASKS = 20
MIN_CELLS = 4
ATTEMPTS_PER_CONTROL = 200
PREFIX = "control:"  # label names of control tasks in the engine's label dict


@dataclass(frozen=True, eq=False)
class ControlTasks:
    """Control labels on the labelled rows. labels: (k, n) int8; n_cells: distinct cells;
    reason: why there are none (None when k > 0)."""

    labels: np.ndarray
    n_cells: int
    requested: int
    reason: str | None = None

    @property
    def k(self) -> int:
        return int(self.labels.shape[0])

    def names(self) -> list[str]:
        return [f"{PREFIX}{i:02d}" for i in range(self.k)]

    def as_labels(self) -> dict[str, np.ndarray]:
        return dict(zip(self.names(), self.labels, strict=True))


def row_cells(index_rows: Sequence[Mapping[str, Any]], fields: Sequence[str]) -> tuple[np.ndarray | None, str | None]:
    """(cell number of each row (n,), None) or (None, why not): the fields must be in every row."""
    if not fields:
        return None, "no cell fields configured"
    missing = sorted({f for row in index_rows for f in fields if f not in row})
    if missing:
        return None, (f"the capture's index lacks the cell field(s) {', '.join(missing)} (cell = "
                      f"{' x '.join(fields)}), e.g. a capture written from user arrays")
    keys = [tuple(str(row[f]) for f in fields) for row in index_rows]
    _, inverse = np.unique(np.array(["\x1f".join(k) for k in keys], dtype=object), return_inverse=True)
    return inverse.astype(np.int64), None


def draw_control_tasks(cells: np.ndarray, y: np.ndarray, k: int, seed: int) -> ControlTasks:
    """Up to k balanced random cell functions on the rows (see the module docstring)."""
    y = np.asarray(y).astype(np.int8)
    n_cells = int(cells.max()) + 1 if len(cells) else 0
    if k <= 0:
        return ControlTasks(np.zeros((0, len(y)), np.int8), n_cells, k, "control tasks switched off (0 requested)")
    if n_cells < MIN_CELLS:
        return ControlTasks(np.zeros((0, len(y)), np.int8), n_cells, k,
                            f"only {n_cells} distinct cells among the labelled rows (need {MIN_CELLS})")
    rng = np.random.default_rng([seed, 2])  # a stream of its own, apart from folds and shuffles
    seen = {y.tobytes(), (1 - y).tobytes()}
    out: list[np.ndarray] = []
    for _ in range(ATTEMPTS_PER_CONTROL * k):
        if len(out) == k:
            break
        ones = n_cells // 2 + (int(rng.integers(2)) if n_cells % 2 else 0)
        f = np.zeros(n_cells, np.int8)
        f[rng.permutation(n_cells)[:ones]] = 1
        lab = f[cells]
        key = lab.tobytes()
        if lab.min() == lab.max() or key in seen:
            continue
        seen.update((key, (1 - lab).tobytes()))
        out.append(lab)
    labels = np.array(out, dtype=np.int8).reshape(len(out), len(y))
    return ControlTasks(labels, n_cells, k, None if out else "no admissible cell function")


# -- AUROC per resample, by family pairs ------------------------------------------------------


def _pair_counts(scores: np.ndarray, y: np.ndarray, fam: np.ndarray, F: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N (F, F), P (F,), Q (F,)) of one score vector; rows with a NaN score are left out.

    N[f, g] = sum over positives i of family f and negatives j of family g of [s_i > s_j] +
    [s_i == s_j] / 2; P, Q = positives and negatives per family."""
    ok = np.isfinite(scores)
    s, yy, ff = scores[ok], np.asarray(y)[ok].astype(bool), fam[ok]
    P = np.bincount(ff[yy], minlength=F).astype(np.float64)
    Q = np.bincount(ff[~yy], minlength=F).astype(np.float64)
    neg_s, neg_f = s[~yy], ff[~yy]
    order = np.argsort(neg_s, kind="mergesort")
    neg_s, neg_f = neg_s[order], neg_f[order]
    onehot = np.zeros((len(neg_s) + 1, F))
    onehot[np.arange(1, len(neg_s) + 1), neg_f] = 1.0
    cum = np.cumsum(onehot, axis=0)  # (negatives + 1, F): negatives per family among the lowest t
    pos_s, pos_f = s[yy], ff[yy]
    lo = np.searchsorted(neg_s, pos_s, side="left")
    hi = np.searchsorted(neg_s, pos_s, side="right")
    contrib = 0.5 * (cum[lo] + cum[hi])  # (positives, F): below + half of the ties
    N = np.zeros((F, F))
    np.add.at(N, pos_f, contrib)
    return N, P, Q


def pooled_auroc_draws(
    scores: np.ndarray, labels: np.ndarray, fam: np.ndarray, counts: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    """Pair-weighted AUROC over label vectors, observed and per resample.

    scores, labels: (L, n); fam: (n,) family numbers into counts' columns; counts: (B, F).
    Returns (pooled value, draws (B,), each vector's own AUROC (L,)); NaN where undefined."""
    B, F = counts.shape
    scores = np.atleast_2d(np.asarray(scores, np.float64))
    labels = np.atleast_2d(labels)
    N_sum = np.zeros((F, F))
    Ps, Qs, each = [], [], []
    for s, y in zip(scores, labels, strict=True):
        N, P, Q = _pair_counts(s, y, fam, F)
        N_sum += N
        Ps.append(P)
        Qs.append(Q)
        den = P.sum() * Q.sum()
        each.append(N.sum() / den if den > 0 else np.nan)
    P, Q = np.array(Ps).T, np.array(Qs).T  # (F, L)
    W = counts.astype(np.float64)
    num = np.einsum("bf,bf->b", W @ N_sum, W)
    den = np.einsum("bl,bl->b", W @ P, W @ Q)
    with np.errstate(invalid="ignore", divide="ignore"):
        draws = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    total = float((P.sum(0) * Q.sum(0)).sum())
    value = float(N_sum.sum() / total) if total > 0 else float("nan")
    return value, draws, np.array(each)


def estimate_from_draws(value: float, draws: np.ndarray, n: int) -> Estimate:
    if not np.isfinite(value):
        return Estimate.empty("undefined (one class only)")
    lo, hi = percentile_interval(draws)
    return Estimate(float(value), (_f(lo[0]), _f(hi[0])), int(n))


def _f(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


@dataclass(frozen=True)
class ControlSummary:
    """The control tasks at one layer/position: pair-weighted mean AUROC, range, count."""

    mean: float
    min: float
    max: float
    k: int

    def to_json(self) -> dict[str, Any]:
        return {"mean": self.mean, "min": self.min, "max": self.max, "k": self.k}


def selectivity(
    target_scores: np.ndarray,
    y: np.ndarray,
    control_scores: np.ndarray,
    control_labels: np.ndarray,
    families: Sequence[str],
    boot: FamilyBootstrap,
) -> tuple[ControlSummary | None, Estimate]:
    """Control-task summary and selectivity = target AUROC - mean control AUROC with its paired
    family-bootstrap interval (module docstring). control_scores, control_labels: (k, n)."""
    if len(control_scores) == 0:
        return None, Estimate.empty("no control tasks")
    fam = boot.family_index(list(np.asarray(families, dtype=object)))
    ctrl_value, ctrl_draws, each = pooled_auroc_draws(control_scores, control_labels, fam, boot.counts)
    summary = ControlSummary(ctrl_value, float(np.nanmin(each)), float(np.nanmax(each)), int(np.isfinite(each).sum()))
    t_value, t_draws, _ = pooled_auroc_draws(target_scores[None], np.asarray(y)[None], fam, boot.counts)
    n = int(np.isfinite(target_scores).sum())
    return summary, estimate_from_draws(t_value - ctrl_value, t_draws - ctrl_draws, n)
