"""The design's own factors decoded beside the label: what "selective" does and does not single out.

The control tasks (probes.control_tasks) ask whether the label is decoded better than *random*
functions of the cell. A label that is decoded at ceiling beats every random cell function, and so
does any other label decoded at ceiling: on the organism's capture at L3/last `threshold_level`
(+0.052, 39 of 39) and `system` (+0.049, 39 of 39) get the verdict `resolved` gets (+0.052). So the
sweep also decodes the design's own factors on the same rows, with the same probe, folds and
scoring as the label, and says how the label compares with each.

Choices (each tested):

- Factors: the sweep's cell fields (`SweepConfig.cell_fields`: system, initial property, history,
  threshold level on the benchmark; your `--cell-fields` on your data), read from the index rows.
- Binarisation: a field with two values on the labelled rows is one label (the second value in
  sorted order against the first; a logistic probe scores a label and its negation alike). A field
  with more values is decoded one value against the rest, each value in turn, and the factor's
  AUROC is the highest of them (its best-decoded value: the hardest comparison for the label). A
  field with one value, or one of whose binary labels equals the label (or its negation), is left
  out with that reason.
- Comparison: difference = label AUROC - factor AUROC (the factor's chosen value), both pooled
  out-of-fold AUROCs over the rows every fit scores. Interval: the paired family bootstrap's
  percentile interval of the difference (the sweep's resamples, fold models held fixed), widened to
  hold the MOVER interval for correlated estimates (Zou and Donner 2008; core.proportion.
  saturated_change) built from the two AUROCs' own 95% intervals (percentiles hulled with the
  cluster Clopper-Pearson interval and the boundary reach, probes.metrics.unit_interval) and their
  correlation r over the same resamples:
      lo = d - sqrt(a^2 + b^2 - 2 r a b), a = label - label_lo, b = factor_hi - factor (hi alike).
  Where an AUROC is exactly 0 or 1, or the paired interval is a point, r = 0: two AUROCs at 1.0 on
  144 families give [-0.025, +0.025], never a point.
- Training spread: those intervals hold the fold models fixed, and so miss what refitting on another
  sample would change; alone they called a factor decoded exactly as well "better" or "worse" 6-8%
  of the time each (benchmarks/coverage_factors.py, `fixed`). Where the sweep refits (`--refits`,
  the default), every half-width above (the paired interval's and both AUROCs') is multiplied by the
  label's refit interval width over its fixed-model width at that row (at least 1; `training_scale`
  in sweep.json), the factor taken to spread as the label does (same probe, rows and folds). With
  refits off the fixed-model intervals stand and the sweep's warning says they undercover.
- Verdict per factor: `better` when the interval lies above 0, `worse` below, `same` otherwise;
  `at_ceiling` when both AUROCs are at least the lower bound of a perfect separation on these
  families (0.975 at 144 families, core.proportion.perfect_lower): there decoding cannot single the
  label out from that factor, whatever the estimates. The row's `singled_out` is True when the label is decoded better
  than every factor (an intersection of one-sided claims: no adjustment needed for a false
  "singled out" at the per-factor level), False when some factor decodes as well or better.

Size (false "better" where label and factor decode equally well) and power are measured by
benchmarks/coverage_factors.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from evprobe.core import proportion
from evprobe.core.bootstrap import FamilyBootstrap, percentile_interval
from evprobe.core.json_types import JsonObject
from evprobe.probes.metrics import auroc, auroc_draws, auroc_reading, unit_interval

PREFIX = "factor:"  # label names of the factors in the engine's label dict (probes.multilabel.BATCHED)
METHOD = (
    "each cell field decoded with the same probe, folds and scoring as the label (two values: one label; more: "
    "each value against the rest, the factor's AUROC the highest); difference = label AUROC - factor AUROC; interval: "
    "the paired family bootstrap's (fold models fixed) widened to hold the MOVER interval of the two AUROCs' own "
    "95% intervals with their correlation over the same resamples, every half-width times the label's refit over "
    "fixed-model interval width at the row (training_scale; 1 with refits off); better = interval above 0; at "
    "ceiling = both AUROCs at least a perfect separation's lower bound on these families (the label is not singled "
    "out)"
)

FACTORS_MEANS = ("the design's factors (cell fields) decoded on the same rows, same probe and folds; interval: paired "
                 "family bootstrap widened to the MOVER interval, scaled by the label's training spread; {verdict} "
                 "(above 0 for every factor = singled out)")


@dataclass(frozen=True, eq=False)
class Factor:
    """One design factor: its field and binary labels (value, engine label name, labels (n,) int8)."""

    field: str
    labels: tuple[tuple[str, str, np.ndarray], ...]


@dataclass(frozen=True, eq=False)
class Factors:
    """The factors of a sweep, and the fields left out with why (field -> reason)."""

    factors: tuple[Factor, ...]
    skipped: dict[str, str] = field(default_factory=dict)

    def as_labels(self) -> dict[str, np.ndarray]:
        return {name: lab for f in self.factors for _, name, lab in f.labels}

    def to_json(self) -> JsonObject:
        return {"fields": [f.field for f in self.factors],
                "labels": {f.field: [v for v, _, _ in f.labels] for f in self.factors},
                "skipped": self.skipped, "method": METHOD, "size_and_power": "benchmarks/coverage_factors.py"}


def factor_labels(index_rows: Sequence[Mapping[str, Any]], fields: Sequence[str], y: np.ndarray) -> Factors:
    """The binary labels of each cell field on the labelled rows (module docstring: binarisation)."""
    y = np.asarray(y).astype(np.int8)
    out, skipped = [], {}
    for name in fields:
        if any(name not in row for row in index_rows):
            skipped[name] = "not in every labelled row's index"
            continue
        values = np.array([str(row[name]) for row in index_rows], dtype=object)
        distinct = sorted(set(values))
        if len(distinct) < 2:
            skipped[name] = f"one value ({distinct[0]}) on the labelled rows" if distinct else "no rows"
            continue
        chosen = distinct[1:] if len(distinct) == 2 else distinct
        labels = [(v, f"{PREFIX}{name}={v}", (values == v).astype(np.int8)) for v in chosen]
        if any(np.array_equal(lab, y) or np.array_equal(lab, 1 - y) for _, _, lab in labels):
            skipped[name] = "equal to the label (or its negation) on the labelled rows"
            continue
        out.append(Factor(name, tuple(labels)))
    return Factors(tuple(out), skipped)


@dataclass(frozen=True)
class FactorReading:
    """The label against one factor at one row: the factor's AUROC (its chosen value's) with its
    fixed-model interval, and the difference label - factor with what its interval is built from: the
    paired bootstrap's percentile interval (fold models fixed), the two AUROCs' fixed-model intervals,
    their correlation r over the same resamples, and `scale`, the training spread (1 with the fold
    models held fixed; the label's refit-over-fixed interval width where refits ran)."""

    field: str
    value: str  # the value decoded against the rest (a two-valued field: its second value)
    auroc: float
    auroc_ci: tuple[float, float]
    target: float
    target_ci: tuple[float, float]
    paired: tuple[float, float]
    r: float
    at_ceiling: bool
    scale: float = 1.0

    @property
    def difference(self) -> float:
        return self.target - self.auroc

    @property
    def ci(self) -> tuple[float, float]:
        """The difference's interval (module docstring): every half-width times `scale`, the paired
        interval widened to hold the MOVER interval."""
        s, d = self.scale, self.difference
        one = lambda x: np.array([float(x)])  # noqa: E731  # (1,) arrays for core.proportion

        def around(v: float, ci: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
            return one(v - s * (v - ci[0])), one(v + s * (ci[1] - v))

        lo, hi = proportion.saturated_change(around(d, self.paired), one(self.target), around(self.target, self.target_ci),
                                             one(self.auroc), around(self.auroc, self.auroc_ci),
                                             sparse=np.array([True]), r=one(self.r))
        return max(-1.0, float(lo[0])), min(1.0, float(hi[0]))

    @property
    def verdict(self) -> str:
        """better | worse | same (the interval covers 0)."""
        lo, hi = self.ci
        return "better" if lo > 0 else "worse" if hi < 0 else "same"

    def to_json(self) -> JsonObject:
        return {"field": self.field, "value": self.value, "auroc": self.auroc, "auroc_ci": list(self.auroc_ci),
                "difference": self.difference, "ci": list(self.ci), "verdict": self.verdict,
                "at_ceiling": self.at_ceiling, "training_scale": self.scale}


@dataclass(frozen=True)
class FactorComparison:
    """The label's AUROC (over the rows every factor scores too) beside each factor's, at one row."""

    target: float
    target_ci: tuple[float, float]
    readings: tuple[FactorReading, ...]

    @property
    def singled_out(self) -> bool | None:
        """True when the label is decoded better than every factor; None without factors."""
        return None if not self.readings else all(r.verdict == "better" for r in self.readings)

    def with_training_spread(self, refit_ci: tuple[float | None, float | None]) -> FactorComparison:
        """The comparison with every half-width scaled by the label's refit interval width over its
        fixed-model one at this row (at least 1): the training spread the fixed fold models miss, taken to
        be the factor's too (same probe, rows and folds). Fixed-model intervals alone called a factor
        decoded as well "worse" 6-8% of the time (benchmarks/coverage_factors.py)."""
        lo, hi = refit_ci
        fixed = self.target_ci[1] - self.target_ci[0]
        if lo is None or hi is None or fixed <= 0:
            return self
        scale = max(1.0, (hi - lo) / fixed)
        return replace(self, readings=tuple(replace(r, scale=scale) for r in self.readings))

    def to_json(self) -> JsonObject:
        return {"target": self.target, "target_ci": list(self.target_ci), "singled_out": self.singled_out,
                "factors": [r.to_json() for r in self.readings]}


@dataclass(frozen=True, eq=False)
class Scored:
    """An AUROC on the scored rows: value, its fixed-model interval under the printed rule, its draws
    (B,) over the sweep's family resamples, and the effective number of families (the reach's size)."""

    value: float
    ci: tuple[float, float]
    draws: np.ndarray
    size: float


def scored(scores: np.ndarray, y: np.ndarray, families: np.ndarray, boot: FamilyBootstrap) -> Scored | None:
    """The AUROC of `scores` (n,) for `y` (n,) over the finite scores; None with one class there."""
    ok = np.isfinite(scores)
    yy = np.asarray(y)[ok]
    if not ok.any() or yy.min() == yy.max():
        return None
    s = scores[ok]
    draws = auroc_draws(scores, y, families, boot)
    lo, hi = percentile_interval(draws)
    reading = auroc_reading(s, yy, boot.family_index(list(families[ok])))
    ci = unit_interval((float(lo[0]), float(hi[0])), reading)
    return Scored(auroc(s, yy), (float(ci[0]), float(ci[1])), draws, reading.size)


def paired(a: Scored, b: Scored) -> tuple[tuple[float, float], float]:
    """(the paired bootstrap's percentile interval of a - b, the correlation r of a and b) over the same
    resamples; r = 0 where either does not vary."""
    both = np.isfinite(a.draws) & np.isfinite(b.draws)
    r = 0.0
    if both.sum() > 2 and a.draws[both].std() > 0 and b.draws[both].std() > 0:
        r = float(np.corrcoef(a.draws[both], b.draws[both])[0, 1])
    lo, hi = percentile_interval(a.draws[both] - b.draws[both])
    return (float(lo[0]), float(hi[0])), r


def compare_factors(
    target_scores: np.ndarray, y: np.ndarray, factor_scores: Mapping[str, np.ndarray], factors: Factors,
    families: Sequence[str], boot: FamilyBootstrap,
) -> FactorComparison | None:
    """The label against each factor at one row (module docstring). target_scores (n,) and each
    factor's out-of-fold scores (n,) by engine label name (NaN: not scored); None without factors."""
    if not factors.factors:
        return None
    fam = np.asarray(families, dtype=object)
    # the rows every fit scores: the label and the factors are compared on the same rows
    ok = np.isfinite(target_scores)
    for f in factors.factors:
        for _, name, _ in f.labels:
            ok &= np.isfinite(factor_scores[name])
    masked = lambda s: np.where(ok, s, np.nan)  # noqa: E731  # shapes (n,)
    target = scored(masked(target_scores), y, fam, boot)
    if target is None:
        return None
    readings = []
    for f in factors.factors:
        plain = [(_plain_auroc(masked(factor_scores[name]), lab), v, name, lab) for v, name, lab in f.labels]
        plain = [p for p in plain if np.isfinite(p[0])]
        if not plain:
            continue
        _, value, name, lab = max(plain, key=lambda p: p[0])  # the best-decoded value (first on ties)
        best = scored(masked(factor_scores[name]), lab, fam, boot)  # resampled for that value only
        if best is None:
            continue
        interval, r = paired(target, best)
        ceiling = float(proportion.perfect_lower(target.size))  # a perfect separation's lower bound here
        readings.append(FactorReading(f.field, value, best.value, best.ci, target.value, target.ci, interval, r,
                                      at_ceiling=min(target.value, best.value) >= ceiling))
    return FactorComparison(target.value, target.ci, tuple(readings))


def _plain_auroc(scores: np.ndarray, y: np.ndarray) -> float:
    ok = np.isfinite(scores)
    yy = np.asarray(y)[ok]
    return auroc(scores[ok], yy) if ok.any() and yy.min() != yy.max() else float("nan")


def fmt_factors(comparison: FactorComparison | Mapping[str, Any] | None, digits: int = 3) -> str:
    """How the label compares with the design's factors at one row, from a FactorComparison or its JSON:
    `decoded better than each of the design's factors (system 0.972, ...)`, or `not singled out from the
    design's factors (label 1.000): system 1.000 and threshold_level 1.000 decode as well (at the ceiling
    with it: decoding cannot tell them apart); better than history 0.958`. Empty without factors."""
    d = comparison.to_json() if isinstance(comparison, FactorComparison) else (comparison or {})
    readings = d.get("factors") or []
    if not readings:
        return ""

    def named(rs: list[Mapping[str, Any]]) -> str:
        items = [f"{r['field']} {r['auroc']:.{digits}f}" for r in rs]
        return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]

    by = {v: [r for r in readings if r["verdict"] == v] for v in ("better", "same", "worse")}
    if len(by["better"]) == len(readings):
        return f"decoded better than each of the design's factors ({named(readings)})"
    parts = []
    if by["same"]:
        ceiling = [r for r in by["same"] if r.get("at_ceiling")]
        note = (" (at the ceiling with it: decoding cannot tell them apart)" if len(ceiling) == len(by["same"]) else
                f" ({', '.join(r['field'] for r in ceiling)} at the ceiling with it)" if ceiling else "")
        parts.append(f"{named(by['same'])} decode{'s' if len(by['same']) == 1 else ''} as well{note}")
    if by["worse"]:
        parts.append(f"{named(by['worse'])} decode{'s' if len(by['worse']) == 1 else ''} better")
    if by["better"]:
        parts.append(f"better than {named(by['better'])}")
    return f"not singled out from the design's factors (label {d['target']:.{digits}f}): " + "; ".join(parts)
