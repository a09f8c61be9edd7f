"""Failure stages from reasoning traces (seed 003, section 4.5, Table 3; bench.failure_stages): the
seed's three definitions as traces, its Table 3 rows from their counts, and a run whose traces are
known giving its stage shares, with untraced and invalid failures kept in the denominators."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evprobe.bench.failure_stages import NO_TRACES, STAGES, stage, tally_stages
from evprobe.bench.generate import GenerateConfig, build, generate
from evprobe.bench.injection import TARGET_EXCLUSIVE
from evprobe.bench.manifest import read_items
from evprobe.bench.runner import RunConfig, run
from evprobe.bench.tally import Tally
from evprobe.core.bootstrap import FamilyBootstrap
from evprobe.experiments.scoring_io import score_run


@pytest.fixture(scope="module")
def mass_prompt() -> str:
    """A target-exclusive mass estimate's prompt (force 2.70902 N on a 1 m track, t up to 0.8 s)."""
    _, items = build(GenerateConfig(families_per_system=1, subset_per_cell=0, numeric=True,
                                    injection_levels=(TARGET_EXCLUSIVE,)))
    return next(it for it in items if it.injection == TARGET_EXCLUSIVE and it.item_id.startswith("sliding-000")
                and it.request == "estimate_property" and it.test == "test_mass").prompt


# The seed's definitions (section 4.5), each as a trace of a failed mass estimate.
STAGE_EXAMPLES = {
    # "provides a detailed description of the clutter but fails to acknowledge the presence of the
    # specific implicit information required for the task"
    "stage_I": [
        "The image shows four panels with a grey track, a brown block and some labels. The block looks like "
        "a typical wooden block of this size, so its mass is probably about 2 kg.",
        "A block is pushed along a track. Without more information I will estimate the mass from its size: "
        "around 1.5 kg.",
    ],
    # "explicitly notices the valid visual evidence but fails to establish a logical connection with the
    # target ... treats the critical cue as irrelevant background noise"
    "stage_II": [
        "Each panel has a ruler with a magenta dot, but that is just part of the apparatus. The block looks "
        "like wood, so its mass is about 1.5 kg.",
        "In the last panel the dot sits at 0.47 m on the ruler. That is where the block happens to be. "
        "Wooden blocks of this size weigh about 1.5 kg, so the mass is 1.5 kg.",
    ],
    # "successfully bridges the anchor and the target but fails at the stage of physical modeling or
    # numerical computation"
    "stage_III": [
        "In the last panel the dot is at 0.47 m on the ruler, at t = 0.8 s. Since x = F t^2 / (2 m), "
        "m = F t^2 / (2 x) = 2.70902 * 0.64 / (2 * 0.47) = 3.7 kg.",
        "The marker reads 47 cm at the last time. Using x = F t^2 / m (forgetting the half), the mass is "
        "2.70902 * 0.64 / 0.47, so m = 47 ... about 3.69 kg.",
    ],
}


@pytest.mark.parametrize("expected", sorted(STAGE_EXAMPLES))
def test_the_seed_definitions_read_as_their_stage(mass_prompt: str, expected: str) -> None:
    for trace in STAGE_EXAMPLES[expected]:
        assert stage(trace, mass_prompt) == expected, trace


def test_the_prompt_own_numbers_and_formula_symbols_are_not_readings(mass_prompt: str) -> None:
    """1 m is the track the prompt prints and "(2 m)" is the mass in a formula: neither is a reading,
    so a trace that only restates them has found no evidence."""
    assert "1 m track" in mass_prompt
    assert stage("The track is 1 m long, so the mass is 1 m / 2 = 0.5 kg.", mass_prompt) == "stage_I"
    assert stage("From x = F t^2 / (2 m), the mass is 2 kg.", mass_prompt) == "stage_I"
    assert stage("The block ends near 0.5 m, so the mass is 0.5 * 4 = 2 kg.", mass_prompt) == "stage_III"


