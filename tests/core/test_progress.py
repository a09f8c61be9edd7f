"""Progress lines (core.progress): whole lines off a terminal, one rewritten line on it, the global
switch (--no-progress), and the job runner's lines (core.jobs.run_job) on a toy job."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evprobe.core import progress as progress_module
from evprobe.core.jobs import run_job
from evprobe.core.progress import Progress, duration, note, progress_callback, set_progress
from tests.core.test_jobs import UNITS, Toy


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def progress_on() -> Iterator[None]:
    set_progress(True)
    yield
    set_progress(True)


def test_a_pipe_gets_whole_lines_first_and_last_always() -> None:
    out = io.StringIO()  # not a terminal: a log file, a pipe, CI
    bar = Progress("capture", 5, stream=out)
    assert bar.lines and bar.every == progress_module.LOG_EVERY
    for _ in range(5):
        bar.update()
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    # the first update (the step computes, at this rate) and the last; the 3 between fall in one 10 s interval
    assert [line.split(" (")[0] for line in lines] == ["capture 1/5", "capture 5/5"]
    assert lines[-1] == "capture 5/5"  # too fast to time: no rate or ETA (core.progress.MIN_TIMED)


def test_a_pipe_gets_a_line_per_interval() -> None:
    out = io.StringIO()
    bar = Progress("run", 4, stream=out, every=0.01)
    for _ in range(4):
        time.sleep(0.02)
        bar.update()
    assert [line.split(" (")[0] for line in out.getvalue().splitlines()] == ["run 1/4", "run 2/4", "run 3/4", "run 4/4"]


def test_a_terminal_gets_one_line_rewritten() -> None:
    out = Terminal()
    bar = Progress("run", 3, stream=out)
    assert not bar.lines and bar.every == progress_module.TERMINAL_EVERY
    bar.update()
    bar.update(2)
    text = out.getvalue()
    assert text.count("\r") == 1 and text.endswith("\n") and text.count("\n") == 1
    assert text.startswith("run 1/3")


def test_rate_and_eta_are_this_sessions() -> None:
    out = io.StringIO()
    bar = Progress("x", 10, stream=out)
    bar.start -= 2.0  # 2 s spent on the first unit
    bar.update()
    line = out.getvalue()
    assert "(0.5/s, ETA 18 s)" in line, line
    bar.start = time.perf_counter() - 1.0  # all 10 in one second
    bar.update(9)
    assert re.fullmatch(r"x 10/10 \((9|10)\.\d/s, ETA 0 s\)", out.getvalue().splitlines()[-1])  # ~10/s


def test_duration_units() -> None:
    assert [duration(s) for s in (0, 42.4, 99.4, 420, 5999, 9000, float("inf"))] == [
        "0 s", "42 s", "99 s", "7 min", "100 min", "2.5 h", "? s"]


def test_switched_off_nothing_prints() -> None:
    out = io.StringIO()
    set_progress(False)
    bar = Progress("x", 2, stream=out)
    bar.update(2)
    note("x", "loading", stream=out)
    progress_callback("y", stream=out)(1, 1)
    assert out.getvalue() == "" and bar.done == 2  # counts, prints nothing
    set_progress(True)
    note("x", "loading", stream=out)
    assert out.getvalue() == "x: loading\n"


def test_callback_draws_one_bar() -> None:
    out = io.StringIO()
    report = progress_callback("sweep layer", stream=out)
    for done in (1, 2, 3):
        report(done, 3)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("sweep layer 1/3") and lines[-1].startswith("sweep layer 3/3")


def test_run_job_says_what_it_does_and_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_job(Toy(tmp_path / "a"), progress=True)
    err = capsys.readouterr().err.splitlines()
    n = 2 * len(UNITS)
    assert err[0] == f"toy: {n} rows to compute (0 already in {tmp_path / 'a'}); loading"
    assert re.fullmatch(rf"toy {n}/{n}( \(.+/s, ETA 0 s\))?", err[-1]), err[-1]  # a rate from 1 s on
    run_job(Toy(tmp_path / "b"), progress=False)
    assert capsys.readouterr().err == ""
    set_progress(False)  # the CLI's --no-progress silences a step whose caller asked for progress
    run_job(Toy(tmp_path / "c"), progress=True)
    assert capsys.readouterr().err == ""
