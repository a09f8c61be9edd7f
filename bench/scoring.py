"""Score a run: every measure of seed 000 (Tables 3, 7, 11-49) and PECS (seed 002, section 3.4).

`score(items, records)` joins records to items by `item_id` and returns a JSON-ready dict in which
every number is `{"value": x, "ci": [lo, hi], "n": n, "n_families": f}` (see `core.bootstrap`): rates
are fractions in [0, 1], costs are in assigned units, n counts the units in the denominator and
n_families the families holding them, on which the interval rests (printed `(n=576 in 144
families)`; a per-system row counts its system's families; a value fixed by design has none), and all intervals of
one call come from one matrix of family resamples (the variant section from one matrix over the
variant subset), so differences and products are paired. Every rate of 0/1 units (choices,
pairs, answers, validity, a policy's success) is a proportion (`Tally.rate`, `binary=True`): its
interval is the hull of the percentile interval and a cluster Clopper-Pearson interval
(`core.proportion`), so 576/576 prints an interval that reaches below 1, never `[1.0, 1.0]`. Costs
are bounded means (`Tally.bounded_mean`: 0 to the dearest price, rescaled to a share for their
interval), so a run at the reference's cost on every decision is not `0.5 [0.5, 0.5]` either.
Paired differences (variants, injection levels) are widened where a rate saturates
(`bench.level_differences`). PECS (a product of rates) and the numeric block's mean log error keep
the percentile interval. The cost of a rule that reads no replies (the fixed rules, the random test,
whose every decision costs the mean test price) is computed from the design alone: where every
family shares it, it is fixed by design (`Tally.design_mean`, core.bootstrap's rule), with
`"fixed_by_design": true` and no interval in print, `1.25 (fixed by design, n=576)`.

Units and vocabulary. A *decision* is a base `select` item; its `decision_id` links its
`answer_initial` item and its 8 `answer_after_test` items (4 tests x 2 hidden worlds). A decision
is *resolved* when the initial evidence settles the question. The *repeat* test measures the
initially measured property again (`test_mass` when `initial_property` is mass, else
`test_other`); the *missing* test is the other one. A test *resolves* a decision when both of its
hidden-world `answer_after_test` items are resolved (labels, whether or not they have records).

Partial runs. Measures are computed over the units that have records; a measure whose inputs are
absent altogether (e.g. no answer records in a `--requests select` run) is
`{"value": null, "ci": [null, null], "n": 0, "reason": "..."}`, never invented. `coverage` gives
records / items per request type. Invalid replies stay in every denominator: an invalid selection
is never correct, never "stop", costs 0 and counts as "invalid"; an invalid answer is never correct
and never counts as abstaining.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from evprobe.core.bootstrap import (
    DEFAULT_N_BOOT,
    DEFAULT_SEED,
    INTERVAL_METHOD,
    Estimate,
    FamilyBootstrap,
)
from evprobe.bench import doubt, pecs, sub_scenarios, void_scoring
from evprobe.bench.tally import Key, Tally
from evprobe.bench.items import NUMERIC_REQUESTS, REQUESTS, VARIANTS, Item
from evprobe.bench.level_differences import METHOD as LEVEL_DIFFERENCE_METHOD
from evprobe.bench.level_differences import level_differences, paired_difference
from evprobe.bench.numeric_scoring import numeric_measures
from evprobe.bench.records import Record
from evprobe.bench.reference import ACTIONS, ANSWERS, TESTS, Prices

ANSWER_REQUESTS: tuple[str, ...] = ("answer_initial", "answer_after_test")
PROPERTY_TESTS: tuple[str, ...] = ("test_mass", "test_other")
CATEGORIES: tuple[str, ...] = ("stop", "missing", "repeat", "fall", "both", "invalid")
RULES: tuple[str, ...] = (
    "always_stop",
    "repeat_known",
    "free_fall",
    "test_missing",
    "complete_report",
    "random_test",
    "min_cost",
    "model",
    "model_exact_reader",
)
REPORT_PRICES: tuple[float, ...] = (1.0, 2.0, 3.0, 5.0)  # appendix F.1
RULER_TOLERANCE = 0.05  # appendix G: |read - true| <= 5% of the true reading
HEADLINE: tuple[str, ...] = (
    "min_cost_choice",
    "stop_if_enough",
    "test_if_needed",
    "both_correct_image_pairs",
    "both_correct_threshold_pairs",
    "same_choice_image_pairs",
    "same_choice_threshold_pairs",
    "enough_evidence",
    "useful_test_supplied",
    "resolved_and_correct",
    "mean_cost",
    "validity_select",
    "pecs",
    "pecs_acc",
    "pecs_abs_rec",
    "pecs_false_abs",
)
SECTIONS: tuple[str, ...] = (
    "answers",
    "choices",
    "errors",
    "repeats",
    "hidden_alternatives",
    "policies",
    "repricing",
    "controls",
    "validity",
    "variants",
    "by_system",
    "coverage",
    "meta",
)
BY_SYSTEM: tuple[str, ...] = (
    "min_cost_choice",
    "both_correct_image_pairs",
    "both_correct_threshold_pairs",
    "same_choice_image_pairs",
    "enough_evidence",
    "resolved_and_correct",
)

NO_SELECT = "no select records"
NO_INITIAL = "no answer_initial records"
NO_AFTER = "no answer_after_test records"



# -- the benchmark's structure ---------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """A base selection and the items linked to it by `decision_id`."""

    decision_id: str
    family: int  # index into the bootstrap's families
    system: str
    resolved: bool
    reference_action: str
    repeat: str  # the test of the initially measured property
    missing: str  # the test of the other property
    select_id: str
    initial_id: str  # the answer_initial item
    after: dict[str, tuple[str, str]]  # test -> answer_after_test item ids, hidden worlds in order
    after_resolved: dict[str, tuple[bool, bool]]

    def resolves(self, action: str) -> bool:
        """Whether `action` leaves the answer known in every remaining world."""
        return self.resolved if action == "stop" else all(self.after_resolved[action])


@dataclass(frozen=True)
class Bench:
    """Index of a benchmark's items: families, decisions, pairs and the items of each request."""

    items: dict[str, Item]
    families: tuple[str, ...]  # in order of first appearance
    family_of: dict[str, int]
    decisions: tuple[Decision, ...]
    by_id: dict[str, Decision]
    image_pairs: tuple[tuple[str, str], ...]  # base select item ids
    threshold_pairs: tuple[tuple[str, str], ...]
    subset: tuple[str, ...]  # families that carry variants

    @classmethod
    def build(cls, items: Sequence[Item]) -> Bench:
        index: dict[str, Item] = {}
        for it in items:
            if it.item_id in index:
                raise ValueError(f"duplicate item id {it.item_id!r} in the benchmark")
            index[it.item_id] = it
        families = tuple(dict.fromkeys(it.family_id for it in items))
        family_of = {f: i for i, f in enumerate(families)}
        initial: dict[str, str] = {}
        after: dict[tuple[str, str], list[Item]] = defaultdict(list)
        for it in items:
            if it.variant is None and it.request == "answer_initial":
                initial[it.decision_id] = it.item_id
            elif it.variant is None and it.request == "answer_after_test":
                after[(it.decision_id, it.test)].append(it)
        decisions = []
        image_pairs: dict[str, list[str]] = defaultdict(list)
        threshold_pairs: dict[str, list[str]] = defaultdict(list)
        for it in items:
            if it.request != "select" or it.variant is not None:
                continue
            did = it.decision_id
            shown: dict[str, tuple[str, str]] = {}
            labels: dict[str, tuple[bool, bool]] = {}
            for test in TESTS:
                pair = sorted(after.get((did, test), []), key=lambda x: x.hidden_world)
                if len(pair) != 2 or did not in initial:
                    raise ValueError(
                        f"decision {did!r} lacks its answer items (answer_initial and two hidden "
                        f"worlds per test); score against the whole benchmark"
                    )
                shown[test] = (pair[0].item_id, pair[1].item_id)
                labels[test] = (bool(pair[0].resolved), bool(pair[1].resolved))
            repeat = "test_mass" if it.initial_property == "mass" else "test_other"
            decisions.append(
                Decision(
                    decision_id=did,
                    family=family_of[it.family_id],
                    system=it.system,
                    resolved=bool(it.resolved),
                    reference_action=it.reference_action,
                    repeat=repeat,
                    missing="test_other" if repeat == "test_mass" else "test_mass",
                    select_id=it.item_id,
                    initial_id=initial[did],
                    after=shown,
                    after_resolved=labels,
                )
            )
            image_pairs[it.image_pair_id].append(it.item_id)
            threshold_pairs[it.threshold_pair_id].append(it.item_id)
        subset = tuple(dict.fromkeys(it.family_id for it in items if it.variant is not None))
        return cls(
            items=index,
            families=families,
            family_of=family_of,
            decisions=tuple(decisions),
            by_id={d.decision_id: d for d in decisions},
            image_pairs=_pairs(image_pairs),
            threshold_pairs=_pairs(threshold_pairs),
            subset=subset,
        )

    def truth(self, decision: Decision, world: str) -> str:
        """The binary answer (yes | no) in a hidden world: the combined report reveals everything,
        so its after-test item's reference answer is the world's true answer."""
        for item_id in decision.after["combined_report"]:
            item = self.items[item_id]
            if item.hidden_world == world:
                return item.reference_answer
        raise ValueError(f"no combined-report item for world {world} of {decision.decision_id}")


