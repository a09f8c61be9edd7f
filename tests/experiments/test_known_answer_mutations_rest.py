"""The other half of the faults of test_known_answer_mutations.py (which says why the split): each
fails at least one known-answer check."""

from __future__ import annotations

from pathlib import Path

import pytest

from evprobe.experiments.known_answer.mutations import FAULTS, failed_checks

HALF = FAULTS[1::2]


@pytest.mark.parametrize("fault", HALF, ids=[f.name for f in HALF])
def test_the_fault_fails_a_check(fault, small_quickstart: tuple[Path, dict], fault_results) -> None:
    assert small_quickstart[1]["passed"], failed_checks(small_quickstart[1])
    assert failed_checks(fault_results([fault])[fault.name]), fault.name
