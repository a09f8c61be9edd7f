"""Known-answer rows for the void block (`bench.voids`), when the quickstart's benchmark has one
(`evprobe quickstart --voids occluded,unstated`).

The organism was trained on voids (organism.data: an occluded sheet reads as `unread`, an unstated
threshold leaves no q token), so their answers are known: on every void answer request it answers
"undetermined" (AbsRec), on every twin it answers as on the main set, and on every occluded selection it
chooses the void's reference action (the combined report at the default prices: the cheapest action
that settles the answer in all four worlds). Each row states the n it expects, counted from the bench
(experiments.known_answer.counts), and fails on fewer or more. Catches (tests/experiments/
test_known_answer_voids.py): voids labelled sufficient (the occluded selections' reference is then the
twin's) and records of half the families' voids missing. The organism before its void training failed
three rows (AbsRec on both types, the occluded selections), measured once, not kept as a test: its
checkpoint is replaced.
"""

from __future__ import annotations

from evprobe.core.estimate_text import estimate_text
from evprobe.experiments.known_answer.counts import Expected, n_problems
from evprobe.core.json_types import JsonObject
from evprobe.experiments.known_answer.rows import CheckRow, check_row

VOID_FLOOR = 0.95  # AbsRec, twin accuracy and minimum-cost choice on the occluded selections

# (void type, scores.json measure, the request its n counts, title)
ROWS = (
    ("occluded", "abs_rec", "answer_initial", "abstains on occluded sheets"),
    ("occluded", "twin_acc", "answer_initial", "answers the occluded voids' twins"),
    ("occluded", "select_min_cost", "select", "measures on occluded sheets (minimum-cost choice)"),
    ("unstated", "abs_rec", "answer_initial", "abstains on unstated thresholds"),
    ("unstated", "twin_acc", "answer_initial", "answers the unstated voids' twins"),
)


def void_checks(scores: JsonObject | None, expected: dict[tuple[str, str], Expected]) -> list[CheckRow]:
    """One row per (void type, measure) of ROWS whose void type the bench holds; `expected`: per (void
    type, request) the void items the bench holds (their twins are as many)."""
    voids = (scores or {}).get("voids") or {}
    out = []
    for void, measure, request, title in ROWS:
        exp = expected.get((void, request))
        if exp is None:
            continue  # the bench has no such voids
        e = (voids.get(void) or {}).get(measure)
        if e is None:
            out.append(check_row(title, False, f"no {measure} for {void} voids in scores.json",
                                 f">= {VOID_FLOOR:.2f}, {exp.text}"))
            continue
        off = n_problems([("n", exp, e.get("n"), None)])
        measured = estimate_text(e) + (f"; FAILS: {off[0]}" if off else "")
        out.append(check_row(title, e["value"] is not None and e["value"] >= VOID_FLOOR and not off, measured,
                             f">= {VOID_FLOOR:.2f}, {exp.text}"))
    return out
