"""PECS, the Penalized Epistemic Calibration Score of seed 002 (section 3.4, appendix M), pooled and
per dataset.

PECS = Acc x max(0, AbsRec - FalseAbs): Acc and FalseAbs over the controls (resolved items: correct,
and abstained on), AbsRec over the voids (unresolved items: abstained on); "undetermined" is the
abstention, and a reply the parser could not read stays in every denominator (it is neither correct
nor an abstention). J = AbsRec - FalseAbs is Youden's J, unclamped.

Seed 002 computes PECS per dataset and averages the datasets with equal weight (its Table 2; the
pooled value "differs slightly", appendix M). Its datasets are (void type, regime) splits. A run of
evprobe has one regime and one kind of void (evidence that leaves the outcome undetermined), so here
a dataset is a physical system (sliding, bouncing, spring: each family belongs to one); a folder of
runs in several regimes is compared with `evprobe compare`. Per dataset this module reports Acc,
AbsRec, FalseAbs, J, PECS and the naive product Acc x AbsRec (appendix M.2, which ignores false
abstention), and over datasets the equal-weight mean of each, the pooled naive product, and the
zero-boundary count (appendix M.3: datasets whose observed J <= 0, so PECS = 0). A benchmark with
the void block (`bench.voids`) also gets PECS per (system, void type), by these rules, in its own
section (`bench.void_scoring`).

Every interval is the family bootstrap's, on the same resamples as the run's other measures (a
function of measures is evaluated on every resample: `FamilyBootstrap.combine`), so differences and
means are paired. A mean of clamped values is biased up where the truth sits at the clamp (every
dataset's J = 0 gives PECS 0, but a resample's mean is 0 only when every dataset's J is at or below
0), so the percentile interval of the equal-weight mean of PECS misses a zero truth. Where some
dataset's J interval reaches 0 (the clamp may be active), its lower end is therefore the lower of the
percentile's and a projection's: PECS is non-decreasing in each dataset's Acc and J, so with each of
the 2k coordinates at its one-sided (2.5 / 2k)% bootstrap percentile (Bonferroni), the mean of
Acc x max(0, J) at those bounds is a lower bound that holds whenever the coordinates' bounds hold.
Measured in benchmarks/coverage_pecs.py.

A PECS whose J is at or below zero on every resample has no sampling spread left after the clamp,
and a perfect run's J and PECS are 1 on every resample: such a value is reported with no interval
and the reason (`VALUE (REASON, n=N)`), never as a zero-width interval; its parts (rates, whose
intervals are never points) keep theirs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from evprobe.core.bootstrap import LEVEL, Estimate, FamilyBootstrap, Resampled, families_of, percentile_interval
from evprobe.core.decimals import fixed

if TYPE_CHECKING:
    from evprobe.bench.score_index import Bench, Replies
    from evprobe.bench.tally import Key, ScoreSection, ScoreValue, Tally
    from evprobe.core.json_types import JsonValue

ABSTAIN = "undetermined"
# the answer requests PECS reads (bench.score_index.ANSWER_REQUESTS; both_given is a variant protocol's)
ANSWER_REQUESTS = ("answer_initial", "answer_after_test")
PARTS = ("acc", "abs_rec", "false_abs")
POOLED = {"acc": "pecs_acc", "abs_rec": "pecs_abs_rec", "false_abs": "pecs_false_abs"}
SECTION = "pecs_datasets"
DATASET = ("system: a run has one regime and one kind of void, so its datasets are the physical systems "
           "(each family belongs to one)")
NO_ANSWERS = "no answer records"
ALPHA = 100.0 - LEVEL  # percent outside a 95% interval


def pecs_value(acc: Any, abs_rec: Any, false_abs: Any) -> Any:
    """Acc x max(0, AbsRec - FalseAbs), elementwise (scalars or resample arrays)."""
    return acc * np.maximum(0.0, abs_rec - false_abs)


def rate_parts(tally: Tally, keys: Mapping[str, Key], controls: Iterable[tuple[int, str | None, str | None]],
               voids: Iterable[tuple[int, str | None]]) -> None:
    """Tally the three parts under `keys` (PARTS -> key): Acc and FalseAbs over `controls` (family,
    answer, reference answer), AbsRec over `voids` (family, answer); an invalid answer (None) is
    never correct and never an abstention, and stays in the denominator."""
    controls = list(controls)
    tally.rate(keys["acc"], ((f, a == ref) for f, a, ref in controls))
    tally.rate(keys["false_abs"], ((f, a == ABSTAIN) for f, a, _ in controls))
    tally.rate(keys["abs_rec"], ((f, a == ABSTAIN) for f, a in voids))


def tally_parts(tally: Tally, bench: Bench, replies: Replies, present: dict[str, bool]) -> None:
    """Acc, FalseAbs (controls) and AbsRec (voids) over answer_initial and answer_after_test records,
    pooled and per system."""
    if not (present["answer_initial"] or present["answer_after_test"]):
        for name in POOLED.values():
            tally.skip((name,), NO_ANSWERS)
        return
    controls, voids = [], []
    for item_id, answer in replies.decoded.items():
        item = bench.items[item_id]
        if item.request not in ANSWER_REQUESTS or item.variant is not None:
            continue
        fam = bench.family_of[item.family_id]
        (controls if item.resolved else voids).append((fam, item, answer))
    # a system whose items have no answer records (a --limit run) has no dataset; an empty
    # denominator within a listed system is reported empty, as any rate
    systems = list(dict.fromkeys(it.system for _, it, _ in (*controls, *voids)))
    for system in (None, *systems):  # None: pooled over the systems
        key = {p: (POOLED[p],) if system is None else (SECTION, "datasets", system, p) for p in PARTS}
        rate_parts(tally, key, ((f, a, it.reference_answer) for f, it, a in controls if system in (None, it.system)),
                   ((f, a) for f, it, a in voids if system in (None, it.system)))


SAME = "the same on every family resample"
AT_ZERO = "J <= 0 on every family resample"


def _combined(fn: Any, parts: Sequence[Resampled], n: int, *, pecs: bool = False) -> Estimate:
    """`FamilyBootstrap.combine`, but a value that every resample reproduces (each part at its bound:
    a perfect run's J and PECS, or a PECS clamped to 0) gets no interval and says why, instead of a
    zero-width one. It carries the number of families holding a unit of any part (`n=5184 in 144
    families`)."""
    est = FamilyBootstrap.combine(fn, parts, n).in_families(families_of(*parts))
    if est.value is None or est.ci[0] is None or est.ci[0] != est.ci[1]:
        return est
    with np.errstate(invalid="ignore"):
        draws = np.asarray(fn(*[p.draws for p in parts]), dtype=float)
    kept = draws[~np.isnan(draws)]
    share = float(np.mean(kept == est.value))
    why = SAME if share == 1.0 else f"{fixed(100 * share, 1)}% of family resamples give this value"
    if pecs and est.value == 0.0:
        _, abs_rec, false_abs = parts
        j = abs_rec.draws - false_abs.draws
        if abs_rec.value - false_abs.value <= 0.0 and np.all(j[~np.isnan(j)] <= 0.0):
            why = AT_ZERO
    return replace(est, ci=(None, None), reason=why)


def combined_estimate(fn: Any, parts: Sequence[Resampled], n: int) -> Estimate:
    """`FamilyBootstrap.combine`, but a value every resample reproduces gets no interval and says why
    (`_combined`): a derived score or a difference of them is never printed with a zero-width interval."""
    return _combined(fn, parts, n)


def pecs_estimate(parts: Sequence[Resampled], n: int) -> Estimate:
    """PECS from its resampled parts (Acc, AbsRec, FalseAbs, in `PARTS` order): a value every resample
    reproduces gets no interval and says why (`_combined`)."""
    return _combined(pecs_value, parts, n, pecs=True)


def estimates(resampled: dict[Key, Resampled], est: dict[Key, Estimate]) -> ScoreSection:
    """The pooled PECS (headline) and the per-dataset section, from the tallied parts (`resampled`)
    and their estimates (`est`: a rate's interval is the hull with its cluster interval)."""
    if (POOLED["acc"],) not in resampled:
        return {"pecs": Estimate.empty(NO_ANSWERS), SECTION: {"dataset": DATASET, "reason": NO_ANSWERS}}
    pooled = [resampled[(POOLED[p],)] for p in PARTS]
    n_pooled = pooled[0].n + pooled[1].n
    systems = list(dict.fromkeys(k[2] for k in resampled if k[:2] == (SECTION, "datasets")))
    datasets: dict[str, dict[str, Estimate]] = {}
    per: dict[str, list[Resampled]] = {}
    for system in systems:
        parts = [resampled[(SECTION, "datasets", system, p)] for p in PARTS]
        acc, abs_rec, false_abs = parts
        n = acc.n + abs_rec.n
        per[system] = parts
        datasets[system] = {
            **{p: est[(SECTION, "datasets", system, p)] for p in PARTS},
            "j": _combined(lambda r, f: r - f, [abs_rec, false_abs], n),
            "pecs": _combined(pecs_value, parts, n, pecs=True),
            "naive": _combined(lambda a, r: a * r, [acc, abs_rec], n),
        }
    defined = [s for s in systems if not any(np.isnan(p.value) for p in per[s])]
    flat = [p for s in defined for p in per[s]]
    k = len(defined)

    def mean_of(fn: Any) -> Estimate:
        if not defined:
            return Estimate.empty("no dataset with both controls and voids")
        return _combined(lambda *xs: sum(fn(*xs[3 * i:3 * i + 3]) for i in range(k)) / k, flat, n_pooled)

    def pecs_mean() -> Estimate:
        """The equal-weight mean of the datasets' PECS; where a dataset's J interval reaches 0, its
        lower end is no higher than the projection's (module docstring; without it the interval
        covered a zero truth in 61-74% of benchmarks/coverage_pecs.py's runs)."""
        est = mean_of(pecs_value)
        if est.value is None or est.ci[0] is None:
            return est
        j_draws = [per[s][1].draws - per[s][2].draws for s in defined]  # k x (B,)
        if np.all(percentile_interval(np.stack(j_draws, axis=1))[0] > 0.0):
            return est  # no dataset's J interval reaches the clamp: the percentile interval holds
        tail = ALPHA / 2.0 / (2 * k)  # percent below each of the 2k one-sided bounds
        coords = np.stack([d for i, s in enumerate(defined) for d in (per[s][0].draws, j_draws[i])], axis=1)
        lower = percentile_interval(coords, level=100.0 - 2.0 * tail)[0]  # (2k,): Acc, J per dataset
        projected = float(np.mean([max(0.0, lower[2 * i]) * max(0.0, lower[2 * i + 1]) for i in range(k)]))
        return replace(est, ci=(min(est.ci[0], projected), est.ci[1]))

    zero = [s for s in defined if per[s][1].value - per[s][2].value <= 0.0]
    section = {
        "dataset": DATASET,
        "datasets": datasets,
        "equal_weight_mean": {
            "pecs": pecs_mean(),
            "naive": mean_of(lambda a, r, f: a * r),
            "acc": mean_of(lambda a, r, f: a),
            "j": mean_of(lambda a, r, f: r - f),
        },
        "pooled_j": _combined(lambda r, f: r - f, pooled[1:], n_pooled),
        "pooled_naive": _combined(lambda a, r: a * r, pooled[:2], n_pooled),
        "zero_boundary": {"count": len(zero), "of": k, "datasets": zero},
    }
    return {"pecs": _combined(pecs_value, pooled, n_pooled, pecs=True), SECTION: section}


def from_family_sums(boot: FamilyBootstrap, systems: Sequence[str],
                     sums: dict[str, tuple[np.ndarray, np.ndarray]]) -> ScoreValue:
    """The per-dataset section from per-family sums: `sums[part]` is (numerator, denominator), each (F,)
    over `boot`'s families, of Acc, AbsRec and FalseAbs, and `systems[f]` family f's system. What a
    folder of runs pools (bench.repeats_scoring: every run's units of a family summed); on one run's
    sums it is that run's own section (the same resamples)."""
    if sums["acc"][1].sum() == 0 and sums["abs_rec"][1].sum() == 0:
        return {"dataset": DATASET, "reason": NO_ANSWERS}
    keys, nums, dens = [], [], []
    of_system = np.asarray(systems)
    for system in dict.fromkeys(systems):
        mask = of_system == system
        if not any(sums[p][1][mask].sum() > 0 for p in PARTS):
            continue  # no answer units of this system in any run: no dataset, as in one run's score
        for p in PARTS:
            keys.append((SECTION, "datasets", system, p))
            nums.append(np.where(mask, sums[p][0], 0.0))
            dens.append(np.where(mask, sums[p][1], 0.0))
    for p in PARTS:
        keys.append((POOLED[p],))
        nums.append(sums[p][0])
        dens.append(sums[p][1])
    resampled = boot.resample_many(np.stack(nums, axis=1), np.stack(dens, axis=1), True)
    # each part with the families holding its units, as one run's Tally gives them (issue 52)
    est = {key: e.in_families(families_of(part))
           for key, e, part in zip(keys, boot.estimates(resampled), resampled, strict=True)}
    found = estimates(dict(zip(keys, resampled, strict=True)), est)
    return found[SECTION]


def section_json(section: ScoreValue) -> JsonValue:
    """The section with every Estimate as its JSON."""
    if isinstance(section, Estimate):
        return section.to_json()
    if isinstance(section, dict):
        return {k: section_json(v) for k, v in section.items()}
    return section
