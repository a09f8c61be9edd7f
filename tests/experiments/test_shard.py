"""Deterministic sharding, `evprobe merge`, and torchrun data parallel (gloo, 2 processes, CPU).

No mocks: a real benchmark (6 families), real policies, a real tiny LLaVA, a real torchrun.
Merged records equal a single run's line for line, every field except the per-item `seconds`
(wall time); merged activations equal a single capture's within float16 rounding.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evprobe.core.errors import InputError
from evprobe.bench.manifest import read_items
from evprobe.bench.runner import RunConfig, run, select_items
from evprobe.core.shard import Shard, family_shards, select_shard, shard_of
from evprobe.experiments.capture import CaptureConfig, capture
from evprobe.experiments.cli import main
from evprobe.experiments.merge import merge

ROOT = Path(__file__).resolve().parents[2]
POLICY = "policy:exact-reader"
MODEL = "tiny:llava"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def bench(small_bench: Path) -> Path:
    return small_bench  # 6 families, shared, read-only (tests/conftest.py)


def lines_without_seconds(path: Path) -> list[str]:
    """records.jsonl lines in file order with the timing field dropped (key order kept)."""
    out = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        del row["seconds"]
        out.append(json.dumps(row))
    return out


def run_policy(bench: Path, out: Path, shard: str | None = None, model: str = POLICY) -> dict:
    return run(RunConfig(model=model, bench=str(bench), out=str(out), shard=shard), progress=False)


@pytest.fixture(scope="module")
def single(bench: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("single") / "run"
    run_policy(bench, out)
    return out


# ---------------------------------------------------------------- selection


def test_shards_keep_families_whole_disjoint_and_balanced(bench: Path) -> None:
    items = read_items(bench)
    selected = select_items(items, ("select", "answer_initial"), None)
    for n in (1, 2, 3, 4, 7):
        parts = [select_shard(selected, Shard(k, n), items) for k in range(n)]
        ids = [it.item_id for part in parts for it in part]
        assert sorted(ids) == sorted(it.item_id for it in selected)  # union = all, no item twice
        families = [{it.family_id for it in part} for part in parts]
        assert sum(len(f) for f in families) == len(set().union(*families))  # a family in one shard only
        sizes = [len(f) for f in families]
        assert max(sizes) - min(sizes) <= 1  # round robin over sorted family ids
        for part in parts:  # selection order kept
            positions = [selected.index(it) for it in part]
            assert positions == sorted(positions)
    owners = family_shards((it.family_id for it in items), 4)
    assert owners == family_shards(sorted({it.family_id for it in items}, reverse=True), 4)  # input order free
    assert all(shard_of(fid, [it.family_id for it in items], 4) == k for fid, k in owners.items())


def test_shard_spec_errors_name_the_fix() -> None:
    assert Shard.parse("1/4") == Shard(1, 4) and str(Shard(1, 4)) == "1/4"
    for bad, fragment in (("4/4", "0 <= K < N"), ("-1/2", "0 <= K < N"), ("1-4", "not K/N"), ("a/b", "not K/N")):
        with pytest.raises(InputError, match=fragment):
            Shard.parse(bad)


# ---------------------------------------------------------------- runs


def test_merged_policy_shards_equal_a_single_run(bench: Path, single: Path, tmp_path: Path) -> None:
    shards = [tmp_path / f"s{k}" for k in range(3)]
    for k, folder in enumerate(shards):
        summary = run_policy(bench, folder, f"{k}/3")
        assert summary.record["shard"] == f"{k}/3" and summary.n_records == summary.n_selected > 0
    merge(tmp_path / "merged", list(reversed(shards)))  # any order
    assert lines_without_seconds(tmp_path / "merged" / "records.jsonl") == lines_without_seconds(
        single / "records.jsonl"
    )
    a, b = (json.loads((d / "run.json").read_text()) for d in (single, tmp_path / "merged"))
    assert list(a) == list(b) and a["shard"] is b["shard"] is None
    for key in a:
        if key == "config":
            assert {**a[key], "out": None} == {**b[key], "out": None}
        elif key != "last_session":
            assert a[key] == b[key], key
    # The merged folder is an ordinary finished run: rerunning the unsharded command adds nothing.
    assert run_policy(bench, tmp_path / "merged").last_session.items == 0


def test_merge_refuses_missing_duplicated_mismatched_and_foreign_shards(bench: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture) -> None:
    s0, s1, other = tmp_path / "s0", tmp_path / "s1", tmp_path / "other1"
    run_policy(bench, s0, "0/2")
    run_policy(bench, s1, "1/2")
    run_policy(bench, other, "1/2", model="policy:always-stop")
    cases = [
        ([s0], "shard 1/2 is missing"),
        ([s0, s1, s1], "shard 1/2 is given twice"),
        ([s0, other], "differs from shard 0/2 in model"),
    ]
    for folders, message in cases:
        with pytest.raises(InputError, match=message):
            merge(tmp_path / "out", folders)
    three = tmp_path / "t0"
    run_policy(bench, three, "0/3")
    with pytest.raises(InputError, match="2 ways and 3 ways"):
        merge(tmp_path / "out", [three, s1])
    with pytest.raises(InputError, match="also a shard folder"):
        merge(s0, [s0, s1])
    # The command line: one line, exit status 2.
    assert main(["merge", str(tmp_path / "out"), str(s0)]) == 2
    assert "shard 1/2 is missing; run it with --shard 1/2" in capsys.readouterr().err.replace(" (1 of 2 missing)", "")
    # Shard folders may not be resumed as another shard.
    with pytest.raises(InputError, match="shard='0/2'"):
        run_policy(bench, s0, "1/2")


def test_killed_shard_is_refused_then_finished_by_a_rerun(bench: Path, single: Path, tmp_path: Path) -> None:
    s0, s1 = tmp_path / "s0", tmp_path / "s1"
    run_policy(bench, s0, "0/2")
    run_policy(bench, s1, "1/2")
    records = s1 / "records.jsonl"
    data = records.read_bytes()
    cut = data.find(b"\n", len(data) // 2) + 20  # a kill mid-append: half the records and a torn line
    records.write_bytes(data[:cut])
    before = records.read_bytes()
    with pytest.raises(InputError, match="shard 1/2 .* is incomplete: .*rerun shard 1 with the same command"):
        merge(tmp_path / "merged", [s0, s1])
    assert records.read_bytes() == before  # merge only reads shard folders
    summary = run_policy(bench, s1, "1/2")  # the rerun finishes the shard
    assert 0 < summary.last_session.items < summary.n_selected
    merge(tmp_path / "merged", [s0, s1])
    merged = lines_without_seconds(tmp_path / "merged" / "records.jsonl")
    assert len(set(merged)) == len(merged)  # nothing duplicated
    assert merged == lines_without_seconds(single / "records.jsonl")  # nothing lost, same order


# ---------------------------------------------------------------- captures


def capture_config(bench: Path, out: Path, shard: str | None = None) -> CaptureConfig:
    return CaptureConfig(model=MODEL, bench=str(bench), out=str(out), requests=("select",),
                         positions=("last", "image_mean", "text_mean"), batch_size=8, shard=shard)


@pytest.fixture(scope="module")
def single_capture(bench: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("single_capture") / "acts"
    assert capture(capture_config(bench, out), progress=False).complete
    return out


def assert_same_capture(a: Path, b: Path) -> None:
    x, y = np.load(a / "acts.npy"), np.load(b / "acts.npy")
    assert x.shape == y.shape and x.dtype == y.dtype == np.float16
    np.testing.assert_allclose(x.astype(np.float32), y.astype(np.float32), rtol=2.0**-9, atol=1e-3)
    assert (a / "index.jsonl").read_bytes() == (b / "index.jsonl").read_bytes()  # same rows, same line order
    ma, mb = (json.loads((d / "meta.json").read_text()) for d in (a, b))
    assert list(ma) == list(mb)
    assert {**ma, "config": None, "bench": None} == {**mb, "config": None, "bench": None}


def test_merged_capture_shards_equal_a_single_capture(bench: Path, single_capture: Path, tmp_path: Path) -> None:
    shards = [tmp_path / f"s{k}" for k in range(2)]
    for k, folder in enumerate(shards):
        summary = capture(capture_config(bench, folder, f"{k}/2"), progress=False)
        assert summary.complete and summary.meta["shard"] == f"{k}/2"
    # A capture shard killed mid-append: refused until rerun.
    index = shards[1] / "index.jsonl"
    lines = index.read_text().splitlines(keepends=True)
    index.write_text("".join(lines[:3]) + lines[3][:10])
    with pytest.raises(InputError, match="shard 1/2 .* is incomplete: 3 of 12"):
        merge(tmp_path / "merged", shards)
    assert capture(capture_config(bench, shards[1], "1/2"), progress=False).complete
    merge(tmp_path / "merged", shards)
    assert_same_capture(single_capture, tmp_path / "merged")
    run_policy(bench, tmp_path / "r0", "0/2")
    with pytest.raises(InputError, match="mix capture and run shards"):
        merge(tmp_path / "x", [shards[0], tmp_path / "r0"])


# ---------------------------------------------------------------- torchrun


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(args: list[str], tmp_path: Path, quiet: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "PYTHONPATH": str(ROOT)}
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT"):
        env.pop(name, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), "-m", "evprobe", *args, *(["--quiet"] if quiet else [])]
    done = subprocess.run(cmd, check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "from 2 processes" in done.stdout
    return done


def test_torchrun_two_processes_equal_one(bench: Path, single_capture: Path, tmp_path: Path) -> None:
    args = ["--model", MODEL, "--bench", str(bench), "--requests", "select"]
    one = tmp_path / "one"
    assert main(["run", *args, "--out", str(one), "--quiet"]) == 0
    done = torchrun(["run", *args, "--out", str(tmp_path / "two")], tmp_path, quiet=False)
    assert lines_without_seconds(tmp_path / "two" / "records.jsonl") == lines_without_seconds(one / "records.jsonl")
    # Every process reports its own items per second (stderr, its shard folder) and rank 0 gathers them.
    assert "[process 0/2] " in done.stderr and "[process 1/2] " in done.stderr
    # Progress: whole lines per process, named by shard, with the process's rate.
    for k in range(2):
        # (its rate once a second has passed: core.progress.MIN_TIMED)
        assert re.search(rf"^run \[shard {k}/2\] 12/12( \([0-9.]+/s, ETA 0 s\))?$", done.stderr, re.M), done.stderr
    speed = json.loads((tmp_path / "two" / "throughput.json").read_text())
    assert [p["shard"] for p in speed["processes"]] == ["0/2", "1/2"]
    assert speed["units"] == sum(p["units"] for p in speed["processes"]) == 24
    assert all(p["per_second"] > 0 and p["device"].startswith("cpu (1 threads)") for p in speed["processes"])
    assert "per process: " in done.stdout
    assert sorted(p.name for p in (tmp_path / "two" / ".shards").iterdir()) == ["shard-0-of-2", "shard-1-of-2"]
    # Kill one shard's work (lose its records) and rerun the same command: merged again, nothing lost.
    shutil.rmtree(tmp_path / "two" / ".shards" / "shard-1-of-2")
    torchrun(["run", *args, "--out", str(tmp_path / "two")], tmp_path)
    assert lines_without_seconds(tmp_path / "two" / "records.jsonl") == lines_without_seconds(one / "records.jsonl")
    torchrun(["capture", *args, "--positions", "last,image_mean,text_mean", "--out", str(tmp_path / "acts")],
             tmp_path)
    assert_same_capture(single_capture, tmp_path / "acts")


# ---------------------------------------------------------------- patching


def test_merged_patching_shards_equal_a_single_job(tmp_path: Path) -> None:
    from evprobe.bench.generate import GenerateConfig, generate
    from evprobe.experiments.patching.job import PatchingConfig, run_patching

    bench = tmp_path / "bench"
    generate(bench, GenerateConfig(families_per_system=1, subset_per_cell=0), progress=False)

    def job(out: Path, shard: str | None = None) -> dict:
        config = PatchingConfig(model="tiny:qwen2_5_vl", bench=str(bench), out=str(out), layers="0,3",
                                limit_pairs=4, n_boot=100, shard=shard)
        return run_patching(config, progress=False)

    assert job(tmp_path / "one").n_rows == 8  # 4 pairs (2 families) x 2 directions
    shards = [tmp_path / "s0", tmp_path / "s1"]
    assert [job(folder, f"{k}/2").n_rows for k, folder in enumerate(shards)] == [4, 4]
    results = shards[0] / "results.jsonl"
    full = results.read_bytes()
    results.write_bytes(full[: full.index(b"\n") + 5])  # killed mid-append after one row
    with pytest.raises(InputError, match="shard 0/2 .* is incomplete: 1 of 4"):
        merge(tmp_path / "merged", shards)
    assert job(shards[0], "0/2").computed == 3  # the same job finishes it: the torn row is redone
    merge(tmp_path / "merged", shards)
    assert (tmp_path / "merged" / "results.jsonl").read_bytes() == (tmp_path / "one" / "results.jsonl").read_bytes()
    a, b = (json.loads((d / "patching.json").read_text()) for d in (tmp_path / "one", tmp_path / "merged"))
    assert {**a, "seconds": 0} == {**b, "seconds": 0}
    assert (tmp_path / "one" / "patching.md").read_bytes() == (tmp_path / "merged" / "patching.md").read_bytes()


# ---------------------------------------------------------------- dose-response (and torchrun patching)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_same_dose_response(one: Path, other: Path) -> None:
    """Same rows in the same order; log-probs within float32 rounding; same choices and rates."""
    a, b = _rows(one / "results.jsonl"), _rows(other / "results.jsonl")
    assert [(r["item_id"], r["condition"]) for r in a] == [(r["item_id"], r["condition"]) for r in b]
    for x, y in zip(a, b):
        if "lp_set" in x:  # a set of directions (random or controls) in one row
            assert x["lp_set"]["choice"] == y["lp_set"]["choice"]
            assert np.allclose(x["lp_set"]["log_odds"], y["lp_set"]["log_odds"], atol=1e-4)
            continue
        assert {k: v for k, v in x["lp"].items() if k != "log_odds"} == {k: v for k, v in y["lp"].items() if k != "log_odds"}
        assert np.allclose(list(x["logprobs"].values()), list(y["logprobs"].values()), atol=1e-4)
    ja, jb = (json.loads((d / "dose_response.json").read_text()) for d in (one, other))
    rates = [(r["value"], s["value"]) for r, s in zip(ja["rows"], jb["rows"]) if r["measure"] != "log_odds"]
    assert len(ja["rows"]) == len(jb["rows"]) and all(x == y for x, y in rates)


def test_dose_response_shards_and_torchrun_equal_a_single_run(bench: Path, tmp_path: Path) -> None:
    from evprobe.experiments.dose_response.config import DoseResponseConfig
    from evprobe.experiments.dose_response import dose_response

    acts, dirs = tmp_path / "acts", tmp_path / "dirs"
    capture(CaptureConfig(model="organism", bench=str(bench), out=str(acts), requests=("select",)), progress=False)
    assert main(["directions", str(acts), "--layer", "1,2", "--by", "system", "--out", str(dirs)]) == 0

    def config(out: Path, shard: str | None = None) -> DoseResponseConfig:
        return DoseResponseConfig(model="organism", bench=str(bench), directions=str(dirs), out=str(out),
                                  alphas=(-1.0, 0.0, 1.0), n_random=1, batch_size=4, n_boot=50, shard=shard)

    one = dose_response(config(tmp_path / "one"), progress=False)
    assert one.report.n_items == 16  # the held-out systems' 4 families x 4 decisions
    shards = [tmp_path / "s0", tmp_path / "s1"]
    assert dose_response(config(shards[0], "0/2"), progress=False).report.n_items == 8
    # Shard 1 in its own process, SIGKILLed as soon as its first rows are on disk.
    script = ("import torch; torch.set_num_threads(1)\n"
              "from pathlib import Path\n"
              "from evprobe.experiments.dose_response import DoseResponseConfig, dose_response\n"
              f"dose_response(DoseResponseConfig(model='organism', bench={str(bench)!r}, directions={str(dirs)!r}, "
              f"out={str(shards[1])!r}, alphas=(-1.0, 0.0, 1.0), n_random=1, batch_size=4, n_boot=50, "
              "shard='1/2'), progress=False)\n")
    had = kill_when([sys.executable, "-c", script], shards[1] / "results.jsonl", 1, tmp_path)
    n_rows = one.n_rows // 2
    assert 1 <= had < n_rows
    with pytest.raises(InputError, match=f"shard 1/2 .* is incomplete: {had} of {n_rows}"):
        merge(tmp_path / "merged", shards)
    rerun = dose_response(config(shards[1], "1/2"), progress=False)  # the same job finishes it
    assert (rerun.reused, rerun.computed) == (had, n_rows - had)
    merge(tmp_path / "merged", shards)
    assert_same_dose_response(tmp_path / "one", tmp_path / "merged")
    with pytest.raises(InputError, match="given twice"):
        merge(tmp_path / "again", [shards[0], shards[0]])

    args = ["dose-response", "--config", "dose_response_tiny", "--model", "organism", "--bench", str(bench),
            "--directions", str(dirs), "--layers", "1,2", "--alphas=-1,0,1", "--n-random", "1", "--limit", "1000",
            "--batch-size", "4", "--n-boot", "50", "--out", str(tmp_path / "two")]
    torchrun(args, tmp_path)
    assert_same_dose_response(tmp_path / "one", tmp_path / "two")

    # Patching under torchrun: the same rows as one process.
    patch = ["--model", "organism", "--bench", str(bench), "--layers", "0,3", "--limit-pairs", "4", "--n-boot", "50"]
    assert main(["patching", *patch, "--out", str(tmp_path / "p1"), "--quiet"]) == 0
    torchrun(["patching", *patch, "--out", str(tmp_path / "p2")], tmp_path)
    a, b = _rows(tmp_path / "p1" / "results.jsonl"), _rows(tmp_path / "p2" / "results.jsonl")
    assert [r["key"] for r in a] == [r["key"] for r in b]
    assert all(np.allclose(x["ld_patched"], y["ld_patched"], atol=1e-3) for x, y in zip(a, b))


def test_accelerate_launch_runs_the_same_data_parallel_path(bench: Path, single: Path, tmp_path: Path) -> None:
    """`accelerate launch --multi_gpu` starts its processes through torch's launcher and sets the
    same variables; on a machine without GPUs they meet over gloo. (`--cpu` with several processes
    would need MPI in accelerate, so it is not the CPU route.)"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT", "MASTER_ADDR"):
        env.pop(name, None)
    accelerate = Path(sys.executable).with_name("accelerate")
    cmd = [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
           "-m", "evprobe", "run", "--model", POLICY, "--bench", str(bench), "--out", str(tmp_path / "acc"),
           "--quiet"]
    done = subprocess.run(cmd, check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "from 2 processes" in done.stdout
    assert lines_without_seconds(tmp_path / "acc" / "records.jsonl") == lines_without_seconds(single / "records.jsonl")


# ---------------------------------------------------------------- layer sweep


def test_layer_sweep_shards_and_torchrun_equal_a_single_sweep(bench: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    from evprobe.experiments.layer_sweep import layer_sweep, load_layer_sweep_config

    # One row per forward (batch size 1): a row's activations then do not depend on which rows share
    # its batch, so the shards' captures are bit-identical to the single one and so are the sweeps.
    settings = ["--bench", str(bench), "--requests", "select", "--labels", "resolved", "--transfer", "system",
                "--n-boot", "50", "--folds", "3", "--batch-size", "1"]
    one = tmp_path / "one"
    single = layer_sweep(load_layer_sweep_config("layer_sweep_tiny", {
        "bench": str(bench), "out": str(one), "requests": ["select"], "labels": ["resolved"], "transfer": ["system"],
        "n_boot": 50, "folds": 3, "batch_size": 1}), progress=False)
    assert single.captured == 24

    def same_sweep(other: Path) -> None:
        assert_same_capture(one / "acts", other / "acts")
        assert (one / "acts" / "acts.npy").read_bytes() == (other / "acts" / "acts.npy").read_bytes()
        for name in ("best_layers.json", "sweeps/resolved/sweep.json", "directions/directions.json"):
            # Equal but for the output folder named inside and the sweep's wall time.
            a, b = ({**json.loads((d / name).read_text().replace(str(d), "OUT")), "seconds": None} for d in (one, other))
            assert a == b, name

    capsys.readouterr()
    shards = [tmp_path / f"s{k}" for k in range(2)]
    for k, folder in enumerate(shards):
        assert main(["layer-sweep", "--config", "layer_sweep_tiny", *settings, "--shard", f"{k}/2",
                     "--out", str(folder), "--quiet"]) == 0
        printed = capsys.readouterr().out
        assert f"shard {k}/2: 12 items captured" in printed, printed
        assert (folder / "layer_sweep_config.json").is_file() and not (folder / "best_layers.json").exists()
    result = merge(tmp_path / "merged", shards)
    assert result.kind == "layer-sweep" and result.n_shards == 2
    same_sweep(tmp_path / "merged")
    # A shard of another sweep (other labels) is refused, naming the difference.
    other = tmp_path / "other"
    assert main(["layer-sweep", "--config", "layer_sweep_tiny", *settings, "--labels", "history", "--shard", "1/2",
                 "--out", str(other), "--quiet"]) == 0
    with pytest.raises(InputError, match="another layer sweep .*different labels"):
        merge(tmp_path / "x", [shards[0], other])

    torchrun(["layer-sweep", "--config", "layer_sweep_tiny", *settings, "--out", str(tmp_path / "two")], tmp_path)
    same_sweep(tmp_path / "two")


# ---------------------------------------------------------------- a real kill


def kill_when(cmd: list[str], log: Path, n_lines: int, tmp_path: Path) -> int:
    """Start `cmd`, SIGKILL it once `log` holds `n_lines` complete lines; the lines it had then."""
    import signal
    import time

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if log.is_file() and log.read_bytes().count(b"\n") >= n_lines:
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL, f"not killed mid-run (rc {proc.returncode}): {proc.stderr.read()[-2000:]}"
    return log.read_bytes().count(b"\n")


@pytest.mark.parametrize("command", ["run", "capture"])
def test_sigkilled_shard_rerun_completes_the_merge(bench: Path, tmp_path: Path, command: str) -> None:
    """A shard process killed with SIGKILL mid-run (not a simulated truncation): merge refuses it,
    the same command finishes it, and the merge equals a single run, nothing lost or duplicated."""
    log = "records.jsonl" if command == "run" else "index.jsonl"
    args = [command, "--model", MODEL, "--bench", str(bench), "--requests", "select,answer_initial",
            "--batch-size", "1", "--quiet"]
    if command == "capture":
        args += ["--positions", "last,image_mean"]
    one, shards = tmp_path / "one", [tmp_path / "s0", tmp_path / "s1"]
    assert main([*args, "--out", str(one)]) == 0
    assert main([*args, "--shard", "0/2", "--out", str(shards[0])]) == 0
    had = kill_when([sys.executable, "-m", "evprobe", *args, "--shard", "1/2", "--out", str(shards[1])],
                    shards[1] / log, 3, tmp_path)
    assert 3 <= had < 24  # killed part way through its 24 items
    with pytest.raises(InputError, match="shard 1/2 .* is incomplete"):
        merge(tmp_path / "merged", shards)
    assert main([*args, "--shard", "1/2", "--out", str(shards[1])]) == 0  # the same command finishes it
    merge(tmp_path / "merged", shards)
    if command == "run":
        merged = lines_without_seconds(tmp_path / "merged" / "records.jsonl")
        assert len(set(merged)) == len(merged) == 48
        assert merged == lines_without_seconds(one / "records.jsonl")
    else:
        assert_same_capture(one, tmp_path / "merged")
        assert (one / "acts.npy").read_bytes() == (tmp_path / "merged" / "acts.npy").read_bytes()


# ---------------------------------------------------------------- where each process's model goes


def test_placement_for_rank_splits_a_nodes_gpus_among_its_processes() -> None:
    from evprobe.experiments.distributed import placement_for_rank

    def place(device_map, max_memory=None, *, gpus=8, rank=0, world=1):
        return placement_for_rank(device_map, max_memory, n_gpus=gpus, local_rank=rank, local_world_size=world,
                                  free={g: 1000 + g for g in range(gpus)})

    assert place(None, gpus=0, world=2) == (None, None)  # CPU: as given
    assert place("auto", "cpu=1GiB", gpus=0, world=2) == ("auto", "cpu=1GiB")
    assert place(None, rank=3, world=8) == ("cuda:3", None)  # one model copy per GPU
    assert place("cuda:1", rank=3, world=8) == ("cuda:1", None)  # an explicit device: as given
    assert place("auto", "0=70GiB", world=1) == ("auto", "0=70GiB")  # one process spans the node
    # 4 processes on 8 GPUs: process 1 owns GPUs 2 and 3 only; the user's budgets are kept.
    assert place("auto", "2=70GiB,cpu=100GiB", rank=1, world=4) == ("auto", "2=70GiB,3=1003B,cpu=100GiB")
    assert place("balanced", rank=3, world=4) == ("balanced", "6=1006B,7=1007B")
    with pytest.raises(ValueError, match="do not split evenly; start a number of processes that divides 8"):
        place("auto", rank=0, world=3)
    with pytest.raises(ValueError, match="3 processes per node but 2 GPUs"):
        place(None, gpus=2, rank=0, world=3)
