"""Control tasks (Hewitt and Liang 2019) and the selectivity they give, on every sweep.

A control task is a random label that is a fixed function of the input's *type*. Here the type
is the cell: the values of the index fields `SweepConfig.cell_fields` names. On the benchmark's
captures it defaults to (system, initial property, history, threshold level), 24 cells
(`default_cell_fields`; the benchmark's design, core.capture_schema.BENCHMARK_CELL_FIELDS); on a
capture of your own to none, until you name yours. Sufficiency (`resolved`) is itself a function of the
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
- Reference: random cell functions differ from one another in how well they decode (some group
  cells the representation keeps apart, some do not), and the question is whether the target is
  decoded better than one more random function of the cell would be. So the reference is the
  distribution of the control tasks themselves. (Before, a family bootstrap of target - control
  mean held the controls fixed, ignoring that spread: on data where the target is itself a random
  cell function it covered 0 in 60% of rows and called 32% selective;
  benchmarks/coverage_selectivity.py measures both rules side by side.)
- Selectivity = target AUROC - plain mean of the k control AUROCs, each the pooled out-of-fold
  AUROC of its own fits (same probe, folds and scoring as the target; rows without a score left
  out, as for the target).
- Interval: [target - max control, target - min control], the distribution-free interval of a
  location shift. If the target decodes like one more cell function shifted by delta (t - delta
  exchangeable with the k controls), t - delta is the largest or the smallest of the k + 1 values
  with probability 2 / (k + 1), so the interval covers delta with probability (k - 1) / (k + 1):
  95% at the default k = 39 (`DEFAULT_CONTROL_TASKS`), stated as `level` for other k. Ties count
  against the target (the interval is closed), which only adds coverage.
- Verdict: selective when the interval's low end is above 0, i.e. the target is decoded better
  than every control task. A target exchangeable with the controls does that with probability
  1 / (k + 1) (2.5% at k = 39); the one-sided rank p-value is (1 + #{controls >= target}) / (k + 1).
  With fewer than `MIN_VERDICT_TASKS` controls that rate would exceed 5%, so no verdict is given.
  n = scored rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from evprobe.core.bootstrap import Estimate
from evprobe.core.capture_schema import BENCHMARK_CELL_FIELDS
from evprobe.core.estimate_text import estimate_text, missing_text
from evprobe.core.json_types import JsonObject

DEFAULT_CONTROL_TASKS = 39  # k + 1 = 40 exchangeable tasks: the interval is a 95% interval
MIN_VERDICT_TASKS = 19  # a verdict needs 1 / (k + 1) <= 5% false "selective" calls
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
        return None, "no cell fields are named"
    missing = missing_cell_fields(index_rows, fields)
    if missing:
        which = "of the configured cell (it has none of them)" if set(missing) == set(fields) else ", ".join(missing)
        return None, f"the capture's index lacks the cell field(s) {which}; set cell_fields (--cell-fields) to fields it has"
    keys = [tuple(str(row[f]) for f in fields) for row in index_rows]
    _, inverse = np.unique(np.array(["\x1f".join(k) for k in keys], dtype=object), return_inverse=True)
    return inverse.astype(np.int64), None


NOT_CELL_FIELDS = frozenset({"row", "item_id", "family_id", "source", "source_name"})


def default_cell_fields(index_rows: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """What `SweepConfig.cell_fields=None` means on these rows: the benchmark's cell
    (BENCHMARK_CELL_FIELDS) where the data is the benchmark's, i.e. some row carries one of those
    fields (one missing elsewhere is then named), else none: a capture of your own has no cell
    until you name its fields (the sweep says so once, suggesting some). The benchmark's default
    lives with its schema in core, not here: probes know no benchmark, they read what the capture
    carries."""
    present = {f for row in index_rows for f in BENCHMARK_CELL_FIELDS if f in row}
    return BENCHMARK_CELL_FIELDS if present else ()


def missing_cell_fields(index_rows: Sequence[Mapping[str, Any]], fields: Sequence[str]) -> list[str]:
    """The cell fields absent from some row's index, sorted."""
    return sorted({f for row in index_rows for f in fields if f not in row})


