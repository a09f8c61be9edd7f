"""Repeated runs (bench.repeats) and their scores (bench.repeats_scoring): the folders, seeds, refusals
and resumption of `run_repeated`; the pooled interval of one run is the run's own; the paired
comparison of a setting with itself is 0; one sampled tiny model's runs."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from evprobe.bench.manifest import read_items, read_meta
from evprobe.bench.records import load_records
from evprobe.bench.reference import Prices
from evprobe.bench.repeats import RUNS_FILE, read_runs, refuse_runs_folder, run_repeated
from evprobe.bench.repeats_scoring import (
    Design,
    check_shares_match,
    cost_bounds,
    paired_comparison,
    pooled_estimates,
    pooled_parts,
    read_side,
    run_shares,
)
from evprobe.bench.runner import RunConfig, run
from evprobe.bench.scoring import HEADLINE, score
from evprobe.core.errors import InputError


def _config(bench: Path, out: Path, **kw) -> RunConfig:
    return RunConfig(model="policy:random", bench=str(bench), out=str(out), **kw)


def _lines(run_dir: Path) -> dict[str, dict]:
    """Records by item id, without the seconds a record took (the only field that is not a reply's)."""
    rows = (json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines())
    return {r["item_id"]: {k: v for k, v in r.items() if k != "seconds"} for r in rows}


@pytest.fixture(scope="module")
def three_runs(small_bench: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("repeats") / "random"
    run_repeated(_config(small_bench, out, seed=5), 3, progress=False)
    return out


def test_runs_are_run_folders_with_their_own_seeds(three_runs: Path, small_bench: Path, tmp_path: Path) -> None:
    index = read_runs(three_runs)
    assert [(e.run, e.folder, e.seed) for e in index.runs] == [(1, "run-1", 5), (2, "run-2", 6), (3, "run-3", 7)]
    raw = json.loads((three_runs / RUNS_FILE).read_text())
    assert [e["n_records"] for e in raw["runs"]] == [312, 312, 312]
    for e in index.runs:
        meta = json.loads((three_runs / e.folder / "run.json").read_text())
        assert meta["seed"] == e.seed and meta["config"]["runs"] == 1 and meta["n_records"] == 312
    runs = [_lines(three_runs / e.folder) for e in index.runs]
    assert runs[0] != runs[1] != runs[2]  # distinct seeds, distinct draws
    # run r alone, by hand, is the same run: reproducible from its seed
    run(_config(small_bench, tmp_path / "alone", seed=6), progress=False)
    assert _lines(tmp_path / "alone") == runs[1]


def test_runs_that_cannot_differ_are_refused(small_bench: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(InputError, match="greedy decoding writes the same records"):
        run_repeated(RunConfig(model="tiny:llava", bench=str(small_bench), out=str(out)), 2, progress=False)
    with pytest.raises(InputError, match="do not depend on the seed"):
        run_repeated(RunConfig(model="policy:reference", bench=str(small_bench), out=str(out)), 3, progress=False)
    with pytest.raises(InputError, match="positive integer"):
        run_repeated(_config(small_bench, out), 0, progress=False)
    with pytest.raises(InputError, match="--shard"):
        run_repeated(_config(small_bench, out, shard="1/2"), 2, progress=False)
    assert not out.exists()  # refused before anything is written
    sampled = RunConfig(model="tiny:llava", bench=str(small_bench), out=str(out), temperature=0.8)
    from evprobe.bench.repeats import check_runs

    check_runs(sampled, 3)  # sampled: allowed (nothing run here)


def test_a_killed_run_of_runs_continues_each_folder(three_runs: Path, small_bench: Path, tmp_path: Path) -> None:
    out = tmp_path / "killed"
    shutil.copytree(three_runs, out)
    before = {r: _lines(out / f"run-{r}") for r in (1, 2, 3)}
    lines = (out / "run-2" / "records.jsonl").read_bytes().splitlines(keepends=True)
    (out / "run-2" / "records.jsonl").write_bytes(b"".join(lines[:100]) + lines[100][:17])  # killed mid-append
    shutil.rmtree(out / "run-3")  # never started
    summary = run_repeated(_config(small_bench, out, seed=5), 3, progress=False)
    assert [e.last_session.items for e in summary.runs] == [0, 212, 312]
    assert {r: _lines(out / f"run-{r}") for r in (1, 2, 3)} == before


def test_what_a_folder_of_runs_refuses_and_what_it_adds(three_runs: Path, small_bench: Path, tmp_path: Path) -> None:
    out = tmp_path / "grow"
    shutil.copytree(three_runs, out)
    with pytest.raises(InputError, match="holds 3 runs; --runs 2"):
        run_repeated(_config(small_bench, out, seed=5), 2, progress=False)
    with pytest.raises(InputError, match="written with --seed 5"):
        run_repeated(_config(small_bench, out, seed=0), 3, progress=False)
    written = (out / RUNS_FILE).read_bytes()
    with pytest.raises(InputError, match="written with temperature=0.0, this run has temperature=0.5"):
        run_repeated(_config(small_bench, out, seed=5, temperature=0.5), 3, progress=False)
    assert (out / RUNS_FILE).read_bytes() == written  # refused before runs.json is rewritten
    with pytest.raises(InputError, match="folder of 3 runs"):
        refuse_runs_folder(_config(small_bench, out, seed=5))
    summary = run_repeated(_config(small_bench, out, seed=5, limit=10), 4, progress=False)
    assert [e.seed for e in summary.runs] == [5, 6, 7, 8] and summary.runs[3].n_records == 10
    assert len(read_runs(out).runs) == 4
    single = tmp_path / "single"
    run(_config(small_bench, single, limit=5), progress=False)
    with pytest.raises(InputError, match="single run folder"):
        run_repeated(_config(small_bench, single), 2, progress=False)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="no runs.json"):
        run_repeated(_config(small_bench, tmp_path / "other"), 2, progress=False)


def _design(bench: Path) -> Design:
    return Design.build(read_items(bench, validate_images=False), Prices(**read_meta(bench)["prices"]))


def test_pooling_one_run_gives_the_runs_own_score(three_runs: Path, small_bench: Path) -> None:
    """Per-family sums reproduce the run's values, and one run pooled on the score's resamples is
    the score's own interval: the same families, seed and draws (module docstring)."""
    design = _design(small_bench)
    records = load_records(three_runs / "run-1" / "records.jsonl")
    scored = score(read_items(small_bench, validate_images=False), records.values(), n_boot=400, seed=11,
                   prices=design.prices)
    shares = run_shares(design, records.values())
    check_shares_match(shares, scored, design, "run-1")
    pooled = pooled_estimates(pooled_parts(design.bootstrap(400, 11), [shares]), cost_bounds(design.prices))
    for name in HEADLINE:
        mine, theirs = pooled[name].to_json(), scored[name]
        assert mine["n"] == theirs["n"], name
        assert mine["value"] == pytest.approx(theirs["value"], abs=1e-12), name
        assert mine["ci"] == pytest.approx(theirs["ci"], abs=1e-12), name


def test_pooled_runs_and_a_settings_difference_from_itself(three_runs: Path, small_bench: Path) -> None:
    side = read_side(three_runs)
    design = _design(small_bench)
    shares = [run_shares(design, r.values()) for r in side.records]
    values = [s.values(cost_bounds(design.prices)) for s in shares]
    pooled = pooled_estimates(pooled_parts(design.bootstrap(300, 3), shares), cost_bounds(design.prices))
    for name in HEADLINE:
        if name != "pecs":  # the same items in every run: the pooled ratio is the runs' mean
            assert pooled[name].value == pytest.approx(np.mean([v[name] for v in values]), abs=1e-12), name
    assert pooled["min_cost_choice"].n == 3 * 24
    result, markdown = paired_comparison(three_runs, three_runs, n_boot=300, seed=3)
    for name, block in result["headline"].items():
        d = block["difference"]
        assert d["value"] == pytest.approx(0.0, abs=1e-12), name
        if name == "pecs":  # exactly 0 on every resample: no interval, and why (never [0, 0])
            assert d["ci"] == [None, None] and d["reason"] == "the same on every family resample"
            continue
        assert d["ci"][0] <= 0.0 <= d["ci"][1], name
    assert result["headline"]["min_cost_choice"]["difference"]["n"] == 24  # one run's units
    assert "| Minimum cost choice |" in markdown and "+0.0 [" in markdown


def test_paired_difference_is_the_difference_of_the_runs_means(three_runs: Path, small_bench: Path,
                                                              tmp_path: Path) -> None:
    other = tmp_path / "other"
    run_repeated(_config(small_bench, other, seed=50), 2, progress=False)
    result, _ = paired_comparison(three_runs, other, n_boot=300, seed=3)
    block = result["headline"]["min_cost_choice"]
    assert block["difference"]["value"] == pytest.approx(block["b_mean"] - block["a_mean"], abs=1e-12)
    lo, hi = block["difference"]["ci"]
    assert lo < block["difference"]["value"] < hi
    # a single run folder is a side of one run
    single, _ = paired_comparison(three_runs / "run-1", other, n_boot=300, seed=3)
    assert single["a"]["runs"] == [str(three_runs / "run-1")]


def test_paired_refuses_different_items(three_runs: Path, small_bench: Path, tmp_path: Path) -> None:
    short = tmp_path / "short"
    run_repeated(_config(small_bench, short, seed=9, limit=100), 2, progress=False)
    with pytest.raises(InputError, match="not the same items"):
        paired_comparison(three_runs, short, n_boot=50)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(three_runs / "run-1", elsewhere)
    meta = json.loads((elsewhere / "run.json").read_text())
    meta["items_sha256"] = "0" * 64
    (elsewhere / "run.json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match="different benchmarks"):
        paired_comparison(three_runs, elsewhere, n_boot=50)


def test_sampled_tiny_model_runs(small_bench: Path, tmp_path: Path, one_torch_thread) -> None:
    """hf backend, seed 002's protocol on 4 items: two runs (seeds 0, 1) draw other replies, and the
    same --runs again with the same seed writes the same records."""
    config = RunConfig(model="tiny:llava", bench=str(small_bench), out=str(tmp_path / "a"), temperature=0.8,
                       top_p=0.95, limit=4)
    run_repeated(config, 2, progress=False)
    run_repeated(replace(config, out=str(tmp_path / "b")), 2, progress=False)
    a1, a2 = _lines(tmp_path / "a" / "run-1"), _lines(tmp_path / "a" / "run-2")
    assert len(a1) == len(a2) == 4
    assert [r["reply"] for r in a1.values()] != [r["reply"] for r in a2.values()]  # seeds 0 and 1 sample apart
    for r in (1, 2):
        assert _lines(tmp_path / "b" / f"run-{r}") == _lines(tmp_path / "a" / f"run-{r}")
    meta = json.loads((tmp_path / "a" / "run-2" / "run.json").read_text())
    assert (meta["temperature"], meta["top_p"], meta["seed"]) == (0.8, 0.95, 1)


def test_pecs_per_dataset_of_one_run_pooled_is_the_runs_own(three_runs: Path, small_bench: Path) -> None:
    """bench.pecs.from_family_sums on one run's per-family sums gives that run's own section (the
    score's resamples), so pooling over runs is the same computation on summed families."""
    from evprobe.bench import pecs

    design = _design(small_bench)
    records = load_records(three_runs / "run-1" / "records.jsonl")
    scored = score(read_items(small_bench, validate_images=False), records.values(), n_boot=400, seed=11,
                   prices=design.prices)
    shares = run_shares(design, records.values())
    from evprobe.bench.repeats_scoring import MEASURES

    sums = {p: (shares.num[:, MEASURES.index(pecs.POOLED[p])], shares.den[:, MEASURES.index(pecs.POOLED[p])])
            for p in pecs.PARTS}
    systems = [design.items_by_family[f][0].system for f in design.families]
    mine = pecs.section_json(pecs.from_family_sums(design.bootstrap(400, 11), systems, sums))
    theirs = scored["pecs_datasets"]
    assert set(mine["datasets"]) == set(theirs["datasets"]) and mine["zero_boundary"]["of"] == 3
    for name, block in theirs["datasets"].items():
        for key, est in block.items():
            assert mine["datasets"][name][key]["value"] == pytest.approx(est["value"], abs=1e-12), (name, key)
            assert mine["datasets"][name][key]["ci"] == pytest.approx(est["ci"], abs=1e-12), (name, key)
            # and the families each rests on, parts (Acc, AbsRec, FalseAbs) and scores alike (issue 52)
            assert mine["datasets"][name][key]["n_families"] == est["n_families"] == 2, (name, key)
    assert mine["equal_weight_mean"]["pecs"]["ci"] == pytest.approx(theirs["equal_weight_mean"]["pecs"]["ci"],
                                                                      abs=1e-12)


def test_a_folder_of_runs_prints_pecs_per_dataset_per_run_and_pooled(three_runs: Path, small_bench: Path,
                                                                    tmp_path: Path) -> None:
    import shutil

    from evprobe.experiments.cli import main

    out = tmp_path / "runs"
    shutil.copytree(three_runs, out)
    assert main(["score", str(out), "--quiet", "--n-boot", "200"]) == 0
    summary = json.loads((out / "scores.json").read_text())
    block = summary["pecs_datasets"]
    assert len(block["runs"]) == 3 and all("datasets" in r for r in block["runs"])
    means = [r["equal_weight_mean"]["pecs"]["value"] for r in block["runs"]]
    text = (out / "scores.md").read_text()
    assert "PECS per dataset (bench.pecs" in text and "| PECS: equal-weight mean |" in text
    assert f"| {np.mean(means):.3f} |" in text  # the runs' mean, in its own column
