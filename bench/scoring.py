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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from evprobe.core.bootstrap import (
    DEFAULT_N_BOOT,
    DEFAULT_SEED,
    INTERVAL_METHOD,
    Estimate,
    FamilyBootstrap,
    Resampled,
)
from evprobe.core.json_types import JsonObject, JsonValue
from evprobe.bench import budget_scoring, doubt, pecs, sub_scenarios, void_scoring
from evprobe.bench.tally import Key, ScoreSection, ScoreValue, Tally
from evprobe.bench.items import NUMERIC_REQUESTS, REQUESTS, VARIANTS, Item
from evprobe.bench.level_differences import METHOD as LEVEL_DIFFERENCE_METHOD
from evprobe.bench.ladder_scoring import ladder_keys
from evprobe.bench.prerequisites import prerequisite_block
from evprobe.bench.failure_stages import failure_stage_block
from evprobe.bench.level_differences import level_differences, paired_difference
from evprobe.bench.numeric_scoring import numeric_measures
from evprobe.bench.records import Record
from evprobe.bench.reference import Prices
from evprobe.bench.score_index import (
    BY_SYSTEM,
    HEADLINE,
    NO_SELECT,
    PROPERTY_TESTS,
    REPORT_PRICES,
    RULER_TOLERANCE,
    RULES,
    SECTIONS,
    Bench,
    Decision,
    Replies,
    decode_reply,
)
from evprobe.bench._score_measures import (
    answer_measures,
    choice_counts,
    control_measures,
    hidden_pairs,
    policy_measures,
    selection_measures,
    system_measures,
    validity_measures,
)


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
    bootstrap: type[FamilyBootstrap] = FamilyBootstrap,
) -> JsonObject:
    """Every measure of a run, with family-bootstrap intervals (see the module docstring).

    `prices` are the action prices of the benchmark (default: stop 0, tests 1, report 2); the
    repricing section varies the combined report's price around them.

    Opt-in blocks: numeric estimates are scored with read_ruler and recover_property in the
    "numeric" section (`bench.numeric_scoring`), from the same family resamples as every other
    measure; the items of injection level L >= 1 are scored as a benchmark of their own
    (`LEVEL_SECTIONS` under "injection" -> "levels" -> "L"), with the same bootstrap seed over the
    same families (so level L's resamples are the main set's). Every other measure uses the main
    (level-0) items only, exactly as without the blocks.

    `bootstrap` makes the main measures' resamples and intervals (default `FamilyBootstrap`; the seed
    mode passes `bench.seed_scoring.PercentileBootstrap`, seed 000's plain percentile rule).
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
    out, base_kept = _score_set(base_items, base_records, n_boot=n_boot, seed=seed, prices=prices,
                                bootstrap=bootstrap, numeric=(numeric_items.get(0, []), numeric_records.get(0, {})))
    if parts:
        levels, differences = {}, {}
        scored = {0: (base_kept.families, base_kept.resampled)}  # bench.ladder_scoring's inputs
        for level in sorted(parts):
            level_items, level_records = parts[level]
            full, kept = _score_set(level_items, level_records, n_boot=n_boot, seed=seed, prices=prices,
                                    numeric=(numeric_items.get(level, []), numeric_records.get(level, {})))
            scored[level] = (kept.families, kept.resampled)
            levels[str(level)] = {name: full[name] for name in LEVEL_SECTIONS if name in full}
            same = kept.families == base_kept.families  # same ids in the same order: the same resamples
            differences[str(level)] = level_differences(kept.resampled, base_kept.resampled, same)
        out["injection"] = {"levels": levels, "level_0": "the main measures above",
                            "differences": _jsonable(differences), "differences_method": LEVEL_DIFFERENCE_METHOD,
                            **ladder_keys(scored)}
        out["injection"]["prerequisites"] = prerequisite_block(items, every_record, score, n_boot=n_boot, seed=seed,
                                                               prices=prices)  # seed 003 section 4.3
        out["injection"]["failure_stages"] = failure_stage_block(items, every_record, n_boot=n_boot, seed=seed)
    if voids:
        out[void_scoring.SECTION] = _void_section(index, voids, every_record, base_kept.families, n_boot, seed)
    return out


@dataclass(frozen=True)
class _Resamples:
    """One scored set's bootstrap families (in order) and every measure's resamples: what the paired
    level differences of the injection block need."""

    families: tuple[str, ...]
    resampled: dict[Key, Resampled]


def _void_section(index: dict[str, Item], voids: list[Item], records: list[Record], families: tuple[str, ...],
                  n_boot: int, seed: int) -> JsonValue:
    """The void block's section (bench.void_scoring) from the decoded replies of every record but the
    numeric estimates' (no void or twin is one; their numbers are bench.numeric_scoring's)."""
    decoded: dict[str, str | None] = {}
    for rec in records:
        if index[rec.item_id].request in NUMERIC_REQUESTS:
            continue
        if rec.item_id in decoded:
            raise ValueError(f"two records for item {rec.item_id!r}; keep one record per item")
        decoded[rec.item_id] = decode_reply(index[rec.item_id], rec)
    return _jsonable(void_scoring.score_voids(index, voids, decoded, families, n_boot=n_boot, seed=seed))


def _score_set(
    items: Sequence[Item],
    records: Iterable[Record],
    *,
    n_boot: int,
    seed: int,
    prices: Prices,
    numeric: tuple[Sequence[Item], dict[str, Record]] = ((), {}),
    bootstrap: type[FamilyBootstrap] = FamilyBootstrap,
) -> tuple[JsonObject, _Resamples]:
    """Every measure over one set of decision items (the main items, or one injection level's),
    with the bootstrap's families and every measure's resamples (for the paired level differences)."""
    bench = Bench.build(items)
    replies = Replies.build(bench, records)
    boot = bootstrap(bench.families, n_boot, seed)
    tally = Tally(boot)
    present = {request: _present(bench, replies, request) for request in REQUESTS}

    selection_measures(tally, bench, replies, prices, present)
    answer_measures(tally, bench, replies, present)
    policy_measures(tally, bench, replies, prices, present)
    control_measures(tally, bench, replies, present)
    validity_measures(tally, bench, replies)
    for system in dict.fromkeys(d.system for d in bench.decisions):
        system_measures(tally, bench, replies, present, system)
    cells = sub_scenarios.tally_cells(tally, bench, replies, present)
    doubt.tally_doubt(tally, bench, replies)  # only where replies carry reasoning traces
    budget_scoring.tally_budget(tally, bench, replies)  # only where a budget cut a reply off
    numeric_items, numeric_records = numeric
    numeric_counts = numeric_measures(
        tally.rate, tally.mean, tally.skip, [*items, *numeric_items],
        {**replies.records, **numeric_records}, bench.family_of,
    )
    resampled, est = tally.resolve()

    out: ScoreSection = {}
    for key, estimate in est.items():
        _put(out, key, estimate)
    out["resolved_and_correct"] = est[("policies", "model", "correct")]
    out["useful_test_supplied"] = est[("answers", "useful_test_supplied")]
    out["validity_select"] = est[("validity", "validity_select")]
    out.pop(pecs.SECTION, None)  # rebuilt whole, in order, by pecs.estimates
    out.update(pecs.estimates(resampled, est))
    out["choices"] = {**out.get("choices", {}), **choice_counts(bench, replies)}
    out["hidden_alternatives"]["pairs"] = sum(1 for _ in hidden_pairs(bench))
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
    return _jsonable(ordered), _Resamples(tuple(boot.families), resampled)  # type: ignore[return-value]


def _present(bench: Bench, replies: Replies, request: str) -> bool:
    """Whether the run has any base record of this request type."""
    return any(
        bench.items[i].request == request and bench.items[i].variant is None
        for i in replies.records
    )


def _put(tree: ScoreSection, key: Key, value: ScoreValue) -> None:
    node = tree
    for part in key[:-1]:
        node = node.setdefault(part, {})
    node[key[-1]] = value


def _jsonable(x: ScoreValue) -> JsonValue:
    if isinstance(x, Estimate):
        return x.to_json()
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    return x


def _variants(bench: Bench, replies: Replies, boot: FamilyBootstrap) -> ScoreSection:
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
    out: ScoreSection = {"families": len(bench.subset), "seed": sub.seed}
    for key, value in est.items():
        _put(out, key, value)
    for variant in VARIANTS:
        a, b = (variant, "min_cost_choice"), ("variant_base", "min_cost_choice")
        if a in resampled and b in resampled:  # paired, widened where a rate saturates (never a point)
            out[variant]["difference"] = paired_difference(resampled[a], resampled[b])
        else:
            out[variant]["difference"] = Estimate.empty(est[a].reason or est[b].reason)
    return out


def _coverage(bench: Bench, replies: Replies) -> dict[str, dict[str, int | float]]:
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
