"""Threshold accuracy of numeric replies (seed 003, eq. 6), beside the mean log relative error.

Scored requests (`NUMERIC_SCORED`): read_ruler (metres read), recover_property (the chosen
candidate's value, so its threshold accuracy is its choice accuracy at every delta up to the
candidates' spread), and the opt-in estimates `estimate_property` and `estimate_outcome`
(`bench.numeric`). Per request, over the items that have records (the caller passes one injection
level's items: level 0 in the main measures, level L under `injection.levels.L.numeric`):

- `acc_5`, `acc_10`, `acc_20`, `acc_30`: the share of items whose reply is valid and within delta
  of the reference value (`bench.threshold.within`); invalid replies count as not within and stay
  in the denominator. Proportions (`Tally.rate`): family-bootstrap percentile interval hulled
  with a cluster Clopper-Pearson interval, never zero width.
- `mean_log_error`: the mean of |ln(estimate / reference)| over the valid replies with a positive
  estimate (`Tally.mean`, percentile interval; 0 in every reply, as when every estimate is exact,
  is marked identical in every unit and has none); `log_error_excluded` counts the replies it leaves
  out, by reason (invalid, non-positive), so n and the excluded add up to the records.
- `validity`: the share of records the parser accepted.
- `by`: the same threshold accuracies per measured property (estimate_property: mass, friction,
  restitution, stiffness) or per system (estimate_outcome: sliding d, bouncing E, spring T).

read_ruler's `acc_5` is the seed's Table 34 ruler criterion (|read - true| <= 5% of the true
reading), computed in exact decimal arithmetic; tests/bench/test_numeric.py checks that it equals
`controls.read_ruler` on a run.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from evprobe.bench.items import Item
from evprobe.bench.records import Record
from evprobe.bench.systems import get_system
from evprobe.bench.threshold import DELTAS, delta_key, log_error, within

NUMERIC_SCORED: tuple[str, ...] = ("read_ruler", "recover_property", "estimate_property", "estimate_outcome")
Key = tuple[str, ...]


def check_record(item: Item, rec: Record) -> None:
    """A numeric record must match its item and carry a finite value when valid."""
    if rec.request != item.request:
        raise ValueError(
            f"record for {item.item_id!r} says request {rec.request!r}, the item is {item.request!r}; "
            "records and benchmark do not match"
        )
    if rec.valid and (rec.value is None or not math.isfinite(rec.value)):
        raise ValueError(f"record for {item.item_id!r} is valid but has no finite value")


def _group(item: Item) -> str | None:
    if item.request == "estimate_property":
        return "mass" if item.test == "test_mass" else get_system(item.system).other
    if item.request == "estimate_outcome":
        return item.system
    return None


def numeric_measures(
    rate: Callable[[Key, Iterable[tuple[int, float]]], None],
    mean: Callable[[Key, Iterable[tuple[int, float]]], None],
    skip: Callable[[Key, str], None],
    items: Iterable[Item],
    records: dict[str, Record],
    family_of: dict[str, int],
) -> dict[str, dict[str, int | dict[str, int]]]:
    """Add every numeric measure to a tally (its `rate`, `mean` and `skip`); return the counts
    that sit beside them (excluded log errors, records per request)."""
    by_request: dict[str, list[tuple[Item, Record]]] = defaultdict(list)
    n_items: Counter[str] = Counter()
    for it in items:
        if it.request not in NUMERIC_SCORED or it.variant is not None:  # one level's items per call
            continue
        n_items[it.request] += 1
        rec = records.get(it.item_id)
        if rec is not None:
            check_record(it, rec)
            by_request[it.request].append((it, rec))
    counts: dict[str, dict[str, int | dict[str, int]]] = {}
    for request in NUMERIC_SCORED:
        if not n_items[request]:
            continue  # not in this benchmark (the estimates are opt-in)
        pairs = by_request.get(request, [])
        base: Key = ("numeric", request)
        if not pairs:
            for d in DELTAS:
                skip((*base, delta_key(d)), f"no {request} records")
            skip((*base, "mean_log_error"), f"no {request} records")
            skip((*base, "validity"), f"no {request} records")
            counts[request] = {"records": 0, "items": n_items[request]}
            continue

        def fam(it: Item) -> int:
            return family_of[it.family_id]

        hits = {d: [(fam(it), float(rec.valid and within(it.reference_value, rec.value, d))) for it, rec in pairs]
                for d in DELTAS}
        for d in DELTAS:
            rate((*base, delta_key(d)), hits[d])
        logs, excluded = [], Counter()
        for it, rec in pairs:
            err = log_error(it.reference_value, rec.value) if rec.valid else None  # type: ignore[arg-type]
            if err is None:
                excluded["invalid" if not rec.valid else "non_positive"] += 1
            else:
                logs.append((fam(it), err))
        if logs:
            mean((*base, "mean_log_error"), logs)
        else:
            skip((*base, "mean_log_error"), "no valid positive estimates")
        rate((*base, "validity"), [(fam(it), float(rec.valid)) for it, rec in pairs])
        groups = sorted({g for it, _ in pairs if (g := _group(it)) is not None})
        for g in groups:
            members = [(it, rec) for it, rec in pairs if _group(it) == g]
            for d in DELTAS:
                rate((*base, "by", g, delta_key(d)),
                     [(fam(it), float(rec.valid and within(it.reference_value, rec.value, d))) for it, rec in members])
        counts[request] = {
            "records": len(pairs),
            "items": n_items[request],
            "log_error_excluded": {"invalid": excluded["invalid"], "non_positive": excluded["non_positive"]},
        }
    return counts
