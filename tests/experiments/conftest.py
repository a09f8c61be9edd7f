"""Fixtures shared by the known-answer tests (test_known_answer_n.py, test_known_answer_mutations.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def small_quickstart(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The mutation test's reduced organism quickstart (experiments.mutations.SMALL_QUICKSTART), run
    once per session: (its folder, its known-answer result). Read-only: copy what a test edits."""
    from evprobe.experiments.mutations import SMALL_QUICKSTART
    from evprobe.experiments.quickstart import quickstart

    out = tmp_path_factory.mktemp("known_answer") / "clean"
    return out, quickstart(out, **SMALL_QUICKSTART)["known_answer"]
