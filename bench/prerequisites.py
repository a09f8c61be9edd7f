"""Seed 003's explicit-capability probe and filter (section 4.3, Figure 2): score the injection levels
again on the families whose prerequisites the model passed, beside the unfiltered scores.

Seed 003 first checks that a model "can accurately identify the implicit objects from the visual
input" (visual recognition) and "knows the specific physical attributes corresponding to these
objects" when asked in text (parametric knowledge), then lets only "verified instances" proceed, so
that a failure left is one of agency, not of capacity. Here the reference objects are the ruler and
the marker dot, and the probe is two controls every family already holds (seed 000's Table 34):

- recognition: `read_ruler`, the sheet with the ruler and the dot named and the last panel pointed
  to; passed when the reading is within 5% of the true one (Table 34's criterion,
  `bench.threshold.within`); an invalid reply fails.
- knowledge: `both_given`, text only (no sheet): both properties given as numbers; passed when the
  answer is the reference answer; an invalid reply fails.

A family is verified when it has records of both and every one passed (the seed's probe is a "unit
test"; a family with a failed or a missing check is not verified, and the counts say which). The
filtered block is `bench.scoring.score` over the verified families' items (every level, the
prerequisite items left out), with the same seed; its intervals rest on those families alone. The
block sits in the injection block of scores.json (`injection.prerequisites`), so the main set's
scores are unchanged; a run without records of both controls gets a reason instead.

Choices where the seed is silent: the unit is the family (all its decisions share the sheets and the
physics the probe checks), and the filter is all-or-nothing per family.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from evprobe.bench.items import Item
from evprobe.bench.records import Record
from evprobe.bench.score_index import decode_reply
from evprobe.bench.threshold import within
from evprobe.core.json_types import JsonObject

RECOGNITION, KNOWLEDGE = "read_ruler", "both_given"
RULER_DELTA = "0.05"  # Table 34's ruler criterion
SHOWN: tuple[str, ...] = ("min_cost_choice", "stop_if_enough", "test_if_needed", "both_correct_image_pairs",
                          "enough_evidence", "resolved_and_correct", "validity_select")
RULE = ("a family is verified when every read_ruler reply (recognition: within 5% of the true reading) and "
        "every both_given answer (text-only knowledge: the reference answer) of it has a record and passed; "
        "invalid replies fail")


@dataclass(frozen=True)
class FamilyCheck:
    """One family's prerequisite replies: how many passed out of how many recorded, per check."""

    recognised: tuple[int, int]
    knows: tuple[int, int]

    @property
    def verified(self) -> bool:
        return all(n > 0 and passed == n for passed, n in (self.recognised, self.knows))


def passed(item: Item, rec: Record) -> bool:
    """Whether one prerequisite reply passed (module docstring)."""
    if item.request == RECOGNITION:
        return rec.valid and within(item.reference_value, rec.value, RULER_DELTA)  # type: ignore[arg-type]
    if item.request == KNOWLEDGE:
        return decode_reply(item, rec) == item.reference_answer
    raise ValueError(f"{item.item_id} is a {item.request} item, not a prerequisite ({RECOGNITION}, {KNOWLEDGE})")


def family_checks(items: Iterable[Item], records: Iterable[Record]) -> dict[str, FamilyCheck]:
    """Every family's checks, from the prerequisite items' records (other records are ignored)."""
    index = {it.item_id: it for it in items}
    counts = {fam: {RECOGNITION: [0, 0], KNOWLEDGE: [0, 0]} for fam in dict.fromkeys(it.family_id for it in index.values())}
    for rec in records:
        it = index.get(rec.item_id)
        if it is None or it.request not in (RECOGNITION, KNOWLEDGE) or it.variant is not None or it.injection:
            continue
        tally = counts[it.family_id][it.request]
        tally[0] += passed(it, rec)
        tally[1] += 1
    return {fam: FamilyCheck(tuple(c[RECOGNITION]), tuple(c[KNOWLEDGE])) for fam, c in counts.items()}  # type: ignore[arg-type]


def _level_blocks(scores: JsonObject) -> JsonObject:
    """The filtered score's shown measures per level ("0" the main items') and its ladder keys."""
    injection = scores.get("injection", {})
    levels = {"0": scores, **injection.get("levels", {})}
    out: JsonObject = {"levels": {L: {name: block[name] for name in SHOWN if name in block}
                                  for L, block in sorted(levels.items(), key=lambda kv: int(kv[0]))}}
    for key in ("differences", "differences_target_exclusive", "task_means"):
        if key in injection:
            out[key] = injection[key]
    return out


def prerequisite_block(items: Sequence[Item], records: Sequence[Record], score: Callable[..., JsonObject],
                       **how: object) -> JsonObject:
    """`injection.prerequisites`: the rule, the family counts and, over the verified families, `score`
    (bench.scoring.score, called with `how`: n_boot, seed, prices) of their items less the probe's."""
    checks = family_checks(items, records)
    n_rec = sum(c.recognised[1] for c in checks.values())
    n_know = sum(c.knows[1] for c in checks.values())
    block: JsonObject = {"rule": RULE}
    if not n_rec or not n_know:
        missing = " and ".join(r for r, n in ((RECOGNITION, n_rec), (KNOWLEDGE, n_know)) if not n)
        block["reason"] = f"no {missing} records: the prerequisites are not checked"
        return block
    verified = [fam for fam, c in checks.items() if c.verified]
    block["families"] = {
        "verified": len(verified),
        "of": len(checks),
        "failed_recognition": sum(1 for c in checks.values() if c.recognised[1] and c.recognised[0] < c.recognised[1]),
        "failed_knowledge": sum(1 for c in checks.values() if c.knows[1] and c.knows[0] < c.knows[1]),
        "unchecked": sum(1 for c in checks.values() if not c.recognised[1] or not c.knows[1]),
    }
    block["replies_passed"] = {RECOGNITION: [sum(c.recognised[0] for c in checks.values()), n_rec],
                               KNOWLEDGE: [sum(c.knows[0] for c in checks.values()), n_know]}
    if not verified:
        block["reason"] = "no family passed every prerequisite: nothing left to score"
        return block
    keep = set(verified)
    kept_items = [it for it in items if it.family_id in keep and it.request not in (RECOGNITION, KNOWLEDGE)]
    kept_ids = {it.item_id for it in kept_items}
    filtered = score(kept_items, [r for r in records if r.item_id in kept_ids], **how)
    block["filtered"] = _level_blocks(filtered)
    return block


__all__ = ["RULE", "FamilyCheck", "family_checks", "passed", "prerequisite_block"]
