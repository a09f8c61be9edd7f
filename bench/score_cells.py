"""The cells and blocks of scores.md (`bench.score_report`, `bench.void_report`): how a scored number prints.

Rates print as percentages with their 95% interval and n, `58.5 [55.6, 61.5] (n=576)`; costs as
plain numbers, `0.99 [0.96, 1.02] (n=576)`; paired differences in percentage points with a sign,
`+14.2 [+8.7, +20.5] (n=288)`; PECS with three decimals. All through core.estimate_text. The
measures' printed names (LABELS) and a headline measure's cell (`headline_cell`, `difference_cell`)
are here too, for scores.md, `evprobe compare` and the repeats' tables (bench.repeats_scoring).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evprobe.core.estimate_text import estimate_text
from evprobe.core.json_types import JsonObject


def fmt_estimate(est: JsonObject | None, scale: float, digits: int, sign: bool = False, units: str = "units") -> str:
    """An estimate's JSON as text, scaled (core.estimate_text, the one formatter); `units` names what
    an estimate identical in every unit counts."""
    return estimate_text(est, digits, scale=scale, sign=sign, units=units)  # the one formatter (core.estimate_text)


def pct(est: JsonObject | None) -> str:
    """A rate as a percentage: `58.5 [55.6, 61.5] (n=576)`."""
    return fmt_estimate(est, 100.0, 1)


def cost(est: JsonObject | None) -> str:
    """A cost in assigned units: `0.99 [0.96, 1.02] (n=576)`."""
    return fmt_estimate(est, 1.0, 2)


def points(est: JsonObject | None) -> str:
    """A paired difference of rates in percentage points: `+14.2 [+8.7, +20.5] (n=288)`."""
    return fmt_estimate(est, 100.0, 1, sign=True)


def plain(est: JsonObject | None, units: str = "units") -> str:
    """A score printed as a number with three decimals (PECS): `0.292 [0.250, 0.331] (n=5184)`."""
    return fmt_estimate(est, 1.0, 3, units=units)


def table_text(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def section_text(title: str, note: str, table: str) -> str:
    """A `## title` section: the note, then the table."""
    return f"## {title}\n\n{note}\n\n{table}\n" if note else f"## {title}\n\n{table}\n"


def rates_section(title: str, note: str, labels: dict[str, str], block: JsonObject) -> str:
    """A section of one rate per row: each of `labels`' measures of `block` as a percentage."""
    return section_text(title, note, table_text(["measure", "rate (%)"],
                                                [[label, pct(block.get(name))] for name, label in labels.items()]))


LABELS: dict[str, str] = {
    "min_cost_choice": "Minimum cost choice",
    "stop_if_enough": "Stop if enough",
    "test_if_needed": "Test if needed",
    "both_correct_image_pairs": "Both correct, changed image",
    "both_correct_threshold_pairs": "Both correct, changed threshold",
    "same_choice_image_pairs": "Same choice, changed image",
    "same_choice_threshold_pairs": "Same choice, changed threshold",
    "enough_evidence": "Enough evidence",
    "useful_test_supplied": "Useful test supplied",
    "resolved_and_correct": "Resolved and correct",
    "mean_cost": "Mean cost",
    "validity_select": "Valid selections",
    "pecs": "PECS",
    "pecs_acc": "PECS: Acc (controls correct)",
    "pecs_abs_rec": "PECS: AbsRec (voids abstained)",
    "pecs_false_abs": "PECS: FalseAbs (controls abstained)",
    "known_answer": "Known answer",
    "unknown_answer": "Unknown answer",
    "action_agreement": "Action agreement",
    "unneeded_test": "Unneeded test",
    "useless_test": "Useless test",
    "early_stop": "Early stop",
    "repeat_known_all": "Repeat known test (all decisions)",
    "repeat_known_unresolved": "Repeat known test (unresolved decisions)",
    "definite_correct": "Definite answers correct",
    "identical_response_rate": "Identical responses in the pair",
    "always_stop": "Always stop",
    "repeat_known": "Repeat known test",
    "free_fall": "Free fall",
    "test_missing": "Test unknown parameter",
    "complete_report": "Complete report",
    "random_test": "Random test",
    "min_cost": "Minimum cost selector",
    "model": "Model selector",
    "model_exact_reader": "Model + exact reader",
    "read_ruler": "Read the ruler",
    "recover_property": "Infer parameter",
    "estimate_property": "Estimate the property",
    "estimate_outcome": "Estimate the outcome",
    "both_given": "Given parameters",
    "variant_base": "Base subset",
    "text_readings": "Text readings",
    "changed_rendering": "Changed rendering",
    "reworded": "Reworded question",
    "given_equations": "Given equations",
    "check_possibilities": "Check possible worlds",
    "no_initial_test": "No initial test",
}
COSTS = {"mean_cost"}  # headline measures in cost units, not rates
PLAIN = {"pecs"}  # a score in [0, 1] printed as a plain number, as seed 002 does


def headline_cell(name: str, est: JsonObject | None) -> str:
    if name in COSTS:
        return cost(est)
    if name in PLAIN:
        return plain(est)
    return pct(est)


def difference_cell(name: str, est: JsonObject | None) -> str:
    """A paired difference of a headline measure: rates in percentage points, costs and PECS signed."""
    if name in COSTS:
        return fmt_estimate(est, 1.0, 2, sign=True)
    if name in PLAIN:
        return fmt_estimate(est, 1.0, 3, sign=True)
    return points(est)


def label(name: str) -> str:
    return LABELS.get(name, name.replace("_", " "))


def at(tree: Any, *path: str) -> Any:
    """tree[path[0]][path[1]]..., or None where a key or a level is missing (scores written before a
    section existed)."""
    for key in path:
        tree = tree.get(key) if isinstance(tree, dict) else None
    return tree


__all__ = ["COSTS", "LABELS", "PLAIN", "at", "cost", "difference_cell", "fmt_estimate", "headline_cell", "label", "pct",
           "plain", "points", "section_text", "table_text"]
