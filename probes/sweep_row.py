"""One row of the layer sweep (probes.sweep): a layer/position's AUROC and accuracy with their
intervals, control tasks and selectivity, the leakage check, the within-family variance, the test
against chance (probes.chance) and the design's factors (probes.factors), and its JSON; and the
leakage check filled in once the sweep has every row."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from evprobe.core.bootstrap import Estimate
from evprobe.core.json_types import JsonObject
from evprobe.probes.chance import ChanceTest
from evprobe.probes.control_tasks import ControlSummary, Selectivity
from evprobe.probes.controls import EXTREME_SDS, LeakageCheck, leakage_check
from evprobe.probes.factors import FactorComparison

DEGENERATE_REASON = (
    "the representation is identical for all rows of each family (within-family variance ratio {ratio:.2e}, robust "
    "{robust:.2e}, both < {limit:g}) while the label varies within families: every grouped probe scores 0.5 by "
    "construction"
)



@dataclass(frozen=True)
class SweepRow:
    layer: int  # the model's layer number (meta.json "layers")
    layer_index: int  # its place on the capture's layer axis
    position: str
    auroc: Estimate
    accuracy: Estimate
    controls: ControlSummary | None  # control tasks (None: skipped, degenerate, or controls off)
    selectivity: Selectivity  # auroc - controls.mean, interval from the controls' range
    leakage_shuffles: tuple[float, ...]  # AUROC of each within-family shuffle (empty: not run)
    within_family_variance: float
    degenerate: bool
    identical: dict[str, tuple[int, int]] = field(default_factory=dict)  # pair field -> (identical, pairs)
    reason: str | None = None
    # the leakage check's mean AUROC with its interval, z and verdict: set once the sweep has every row
    leakage: Estimate = Estimate.empty("not run")
    leakage_z: float | None = None  # (leakage - 0.5) / standard error between shuffles
    leakage_fires: bool | None = None
    within_family_variance_robust: float | None = None  # the robust ratio where the plain one is < limit, else None
    extreme_rows: int = 0  # labelled rows more than EXTREME_SDS robust SDs from the median
    extreme_example: str | None = None  # the item id of the farthest of them
    chance: ChanceTest | None = None  # the test against chance (None: not run, or degenerate)
    factors: FactorComparison | None = None  # the label against the design's factors (None: none)

    @property
    def decodable(self) -> bool | None:
        """True when the test against chance rejects (adjusted p <= 0.05, probes.chance); None without a test."""
        return None if self.chance is None else self.chance.decodable

    @property
    def selective(self) -> bool | None:
        """True when the target beats every control task (the selectivity interval lies above 0);
        None without a verdict (probes.control_tasks.Selectivity)."""
        return self.selectivity.selective

    def to_json(self) -> JsonObject:
        z = self.leakage_z
        out = {
            "layer": self.layer,
            "layer_index": self.layer_index,
            "position": self.position,
            "auroc": self.auroc.value,
            "ci": list(self.auroc.ci),
            "n": self.auroc.n,
            "n_families": self.auroc.n_families,  # the clusters its intervals were computed on
            "accuracy": self.accuracy.value,
            "accuracy_ci": list(self.accuracy.ci),
            "control_tasks": None if self.controls is None else self.controls.to_json(),
            "selectivity": self.selectivity.to_json(),
            "leakage_auroc": self.leakage.value,
            "leakage_ci": list(self.leakage.ci),
            "leakage_z": None if z is None or not np.isfinite(z) else z,
            "leakage_fires": self.leakage_fires,
            "leakage_shuffles": list(self.leakage_shuffles),
            "within_family_variance": self.within_family_variance,
            "within_family_variance_robust": self.within_family_variance_robust,
            "extreme_rows": {"n": self.extreme_rows, "example": self.extreme_example, "limit_sds": EXTREME_SDS},
            "degenerate": self.degenerate,
            "identical_pairs": {k: list(v) for k, v in self.identical.items()},
            "chance_test": None if self.chance is None else self.chance.to_json(),
            "factors": None if self.factors is None else self.factors.to_json(),
        }
        if self.reason:
            out["reason"] = self.reason
        return out


def auroc_json(record: JsonObject) -> JsonObject:
    """The AUROC of a sweep.json row or best (keys auroc, ci, n, n_families) as an estimate's JSON for
    core.estimate_text; n_families None where an older sweep.json lacks it (the count left unsaid)."""
    return {"value": record.get("auroc"), "ci": record.get("ci"), "n": record.get("n"),
            "n_families": record.get("n_families")}


def with_leakage(rows: list[SweepRow]) -> tuple[list[SweepRow], LeakageCheck | None]:
    """The rows with the leakage check's estimate, z and verdict filled in (probes.controls)."""
    scored = [i for i, r in enumerate(rows) if r.leakage_shuffles and all(np.isfinite(r.leakage_shuffles))]
    if not scored:
        return rows, None
    check = leakage_check(np.array([rows[i].leakage_shuffles for i in scored]))  # (R, L)
    out = list(rows)
    for j, i in enumerate(scored):
        est = Estimate(float(check.auroc[j]), (float(check.lo[j]), float(check.hi[j])), rows[i].auroc.n)
        out[i] = replace(rows[i], leakage=est, leakage_z=float(check.z[j]), leakage_fires=bool(check.fires[j]))
    return out, check
