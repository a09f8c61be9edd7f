"""Files evprobe writes in an output folder are regular files: a link or a FIFO there is refused in one line.

The broken input: a dangling `OUT/records.jsonl` symbolic link was written through by `evprobe run`
(a records file created outside OUT); a FIFO there would have blocked the append's open for good.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evprobe.core.errors import InputError
from evprobe.core.files import append_log_lines, atomic_write_bytes, cut_torn_tail
from evprobe.experiments.cli import main

LINK = "is a symbolic link to {target}; evprobe writes only regular files in its output folders: remove the link, or use another --out"


def test_a_dangling_records_link_in_out_is_refused_and_nothing_is_written_outside(
        small_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out, outside = tmp_path / "run", tmp_path / "outside" / "records.jsonl"
    out.mkdir()
    outside.parent.mkdir()
    (out / "records.jsonl").symlink_to(outside)
    assert main(["run", "--model", "policy:random", "--bench", str(small_bench), "--out", str(out), "--limit", "4",
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == f"evprobe: error: {out / 'records.jsonl'} {LINK.format(target=outside)}\n"
    assert not outside.exists()
    assert sorted(p.name for p in out.iterdir()) == ["records.jsonl"]  # refused before any work: no run.json


def test_every_writer_refuses_a_link_and_leaves_its_target_alone(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.jsonl"
    target.write_text('{"a": 1}\n{"b"')
    link = tmp_path / "out" / "rows.jsonl"
    link.parent.mkdir()
    link.symlink_to(target)
    for write in (lambda: append_log_lines(link, [{"c": 3}]), lambda: cut_torn_tail(link),
                  lambda: atomic_write_bytes(link, b"{}\n")):
        with pytest.raises(InputError) as err:
            write()
        assert str(err.value) == f"{link} {LINK.format(target=target)}"
    assert target.read_text() == '{"a": 1}\n{"b"' and link.is_symlink()


def test_a_fifo_where_a_log_belongs_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "records.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=f"^{fifo} is not a regular file; .* move it aside, or use another --out$"):
        append_log_lines(fifo, [{"a": 1}])  # O_WRONLY on a FIFO without a reader blocked for good
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # with a reader the open succeeds: fstat refuses it
    try:
        with pytest.raises(InputError, match="is not a regular file"):
            append_log_lines(fifo, [{"a": 1}])
    finally:
        os.close(reader)


def test_a_capture_store_refuses_a_linked_acts_file_before_any_row(tmp_path: Path) -> None:
    """acts.npy was opened O_WRONLY through a link: positioned writes into a file outside the folder."""
    from evprobe.experiments.capture.store import CaptureRows

    outside = tmp_path / "outside.npy"
    outside.write_bytes(b"theirs")
    folder = tmp_path / "acts"
    folder.mkdir()
    (folder / "acts.npy").symlink_to(outside)
    with pytest.raises(InputError) as err:
        CaptureRows(folder, ["a"]).repair()  # the job runner's first step once rows are missing
    assert str(err.value) == f"{folder / 'acts.npy'} {LINK.format(target=outside)}"
    assert outside.read_bytes() == b"theirs"
