"""No rate or ETA from too little time (issue 28 item 4): core.progress.MIN_TIMED, on a fake clock."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from evprobe.core.progress import MIN_TIMED, Progress, progress_callback, set_progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def progress_on() -> Iterator[None]:
    set_progress(True)
    yield
    set_progress(True)


def test_the_threshold_is_one_second() -> None:
    assert MIN_TIMED == 1.0


def test_steps_too_short_to_time_show_the_count_alone() -> None:
    out, clock = io.StringIO(), Clock()
    bar = Progress("sweep layer", 6, stream=out, every=0.0, clock=clock)
    for _ in range(6):
        clock.now += 1e-6  # six layers in microseconds: was "(879120.9/s, ETA 0 s)"
        bar.update()
    lines = out.getvalue().splitlines()
    assert lines == [f"sweep layer {k}/6" for k in range(1, 7)]


def test_a_rate_once_a_second_has_passed() -> None:
    out, clock = io.StringIO(), Clock()
    bar = Progress("run", 10, stream=out, every=0.0, clock=clock)
    clock.now += 0.999
    bar.update()
    clock.now += 0.001  # exactly MIN_TIMED since the start
    bar.update()
    clock.now += 2.0
    bar.update(8)
    assert out.getvalue().splitlines() == ["run 1/10", "run 2/10 (2.0/s, ETA 4 s)", "run 10/10 (3.3/s, ETA 0 s)"]


def test_one_slow_update_is_timed() -> None:
    out, clock = io.StringIO(), Clock()
    bar = Progress("capture", 4, stream=out, clock=clock)
    clock.now += 30.0
    bar.update()
    assert out.getvalue() == "capture 1/4 (0.033/s, ETA 90 s)\n"


def test_a_terminal_line_too_short_to_time_is_rewritten_alone() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out, clock = Terminal(), Clock()
    bar = Progress("run", 2, stream=out, clock=clock)
    bar.update()
    bar.update()
    assert out.getvalue() == "run 1/2   \rrun 2/2   \n"


def test_the_callback_times_from_when_it_is_made() -> None:
    out, clock = io.StringIO(), Clock()
    report = progress_callback("sweep layer", stream=out, clock=clock)
    clock.now += 4.0  # the first layer took 4 s before the first report
    report(1, 4)
    clock.now += 4.0
    report(4, 4)
    lines = out.getvalue().splitlines()
    assert lines == ["sweep layer 1/4 (0.25/s, ETA 12 s)", "sweep layer 4/4 (0.5/s, ETA 0 s)"]
