"""Dose-response with the information-injection level as a condition (seed 003, section 4.6):
`injection: L` steers level L's items of the same held-out families with the same directions and
alpha unit. Known answer on the organism: it reads the same facts at every level (its front end
ignores the guidance and readings lines), so steering it must give the same log-probs at level 2
as at level 0, row for row; a level that steered other items or another unit would not."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from evprobe.bench.generate import GenerateConfig, generate
from evprobe.core.errors import InputError
from evprobe.experiments.capture import CaptureConfig, capture
from evprobe.experiments.dose_response.config import DoseResponseConfig
from evprobe.experiments.dose_response.plan import make_plan
from evprobe.experiments.dose_response import dose_response
from evprobe.probes.runs import directions_to_folder

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dose_levels")
    generate(root / "bench", GenerateConfig(families_per_system=2, subset_per_cell=0, injection_levels=(2,)),
             progress=False)
    capture(CaptureConfig(model="organism", bench=str(root / "bench"), out=str(root / "acts"), requests=("select",),
                          layers=(3,), positions=("last",)), progress=False)
    directions_to_folder([root / "acts"], "resolved", root / "dirs", [3], position="last", by="half")
    return {"root": root, "bench": root / "bench", "dirs": root / "dirs"}


def config(setup: dict[str, Path], level: int, **changes) -> DoseResponseConfig:
    return DoseResponseConfig(model="organism", bench=str(setup["bench"]), directions=str(setup["dirs"]),
                              out=str(setup["root"] / f"dose.L{level}"), layers=(3,), alphas=(-1.0, 0.0, 1.0),
                              n_random=2, controls=(), ablation=False, positions="last", injection=level,
                              n_boot=200, **changes)


def test_the_plan_steers_the_levels_items_of_the_same_families(setup) -> None:
    base, level = make_plan(config(setup, 0)), make_plan(config(setup, 2))
    assert all(it.injection == 0 for it in base.items) and all(it.injection == 2 for it in level.items)
    assert [it.item_id + ".L2" for it in base.items] == [it.item_id for it in level.items]
    assert base.excluded == level.excluded and base.norm_items == level.norm_items  # same unit, same held-out
    assert level.pinned["injection"] == 2 and base.pinned["injection"] is None


def test_a_level_the_benchmark_lacks_is_one_line(setup) -> None:
    with pytest.raises(InputError, match="no injection level 3 items"):
        make_plan(config(setup, 3))
    with pytest.raises(ValueError, match="choose a level among 0, 1, 2, 3"):
        config(setup, 4)


def test_the_organism_steers_alike_at_every_level(setup) -> None:
    dose_response(config(setup, 0), progress=False)
    dose_response(config(setup, 2), progress=False)
    a, b = (json.loads((setup["root"] / f"dose.L{lv}" / "dose_response.json").read_text()) for lv in (0, 2))
    rows = {}
    for level in (0, 2):
        for line in (setup["root"] / f"dose.L{level}" / "results.jsonl").read_text().splitlines():
            r = json.loads(line)
            rows[(r["item_id"].removesuffix(".L2"), r["condition"], level)] = r
    keys = {k[:2] for k in rows}
    assert len(keys) > 20
    for item, cond in keys:
        x, y = rows[(item, cond, 0)], rows[(item, cond, 2)]
        assert x["logprobs" if "logprobs" in x else "lp_set"] is not None
        assert x.get("logprobs") == pytest.approx(y.get("logprobs"), abs=1e-5), (item, cond)
        assert x.get("lp") == y.get("lp") and x.get("lp_set") == y.get("lp_set"), (item, cond)
    assert b["meta"]["injection"] == 2 and a["meta"]["injection"] == 0
    assert "of information-injection level 2" in (setup["root"] / "dose.L2" / "dose_response.md").read_text()
    ha, hb = a["headline"], b["headline"]
    assert [h["target"]["change"]["value"] for h in ha] == [h["target"]["change"]["value"] for h in hb]


def test_a_level_folder_is_not_resumed_at_another_level(setup) -> None:
    """Both ways: level 0 into a level-2 folder and level 2 into a level-0 folder."""
    with pytest.raises(InputError, match="injection=2"):
        dose_response(replace(config(setup, 0), out=str(setup["root"] / "dose.L2")), progress=False)
    with pytest.raises(InputError, match="injection=None"):
        dose_response(replace(config(setup, 2), out=str(setup["root"] / "dose.L0")), progress=False)
