"""Paired differences between information-injection levels (seed 003, section 4.6): level L minus
level 0 of the headline proportions, from one set of family resamples.

Why paired. Every level of a benchmark holds the same families (bench.injection builds level L
from level 0's decisions), and `bench.scoring.score` scores each level with a `FamilyBootstrap`
of the same seed over the same families, so resample b draws the same families at every level.
The difference on resample b is level L's value minus level 0's on that resample; its
percentile interval carries the correlation between the levels (the same decisions, the same
images), which two separate intervals ignore: their overlap is not a test of a difference.

Never zero width. Where a level sits at 0% or 100%, or where every decision chose alike at both
levels (each resample's difference is exactly 0), the percentile interval collapses to a point;
there it is widened to hold the MOVER interval of the two cluster intervals
(`core.proportion.saturated_change`, which documents the method).

A level whose families are not level 0's has no paired difference (its reason says so): pairing
resamples of different family sets would pair unrelated draws.
"""

from __future__ import annotations

import numpy as np

from evprobe.core.bootstrap import Estimate, Resampled, families_of, percentile_interval
from evprobe.core.proportion import cluster_interval, saturated_change

# The headline proportions differenced (name in scores.json -> the measure's key in the tally).
DIFFERENCED: dict[str, tuple[str, ...]] = {
    "min_cost_choice": ("min_cost_choice",),
    "stop_if_enough": ("stop_if_enough",),
    "test_if_needed": ("test_if_needed",),
    "both_correct_image_pairs": ("both_correct_image_pairs",),
    "both_correct_threshold_pairs": ("both_correct_threshold_pairs",),
    "enough_evidence": ("enough_evidence",),
    "resolved_and_correct": ("policies", "model", "correct"),
    "validity_select": ("validity", "validity_select"),
}
METHOD = (
    "level L minus level 0 on each of the same family resamples (same families, same seed); 95% "
    "percentile interval of the differences, widened to the MOVER interval of the two cluster "
    "intervals where a level is at 0% or 100% or the paired interval is a point"
)


def paired_difference(a: Resampled, b: Resampled) -> Estimate:
    """a - b of two proportions resampled on the same family draws; n is a's denominator, the
    families those holding a unit of either."""
    if np.isnan(a.value) or np.isnan(b.value):
        return Estimate.empty("no value at one of the two levels")
    lo, hi = percentile_interval(a.draws - b.draws)  # (1,) each; NaN draws (empty resamples) ignored
    if a.shares is not None and b.shares is not None:
        p1, p0 = np.array([a.value]), np.array([b.value])
        lo, hi = saturated_change((lo, hi), p1, cluster_interval(*a.shares), p0, cluster_interval(*b.shares))
    if np.isnan(lo[0]):
        return Estimate.empty("no resample defines both levels")
    return Estimate(float(a.value - b.value), (float(lo[0]), float(hi[0])), a.n).in_families(families_of(a, b))


def level_differences(
    level: dict[tuple[str, ...], Resampled], base: dict[tuple[str, ...], Resampled], same_families: bool
) -> dict[str, Estimate]:
    """Every DIFFERENCED measure of one level against level 0 (both as `Tally.resolve` gives them)."""
    out: dict[str, Estimate] = {}
    for name, key in DIFFERENCED.items():
        if not same_families:
            out[name] = Estimate.empty("this level's families are not level 0's: no paired difference")
        elif key not in level or key not in base:
            out[name] = Estimate.empty("not scored at both levels")
        else:
            out[name] = paired_difference(level[key], base[key])
    return out


__all__ = ["DIFFERENCED", "METHOD", "level_differences", "paired_difference"]
