"""The prefetch queue (evprobe.core.prefetch): order kept, the bound on work prepared ahead, one worker thread, errors in place."""

from __future__ import annotations

import threading
import time

import pytest

from evprobe.core.prefetch import prefetched


def test_every_piece_comes_back_in_order_with_its_preparation() -> None:
    for depth in (0, 1, 3, 50):
        assert list(prefetched(range(10), lambda x: x * x, depth)) == [(i, i * i) for i in range(10)]
    assert list(prefetched([], lambda x: x, 2)) == []


def test_depth_zero_prepares_inline_and_depth_d_at_most_d_ahead() -> None:
    prepared: list[int] = []

    def prepare(x: int) -> int:
        prepared.append(x)
        return x

    for piece, _ in prefetched(range(8), prepare, 0):
        assert prepared[-1] == piece and threading.current_thread() is threading.main_thread()
    for depth in (1, 2):
        prepared.clear()
        for piece, _ in prefetched(range(8), prepare, depth):
            time.sleep(0.01)  # let the worker run as far ahead as it may
            assert len(prepared) <= piece + 1 + depth  # the bound on results waiting in memory
        assert prepared == list(range(8))


def test_depth_d_prepares_on_one_other_thread_while_the_caller_works() -> None:
    threads: set[int] = set()
    started = threading.Event()

    def prepare(x: int) -> int:
        threads.add(threading.get_ident())
        if x == 1:
            started.set()  # piece 1 is prepared while the caller still holds piece 0
        return x

    for piece, _ in prefetched(range(4), prepare, 1):
        if piece == 0:
            assert started.wait(5)
    assert len(threads) == 1 and threading.get_ident() not in threads


def test_an_error_in_prepare_is_raised_at_its_piece_after_the_ones_before() -> None:
    def prepare(x: int) -> int:
        if x == 3:
            raise KeyError("piece 3")
        return x

    got = []
    with pytest.raises(KeyError, match="piece 3"):
        for piece, _ in prefetched(range(6), prepare, 2):
            got.append(piece)
    assert got == [0, 1, 2]


def test_stopping_early_ends_the_worker() -> None:
    before = {t.name for t in threading.enumerate()}
    gen = prefetched(range(100), lambda x: time.sleep(0.001) or x, 2)
    assert next(gen) == (0, 0)
    gen.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("evprobe-prefetch") and t.name not in before]


@pytest.mark.parametrize("depth", [-1, 1.5, True])
def test_a_bad_depth_is_refused(depth) -> None:
    with pytest.raises(ValueError, match="non-negative integer"):
        list(prefetched(range(3), lambda x: x, depth))
