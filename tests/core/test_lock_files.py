"""Odd lock files (core.lock): a FIFO, escapes in the holder's name, deep brackets, and who is writing.

The broken input each test catches: a FIFO planted as OUT/.evprobe.lock ("[Errno 29] Illegal seek"
traceback, and a reader's open of it blocked for good), ANSI escapes in the holder's command (they
reached the terminal raw), a lock file of 5,000 brackets (a RecursionError in the holder's read),
and `being_written` for each state of a folder (captures refuse a torn index when it is False).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from evprobe.core.errors import InputError, printable
from evprobe.core.lock import LOCK_FILE, being_written, folder_lock, holder

HOLD = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
from evprobe.core.lock import folder_lock
with folder_lock(sys.argv[1], sys.argv[2]):
    print("held", flush=True)
    time.sleep(600)
"""


def within(seconds: float, call):  # noqa: ANN001, ANN201 - any call
    """`call()`'s result (or its exception), failing, not hanging, if it takes over `seconds` (a blocked open)."""
    box: list = []

    def run() -> None:
        try:
            box.append((True, call()))
        except BaseException as err:  # noqa: BLE001 - handed to the caller
            box.append((False, err))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still blocked after {seconds} s"
    ok, value = box[0]
    if not ok:
        raise value
    return value


def test_a_fifo_lock_file_is_refused_in_one_line_and_never_blocks(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / LOCK_FILE)
    with pytest.raises(InputError) as err:
        within(10, lambda: folder_lock(out, "evprobe run").__enter__())
    assert str(err.value) == (f"{out / LOCK_FILE}: the lock file is not a regular file (a FIFO); remove it if no "
                              "evprobe command is running on this folder, or use another --out")
    assert within(10, lambda: holder(out)) is None  # a read-only open of a FIFO without a writer blocked
    assert within(10, lambda: being_written(out)) is True  # something is there: a reader does not refuse


def test_escapes_in_the_holders_name_reach_the_terminal_escaped(tmp_path: Path) -> None:
    out = tmp_path / "out"
    evil = "evprobe run \x1b[2J\x1b[31mowned\x1b[0m\u202e\r"
    holder_process = subprocess.Popen([sys.executable, "-c", HOLD, str(out), evil], stdout=subprocess.PIPE, text=True)
    try:
        assert holder_process.stdout.readline().strip() == "held"
        done = subprocess.run([sys.executable, "-m", "evprobe", "generate", "--out", str(out), "--families-per-system",
                               "1", "--quiet"], capture_output=True, text=True, timeout=120)
    finally:
        holder_process.terminate()
        holder_process.wait(30)
    assert done.returncode == 2
    line = done.stderr.strip()
    assert "\x1b" not in line and "\u202e" not in line and "\r" not in line and len(line.splitlines()) == 1
    assert r"evprobe run \x1b[2J\x1b[31mowned\x1b[0m\u202e\r (pid" in line


def test_printable_escapes_controls_only_and_is_idempotent() -> None:
    assert printable("a\x1b[1mb\x9b\u2066c\nd\te") == r"a\x1b[1mb\x9b\u2066c\nd\te"
    assert printable("é ü 中文 😀 [ok]") == "é ü 中文 😀 [ok]"
    assert printable(printable("x\x07y")) == printable("x\x07y")


def test_a_lock_file_of_deep_brackets_is_no_holder_and_is_taken_over(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_FILE).write_text("[" * 5000)
    assert holder(out) is None
    with folder_lock(out, "evprobe run"):
        assert holder(out)["command"] == "evprobe run"


def test_being_written_reads_the_lock_file_alone(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert not being_written(out)  # no lock file
    with folder_lock(out, "evprobe capture"):
        assert being_written(out)  # a live process here (this one)
    assert not (out / LOCK_FILE).exists() and not being_written(out)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    record = {"pid": int(dead.stdout), "host": socket.gethostname(), "command": "evprobe capture", "started": "-"}
    (out / LOCK_FILE).write_text(json.dumps(record))
    assert not being_written(out)  # killed: its record names a process that is gone
    (out / LOCK_FILE).write_text(json.dumps({**record, "host": "elsewhere"}))
    assert being_written(out)  # another host's process cannot be asked: assume it runs
    (out / LOCK_FILE).write_text("")
    assert being_written(out)  # a writer that has not written its record yet


def test_the_cli_shows_any_error_with_its_escapes_escaped(tmp_path: Path) -> None:
    """Every error line the CLI prints goes through `printable`: here a folder name from the command line."""
    odd = tmp_path / "acts\x1b[8m"
    done = subprocess.run([sys.executable, "-m", "evprobe", "sweep", str(odd), "--label", "resolved", "--out",
                           str(tmp_path / "out"), "--quiet"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "\x1b" not in done.stderr and r"acts\x1b[8m" in done.stderr
