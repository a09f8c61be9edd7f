"""Scores of the void block (`bench.voids`; seed 002, sections 3.4 and 5.2): abstention on each void
type, its sufficient twins beside it, the textual-vs-visual gap, and PECS per (system, void type).

Per void type (`voids.<type>` in scores.json), over the items that have records:

- `abs_rec`: the share of the type's void answer requests answered "undetermined" (AbsRec);
- `twin_acc`, `twin_false_abs`: the twins' (the matched sufficient answer requests) share answered
  correctly, and answered "undetermined" (Acc and FalseAbs of PECS);
- `pecs`: twin_acc x max(0, abs_rec - twin_false_abs), on the same resamples;
- occluded selections only: `select_min_cost` (the void's reference action chosen), `select_stop`
  (stopping on a void: answering from a sheet that shows nothing) and `twin_select_stop` (stopping on
  its sufficient twin, what a calibrated model does), and `stop_gap` = twin_select_stop -
  select_stop, paired.

With the question-side voids scored (`false_premise`, `unobservable`), `gap` also holds
`<type>_minus_visual`, that type's AbsRec minus the occluded's, paired the same way (seed 002's
ill-posed vs visual contrast); the keys appear only where the type has pairs.

`gap.textual_minus_visual` is AbsRec(unstated) - AbsRec(occluded), paired: both void types are built
on the same twins, so each family resample draws both; the interval is the percentile interval of
the per-resample differences, widened where a rate saturates (`bench.level_differences`,
`paired_difference`). The seed reports the ratio (its "about 4x"); a ratio of rates has no
interval when the visual rate can be 0, so we report the difference and print the ratio of the
point values beside it only where both are above 0. Per system the same gap is in `by_system`.
Coverage where the truth is known (benchmarks/coverage_void_gap.py): 93.3-96.1% at 30 and 144
families; 4.7% false verdicts at a true gap of 0.

`by_sub_scenario` (seed 002, appendix K: Table 29's AR and AR_ill) is `by_system` one level finer:
per sub-scenario (`bench.sub_scenarios`: a system with the property its initial test measured), each
void type's `abs_rec` (the occluded's is the visual AR, the unstated's the textual AR_ill), its twins'
`twin_acc` and `twin_false_abs`, and the paired textual-minus-visual `gap`; a void belongs to its
twin's sub-scenario (the same family).

`pecs` holds PECS with the seed's datasets: one dataset per (system, void type), the controls being
the type's twins in that system (`bench.pecs`: per-dataset Acc, AbsRec, FalseAbs, J, PECS and the
naive product, the equal-weight mean with its projection bound, zero-boundary counts; pooled over
every void and twin). Invalid replies stay in every denominator (never correct, never abstaining).
All intervals are family-bootstrap intervals from the main score's resamples (same families, same
seed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from evprobe.bench import pecs
from evprobe.bench.level_differences import paired_difference
from evprobe.bench.sub_scenarios import cell_of
from evprobe.bench.tally import Key, ScoreSection, Tally
from evprobe.bench.voids import VOID_TYPES
from evprobe.core.bootstrap import DEFAULT_N_BOOT, DEFAULT_SEED, Estimate, FamilyBootstrap, Resampled

if TYPE_CHECKING:
    from evprobe.bench.items import Item

SECTION = "voids"
DATASET = "system and void type: the controls of a dataset are that void type's sufficient twins in that system"
NO_VOID_ANSWERS = "no void answer records"
NO_VOID_SELECTS = "no occluded select records"
PER_TYPE = ("abs_rec", "twin_acc", "twin_false_abs")
SELECT = ("select_min_cost", "select_stop", "twin_select_stop")
QUESTION_SIDE = ("false_premise", "unobservable")  # seed 002's ill-posed questions (bench.voids)


# The groups a void type's measures are also split by: (section key, the group of a void item).
GROUPS: dict[str, Callable[[Item], str]] = {
    "by_system": lambda it: it.system,
    "by_sub_scenario": lambda it: cell_of(it.system, it.initial_property),
}


def _pecs_key(group: tuple[str, str] | None, void: str, part: str) -> Key:
    """The tally key of a PECS part of `void`: over every pair, or over one group's (e.g. ("by_system", s))."""
    name = {"acc": "twin_acc", "abs_rec": "abs_rec", "false_abs": "twin_false_abs"}[part]
    return (SECTION, void, name) if group is None else (SECTION, *group, void, name)


