"""Replies their budget cut off, counted (bench.budgets): scores.json `budget`, present only when
some reply of the run was cut off or had its reasoning block closed by its budget.

Over every scored record (each a unit of its family; family-bootstrap intervals):

- `cut_off`: replies whose reply budget ran out before they ended;
- `cut_off_invalid`: of all replies, those cut off and unreadable (route `invalid:cut_off`): the
  share of the invalid replies the budget, not the model's words, explains;
- `thinking_closed`: replies whose reasoning block was closed by its own budget.

A cut-off reply stays in every denominator like any other, valid or not (bench.scoring).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evprobe.bench.budgets import CUT_OFF_ROUTE
from evprobe.bench.tally import Tally
from evprobe.core.json_types import JsonObject

if TYPE_CHECKING:
    from evprobe.bench.score_index import Bench, Replies

SECTION = "budget"
MEASURES = ("cut_off", "cut_off_invalid", "thinking_closed")


def tally_budget(tally: Tally, bench: Bench, replies: Replies) -> bool:
    """Tally the section's measures; False (nothing tallied) when no reply was cut off or closed."""
    rows = [(bench.family_of[bench.items[item_id].family_id], rec) for item_id, rec in replies.records.items()]
    if not any(rec.cut_off or rec.thinking_closed for _, rec in rows):
        return False
    tally.rate((SECTION, "cut_off"), ((f, bool(rec.cut_off)) for f, rec in rows))
    tally.rate((SECTION, "cut_off_invalid"), ((f, rec.route == CUT_OFF_ROUTE) for f, rec in rows))
    tally.rate((SECTION, "thinking_closed"), ((f, bool(rec.thinking_closed)) for f, rec in rows))
    return True




LABELS = {
    "cut_off": "replies cut off by their budget",
    "cut_off_invalid": "cut off and unreadable (invalid:cut_off)",
    "thinking_closed": "reasoning blocks closed by their budget",
}


def budget_section(block: JsonObject) -> str:
    """scores.md's section of the budget measures."""
    from evprobe.bench.score_cells import rates_section

    return rates_section(
        "Reply budget",
        "Replies whose budget ran out before they ended, over every scored reply; they stay in every "
        "denominator. Raise the budget (evprobe run --max-new-tokens, --budget, --thinking-budget) where many are.",
        LABELS, block)


__all__ = ["LABELS", "MEASURES", "SECTION", "budget_section", "tally_budget"]
