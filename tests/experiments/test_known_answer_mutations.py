"""The known-answer suite fails when the toolkit is broken: every fault fails a check, every check is
failed by a fault, and the clean pipeline passes them all (experiments/known_answer/mutations.py; README table).

One reduced quickstart on the organism (8 families per system, steering at the planted layer only, 8
random directions, no refits), then each fault reruns only the stages that depend on what it breaks.
The faults are split between this file and test_known_answer_mutations_rest.py, so that the two
workers of `--dist loadfile` share them; conftest's `fault_results` runs each fault once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from evprobe.experiments.known_answer.mutations import FAULTS, failed_checks, fault_table

# This file's half of the faults (test_known_answer_mutations_rest.py takes the other).
HALF = FAULTS[::2]


@pytest.mark.parametrize("fault", HALF, ids=[f.name for f in HALF])
def test_the_fault_fails_a_check(fault, small_quickstart: tuple[Path, dict], fault_results) -> None:
    assert small_quickstart[1]["passed"], failed_checks(small_quickstart[1])
    assert failed_checks(fault_results([fault])[fault.name]), fault.name


def test_every_check_is_failed_by_a_fault(small_quickstart: tuple[Path, dict], fault_results) -> None:
    """The clean run is conftest's `small_quickstart` (shared with test_known_answer_n.py); the
    faults' runs are shared with the other half's tests."""
    _, result = small_quickstart
    assert result["passed"], failed_checks(result)
    by_fault = fault_results(FAULTS)
    print(fault_table(result, by_fault))
    caught = {name: failed_checks(r) for name, r in by_fault.items()}
    assert all(caught.values()), {k: v for k, v in caught.items() if not v}
    names = {c["check"] for c in result["checks"]}
    assert names == {c for failed in caught.values() for c in failed}, names - {c for v in caught.values() for c in v}