def _rate_pairs(tally: Tally, keys: Mapping[str, Key], pairs: list[tuple[Item, Item]],
                decoded: Mapping[str, str | None], family_of: Callable[[str], int]) -> None:
    """PECS' parts over (void, twin) pairs: the twins are the controls, the voids the voids."""
    pecs.rate_parts(tally, keys, ((family_of(t.family_id), decoded[t.item_id], t.reference_answer) for _, t in pairs),
                    ((family_of(v.family_id), decoded[v.item_id]) for v, _ in pairs))


def tally_voids(tally: Tally, voids: Iterable[Item], items: Mapping[str, Item], decoded: Mapping[str, str | None],
                family_of: Callable[[str], int]) -> None:
    """Tally every void measure. voids: the void items; items: every item by id (the twins among
    them); decoded: the decoded reply of every item with a record (None: invalid)."""
    answers: dict[str, list[tuple[Item, Item]]] = {v: [] for v in VOID_TYPES}
    selects: list[tuple[Item, Item]] = []
    for it in voids:
        twin = items[it.twin_id]  # type: ignore[index]
        if it.item_id not in decoded or twin.item_id not in decoded:
            continue  # a pair is scored when both members have records
        (selects if it.request == "select" else answers[it.void]).append((it, twin))  # type: ignore[index]
    for void, pairs in answers.items():
        if not pairs:
            for name in PER_TYPE:
                tally.skip((SECTION, void, name), NO_VOID_ANSWERS)
            continue
        _rate_pairs(tally, {p: _pecs_key(None, void, p) for p in pecs.PARTS}, pairs, decoded, family_of)
        for kind, group_of in GROUPS.items():
            for group in dict.fromkeys(group_of(it) for it, _ in pairs):
                _rate_pairs(tally, {p: _pecs_key((kind, group), void, p) for p in pecs.PARTS},
                            [(v, t) for v, t in pairs if group_of(v) == group], decoded, family_of)
    pooled = [pair for pairs in answers.values() for pair in pairs]
    if pooled:
        _rate_pairs(tally, {p: (SECTION, "pooled", p) for p in pecs.PARTS}, pooled, decoded, family_of)
    if not selects:
        for name in SELECT:
            tally.skip((SECTION, "occluded", name), NO_VOID_SELECTS)
        return
    f = [family_of(v.family_id) for v, _ in selects]
    tally.rate((SECTION, "occluded", "select_min_cost"),
               zip(f, (decoded[v.item_id] == v.reference_action for v, _ in selects)))
    tally.rate((SECTION, "occluded", "select_stop"), zip(f, (decoded[v.item_id] == "stop" for v, _ in selects)))
    tally.rate((SECTION, "occluded", "twin_select_stop"), zip(f, (decoded[t.item_id] == "stop" for _, t in selects)))


def score_voids(items: Mapping[str, Item], voids: Iterable[Item], decoded: Mapping[str, str | None],
                families: Sequence[str], *, n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED) -> ScoreSection:
    """The void section (module docstring) from decoded replies, on a `FamilyBootstrap` of `families`
    (the main score's: the same families and seed give the same resamples)."""
    voids = list(voids)
    families = list(families)
    family_of = {f: i for i, f in enumerate(families)}
    tally = Tally(FamilyBootstrap(families, n_boot, seed))
    tally_voids(tally, voids, items, decoded, family_of.__getitem__)
    resampled, est = tally.resolve()
    return section(resampled, est, voids)


