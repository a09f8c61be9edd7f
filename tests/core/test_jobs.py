"""The one job runner (core.jobs) and its shards and merge (core.launch), on a toy job.

The toy job knows no benchmark or model: units are (key, family, group) triples, conditions are
strings, and a row's value is a pure function of its unit and condition, so every resumed,
sharded or merged folder can be compared with one uninterrupted run byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evprobe.core.errors import InputError
from evprobe.core.files import read_complete_lines
from evprobe.core.jobs import Job, JsonlRows, Unit, batches, grid_order, run_job
from evprobe.core.launch import merge_folders, merge_job
from evprobe.core.shard import Shard

# 12 units in 6 families, two batching groups (e.g. items with 1 and 2 images)
UNITS = [(f"u{i:02d}", f"fam{i // 2}", i % 2) for i in range(12)]


class Toy(Job):
    kind = "toy"

    def __init__(self, out: Path, shard: Shard | None = None, *, conditions=("a", "b"), batch: int = 3,
                 scale: int = 1, fail_after: int | None = None) -> None:
        super().__init__(out, shard)
        self._conditions, self.batch, self.scale, self.fail_after = conditions, batch, scale, fail_after
        self.opened = 0
        self.computed: list[tuple[str, str]] = []

    def units(self) -> list[Unit]:
        return [Unit(key, fam, group) for key, fam, group in UNITS]

    def conditions(self) -> tuple[str, ...]:
        return self._conditions

    @property
    def batch_size(self) -> int:
        return self.batch

    def pinned(self) -> dict[str, Any]:
        return {"scale": self.scale}

    def store_at(self, folder: Path) -> JsonlRows:
        return JsonlRows(folder / "rows.jsonl", lambda row: (row["key"], row["condition"]))

    def open(self) -> None:
        self.opened += 1

    def compute(self, batch: list[Unit], condition: str) -> list[dict[str, Any]]:
        if self.fail_after is not None and len(self.computed) >= self.fail_after:
            raise KeyboardInterrupt  # a kill between two appends
        self.computed += [(u.key, condition) for u in batch]
        return [{"key": u.key, "condition": condition, "value": self.scale * (int(u.key[1:]) + len(condition))}
                for u in batch]

    def finish(self, rows, summary):
        (self.out / "report.json").write_text(json.dumps(sorted(r["value"] for r in rows.values())))
        return len(rows)  # its report: the rows it reported on

    @classmethod
    def from_meta(cls, meta: dict[str, Any], out: Path) -> Toy:
        return cls(out, scale=meta["scale"])


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_grid_order_groups_batches_then_conditions() -> None:
    units = Toy(Path("x")).units()
    assert [[u.key for u in b] for b in batches(units, 4)] == [
        ["u00", "u02", "u04", "u06"], ["u08", "u10"], ["u01", "u03", "u05", "u07"], ["u09", "u11"]]
    order = grid_order(units, ("a", "b"), 4)
    assert order[:5] == [("u00", "a"), ("u02", "a"), ("u04", "a"), ("u06", "a"), ("u00", "b")]
    assert len(order) == len(set(order)) == 24


def test_one_run_writes_every_row_once_in_grid_order_then_reports(tmp_path: Path) -> None:
    job = Toy(tmp_path / "one")
    summary = run_job(job, progress=False)
    keys = [(r["key"], r["condition"]) for r in map(json.loads, lines(tmp_path / "one" / "rows.jsonl"))]
    assert keys == grid_order(job.units(), ("a", "b"), 3)
    assert (summary.computed, summary.reused, summary.complete, summary.report) == (24, 0, True, 24)
    meta = json.loads((tmp_path / "one" / "meta.json").read_text())
    assert (meta["kind"], meta["scale"], meta["shard"]) == ("toy", 1, None)
    again = Toy(tmp_path / "one")
    assert run_job(again, progress=False).computed == 0 and again.opened == 0  # no model load for nothing


def test_a_killed_run_resumes_computing_only_what_is_missing(tmp_path: Path) -> None:
    out = tmp_path / "killed"
    with pytest.raises(KeyboardInterrupt):
        run_job(Toy(out, fail_after=9), progress=False)
    # a torn last line, as a kill mid-append leaves
    with (out / "rows.jsonl").open("a") as fh:
        fh.write('{"key": "u9')
    had = len(read_complete_lines(out / "rows.jsonl"))
    assert had == 9
    job = Toy(out)
    summary = run_job(job, progress=False)
    assert (summary.reused, summary.computed) == (9, 15)
    assert not set(job.computed) & {(r["key"], r["condition"]) for r in map(json.loads, lines(out / "rows.jsonl")[:9])}
    reference = tmp_path / "one"
    run_job(Toy(reference), progress=False)
    assert sorted(lines(out / "rows.jsonl")) == sorted(lines(reference / "rows.jsonl"))


def test_readers_leave_a_torn_tail_alone_only_the_writer_cuts_it(tmp_path: Path) -> None:
    out = tmp_path / "torn"
    with pytest.raises(KeyboardInterrupt):
        run_job(Toy(out, fail_after=6), progress=False)
    path = out / "rows.jsonl"
    with path.open("a") as fh:
        fh.write('{"key": "u1')
    before = path.read_bytes()
    assert len(Toy(out).store().done()) == 6  # a reader: the torn line is left out ...
    assert path.read_bytes() == before  # ... and the file is not touched
    run_job(Toy(out), progress=False)  # the writer cuts it before appending
    assert all(json.loads(line) for line in lines(path))


def test_another_setting_is_refused_naming_it_and_both_values(tmp_path: Path) -> None:
    run_job(Toy(tmp_path / "p", batch=4), progress=False)
    with pytest.raises(InputError, match=r"was written with scale=1, this run has scale=2"):
        run_job(Toy(tmp_path / "p", scale=2), progress=False)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "meta.json").write_text(json.dumps({"kind": "run"}))
    with pytest.raises(InputError, match="holds a run job, not toy"):
        run_job(Toy(tmp_path / "other"), progress=False)


def test_a_duplicated_row_is_an_error_naming_its_line(tmp_path: Path) -> None:
    out = tmp_path / "dup"
    run_job(Toy(out), progress=False)
    path = out / "rows.jsonl"
    path.write_text(path.read_text() + lines(path)[0] + "\n")
    with pytest.raises(InputError, match=r"rows.jsonl:25: a second row for u00 under a"):
        run_job(Toy(out), progress=False)


def shard_runs(tmp_path: Path, n: int, **kw) -> list[Path]:
    folders = [tmp_path / f"s{k}" for k in range(n)]
    for k, folder in enumerate(folders):
        run_job(Toy(folder, Shard(k, n), **kw), progress=False)
    return folders


def test_shards_merge_into_what_one_run_writes(tmp_path: Path) -> None:
    run_job(Toy(tmp_path / "one"), progress=False)
    folders = shard_runs(tmp_path, 3)
    assert sum(len(lines(f / "rows.jsonl")) for f in folders) == 24
    families = [{json.loads(line)["key"] for line in lines(f / "rows.jsonl")} for f in folders]
    assert not families[0] & families[1]  # disjoint
    summary = merge_folders(Toy, tmp_path / "merged", list(reversed(folders)))
    assert lines(tmp_path / "merged" / "rows.jsonl") == lines(tmp_path / "one" / "rows.jsonl")  # byte for byte
    assert (tmp_path / "merged" / "report.json").read_text() == (tmp_path / "one" / "report.json").read_text()
    assert summary.n_shards == 3 and json.loads((tmp_path / "merged" / "meta.json").read_text())["shard"] is None
    assert run_job(Toy(tmp_path / "merged"), progress=False).computed == 0  # an ordinary finished folder


def test_merge_refuses_what_would_not_be_one_run(tmp_path: Path) -> None:
    s0, s1 = shard_runs(tmp_path, 2)
    other = tmp_path / "other"
    run_job(Toy(other, Shard(1, 2), scale=3), progress=False)
    third = tmp_path / "third"
    run_job(Toy(third, Shard(2, 3)), progress=False)
    unsharded = tmp_path / "one"
    run_job(Toy(unsharded), progress=False)
    cases = [
        ([s0], "shard 1/2 is missing"),
        ([s0, s1, s1], "shard 1/2 is given twice"),
        ([s0, other], "differs from shard 0/2 in scale: 3 vs 1"),
        ([s0, third], "split the work 2 ways and 3 ways"),
        ([s0, unsharded], "was not written with --shard"),
    ]
    for folders, message in cases:
        with pytest.raises(InputError, match=message):
            merge_folders(Toy, tmp_path / "m", folders)
    # an incomplete shard is refused, and finishing it with the same job makes the merge work
    half = tmp_path / "half"
    with pytest.raises(KeyboardInterrupt):
        run_job(Toy(half, Shard(1, 2), fail_after=3), progress=False)
    with pytest.raises(InputError, match=r"shard 1/2 .* is incomplete: 3 of 12 rows done"):
        merge_folders(Toy, tmp_path / "m", [s0, half])
    run_job(Toy(half, Shard(1, 2)), progress=False)
    merge_job(Toy(tmp_path / "m"), [s0, half])
    assert lines(tmp_path / "m" / "rows.jsonl") == lines(unsharded / "rows.jsonl")
    # shard folders are only read: a shard's own report and rows stay as its run wrote them
    assert len(lines(s0 / "rows.jsonl")) == 12 and json.loads((s0 / "meta.json").read_text())["shard"] == "0/2"
