"""The benchmark indexed for scoring, and a run's records joined to it.

`Bench.build(items)`: families, decisions (a base `select` item with its `answer_initial` item and
its `answer_after_test` items, linked by `decision_id`), image and threshold pairs, the variant
subset. `Replies.build(bench, records)`: one record per item, each decoded to the action or answer
it stands for (None: invalid). The measure names and sections of a score are here too, so the
modules that compute measures (bench._score_measures, bench.pecs, ...) and bench.scoring share them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from evprobe.bench.items import Item
from evprobe.bench.records import Record
from evprobe.bench.reference import ACTIONS, ANSWERS, TESTS

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
            decoded[rec.item_id] = decode_reply(item, rec)
        return cls(joined, decoded)

    def has(self, item_id: str) -> bool:
        return item_id in self.records

    def correct(self, item: Item) -> bool:
        """An answer record equals the reference answer (invalid: never)."""
        return self.decoded.get(item.item_id) == item.reference_answer


def decode_reply(item: Item, rec: Record) -> str | None:
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