def suggest_cell_fields(index_rows: Sequence[Mapping[str, Any]], label: str) -> list[str]:
    """Index fields that could define cells: in every row, scalar, with 2 to n/2 distinct values,
    neither the label nor an id (the examples named when the configured cell fields are missing)."""
    if not index_rows:
        return []
    out = []
    for name in index_rows[0]:
        if name in NOT_CELL_FIELDS or name == label:
            continue
        values = [row.get(name, ...) for row in index_rows]
        if any(v is ... or isinstance(v, (list, dict)) for v in values):
            continue
        if 2 <= len({str(v) for v in values}) <= max(2, len(values) // 2):
            out.append(name)
    return out


def missing_cells_warning(label: str, fields: Sequence[str], missing: Sequence[str], suggested: Sequence[str]) -> str:
    """The one line said when no cell fields are named, or they are not in the index
    (probes.sweep_warnings): the missing ones are named unless the index has none of them."""
    if not fields:
        what = "no cell fields are named"
    elif set(missing) == set(fields):
        what = f"the index has none of the cell fields {','.join(fields)}"
    else:
        what = f"the index lacks the cell field(s) {', '.join(missing)} of {' x '.join(fields)}"
    example = f", e.g. --cell-fields {','.join(suggested[:3])}" if suggested else ""
    return (f"CONTROL TASKS SKIPPED: {what}; name the index fields that define your prompts' cells (types) with "
            f"--cell-fields FIELD,FIELD (Python: SweepConfig(cell_fields=(...))){example}. Until then there are no "
            f"control tasks, no one-hot cell baseline and no selectivity for '{label}'.")


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


# -- selectivity against the control tasks' own distribution ----------------------------------


@dataclass(frozen=True)
class ControlSummary:
    """The control tasks at one layer/position: each one's AUROC (k,), their plain mean and range."""

    aurocs: tuple[float, ...]

    @property
    def k(self) -> int:
        return len(self.aurocs)

    @property
    def mean(self) -> float:
        return float(np.mean(self.aurocs))

    @property
    def min(self) -> float:
        return float(np.min(self.aurocs))

    @property
    def max(self) -> float:
        return float(np.max(self.aurocs))

    def to_json(self) -> JsonObject:
        return {"mean": self.mean, "min": self.min, "max": self.max, "k": self.k, "aurocs": list(self.aurocs)}


@dataclass(frozen=True)
class Selectivity:
    """Target AUROC - mean control AUROC, with the interval and verdict of the module docstring.

    estimate: value, ci = (target - max control, target - min control), n = scored rows;
    beaten: controls whose AUROC is strictly below the target's; k: controls."""

    estimate: Estimate
    beaten: int = 0
    k: int = 0

    @classmethod
    def empty(cls, reason: str) -> Selectivity:
        return cls(Estimate.empty(reason))

    # read like an Estimate (value [lo, hi], n), as the selectivity was before the verdict joined it
    @property
    def value(self) -> float | None:
        return self.estimate.value

    @property
    def ci(self) -> tuple[float | None, float | None]:
        return self.estimate.ci

    @property
    def n(self) -> int:
        return self.estimate.n

    @property
    def level(self) -> float | None:
        """Two-sided coverage of the interval, (k - 1) / (k + 1); None without controls."""
        return (self.k - 1) / (self.k + 1) if self.k >= 2 else None

    @property
    def p_value(self) -> float | None:
        """One-sided rank p-value of 'decoded better than the controls': (1 + #{c >= t}) / (k + 1)."""
        return None if self.estimate.value is None else (1 + self.k - self.beaten) / (self.k + 1)

    @property
    def selective(self) -> bool | None:
        """True when the target beats every control (the interval's low end above 0); None without
        a verdict (no controls, or fewer than MIN_VERDICT_TASKS)."""
        if self.estimate.value is None or self.k < MIN_VERDICT_TASKS:
            return None
        return self.beaten == self.k

    def to_json(self) -> JsonObject:
        return {**self.estimate.to_json(), "selective": self.selective, "k": self.k, "beaten": self.beaten,
                "level": self.level, "p_value": self.p_value}


def selectivity(target_auroc: float, control_aurocs: Sequence[float], n: int) -> tuple[ControlSummary | None, Selectivity]:
    """Control-task summary and selectivity (module docstring) from the target's AUROC and each
    control's (NaN: a control with one class among the scored rows, left out)."""
    each = np.asarray(control_aurocs, dtype=np.float64)
    each = each[np.isfinite(each)]
    if len(each) == 0:
        return None, Selectivity.empty("no control tasks")
    summary = ControlSummary(tuple(float(x) for x in each))
    if not np.isfinite(target_auroc):
        return summary, Selectivity.empty("undefined (one class only)")
    t = float(target_auroc)
    est = Estimate(t - summary.mean, (t - summary.max, t - summary.min), int(n))
    return summary, Selectivity(est, int(np.sum(each < t)), len(each))


def fmt_selectivity(sel: Selectivity | Mapping[str, Any] | None) -> str:
    """`+0.050 [+0.006, +0.112] (beats 39 of 39 control tasks)`, from a Selectivity or its JSON; the
    interval's level is named when it is not 95% (k != 39)."""
    d = sel.to_json() if isinstance(sel, Selectivity) else (sel or {})
    if d.get("value") is None:
        return missing_text(d.get("reason"))
    text = estimate_text(d, 3, sign=True, n=False)
    k = d.get("k")
    if not k:  # a sweep.json written before the controls' own distribution was the reference
        return text
    level = d.get("level")
    note = "" if level is None or abs(level - 0.95) < 1e-9 else f"; a {level:.1%} interval"
    return text + f" (beats {d['beaten']} of {k} control tasks{note})"
