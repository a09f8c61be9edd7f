"""Scores per sub-scenario (bench.sub_scenarios; seed 002, appendix K): planted behaviour per cell,
rescored by hand from the records."""

from __future__ import annotations

import pytest

from evprobe.bench.generate import GenerateConfig, build
from evprobe.bench.items import Item
from evprobe.bench.score_report import scores_markdown
from evprobe.bench.scoring import score
from evprobe.bench.sub_scenarios import cell_of

from tests.bench.test_scoring import record

ABSTAINS = "sliding, mass first"  # answers "undetermined" to everything, always stops
PERFECT = "spring, stiffness first"


@pytest.fixture(scope="module")
def items() -> list[Item]:
    return build(GenerateConfig(families_per_system=8, subset_per_cell=0))[1]


def _records(items: list[Item]) -> list:
    out = []
    for it in items:
        cell = cell_of(it.system, it.initial_property)
        if it.request == "select":
            out.append(record(it, action="stop" if cell == ABSTAINS else it.reference_action))
        elif it.request in ("answer_initial", "answer_after_test", "both_given"):
            out.append(record(it, answer="undetermined" if cell == ABSTAINS else it.reference_answer))
    return out


def test_each_sub_scenario_reads_its_own_behaviour(items: list[Item]) -> None:
    recs = _records(items)
    cells = score(items, recs, n_boot=300)["by_sub_scenario"]
    assert len(cells) == 6 and sum(c["decisions"] for c in cells.values()) == 8 * 3 * 4
    bad, good = cells[ABSTAINS], cells[PERFECT]
    assert bad["acc"]["value"] == 0.0 and bad["false_abs"]["value"] == 1.0 and bad["abs_rec"]["value"] == 1.0
    assert bad["pecs"]["value"] == 0.0 and bad["pecs"]["reason"] == "J <= 0 on every family resample"
    # min-cost choice is stopping's share among its decisions: the resolved ones, rescored here by hand
    mine = [it for it in items if it.request == "select" and it.variant is None
            and cell_of(it.system, it.initial_property) == ABSTAINS]
    assert bad["min_cost_choice"]["value"] == pytest.approx(sum(it.reference_action == "stop" for it in mine) / len(mine))
    assert good["acc"]["value"] == 1.0 and good["abs_rec"]["value"] == 1.0 and good["false_abs"]["value"] == 0.0
    assert good["min_cost_choice"]["value"] == 1.0 and good["min_cost_choice"]["ci"][0] < 1.0  # never a point
    text = scores_markdown(score(items, recs, n_boot=300), "planted")
    assert "## Per sub-scenario (seed 002, appendix K)" in text and f"| {ABSTAINS} | 16 |" in text


def test_a_run_without_selections_says_so_per_cell(items: list[Item]) -> None:
    recs = [r for r in _records(items) if r.request != "select"]
    cells = score(items, recs, n_boot=200)["by_sub_scenario"]
    assert all(c["min_cost_choice"]["reason"] == "no select records" for c in cells.values())
    assert all(c["acc"]["n"] > 0 for c in cells.values())