def _pairs(groups: dict[str, list[str]]) -> tuple[tuple[str, str], ...]:
    for key, members in groups.items():
        if len(members) != 2:
            raise ValueError(f"pair {key!r} has {len(members)} members, expected 2")
    return tuple((a, b) for a, b in groups.values())


# -- records ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Replies:
    """Records joined to items. `decoded` holds the action (select) or answer (answer requests)
    of a valid reply and None for an invalid one; items without a record are absent."""

    records: dict[str, Record]
    decoded: dict[str, str | None]

    @classmethod
    def build(cls, bench: Bench, records: Iterable[Record]) -> Replies:
        joined: dict[str, Record] = {}
        decoded: dict[str, str | None] = {}
        for rec in records:
            item = bench.items.get(rec.item_id)
            if item is None:
                raise ValueError(
                    f"record for unknown item id {rec.item_id!r}: not in this benchmark"
                )
            if rec.item_id in joined:
                raise ValueError(f"two records for item {rec.item_id!r}; keep one record per item")
            if rec.request != item.request:
                raise ValueError(
                    f"record for {rec.item_id!r} says request {rec.request!r}, the item is "
                    f"{item.request!r}; records and benchmark do not match"
                )
            joined[rec.item_id] = rec
            decoded[rec.item_id] = _decode(item, rec)
        return cls(joined, decoded)

    def has(self, item_id: str) -> bool:
        return item_id in self.records

    def correct(self, item: Item) -> bool:
        """An answer record equals the reference answer (invalid: never)."""
        return self.decoded.get(item.item_id) == item.reference_answer


