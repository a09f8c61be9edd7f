"""Scores per sub-scenario (seed 002, appendix K: its datasets disaggregated by task structure).

A sub-scenario here is a system with the property its initial test measured (`sliding, mass first`,
`sliding, friction first`, ...: six on the main set, each half of its system's families): the task
differs in which unknown the sheet settles and which test is still missing. Per sub-scenario, over
the decisions and answers of its families, on the score's resamples:

- `decisions`: the base selections it holds;
- `min_cost_choice`: the selection equals the reference action (Table 3's headline);
- `acc`, `false_abs`: answer requests whose evidence settles the question (controls) answered
  correctly, and answered "undetermined"; `abs_rec`: the others (voids) answered "undetermined"
  (bench.pecs' parts, over answer_initial and answer_after_test; invalid replies in every denominator);
- `pecs`: acc x max(0, abs_rec - false_abs) on every resample (bench.pecs' rule for a value every
  resample reproduces: no interval, and why).

The seed's table also has the guided regime's uplift; here each run is one regime, and two runs of
the same items are compared with `evprobe compare --paired`. Its AR and AR_ill on the void block
(each void type's AbsRec per sub-scenario) are in the void section, `voids.by_sub_scenario`
(bench.void_scoring, using `cell_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from evprobe.bench import pecs
from evprobe.bench.tally import Key, Tally
from evprobe.core.bootstrap import Estimate, Resampled

if TYPE_CHECKING:
    from evprobe.bench.score_index import Bench, Replies

SECTION = "by_sub_scenario"
MEASURES = ("min_cost_choice", "acc", "false_abs", "abs_rec")
NO_SELECT = "no select records"
NO_ANSWERS = pecs.NO_ANSWERS


def cell_of(system: str, initial_property: str) -> str:
    return f"{system}, {initial_property} first"


def tally_cells(tally: Tally, bench: Bench, replies: Replies, present: dict[str, bool]) -> dict[str, int]:
    """Tally every sub-scenario's measures; returns each one's number of decisions."""
    cells: dict[str, list[Any]] = {}
    for d in bench.decisions:
        item = bench.items[d.select_id]
        cells.setdefault(cell_of(item.system, item.initial_property), []).append(d)
    answers: dict[str, list[tuple[int, Any, str | None]]] = {c: [] for c in cells}
    for item_id, answer in replies.decoded.items():
        item = bench.items[item_id]
        if item.request in pecs.ANSWER_REQUESTS and item.variant is None:
            answers[cell_of(item.system, item.initial_property)].append((bench.family_of[item.family_id], item, answer))
    for cell, decisions in cells.items():
        key: dict[str, Key] = {m: (SECTION, cell, m) for m in MEASURES}
        if present["select"]:
            chosen = [(d, replies.decoded.get(d.select_id)) for d in decisions if replies.has(d.select_id)]
            tally.rate(key["min_cost_choice"], ((d.family, a == d.reference_action) for d, a in chosen))
        else:
            tally.skip(key["min_cost_choice"], NO_SELECT)
        if not answers[cell]:
            for m in ("acc", "false_abs", "abs_rec"):
                tally.skip(key[m], NO_ANSWERS)
            continue
        pecs.rate_parts(tally, key, ((f, a, it.reference_answer) for f, it, a in answers[cell] if it.resolved),
                        ((f, a) for f, it, a in answers[cell] if not it.resolved))
    return {cell: len(decisions) for cell, decisions in cells.items()}


def section(resampled: Mapping[Key, Resampled], est: Mapping[Key, Estimate], decisions: dict[str, int]) -> dict[str, dict[str, int | Estimate]]:
    """Per sub-scenario: its decisions, the tallied measures and PECS."""
    out: dict[str, dict[str, int | Estimate]] = {}
    for cell, n in decisions.items():
        block: dict[str, int | Estimate] = {"decisions": n, **{m: est[(SECTION, cell, m)] for m in MEASURES}}
        parts = [resampled.get((SECTION, cell, m)) for m in ("acc", "abs_rec", "false_abs")]
        block["pecs"] = (pecs.pecs_estimate(parts, parts[0].n + parts[1].n)  # type: ignore[arg-type, union-attr]
                         if all(p is not None for p in parts) else Estimate.empty(NO_ANSWERS))
        out[cell] = block
    return out


__all__ = ["MEASURES", "SECTION", "cell_of", "section", "tally_cells"]
