"""Agreement per task x dataset (bench.judge_agreement; seed 002, D.4 Table 7): known answers on
hand-counted tables, the refusals of a cell (too few replies, one category), one cell equal to the
pooled kappa, and `evprobe judge`'s judge.json / judge.md carrying the cells."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from evprobe.bench.judge_agreement import (
    MIN_REPLIES,
    ONE_CATEGORY,
    TOO_FEW,
    agreement_cells,
    cell,
    task_of,
)
from evprobe.bench.judges import CATEGORIES, fleiss_kappa, kappa_estimate
from evprobe.bench.manifest import read_items

from tests.bench import test_judges
from tests.intervals import zero_width

NAMES = ("j0", "j1", "j2")
free_run = test_judges.free_run  # the module-scoped free-protocol run of the judge tests


def _rows(decisions: list[tuple[str | None, ...]], names: tuple[str, ...] = NAMES, families: int = 0) -> list[dict]:
    """judgments.jsonl-like rows; reply k in family f{k % families} (or its own family when 0)."""
    return [{"item_id": f"i{k}", "family_id": f"f{k % families if families else k}",
             "judges": dict(zip(names, d))} for k, d in enumerate(decisions)]


def test_two_judges_agreeing_on_8_of_10_give_the_hand_counted_kappa() -> None:
    # 4 both yes, 4 both no, 2 split: P_bar = 0.8, p_yes = p_no = 0.5, so p_e = 0.5 and kappa = 0.6
    decisions = [("yes", "yes")] * 4 + [("no", "no")] * 4 + [("yes", "no"), ("no", "yes")]
    c = cell("control", "sliding", _rows(decisions, ("a", "b")), ("a", "b"), CATEGORIES, 500, 1)
    assert c.fleiss_kappa.value == pytest.approx(0.6) and c.unanimous.value == pytest.approx(0.8)
    assert c.mean_pairwise.value == pytest.approx(0.8) and dict(c.pairs)["a / b"].value == pytest.approx(0.8)
    assert c.n_replies == c.n_decided_by_all == 10 and c.n_families == 10 and c.reason is None
    lo, hi = c.fleiss_kappa.ci
    assert lo < 0.6 < hi and c.fleiss_kappa.n_families == 10
    assert zero_width(c.to_json()) == []


def test_three_judges_hand_counted() -> None:
    # (yes, no) counts per reply: (3,0) (3,0) (2,1) (0,3) (0,3) (1,2): P_i = 1,1,1/3,1,1,1/3 so
    # P_bar = 7/9; p_yes = 9/18, p_e = 1/2; kappa = (7/9 - 1/2) / (1/2) = 5/9; unanimous 4/6;
    # mean pairwise agreement 7/9 (a 2-1 reply has 1 agreeing pair of 3); j2 dissents on both splits
    decisions = [("yes",) * 3] * 2 + [("yes", "yes", "no")] + [("no",) * 3] * 2 + [("no", "no", "yes")]
    c = cell("void", "spring", _rows(decisions, families=3), NAMES, CATEGORIES, 500, 1)
    assert c.fleiss_kappa.value == pytest.approx(5 / 9) and c.unanimous.value == pytest.approx(4 / 6)
    assert c.mean_pairwise.value == pytest.approx(7 / 9)
    pairs = dict(c.pairs)
    assert pairs["j0 / j1"].value == 1.0 and pairs["j0 / j2"].value == pytest.approx(4 / 6)
    assert c.n_families == 3 and c.unanimous.ci[0] < c.unanimous.ci[1]  # a share of 1.0 still has width


def test_a_cell_with_too_few_replies_or_one_category_says_why() -> None:
    few = cell("void", "sliding", _rows([("yes",) * 3] * (MIN_REPLIES - 1) + [("yes", None, "no")]), NAMES,
               CATEGORIES, 200, 1)
    assert few.reason == TOO_FEW and few.fleiss_kappa.value is None and few.fleiss_kappa.reason == TOO_FEW
    assert few.n_replies == MIN_REPLIES and few.n_decided_by_all == MIN_REPLIES - 1
    same = cell("void", "sliding", _rows([("undetermined",) * 3] * 8, families=4), NAMES, CATEGORIES, 200, 1)
    assert same.reason == ONE_CATEGORY and same.fleiss_kappa.value is None
    assert same.unanimous.value == 1.0 and same.unanimous.ci[0] < 1.0  # the shares still stand, with width
    from evprobe.bench.judge_agreement import cells_json, cells_markdown

    text = "\n".join(cells_markdown(cells_json([few, same])))
    assert TOO_FEW in text and ONE_CATEGORY in text


def test_one_cell_gives_the_pooled_kappa_and_its_interval(tmp_path: Path) -> None:
    from evprobe.bench.generate import GenerateConfig, generate

    generate(tmp_path / "bench", GenerateConfig(families_per_system=2, subset_per_cell=0), progress=False)
    items = [it for it in read_items(tmp_path / "bench") if it.request == "answer_initial"]
    one = {it.item_id: replace(it, system="sliding", resolved=True) for it in items}
    rng = np.random.default_rng(0)
    rows = [{"item_id": it.item_id, "family_id": it.family_id,
             "judges": {n: str(rng.choice(CATEGORIES[:3])) for n in NAMES}} for it in items]
    (only,) = agreement_cells(rows, one, NAMES, CATEGORIES, 300, 7)
    table = np.array([[sum(r["judges"][n] == c for n in NAMES) for c in CATEGORIES] for r in rows])
    pooled = kappa_estimate(table, [r["family_id"] for r in rows], 300, 7)
    assert only.fleiss_kappa == pooled and only.fleiss_kappa.value == pytest.approx(fleiss_kappa(table))
    both = {it.item_id: it for it in items}  # the real tasks and systems: cells partition the replies
    cells = agreement_cells(rows, both, NAMES, CATEGORIES, 300, 7)
    assert sum(c.n_replies for c in cells) == len(rows)
    assert {(c.task, c.dataset) for c in cells} == {(task_of(it), it.system) for it in items}


def test_judge_json_and_md_carry_the_cells(free_run: Path, tmp_path: Path) -> None:
    from tests.bench.test_judges import LETTER, _judge, _planned

    right = _planned(free_run, lambda it, rec: LETTER[rec.answer])
    says_no = _planned(free_run, lambda it, rec: "B")
    assert _judge(free_run, tmp_path, [right, right, says_no], name="cells") == 0
    out = free_run / "judged"
    result = json.loads((out / "judge.json").read_text())
    keys = list(result)
    assert keys[keys.index("seed") + 1:] == ["agreement_by_task_dataset"]  # appended, the rest as before
    section = result["agreement_by_task_dataset"]
    cells = section["cells"]
    items = {it.item_id: it for it in read_items(free_run.parent / "bench")}
    rows = [json.loads(x) for x in (out / "judgments.jsonl").read_text().splitlines()]
    assert {(c["task"], c["dataset"]) for c in cells} == {(task_of(items[r["item_id"]]), items[r["item_id"]].system)
                                                          for r in rows}
    assert sum(c["n_replies"] for c in cells) == result["n_replies"]
    for c in cells:  # the cell's kappa is Fleiss' kappa of its own replies
        mine = [r for r in rows if (task_of(items[r["item_id"]]), items[r["item_id"]].system) == (c["task"], c["dataset"])]
        table = np.array([[sum(v == k for v in r["judges"].values()) for k in CATEGORIES] for r in mine])
        if c["fleiss_kappa"]["value"] is not None:
            assert c["fleiss_kappa"]["value"] == pytest.approx(fleiss_kappa(table))
        assert c["n_families"] == len({r["family_id"] for r in mine})
    assert zero_width(section) == []
    assert "## Agreement per task x dataset" in (out / "judge.md").read_text()
