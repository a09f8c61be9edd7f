"""The measures of a score computed from the joined bench and replies: selections (Tables 11-13,
19-23, 30-33), image and threshold pairs, choices, answers, hidden alternatives, policies and the
fixed rules, controls, validity and per-system rows. Each adds its estimates to one `Tally`
(bench.tally), so all intervals of a score come from one matrix of family resamples; bench.scoring
calls them in order."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from evprobe.bench import pecs
from evprobe.bench.items import REQUESTS, VARIANTS, Item
from evprobe.bench.records import Record
from evprobe.bench.reference import ACTIONS, TESTS, Prices
from evprobe.bench.score_index import (
    BY_SYSTEM,
    CATEGORIES,
    NO_AFTER,
    NO_INITIAL,
    NO_SELECT,
    PROPERTY_TESTS,
    REPORT_PRICES,
    RULER_TOLERANCE,
    Bench,
    Decision,
    Replies,
)
from evprobe.bench.tally import Key, Tally


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


def selection_measures(
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


def choice_counts(bench: Bench, replies: Replies) -> dict[str, dict[str, int]]:
    """Raw counts of Tables 19-20 next to the rates: {"<group>_counts": {"n": .., cat: ..}}."""
    out: dict[str, dict[str, int]] = {}
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


def answer_measures(
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
        for d, (a_id, b_id) in hidden_pairs(bench):
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


def hidden_pairs(bench: Bench):
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


def policy_measures(
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


def control_measures(
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


def validity_measures(tally: Tally, bench: Bench, replies: Replies) -> None:
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


def system_measures(
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