def _decode(item: Item, rec: Record) -> str | None:
    """The action or answer a valid record stands for; a valid record without one is an error."""
    if not rec.valid:
        return None
    if item.request == "select":
        if rec.action not in ACTIONS:
            raise ValueError(
                f"record for {item.item_id!r} is valid but its action is {rec.action!r}"
            )
        if rec.choice is not None and (item.options or {}).get(rec.choice) != rec.action:
            raise ValueError(
                f"record for {item.item_id!r}: choice {rec.choice!r} is not action {rec.action!r} "
                f"in the item's menu"
            )
        return rec.action
    if item.request in (*ANSWER_REQUESTS, "both_given"):
        if rec.answer not in ANSWERS:
            raise ValueError(
                f"record for {item.item_id!r} is valid but its answer is {rec.answer!r}"
            )
        return rec.answer
    if item.request == "read_ruler":
        if rec.value is None or not np.isfinite(rec.value):
            raise ValueError(f"record for {item.item_id!r} is valid but has no finite value")
        return None
    if item.request == "recover_property":
        if rec.choice not in (item.options or {}):
            raise ValueError(
                f"record for {item.item_id!r} is valid but choice {rec.choice!r} is not an option"
            )
        return rec.choice
    raise ValueError(f"item {item.item_id!r} has unknown request {item.request!r}")


# -- accumulating measures -------------------------------------------------------------------------


# -- the score -------------------------------------------------------------------------------------


# Measures kept per injection level (`bench.injection`): the headline and the answer sections.
LEVEL_SECTIONS: tuple[str, ...] = (*HEADLINE, "answers", "hidden_alternatives", "validity", "coverage", "numeric")


def score(
    items: Sequence[Item],
    records: Iterable[Record],
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
    prices: Prices | None = None,
) -> dict[str, Any]:
    """Every measure of a run, with family-bootstrap intervals (see the module docstring).

    `prices` are the action prices of the benchmark (default: stop 0, tests 1, report 2); the
    repricing section varies the combined report's price around them.

    Opt-in blocks: numeric estimates are scored with read_ruler and recover_property in the
    "numeric" section (`bench.numeric_scoring`), from the same family resamples as every other
    measure; the items of injection level L >= 1 are scored as a benchmark of their own
    (`LEVEL_SECTIONS` under "injection" -> "levels" -> "L"), with the same bootstrap seed over the
    same families (so level L's resamples are the main set's). Every other measure uses the main
    (level-0) items only, exactly as without the blocks.
    """
    prices = prices or Prices()
    index: dict[str, Item] = {}
    for it in items:
        if it.item_id in index:
            raise ValueError(f"duplicate item id {it.item_id!r} in the benchmark")
        index[it.item_id] = it
    parts: dict[int, tuple[list[Item], list[Record]]] = defaultdict(lambda: ([], []))
    # the opt-in numeric estimates, per injection level (bench.injection): level L's are scored with
    # level L's decisions, so threshold accuracy is traced across the ladder on the same resamples
    numeric_items: dict[int, list[Item]] = defaultdict(list)
    numeric_records: dict[int, dict[str, Record]] = defaultdict(dict)
    voids = [it for it in items if it.void is not None]  # the void block (bench.voids): its own section
    void_records: list[Record] = []
    every_record: list[Record] = []
    for it in items:
        if it.void is not None:
            continue
        if it.request in NUMERIC_REQUESTS:
            numeric_items[it.injection].append(it)
        else:
            parts[it.injection][0].append(it)
    for rec in records:
        item = index.get(rec.item_id)
        if item is None:
            raise ValueError(f"record for unknown item id {rec.item_id!r}: not in this benchmark")
        every_record.append(rec)
        if item.void is not None:
            void_records.append(rec)
        elif item.request in NUMERIC_REQUESTS:
            if rec.item_id in numeric_records[item.injection]:
                raise ValueError(f"two records for item {rec.item_id!r}; keep one record per item")
            numeric_records[item.injection][rec.item_id] = rec
        else:
            parts[item.injection][1].append(rec)
    base_items, base_records = parts.pop(0, ([], []))
    base_kept: dict[str, Any] = {}
    out = _score_set(base_items, base_records, n_boot=n_boot, seed=seed, prices=prices,
                     numeric=(numeric_items.get(0, []), numeric_records.get(0, {})), keep=base_kept)
    if parts:
        levels, differences = {}, {}
        for level in sorted(parts):
            level_items, level_records = parts[level]
            kept: dict[str, Any] = {}
            full = _score_set(level_items, level_records, n_boot=n_boot, seed=seed, prices=prices, keep=kept,
                              numeric=(numeric_items.get(level, []), numeric_records.get(level, {})))
            levels[str(level)] = {name: full[name] for name in LEVEL_SECTIONS if name in full}
            same = kept["families"] == base_kept["families"]  # same ids in the same order: the same resamples
            differences[str(level)] = level_differences(kept["resampled"], base_kept["resampled"], same)
        out["injection"] = {"levels": levels, "level_0": "the main measures above",
                            "differences": _jsonable(differences), "differences_method": LEVEL_DIFFERENCE_METHOD}
    if voids:
        out[void_scoring.SECTION] = _void_section(index, voids, every_record, base_kept["families"], n_boot, seed)
    return out