# Seed 003's Table 3: (accuracy, stage I, II, III in %) of 10 samples, and the failures behind them.
TABLE_3 = {
    "InternVL3-2B": ((0.0, 90.00, 10.00, 0.00), (9, 1, 0)),
    "Qwen3-VL-8B": ((10.0, 88.89, 11.11, 0.00), (8, 1, 0)),
    "InternVL3.5-38B": ((0.0, 70.00, 20.00, 10.00), (7, 2, 1)),
    "InternVL3-78B": ((30.0, 57.14, 14.29, 28.57), (4, 1, 2)),
    "Gemini-3-Pro": ((50.0, 60.00, 20.00, 20.00), (3, 1, 1)),
}


@pytest.mark.parametrize("model", sorted(TABLE_3))
def test_table_3_rows_from_their_counts(model: str) -> None:
    row, (one, two, three) = TABLE_3[model]
    units = [(i, c) for i, c in enumerate(["stage_I"] * one + ["stage_II"] * two + ["stage_III"] * three)]
    units += [(len(units) + i, None) for i in range(10 - len(units))]  # the correct ones
    tally = Tally(FamilyBootstrap([f"s{i}" for i in range(10)], 200, 3))
    tally_stages(tally, ("t",), units)
    _, est = tally.resolve()
    got = [100 * est[("t", name)].value for name in ("accuracy", "stage_I", "stage_II", "stage_III")]
    assert [round(x, 2) for x in got] == pytest.approx(list(row), abs=0.006)
    assert est[("t", "untraced")].value == 0.0 and est[("t", "untraced")].ci[1] > 0.0  # never a point


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("stages") / "bench"
    generate(out, GenerateConfig(families_per_system=2, subset_per_cell=0, numeric=True,
                                 injection_levels=(TARGET_EXCLUSIVE,)), progress=False)
    return out


def test_a_run_without_traces_says_so(bench: Path, tmp_path: Path) -> None:
    out = tmp_path / "random"
    run(RunConfig(model="policy:random", bench=str(bench), out=str(out)), progress=False)
    assert score_run(out, n_boot=50)[0]["injection"]["failure_stages"] == {"reason": NO_TRACES}


def test_a_run_with_known_traces_gives_their_shares(bench: Path, tmp_path: Path) -> None:
    """The random policy's replies with traces written in: at level -1 the failed mass estimates get a
    stage I, II or III trace in turn, every fourth left untraced and one made invalid; the shares are
    those counts over every failure, invalid and untraced included."""
    out = tmp_path / "traced"
    run(RunConfig(model="policy:random", bench=str(bench), out=str(out)), progress=False)
    items = {it.item_id: it for it in read_items(bench)}
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    cycle = ["stage_I", "stage_II", "stage_III", None]
    want = dict.fromkeys(STAGES, 0)
    k = 0
    for r in rows:
        it = items[r["item_id"]]
        if it.injection != TARGET_EXCLUSIVE or it.request != "estimate_property" or it.test != "test_mass":
            continue
        if k == 0:
            r.update(valid=False, value=None)  # an invalid reply is a failure too
        r["value"] = None if r["value"] is None else 1000.0 * it.reference_value  # every one fails
        kind = cycle[k % 4]
        if kind is not None:
            r["reply"] = f"<think>{STAGE_EXAMPLES[kind][0]}</think>{r['reply']}"
        want[kind or "untraced"] += 1
        k += 1
    assert k == 12
    (out / "records.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    block = score_run(out, n_boot=100)[0]["injection"]["failure_stages"]
    est = block["levels"][str(TARGET_EXCLUSIVE)]["estimates"]
    counts = block["counts"][str(TARGET_EXCLUSIVE)]["estimates"]
    failures = counts["failures"]
    assert counts["replies"] == 48 and failures >= 12
    for name in ("stage_I", "stage_II", "stage_III"):  # the traced failures are the ones written in
        assert counts[name] == want[name] == 3
        assert est[name]["value"] == pytest.approx(3 / failures) and est[name]["n"] == failures
    assert counts["untraced"] == failures - 9
    assert sum(est[name]["value"] for name in STAGES) == pytest.approx(1.0)
    assert "0" in block["levels"] and "decisions" in block["levels"]["0"]
