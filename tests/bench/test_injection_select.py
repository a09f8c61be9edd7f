"""Selecting items by information-injection level (`evprobe run --injection`, bench.runner.select_items):
select_items' default is level 0, exactly the main set's selection; `evprobe run`'s is every level
(as before the flag); named levels only; a level the benchmark does not hold, or a bad level, is a
one-line error; a run by level is scored by level."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evprobe.bench.generate import GenerateConfig, build, generate
from evprobe.bench.runner import RunConfig, run, select_items
from evprobe.core.errors import InputError
from evprobe.experiments.scoring_io import score_run


@pytest.fixture(scope="module")
def items():
    return build(GenerateConfig(families_per_system=1, subset_per_cell=1, injection_levels=(1, 2, 3)))[1]


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ladder") / "bench"
    generate(out, GenerateConfig(families_per_system=1, subset_per_cell=0, injection_levels=(1, 2, 3)), progress=False)
    return out


def test_the_default_is_the_main_sets_selection(items) -> None:
    main = build(GenerateConfig(families_per_system=1, subset_per_cell=1))[1]
    for requests in (None, ("select",), ("select", "answer_initial", "variants"), ("read_ruler",)):
        chosen = select_items(items, requests, None)
        assert [it.item_id for it in chosen] == [it.item_id for it in select_items(main, requests, None)]
        assert all(it.injection == 0 for it in chosen)


def test_run_selects_every_level_unless_told(bench: Path, tmp_path: Path) -> None:
    from evprobe.bench.runner import RunJob

    every = RunJob(RunConfig(model="policy:random", bench=str(bench), out=str(tmp_path / "a"), requests=("select",)))
    assert sorted({it.injection for it in every.items}) == [0, 1, 2, 3] and len(every.items) == 48
    assert select_items(every.all_items, ("select",), None, None) == every.items


def test_named_levels_select_only_their_items(items) -> None:
    chosen = select_items(items, ("select",), None, (2,))
    assert chosen and all(it.injection == 2 and it.item_id.endswith(".L2") for it in chosen)
    assert len(chosen) == len(select_items(items, ("select",), None))  # one copy per base selection
    both = select_items(items, ("select",), None, (0, 3))
    assert sorted({it.injection for it in both}) == [0, 3] and len(both) == 2 * len(chosen)
    # levels copy selections and answers only: variants and the sheet probes exist at level 0 alone
    assert select_items(items, ("variants", "read_ruler"), None, (1,)) == []
    assert select_items(items, ("select",), 5, (1,)) == chosen[:0] + select_items(items, ("select",), None, (1,))[:5]


@pytest.mark.parametrize("levels, message", [
    ((4,), "distinct levels among 0, 1, 2, 3, -1, got 4"),
    ((1, 1), "got 1,1"),
    ((), "got none"),
])
def test_bad_levels_are_refused(items, levels, message) -> None:
    with pytest.raises(InputError, match=message):
        select_items(items, None, None, levels)


def test_a_level_the_benchmark_lacks_is_an_error_not_an_empty_run() -> None:
    main = build(GenerateConfig(families_per_system=1, subset_per_cell=0))[1]
    with pytest.raises(InputError, match="no injection level 2 items; regenerate it with `evprobe generate --injection 2`"):
        select_items(main, ("select",), None, (0, 2))


def test_a_run_by_level_is_scored_by_level(bench: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    summary = run(RunConfig(model="policy:exact-reader", bench=str(bench), out=str(out), requests=("select",),
                            injection=(0, 2)), progress=False)
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert summary.n_records == len(records) == 24
    assert {r["item_id"].endswith(".L2") for r in records} == {True, False}
    assert json.loads((out / "run.json").read_text())["config"]["injection"] == [0, 2]
    scores, _ = score_run(out, n_boot=50)
    levels = scores["injection"]["levels"]
    for unrun in ("1", "3"):  # not run: no number, and the coverage says so
        assert levels[unrun]["min_cost_choice"]["reason"] == "no select records"
        assert levels[unrun]["coverage"]["select"]["records"] == 0
    level = levels["2"]["min_cost_choice"]
    assert level["n"] == scores["min_cost_choice"]["n"] == 12
    # the exact reader reads the sheet values whatever the prompt says: the same choices at both levels
    assert level["value"] == scores["min_cost_choice"]["value"] == 1.0