def _void_section(index: dict[str, Item], voids: list[Item], records: list[Record], families: tuple[str, ...],
                  n_boot: int, seed: int) -> dict[str, Any]:
    """The void block's section (bench.void_scoring) from the decoded replies of every record but the
    numeric estimates' (no void or twin is one; their numbers are bench.numeric_scoring's)."""
    decoded: dict[str, str | None] = {}
    for rec in records:
        if index[rec.item_id].request in NUMERIC_REQUESTS:
            continue
        if rec.item_id in decoded:
            raise ValueError(f"two records for item {rec.item_id!r}; keep one record per item")
        decoded[rec.item_id] = _decode(index[rec.item_id], rec)
    return _jsonable(void_scoring.score_voids(index, voids, decoded, families, n_boot=n_boot, seed=seed))


def _score_set(
    items: Sequence[Item],
    records: Iterable[Record],
    *,
    n_boot: int,
    seed: int,
    prices: Prices,
    numeric: tuple[Sequence[Item], dict[str, Record]] = ((), {}),
    keep: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every measure over one set of decision items (the main items, or one injection level's).
    `keep`, when given, receives the bootstrap's families and every measure's resamples (for the
    paired level differences)."""
    bench = Bench.build(items)
    replies = Replies.build(bench, records)
    boot = FamilyBootstrap(bench.families, n_boot, seed)
    tally = Tally(boot)
    present = {request: _present(bench, replies, request) for request in REQUESTS}

    _selection_measures(tally, bench, replies, prices, present)
    _answer_measures(tally, bench, replies, present)
    _policy_measures(tally, bench, replies, prices, present)
    _control_measures(tally, bench, replies, present)
    _validity_measures(tally, bench, replies)
    for system in dict.fromkeys(d.system for d in bench.decisions):
        _system_measures(tally, bench, replies, present, system)
    cells = sub_scenarios.tally_cells(tally, bench, replies, present)
    doubt.tally_doubt(tally, bench, replies)  # only where replies carry reasoning traces
    numeric_items, numeric_records = numeric
    numeric_counts = numeric_measures(
        tally.rate, tally.mean, tally.skip, [*items, *numeric_items],
        {**replies.records, **numeric_records}, bench.family_of,
    )
    resampled, est = tally.resolve()
    if keep is not None:
        keep.update(families=tuple(boot.families), resampled=resampled)

    out: dict[str, Any] = {}
    for key, estimate in est.items():
        _put(out, key, estimate)
    out["resolved_and_correct"] = est[("policies", "model", "correct")]
    out["useful_test_supplied"] = est[("answers", "useful_test_supplied")]
    out["validity_select"] = est[("validity", "validity_select")]
    out.pop(pecs.SECTION, None)  # rebuilt whole, in order, by pecs.estimates
    out.update(pecs.estimates(resampled, est))
    out["choices"] = {**out.get("choices", {}), **_choice_counts(bench, replies)}
    out["hidden_alternatives"]["pairs"] = sum(1 for _ in _hidden_pairs(bench))
    out["variants"] = _variants(bench, replies, boot)
    out[sub_scenarios.SECTION] = sub_scenarios.section(resampled, est, cells)
    if numeric_counts:
        out.setdefault("numeric", {})["counts"] = numeric_counts
    out["coverage"] = _coverage(bench, replies)
    out["meta"] = {
        "n_boot": n_boot,
        "seed": seed,
        "interval": INTERVAL_METHOD,
        "n_families": len(bench.families),
        "n_items": len(bench.items),
        "n_records": len(replies.records),
        "n_decisions": len(bench.decisions),
        "prices": prices.as_dict(),
        "report_prices": list(REPORT_PRICES),
        "ruler_tolerance": RULER_TOLERANCE,
    }
    out["policies"] = {rule: out["policies"][rule] for rule in RULES}
    out["by_system"] = {
        system: {name: block[name] for name in BY_SYSTEM}
        for system, block in out["by_system"].items()
    }
    ordered = {name: out.pop(name) for name in (*HEADLINE, *SECTIONS)}
    ordered.update(out)
    return _jsonable(ordered)


def _present(bench: Bench, replies: Replies, request: str) -> bool:
    """Whether the run has any base record of this request type."""
    return any(
        bench.items[i].request == request and bench.items[i].variant is None
        for i in replies.records
    )


def _put(tree: dict[str, Any], key: Key, value: Any) -> None:
    node = tree
    for part in key[:-1]:
        node = node.setdefault(part, {})
    node[key[-1]] = value


def _jsonable(x: Any) -> Any:
    if isinstance(x, Estimate):
        return x.to_json()
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    return x


def _price_key(price: float) -> str:
    return f"{price:g}"


# -- selections (Tables 11-13, 19-23, 30-33; Table 3's evidence and repeat columns) ----------------


def _category(d: Decision, action: str | None) -> str:
    if action is None:
        return "invalid"
    return {
        "stop": "stop",
        d.missing: "missing",
        d.repeat: "repeat",
        "free_fall": "fall",
        "combined_report": "both",
    }[action]


def _selected(bench: Bench, replies: Replies, decisions: Iterable[Decision] | None = None):
    """(decision, decoded action) for decisions with a select record."""
    for d in bench.decisions if decisions is None else decisions:
        if replies.has(d.select_id):
            yield d, replies.decoded[d.select_id]


def _cost(action: str | None, prices: Prices) -> float:
    return 0.0 if action is None else prices.of(action)  # an invalid reply buys nothing


def _cost_bounds(prices: Prices) -> tuple[float, float]:
    """(lower, upper) of any one decision's cost: 0 (an invalid reply) to the dearest price."""
    values = prices.as_dict().values()
    return min(0.0, *values), max(0.0, *values)


SELECTION_KEYS: tuple[Key, ...] = (
    ("min_cost_choice",),
    ("stop_if_enough",),
    ("test_if_needed",),
    ("both_correct_image_pairs",),
    ("both_correct_threshold_pairs",),
    ("same_choice_image_pairs",),
    ("same_choice_threshold_pairs",),
    ("enough_evidence",),
    ("mean_cost",),
    *(("choices", g, c) for g in ("resolved", "unresolved") for c in CATEGORIES),
    ("errors", "unneeded_test"),
    ("errors", "useless_test"),
    ("errors", "early_stop"),
    ("repeats", "repeat_known_all"),
    ("repeats", "repeat_known_unresolved"),
    *(
        ("repricing", _price_key(p), m)
        for p in REPORT_PRICES
        for m in ("choice_accuracy", "mean_cost")
    ),
    ("policies", "model", "mean_cost"),
    ("policies", "model_exact_reader", "correct"),
    ("policies", "model_exact_reader", "mean_cost"),
)


def _selection_measures(
    tally: Tally, bench: Bench, replies: Replies, prices: Prices, present: dict[str, bool]
) -> None:
    """Measures of the base selections. Denominators: decisions with a select record (576 on
    the main set), their resolved / unresolved halves (288 each), pairs with both records (288),
    and for the repeat rates the decisions that bought one property test."""
    if not present["select"]:
        for key in SELECTION_KEYS:
            tally.skip(key, NO_SELECT)
        return
    sel = list(_selected(bench, replies))
    known = [(d, a) for d, a in sel if d.resolved]
    unknown = [(d, a) for d, a in sel if not d.resolved]
    tally.rate(("min_cost_choice",), ((d.family, a == d.reference_action) for d, a in sel))
    tally.rate(("stop_if_enough",), ((d.family, a == "stop") for d, a in known))
    tally.rate(("test_if_needed",), ((d.family, a == d.reference_action) for d, a in unknown))
    _pair_measures(tally, bench, replies, bench.decisions, ())
    tally.rate(("enough_evidence",), ((d.family, a is not None and d.resolves(a)) for d, a in sel))
    tally.bounded_mean(("mean_cost",), ((d.family, _cost(a, prices)) for d, a in sel), *_cost_bounds(prices))
    for group, units in (("resolved", known), ("unresolved", unknown)):
        for cat in CATEGORIES:
            tally.rate(
                ("choices", group, cat), ((d.family, _category(d, a) == cat) for d, a in units)
            )
    tally.rate(("errors", "unneeded_test"), ((d.family, a not in (None, "stop")) for d, a in known))
    tally.rate(
        ("errors", "useless_test"), ((d.family, a in (d.repeat, "free_fall")) for d, a in unknown)
    )
    tally.rate(("errors", "early_stop"), ((d.family, a == "stop") for d, a in unknown))
    tally.rate(
        ("repeats", "repeat_known_all"),
        ((d.family, a == d.repeat) for d, a in sel if a in PROPERTY_TESTS),
    )
    tally.rate(
        ("repeats", "repeat_known_unresolved"),
        ((d.family, a == d.repeat) for d, a in unknown if a in PROPERTY_TESTS),
    )
    for price in REPORT_PRICES:
        repriced = Prices(**{**prices.as_dict(), "combined_report": price})
        best = {d.decision_id: _cheapest_resolving(d, repriced) for d, _ in sel}
        tally.rate(
            ("repricing", _price_key(price), "choice_accuracy"),
            ((d.family, a in best[d.decision_id]) for d, a in sel),
        )
        tally.bounded_mean(
            ("repricing", _price_key(price), "mean_cost"),
            ((d.family, _cost(a, repriced)) for d, a in sel),
            *_cost_bounds(repriced),
        )
    tally.bounded_mean(
        ("policies", "model", "mean_cost"),
        ((d.family, _cost(a, prices)) for d, a in sel),
        *_cost_bounds(prices),
    )
    tally.rate(
        ("policies", "model_exact_reader", "correct"),
        ((d.family, a is not None and d.resolves(a)) for d, a in sel),
    )
    tally.bounded_mean(
        ("policies", "model_exact_reader", "mean_cost"),
        ((d.family, _cost(a, prices)) for d, a in sel),
        *_cost_bounds(prices),
    )


def _cheapest_resolving(d: Decision, prices: Prices) -> frozenset[str]:
    """Minimum-cost actions among those that resolve the decision (ties all count as correct)."""
    useful = [a for a in ACTIONS if d.resolves(a)]
    cheapest = min(prices.of(a) for a in useful)
    return frozenset(a for a in useful if prices.of(a) == cheapest)


def _pair_measures(
    tally: Tally,
    bench: Bench,
    replies: Replies,
    decisions: Iterable[Decision],
    prefix: Key,
    only: Sequence[str] | None = None,
) -> None:
    """Both correct and same choice over image and threshold pairs whose two records exist.
    Two invalid replies count as the same choice (seed B.2)."""
    keep = {d.select_id for d in decisions}
    for kind, pairs in (("image", bench.image_pairs), ("threshold", bench.threshold_pairs)):
        units_both, units_same = [], []
        for a_id, b_id in pairs:
            if a_id not in keep or not (replies.has(a_id) and replies.has(b_id)):
                continue
            fam = bench.family_of[bench.items[a_id].family_id]
            a, b = replies.decoded[a_id], replies.decoded[b_id]
            ok_a = a == bench.items[a_id].reference_action
            ok_b = b == bench.items[b_id].reference_action
            units_both.append((fam, ok_a and ok_b))
            units_same.append((fam, a == b))
        for name, units in (
            (f"both_correct_{kind}_pairs", units_both),
            (f"same_choice_{kind}_pairs", units_same),
        ):
            if only is None or name in only:
                tally.rate((*prefix, name), units)


def _choice_counts(bench: Bench, replies: Replies) -> dict[str, Any]:
    """Raw counts of Tables 19-20 next to the rates: {"<group>_counts": {"n": .., cat: ..}}."""
    out: dict[str, Any] = {}
    for group, resolved in (("resolved", True), ("unresolved", False)):
        counts = dict.fromkeys(CATEGORIES, 0)
        n = 0
        for d, a in _selected(bench, replies):
            if d.resolved == resolved:
                counts[_category(d, a)] += 1
                n += 1
        out[f"{group}_counts"] = {"n": n, **counts}
    return out


# -- answers (Tables 3, 17, 18; appendix D) --------------------------------------------------------


def _answer_measures(
    tally: Tally, bench: Bench, replies: Replies, present: dict[str, bool]
) -> None:
    items = bench.items
    if present["answer_initial"]:
        known = [d for d in bench.decisions if d.resolved and replies.has(d.initial_id)]
        unknown = [d for d in bench.decisions if not d.resolved and replies.has(d.initial_id)]
        tally.rate(
            ("answers", "known_answer"),
            ((d.family, replies.correct(items[d.initial_id])) for d in known),
        )
        tally.rate(
            ("answers", "unknown_answer"),
            ((d.family, replies.decoded[d.initial_id] == "undetermined") for d in unknown),
        )
    else:
        tally.skip(("answers", "known_answer"), NO_INITIAL)
        tally.skip(("answers", "unknown_answer"), NO_INITIAL)
    if present["answer_initial"] and present["select"]:
        units = []
        for d, a in _selected(bench, replies):
            if not replies.has(d.initial_id):
                continue
            answer = replies.decoded[d.initial_id]
            agree = (
                a is not None
                and answer is not None
                and ((answer == "undetermined") == (a != "stop"))
            )
            units.append((d.family, agree))
        tally.rate(("answers", "action_agreement"), units)
    else:
        tally.skip(
            ("answers", "action_agreement"), NO_SELECT if not present["select"] else NO_INITIAL
        )
    if present["answer_after_test"]:
        units = []
        for d in bench.decisions:
            if d.resolved:
                continue
            for test in (d.missing, "combined_report"):
                for item_id in d.after[test]:
                    if replies.has(item_id):
                        units.append((d.family, replies.correct(items[item_id])))
        tally.rate(("answers", "useful_test_supplied"), units)
        definite, identical = [], []
        for d, (a_id, b_id) in _hidden_pairs(bench):
            if not (replies.has(a_id) and replies.has(b_id)):
                continue
            a, b = replies.decoded[a_id], replies.decoded[b_id]
            identical.append((d.family, a == b))
            for item_id, answer in ((a_id, a), (b_id, b)):
                if answer in ("yes", "no"):
                    truth = bench.truth(d, items[item_id].hidden_world)
                    definite.append((d.family, answer == truth))
        tally.rate(("hidden_alternatives", "definite_correct"), definite)
        tally.rate(("hidden_alternatives", "identical_response_rate"), identical)
    else:
        for key in (
            ("answers", "useful_test_supplied"),
            ("hidden_alternatives", "definite_correct"),
            ("hidden_alternatives", "identical_response_rate"),
        ):
            tally.skip(key, NO_AFTER)
    pecs.tally_parts(tally, bench, replies, present)


def _hidden_pairs(bench: Bench):
    """(decision, (item a, item b)) for after-test pairs whose two hidden worlds show identical
    images and stay unresolved: inputs are identical, true answers opposite (appendix D)."""
    for d in bench.decisions:
        for test in TESTS:
            a_id, b_id = d.after[test]
            a, b = bench.items[a_id], bench.items[b_id]
            if a.images == b.images and not a.resolved and not b.resolved:
                yield d, (a_id, b_id)


# -- policies (Tables 7, 24-29) --------------------------------------------------------------------


def _success(bench: Bench, replies: Replies, d: Decision, action: str | None) -> float | None:
    """Resolved and correct for one decision if `action` is taken, from stored answer records:
    stop -> the decision is resolved and its initial answer is correct; a test -> the mean over
    the two hidden worlds of [after-test item resolved and its answer correct]; invalid -> 0.
    None when an answer record the action would read is missing."""
    if action is None:
        return 0.0
    if action == "stop":
        if not replies.has(d.initial_id):
            return None
        return float(d.resolved and replies.correct(bench.items[d.initial_id]))
    shown = [bench.items[i] for i in d.after[action]]
    if not all(replies.has(it.item_id) for it in shown):
        return None
    return sum(bool(it.resolved) and replies.correct(it) for it in shown) / len(shown)


def _random_success(bench: Bench, replies: Replies, d: Decision) -> float | None:
    values = [_success(bench, replies, d, t) for t in TESTS]
    return None if None in values else sum(values) / len(values)


FIXED_RULES: dict[str, Callable[[Decision], str]] = {
    "always_stop": lambda d: "stop",
    "repeat_known": lambda d: d.repeat,
    "free_fall": lambda d: "free_fall",
    "test_missing": lambda d: d.missing,
    "complete_report": lambda d: "combined_report",
    "min_cost": lambda d: d.reference_action,
}


def _policy_measures(
    tally: Tally, bench: Bench, replies: Replies, prices: Prices, present: dict[str, bool]
) -> None:
    """Final success ("correct") and mean cost of each selection rule over the decisions. Fixed
    rules' costs use every decision; their success uses the decisions whose needed answer records
    exist. The model rules use decisions with a select record (and the needed answer records)."""
    after = present["answer_after_test"]
    initial = present["answer_initial"]
    for rule, pick in FIXED_RULES.items():  # a rule's cost: the design's, fixed when every family shares it
        tally.design_mean(
            ("policies", rule, "mean_cost"),
            ((d.family, prices.of(pick(d))) for d in bench.decisions),
            *_cost_bounds(prices),
        )
        reads_initial = rule in ("always_stop", "min_cost")
        reads_after = rule != "always_stop"
        if (reads_initial and not initial) or (reads_after and not after):
            tally.skip(
                ("policies", rule, "correct"),
                NO_INITIAL if reads_initial and not initial else NO_AFTER,
            )
            continue
        units = ((d.family, _success(bench, replies, d, pick(d))) for d in bench.decisions)
        tally.rate(("policies", rule, "correct"), ((f, v) for f, v in units if v is not None))
    mean_test = sum(prices.of(t) for t in TESTS) / len(TESTS)  # every decision's expected cost
    tally.design_mean(
        ("policies", "random_test", "mean_cost"), ((d.family, mean_test) for d in bench.decisions),
        *_cost_bounds(prices),
    )
    if after:
        units = ((d.family, _random_success(bench, replies, d)) for d in bench.decisions)
        tally.rate(
            ("policies", "random_test", "correct"), ((f, v) for f, v in units if v is not None)
        )
    else:
        tally.skip(("policies", "random_test", "correct"), NO_AFTER)
    _model_success(
        tally, bench, replies, present, bench.decisions, ("policies", "model", "correct")
    )


def _model_success(
    tally: Tally,
    bench: Bench,
    replies: Replies,
    present: dict[str, bool],
    decisions: Iterable[Decision],
    key: Key,
) -> None:
    """Resolved and correct with the model's own selections (Table 3 final success)."""
    missing = [
        reason
        for reason, ok in (
            (NO_SELECT, present["select"]),
            (NO_INITIAL, present["answer_initial"]),
            (NO_AFTER, present["answer_after_test"]),
        )
        if not ok
    ]
    if missing:
        tally.skip(key, missing[0])
        return
    units = (
        (d.family, _success(bench, replies, d, a)) for d, a in _selected(bench, replies, decisions)
    )
    tally.rate(key, ((f, v) for f, v in units if v is not None))


# -- controls, validity, systems -------------------------------------------------------------------


def _base_items(bench: Bench, request: str) -> list[Item]:
    return [it for it in bench.items.values() if it.request == request and it.variant is None]


def _control_measures(
    tally: Tally, bench: Bench, replies: Replies, present: dict[str, bool]
) -> None:
    """Table 34: ruler reading within 5% of the true reading, recovered candidate, answers with
    both properties given. Denominators: the probe items with records (288, 288, 1,152)."""
    checks: dict[str, Callable[[Item, Record], bool]] = {
        "read_ruler": lambda it, rec: (
            rec.valid
            and abs(rec.value - it.reference_value) <= RULER_TOLERANCE * abs(it.reference_value)
        ),
        "recover_property": lambda it, rec: rec.valid and rec.choice == it.reference_option,
        "both_given": lambda it, rec: replies.correct(it),
    }
    for request, check in checks.items():
        if not present[request]:
            tally.skip(("controls", request), f"no {request} records")
            continue
        tally.rate(
            ("controls", request),
            (
                (bench.family_of[it.family_id], check(it, replies.records[it.item_id]))
                for it in _base_items(bench, request)
                if replies.has(it.item_id)
            ),
        )


def _validity_measures(tally: Tally, bench: Bench, replies: Replies) -> None:
    """Tables 35-36: the fraction of records the parser accepted, per request and per variant."""
    groups: dict[str, list[tuple[int, bool]]] = {f"validity_{r}": [] for r in REQUESTS}
    groups.update({f"validity_variant_{v}": [] for v in VARIANTS})
    for item_id, rec in replies.records.items():
        item = bench.items[item_id]
        name = f"validity_variant_{item.variant}" if item.variant else f"validity_{item.request}"
        groups[name].append((bench.family_of[item.family_id], rec.valid))
    for name, units in groups.items():
        if units:
            tally.rate(("validity", name), units)
        else:
            tally.skip(("validity", name), f"no records for {name.removeprefix('validity_')}")


def _system_measures(
    tally: Tally, bench: Bench, replies: Replies, present: dict[str, bool], system: str
) -> None:
    """Tables 14-16 and friends restricted to one system's decisions (same resamples)."""
    prefix: Key = ("by_system", system)
    decisions = [d for d in bench.decisions if d.system == system]
    if not present["select"]:
        for name in BY_SYSTEM:
            tally.skip((*prefix, name), NO_SELECT)
        return
    sel = list(_selected(bench, replies, decisions))
    tally.rate((*prefix, "min_cost_choice"), ((d.family, a == d.reference_action) for d, a in sel))
    _pair_measures(tally, bench, replies, decisions, prefix, only=BY_SYSTEM)
    tally.rate(
        (*prefix, "enough_evidence"), ((d.family, a is not None and d.resolves(a)) for d, a in sel)
    )
    _model_success(tally, bench, replies, present, decisions, (*prefix, "resolved_and_correct"))


# -- variants (Tables 37-49) -----------------------------------------------------------------------


def _variants(bench: Bench, replies: Replies, boot: FamilyBootstrap) -> dict[str, Any]:
    """Min-cost choice of each variant on the subset families, its paired difference from the
    matched base selections (same resampled subset families), and the repeat rate among single
    property purchases (repeat = the test of the property the matched base decision measured
    first, also for no_initial_test). Denominators: records (288 each on the main set) and, for
    repeats, the property purchases."""
    if not bench.subset:
        return {"families": 0, "reason": "the benchmark has no variant subset"}
    sub = boot.subset(bench.subset)
    tally = Tally(sub)
    in_subset = set(bench.subset)
    base = [d for d in bench.decisions if bench.families[d.family] in in_subset]

    fam = {d.decision_id: sub.index[bench.families[d.family]] for d in base}

    def add(name: str, chosen: list[tuple[Decision, str | None, str]]) -> None:
        tally.rate(
            (name, "min_cost_choice"), ((fam[d.decision_id], a == ref) for d, a, ref in chosen)
        )
        tally.rate(
            (name, "repeat"),
            ((fam[d.decision_id], a == d.repeat) for d, a, _ in chosen if a in PROPERTY_TESTS),
        )

    have_base = any(replies.has(d.select_id) for d in base)
    if have_base:
        add(
            "variant_base",
            [
                (d, replies.decoded[d.select_id], d.reference_action)
                for d in base
                if replies.has(d.select_id)
            ],
        )
    else:
        tally.skip(("variant_base", "min_cost_choice"), NO_SELECT)
        tally.skip(("variant_base", "repeat"), NO_SELECT)
    by_variant: dict[str, list[Item]] = defaultdict(list)
    for it in bench.items.values():
        if it.variant is not None:
            by_variant[it.variant].append(it)
    for variant in VARIANTS:
        chosen = [
            (bench.by_id[it.decision_id], replies.decoded[it.item_id], it.reference_action)
            for it in by_variant.get(variant, [])
            if replies.has(it.item_id)
        ]
        if chosen:
            add(variant, chosen)
        else:
            tally.skip((variant, "min_cost_choice"), f"no {variant} records")
            tally.skip((variant, "repeat"), f"no {variant} records")
    resampled, est = tally.resolve()
    out: dict[str, Any] = {"families": len(bench.subset), "seed": sub.seed}
    for key, value in est.items():
        _put(out, key, value)
    for variant in VARIANTS:
        a, b = (variant, "min_cost_choice"), ("variant_base", "min_cost_choice")
        if a in resampled and b in resampled:  # paired, widened where a rate saturates (never a point)
            out[variant]["difference"] = paired_difference(resampled[a], resampled[b])
        else:
            out[variant]["difference"] = Estimate.empty(est[a].reason or est[b].reason)
    return out


def _coverage(bench: Bench, replies: Replies) -> dict[str, dict[str, Any]]:
    """Records / items per request type (base requests) and per variant."""
    items: dict[str, int] = defaultdict(int)
    have: dict[str, int] = defaultdict(int)
    for item_id, item in bench.items.items():
        name = f"variant_{item.variant}" if item.variant else item.request
        items[name] += 1
        have[name] += replies.has(item_id)
    return {
        name: {"records": have[name], "items": n, "fraction": have[name] / n}
        for name, n in items.items()
    }
