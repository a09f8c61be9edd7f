"""Readers never write, and say so: every reader that leaves out the unterminated last line of an
append-only log (a run killed mid-append, or one still appending) warns once, naming the file, and
leaves its bytes as they were; only the writer that resumes cuts that line, and it does not warn.

One test per reader, each on a file with a torn last line: `evprobe score`, `evprobe compare`,
`evprobe merge` (a shard with a torn tail is incomplete: refused), `evprobe report`,
`probes.load_capture` and `evprobe sweep` on a capture whose index.jsonl is torn, and
`core.jobs.JsonlRows.done()`; plus the runner's own resume, which is silent, and the one stderr
line a command prints.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from evprobe.core.errors import IncompleteLineWarning
from evprobe.core.jobs import Job, JsonlRows, Unit, run_job
from evprobe.core.lock import folder_lock
from evprobe.experiments.cli import main

INCOMPLETE = "its last line is incomplete and was left out"
REPO = Path(__file__).resolve().parents[2]


def tear(path: Path, keep: float = 0.5) -> bytes:
    """Cut `path`'s last line part-way, as a kill mid-append leaves it; returns the torn bytes."""
    data = path.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    torn = data[: start + int((len(data) - start) * keep)]
    assert not torn.endswith(b"\n")
    path.write_bytes(torn)
    return torn


def warns_for(path: Path):
    """pytest.warns for the reader warning that names `path`."""
    return pytest.warns(IncompleteLineWarning, match=f"^{path}: {INCOMPLETE}")


