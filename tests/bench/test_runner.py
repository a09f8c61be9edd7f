"""`evprobe run`: records, resumption, kill -9 safety, pinned settings, batching."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from evprobe.bench.generate import GenerateConfig, generate
from evprobe.bench.model_config import ModelConfig
from evprobe.core.errors import InputError
from evprobe.bench.manifest import read_items
from evprobe.bench.records import load_records
from evprobe.bench.runner import RunConfig, run, select_items


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runner") / "bench"
    generate(out, GenerateConfig(families_per_system=2, subset_per_cell=1), progress=False)
    return out


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_policy_run_covers_every_item_and_resumes_without_duplicates(bench: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    summary = run(RunConfig(model="policy:exact-reader", bench=str(bench), out=str(out)), progress=False)
    items = read_items(bench)
    rows = _lines(out / "records.jsonl")
    assert summary.n_records == len(rows) == len(items)
    assert {r["item_id"] for r in rows} == {it.item_id for it in items}
    assert all(r["valid"] and r["route"] in ("direct", "number") for r in rows)
    again = run(RunConfig(model="policy:exact-reader", bench=str(bench), out=str(out)), progress=False)
    assert again.last_session.items == 0 and len(_lines(out / "records.jsonl")) == len(items)


def test_a_torn_last_line_is_dropped_and_redone(bench: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    cfg = RunConfig(model="policy:reference", bench=str(bench), out=str(out), requests=("select",))
    run(cfg, progress=False)
    path = out / "records.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # killed mid-write
    torn = path.read_bytes()
    assert len(load_records(path)) == len(lines) - 1
    assert path.read_bytes() == torn  # a reader never writes: the torn line is left for the writer
    run(cfg, progress=False)
    rows = _lines(path)
    assert len(rows) == len({r["item_id"] for r in rows}) == len(lines)


def test_a_run_killed_with_sigkill_loses_and_duplicates_nothing(main_bench: Path, tmp_path: Path) -> None:
    """kill -9 part-way through a 9,216-item run, then rerun: every id once, nothing rewritten."""
    out = tmp_path / "run"
    args = [sys.executable, "-m", "evprobe.experiments.cli", "run", "--model", "policy:random", "--bench",
            str(main_bench), "--out", str(out), "--batch-size", "1", "--quiet"]
    proc = subprocess.Popen(args)
    path = out / "records.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not path.is_file() or path.stat().st_size < 20_000):
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = load_records(path)
    assert 0 < len(before) < 9216  # killed part-way
    assert subprocess.run(args).returncode == 0
    rows = _lines(path)
    assert len(rows) == 9216 and len({r["item_id"] for r in rows}) == 9216
    after = {r["item_id"]: r for r in rows}
    assert all(after[k]["reply"] == v.reply for k, v in before.items())  # nothing rewritten


def test_other_settings_in_the_same_folder_are_refused(bench: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run(RunConfig(model="policy:reference", bench=str(bench), out=str(out), limit=3), progress=False)
    with pytest.raises(InputError, match="protocol='direct', this run has protocol='brief'"):
        run(RunConfig(model="policy:reference", bench=str(bench), out=str(out), protocol="brief"), progress=False)
    with pytest.raises(InputError, match="model='policy:reference'"):
        run(RunConfig(model="policy:random", bench=str(bench), out=str(out)), progress=False)
    # Every setting that changes a record is pinned, not just the model and the prompt's protocol.
    policy = ModelConfig.of("policy:reference")
    for changed, message in ((dict(seed=1), "seed=0, this run has seed=1"),
                             (dict(model=replace(policy, dtype="bfloat16")), "dtype='auto', this run has dtype='bfloat16'"),
                             (dict(model=replace(policy, attn_implementation="eager")),
                              "attn_implementation=None, this run has")):
        with pytest.raises(InputError, match=message):
            run(RunConfig(**{"model": "policy:reference", "bench": str(bench), "out": str(out), **changed}),
                progress=False)
    # The same settings with a larger selection resume the run (a batch size is not a setting of the records).
    summary = run(RunConfig(model="policy:reference", bench=str(bench), out=str(out), limit=5, batch_size=2),
                  progress=False)
    assert (summary.n_records, summary.last_session.items) == (5, 2)


def test_request_selection(bench: Path) -> None:
    items = read_items(bench)
    assert {it.variant for it in select_items(items, ["select"], None)} == {None}
    assert {it.variant for it in select_items(items, ["variants"], None)} == {
        "text_readings", "changed_rendering", "reworded", "given_equations", "check_possibilities", "no_initial_test"}
    assert len(select_items(items, None, 5)) == 5
    with pytest.raises(InputError, match="unknown request type 'selct'"):
        select_items(items, ["selct"], None)


def test_tiny_model_batched_and_single_replies_agree(bench: Path, tmp_path: Path) -> None:
    """Left padding must not leak: the same items give the same replies in batches of 3 and 1."""
    common = dict(model="tiny:qwen2_5_vl", bench=str(bench), requests=("answer_after_test",), limit=3)
    run(RunConfig(out=str(tmp_path / "b3"), batch_size=3, **common), progress=False)
    run(RunConfig(out=str(tmp_path / "b1"), batch_size=1, **common), progress=False)
    one = {r["item_id"]: r for r in _lines(tmp_path / "b1" / "records.jsonl")}
    three = {r["item_id"]: r for r in _lines(tmp_path / "b3" / "records.jsonl")}
    assert one.keys() == three.keys() and len(one) == 3
    for key in one:
        assert one[key]["reply"] == three[key]["reply"]
        assert one[key]["n_prompt_tokens"] == three[key]["n_prompt_tokens"] > 0
        assert one[key]["n_new_tokens"] == three[key]["n_new_tokens"] > 0
    # Items with 2 and 3 images have different prompt lengths: the batch really was padded.
    assert len({r["n_prompt_tokens"] for r in one.values()}) >= 1
