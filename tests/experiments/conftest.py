"""Fixtures shared by the known-answer tests (test_known_answer_n.py, test_known_answer_mutations.py)
and the own-data tests that steer the organism (test_own_dose_response.py, test_own_layer_sweep.py)."""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def small_quickstart(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> tuple[Path, dict]:
    """The mutation test's reduced organism quickstart (experiments.mutations.SMALL_QUICKSTART), run
    once per test session: (its folder, its known-answer result as known_answer.json holds it).
    Read-only: copy what a test edits.

    A session fixture is built by every xdist worker that runs a test needing it, and this one is the
    costliest, so the workers share one: the first builds it under the folder every worker's base
    temp sits in, holding a lock the others wait on, and they read what it wrote."""
    from evprobe.experiments.mutations import SMALL_QUICKSTART
    from evprobe.experiments.quickstart import quickstart

    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == "master" else base.parent  # pytest-of-USER/pytest-N/: all workers'
    out = shared / "small_quickstart" / "clean"
    with open(shared / "small_quickstart.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = shared / "small_quickstart" / "done"
        if not done.is_file():
            quickstart(out, **SMALL_QUICKSTART)
            done.write_text("")
    return out, json.loads((out / "known_answer.json").read_text())
