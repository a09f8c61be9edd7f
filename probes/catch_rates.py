"""Catch rates per group (seed 002, appendix H.2: a nearest-centroid probe's share of each sub-scenario's
voids it assigns to the void class, "behind_wall 89%, under_bridge 47%").

At one layer and position, every labelled row is scored out of fold (the sweep's family folds and
probe: `--probe centroid` is the seed's NC classifier), and a row is assigned class 1 where its score
is above 0. A group is a value of the `by` fields (`system,initial_property`: the benchmark's
sub-scenarios, bench.sub_scenarios); per group and class, the catch rate is the share of that class's
rows the probe assigns to it (on void-vs-twin rows labelled `resolved`, class `False` is the voids:
the seed's catch rate). A row whose score could not be computed stays in the denominator as not
caught (never silently dropped; counted in `unscored`).

Intervals: the share over whole families with its family-bootstrap interval and the probe's accuracy
rule (probes.metrics.accuracy_estimate: never zero width at 0% or 100%). The fold models are held
fixed, so the interval is over which families were tested, not over which trained the probe.
Coverage where the truth is known (benchmarks/coverage_catch_rates.py: 3 groups, family offsets,
nearest-centroid probe, 500 runs, B = 1,000): of the fold models' catch rate on new families,
97.2-98.6% at 24 families a group and 96.6-99.6% at 8; of the rate averaged over datasets, 97.8-99.4%
and 96.6-100%; no zero-width interval. The layer is the caller's (the seed fixes layer 32), never
chosen on these rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from evprobe.core.bootstrap import Estimate, FamilyBootstrap
from evprobe.core.json_types import JsonObject
from evprobe.probes.captures import CaptureError, CaptureSet
from evprobe.probes.engine import cv_scores
from evprobe.probes.label_sets import LabelSet
from evprobe.probes.metrics import accuracy_estimate
from evprobe.probes.splits import family_folds
from evprobe.probes.sweep import SweepConfig

MAX_GROUPS = 60
METHOD = ("out-of-fold assignment (score > 0 is class 1) at the given layer and position, family folds; the "
          "share of a group's rows of a class assigned to it, over whole families; 95% family-bootstrap interval "
          "with the fold models held fixed")


@dataclass(frozen=True)
class CatchRate:
    group: str  # the `by` fields' values, joined with ", "
    caught: str  # the class (label value) whose rows are counted
    rate: Estimate  # share of those rows assigned to that class
    unscored: int  # rows without a score (counted as not caught)


@dataclass(frozen=True, eq=False)
class CatchRates:
    label: str
    positive: Any
    probe: str
    layer: int
    position: str
    by: tuple[str, ...]
    restriction: str | None
    rates: tuple[CatchRate, ...]

    def to_json(self) -> JsonObject:
        return {"label": self.label, "positive": self.positive, "probe": self.probe, "layer": self.layer,
                "position": self.position, "by": list(self.by), "restriction": self.restriction, "method": METHOD,
                "rates": [{"group": r.group, "caught": r.caught, **r.rate.to_json(), "unscored": r.unscored}
                          for r in self.rates]}


def class_names(labelset: LabelSet) -> tuple[str, str]:
    """(class 0, class 1) as words: the label's other value where it has two, else `not <positive>`."""
    others = [v for v in labelset.values if v != labelset.positive]
    return (str(others[0]) if len(others) == 1 else f"not {labelset.positive}", str(labelset.positive))


def catch_rates(
    captures: CaptureSet,
    labelset: LabelSet,
    by: Sequence[str],
    layer: int,
    position: str,
    config: SweepConfig | None = None,
) -> CatchRates:
    """Per group of `by` and class, the share of the class's rows the probe assigns to it (module docstring)."""
    config = config or SweepConfig()
    rows = [captures.index[r] for r in labelset.rows]
    missing = [f for f in by if not any(f in r for r in rows)]
    if not by or missing:
        raise CaptureError(f"--catch-by {','.join(by)}: {', '.join(missing) or 'no field'} is not an index field of "
                           "the labelled rows; name fields such as system,initial_property (the sub-scenarios)")
    groups = np.array([", ".join(str(r.get(f)) for f in by) for r in rows], dtype=object)
    order = list(dict.fromkeys(groups))
    if len(order) > MAX_GROUPS:
        raise CaptureError(f"--catch-by {','.join(by)} gives {len(order)} groups (at most {MAX_GROUPS}); name fewer "
                           "or coarser fields")
    li, pi = captures.layer_index(layer), captures.position_index(position)
    y, fam = labelset.y, labelset.families
    folds = family_folds(fam, config.folds, config.seed, y)
    boot = FamilyBootstrap(sorted(set(fam)), config.n_boot, config.seed)
    X = captures.block(li, labelset.rows, [pi])[:, 0]
    scores = cv_scores(X, config.spec.fitter(), folds, {"y": y}).oof["y"]
    scored = np.isfinite(scores)
    assigned = np.where(scored, scores > 0, False).astype(np.int8)
    names = class_names(labelset)
    out = []
    for group in order:
        for cls in (0, 1):
            mask = (groups == group) & (y == cls)
            if mask.any():
                caught = (assigned[mask] == cls).astype(float)  # unscored: assigned neither, so not caught
                out.append(CatchRate(str(group), names[cls], accuracy_estimate(caught, fam[mask], boot),
                                     int((~scored[mask]).sum())))
    return CatchRates(labelset.name, labelset.positive, config.probe, int(layer), str(position), tuple(by),
                      labelset.restriction, tuple(out))


def catch_markdown(result: CatchRates) -> str:
    from evprobe.probes.report import fmt

    lines = [f"# Catch rates by {', '.join(result.by)}: {result.label}={result.positive}, {result.probe} probe, "
             f"L{result.layer}/{result.position}", "",
             f"- restriction: {result.restriction or 'none'}", f"- {METHOD}", "",
             "| group | class | assigned to it | n | families |", "|---|---|---|---|---|"]
    lines += [f"| {r.group} | {r.caught} | {fmt(r.rate)} | {r.rate.n} | {r.rate.n_families} |" for r in result.rates]
    return "\n".join(lines) + "\n"


__all__ = ["CatchRate", "CatchRates", "catch_markdown", "catch_rates", "class_names"]