def section(resampled: Mapping[Key, Resampled], est: Mapping[Key, Estimate], voids: Iterable[Item]) -> ScoreSection:
    """The `voids` section of scores.json from the tallied measures (module docstring)."""
    present = [v for v in VOID_TYPES if any(it.void == v for it in voids)]
    out: ScoreSection = {"types": {v: VOID_TYPES[v] for v in present}}
    for void in present:
        block = {name: est[(SECTION, void, name)] for name in PER_TYPE if (SECTION, void, name) in est}
        parts = [resampled.get(_pecs_key(None, void, p)) for p in pecs.PARTS]
        if all(p is not None for p in parts):
            acc, abs_rec, false_abs = parts
            block["pecs"] = pecs.pecs_estimate(parts, acc.n + abs_rec.n)  # type: ignore[arg-type, union-attr]
        if void == "occluded":
            block.update({name: est[(SECTION, void, name)] for name in SELECT if (SECTION, void, name) in est})
            twin, void_stop = (resampled.get((SECTION, void, k)) for k in ("twin_select_stop", "select_stop"))
            if twin is not None and void_stop is not None:
                block["stop_gap"] = paired_difference(twin, void_stop)
        out[void] = block
    out["gap"] = _gap(resampled, None)
    out["by_system"] = _by_group(resampled, est, "by_system", present)
    out["pecs"] = _pecs_datasets(resampled, est, list(out["by_system"]), present)
    out["by_sub_scenario"] = _by_group(resampled, est, "by_sub_scenario", present)  # last: older keys keep their place
    return out


def _by_group(resampled: Mapping[Key, Resampled], est: Mapping[Key, Estimate], kind: str,
              present: list[str]) -> ScoreSection:
    """Per group of `kind` (GROUPS): each void type's PER_TYPE measures and the paired gap."""
    groups = list(dict.fromkeys(k[2] for k in resampled if k[:2] == (SECTION, kind)))
    return {g: {**{v: {name: est[(SECTION, kind, g, v, name)] for name in PER_TYPE
                       if (SECTION, kind, g, v, name) in est} for v in present},
                "gap": _gap(resampled, (kind, g))} for g in groups}


def _gap(resampled: Mapping[Key, Resampled], group: tuple[str, str] | None) -> dict[str, Estimate | float]:
    """AbsRec(unstated) - AbsRec(occluded), paired; the ratio of the point values where both are above 0.
    With question-side voids (false_premise, unobservable) scored, also each one's AbsRec minus the
    occluded's, paired the same way (`<type>_minus_visual`: keys only where that type has pairs)."""
    textual, visual = (resampled.get(_pecs_key(group, v, "abs_rec")) for v in ("unstated", "occluded"))
    out: dict[str, Estimate | float] = {}
    if textual is None or visual is None:
        out["textual_minus_visual"] = Estimate.empty("needs answer records of both void types")
    else:
        out["textual_minus_visual"] = paired_difference(textual, visual)
        if textual.value > 0 and visual.value > 0:
            out["ratio_of_points"] = float(textual.value / visual.value)
    for void in QUESTION_SIDE:
        asked = resampled.get(_pecs_key(group, void, "abs_rec"))
        if asked is not None:
            out[f"{void}_minus_visual"] = (paired_difference(asked, visual) if visual is not None else
                                           Estimate.empty("needs occluded answer records"))
    return out


def _pecs_datasets(resampled: Mapping[Key, Resampled], est: Mapping[Key, Estimate], systems: list[str],
                   present: list[str]) -> ScoreSection:
    """bench.pecs' per-dataset section with datasets (system, void type), pooled over every void pair."""
    keyed: dict[Key, Resampled] = {}
    estimates: dict[Key, Estimate] = {}
    for s in systems:
        for v in present:
            for p in pecs.PARTS:
                src = _pecs_key(("by_system", s), v, p)
                if src in resampled:
                    keyed[(pecs.SECTION, "datasets", f"{s} {v}", p)] = resampled[src]
                    estimates[(pecs.SECTION, "datasets", f"{s} {v}", p)] = est[src]
    if not keyed:
        return {"dataset": DATASET, "reason": NO_VOID_ANSWERS}
    for p in pecs.PARTS:  # pooled: every void type's pairs (a twin counted once per void type it anchors)
        keyed[(pecs.POOLED[p],)] = resampled[(SECTION, "pooled", p)]
    found = pecs.estimates(keyed, estimates)
    return {"pecs": found["pecs"], **found[pecs.SECTION], "dataset": DATASET}


__all__ = ["SECTION", "score_voids", "section", "tally_voids"]
