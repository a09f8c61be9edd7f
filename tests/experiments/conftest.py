"""Fixtures shared by the known-answer tests (test_known_answer_n.py, test_known_answer_mutations.py)
and the tests that steer the organism as a user's own data (test_dose_response_library_parity.py; tests/analysis/ imports it)."""

from __future__ import annotations

import fcntl
import json
import re
from pathlib import Path

import pytest


def _shared(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The folder every xdist worker's base temp sits in (pytest-of-USER/pytest-N/), or the base temp
    without workers."""
    base = tmp_path_factory.getbasetemp()
    return base if worker_id == "master" else base.parent


@pytest.fixture(scope="session")
def small_quickstart(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> tuple[Path, dict]:
    """The mutation test's reduced organism quickstart (experiments.known_answer.mutations.SMALL_QUICKSTART), run
    once per test session: (its folder, its known-answer result as known_answer.json holds it).
    Read-only: copy what a test edits.

    A session fixture is built by every xdist worker that runs a test needing it, and this one is the
    costliest, so the workers share one: the first builds it under the folder every worker's base
    temp sits in, holding a lock the others wait on, and they read what it wrote."""
    from evprobe.experiments.known_answer.mutations import SMALL_QUICKSTART
    from evprobe.experiments.quickstart import quickstart

    shared = _shared(tmp_path_factory, worker_id)
    out = shared / "small_quickstart" / "clean"
    with open(shared / "small_quickstart.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = shared / "small_quickstart" / "done"
        if not done.is_file():
            quickstart(out, **SMALL_QUICKSTART)
            done.write_text("")
    return out, json.loads((out / "known_answer.json").read_text())


@pytest.fixture(scope="session")
def fault_results(small_quickstart: tuple[Path, dict], tmp_path_factory: pytest.TempPathFactory,
                  worker_id: str):
    """`results(faults)`: {fault name: the known-answer result of the reduced quickstart rerun under
    that fault} (experiments.known_answer.mutations.run_with_fault), each fault run once per test session whichever
    worker asks first. The mutation tests are split over two files so that `--dist loadfile` can give
    the faults to both workers; the test that needs every fault's result takes the ones done, runs the
    ones no worker has started, and waits on the ones another worker is running."""
    from evprobe.experiments.known_answer.mutations import SMALL_QUICKSTART, run_with_fault
    from evprobe.experiments.quickstart import quickstart

    clean, _ = small_quickstart
    folder = _shared(tmp_path_factory, worker_id) / "small_quickstart" / "faults"
    folder.mkdir(parents=True, exist_ok=True)

    def one(fault, wait: bool) -> dict | None:
        name = re.sub(r"[^a-z0-9]+", "_", fault.name.lower())
        done = folder / f"{name}.done"
        with open(folder / f"{name}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))  # released when the file closes
            except BlockingIOError:
                return None  # another worker is running it
            if not done.is_file():
                run_with_fault(clean, folder / name, fault, lambda out: quickstart(out, **SMALL_QUICKSTART))
                done.write_text("")
        return json.loads((folder / name / "known_answer.json").read_text())  # as small_quickstart reads it

    def results(faults) -> dict[str, dict]:
        found = {f.name: r for f in faults if (r := one(f, wait=False)) is not None}
        return {f.name: found[f.name] if f.name in found else one(f, wait=True) for f in faults}

    return results