@pytest.fixture(scope="module")
def done_run(small_bench: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished, scored policy run of the small benchmark (select items)."""
    out = tmp_path_factory.mktemp("readers") / "run"
    assert main(["run", "--model", "policy:reference", "--bench", str(small_bench), "--out", str(out),
                 "--requests", "select", "--quiet"]) == 0
    assert main(["score", str(out), "--quiet", "--n-boot", "50"]) == 0
    return out


@pytest.fixture
def torn_run(done_run: Path, tmp_path: Path) -> tuple[Path, bytes]:
    """A copy of the finished run whose records.jsonl lost half of its last line (a kill mid-append)."""
    run = tmp_path / "run"
    shutil.copytree(done_run, run)
    return run, tear(run / "records.jsonl")


def test_score_warns_and_leaves_the_records_alone(torn_run: tuple[Path, bytes], capsys) -> None:
    run, torn = torn_run
    with warns_for(run / "records.jsonl"):
        assert main(["score", str(run), "--quiet", "--n-boot", "50"]) == 0
    assert (run / "records.jsonl").read_bytes() == torn
    assert json.loads((run / "scores.json").read_text())["records"]["n_records"] == torn.count(b"\n")


def test_compare_warns_and_leaves_the_records_alone(torn_run: tuple[Path, bytes], capsys) -> None:
    run, torn = torn_run
    with warns_for(run / "records.jsonl"):
        assert main(["compare", str(run)]) == 0
    assert (run / "records.jsonl").read_bytes() == torn


def test_report_warns_and_leaves_the_records_alone(done_run: Path, tmp_path: Path, capsys) -> None:
    """A line being appended after scoring: the scores still score every complete line (fresh), and the
    report says the last line was left out."""
    run = tmp_path / "run"
    shutil.copytree(done_run, run)
    path = run / "records.jsonl"
    last = path.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    with path.open("ab") as fh:
        fh.write(last[: len(last) // 2])  # a second writer part-way through its append
    torn = path.read_bytes()
    with warns_for(path):
        assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 0
    assert path.read_bytes() == torn
    assert "Behaviour" in (tmp_path / "report" / "report.md").read_text()


def test_one_line_on_stderr(torn_run: tuple[Path, bytes]) -> None:
    """What a user sees: one warning line naming the file, whichever readers of the command noticed."""
    run, torn = torn_run
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": ""}
    done = subprocess.run([sys.executable, "-m", "evprobe", "score", str(run), "--quiet", "--n-boot", "50"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"evprobe: warning: {run / 'records.jsonl'}: {INCOMPLETE} (a run may still be writing it, or was killed: "
        "rerun that command to finish it); the file was not changed"]
    assert (run / "records.jsonl").read_bytes() == torn


def test_merge_refuses_a_torn_shard_as_incomplete_and_leaves_it_alone(small_bench: Path, tmp_path: Path,
                                                                       capsys) -> None:
    shards = [tmp_path / f"shard{k}" for k in range(2)]
    for k, folder in enumerate(shards):
        assert main(["run", "--model", "policy:reference", "--bench", str(small_bench), "--out", str(folder),
                     "--requests", "select", "--shard", f"{k}/2", "--quiet"]) == 0
    path = shards[1] / "records.jsonl"
    torn = tear(path)
    with warns_for(path):
        assert main(["merge", str(tmp_path / "merged"), *map(str, shards)]) == 2
    err = capsys.readouterr().err
    assert "shard 1/2" in err and "is incomplete" in err and "rerun shard 1" in err
    assert path.read_bytes() == torn  # byte for byte: merge only reads its shards
    assert not (tmp_path / "merged" / "records.jsonl").exists()


def test_load_capture_and_the_sweep_warn_and_leave_the_index_alone(tmp_path: Path, capsys) -> None:
    from evprobe.probes.captures import load_capture
    from evprobe.probes.synthetic import planted_acts, reference_rows, write_capture

    rows = reference_rows(12, seed=3)
    acts, _ = planted_acts([r["resolved"] for r in rows], 2, 1, 8, signal_layers=[1], strength=4.0, seed=5)
    folder = write_capture(tmp_path / "acts", acts, rows, indexed=range(len(rows) - 1),
                           torn_tail=json.dumps({"row": len(rows) - 1, **rows[-1]})[:40])
    index = folder / "index.jsonl"
    torn = index.read_bytes()
    with folder_lock(folder, "evprobe capture"):  # a capture still writing it: its torn append is left out
        with warns_for(index):
            cap = load_capture(folder)
        assert len(cap.index) == len(rows) - 1 and cap.n_torn == 1
        assert index.read_bytes() == torn
        with warns_for(index):
            assert main(["sweep", str(folder), "--label", "resolved", "--probe", "massmean", "--folds", "3",
                         "--n-boot", "20", "--no-nested", "--jobs", "1", "--out", str(tmp_path / "sweep"),
                         "--quiet"]) == 0
    assert index.read_bytes() == torn
    assert json.loads((tmp_path / "sweep" / "sweep.json").read_text())["label"] == "resolved"
    capsys.readouterr()
    # no process writes it now: a capture whose index lost its last row is refused, not read short
    assert main(["sweep", str(folder), "--label", "resolved", "--out", str(tmp_path / "sweep2"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"evprobe: error: {index}:{len(rows)}: the last line is incomplete") and err.count("\n") == 1
    assert index.read_bytes() == torn and not (tmp_path / "sweep2" / "sweep.json").exists()


class Count(Job):
    """A job without model or benchmark: one row per unit, its value a function of the key."""

    kind = "count"

    def units(self) -> list[Unit]:
        return [Unit(f"u{i}", f"f{i}") for i in range(6)]

    @property
    def batch_size(self) -> int:
        return 2

    def pinned(self) -> dict[str, Any]:
        return {}

    def store_at(self, folder: Path) -> JsonlRows:
        return JsonlRows(folder / "rows.jsonl", lambda row: (row["key"], ""))

    def compute(self, batch: list[Unit], condition: str) -> list[dict[str, Any]]:
        return [{"key": u.key, "value": int(u.key[1:]) ** 2} for u in batch]

    @classmethod
    def from_meta(cls, meta: dict[str, Any], out: Path) -> Count:
        return cls(out, None)


def test_jsonl_rows_done_warns_and_leaves_the_file_alone_the_writer_cuts_silently(tmp_path: Path) -> None:
    out = tmp_path / "count"
    run_job(Count(out, None), progress=False)
    path = out / "rows.jsonl"
    torn = tear(path, keep=0.3)
    with warns_for(path):
        assert len(Count(out, None).store().done()) == 5
    assert path.read_bytes() == torn
    with warnings.catch_warnings(record=True) as seen:  # the writer's resume: it cuts the line and redoes the row
        warnings.simplefilter("always")
        summary = run_job(Count(out, None), progress=False)
    assert not [w for w in seen if issubclass(w.category, IncompleteLineWarning)]
    assert (summary.computed, summary.complete) == (1, True)
    assert [json.loads(line)["key"] for line in path.read_text().splitlines()] == [f"u{i}" for i in range(6)]
