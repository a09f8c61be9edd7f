"""The known-answer suite fails when the toolkit is broken: every fault fails a check, every check is
failed by a fault, and the clean pipeline passes them all (experiments/mutations.py; README table).

One reduced quickstart on the organism (8 families per system, steering at the planted layer only, 8
random directions, no refits), then each fault reruns only the stages that depend on what it breaks."""

from __future__ import annotations

from pathlib import Path

from evprobe.experiments.mutations import FAULTS, SMALL_QUICKSTART, failed_checks, fault_table, run_with_fault
from evprobe.experiments.quickstart import quickstart


def _run(out: Path) -> dict:
    return quickstart(out, **SMALL_QUICKSTART)["known_answer"]


def test_every_fault_fails_a_check_and_every_check_is_failed(small_quickstart: tuple[Path, dict],
                                                             tmp_path: Path) -> None:
    """The clean run is conftest's `small_quickstart` (shared with test_known_answer_n.py)."""
    folder, result = small_quickstart
    assert result["passed"], failed_checks(result)
    by_fault = {f.name: run_with_fault(folder, tmp_path / f.name.replace(" ", "_"), f, _run) for f in FAULTS}
    table = fault_table(result, by_fault)
    print(table)
    caught = {name: failed_checks(r) for name, r in by_fault.items()}
    assert all(caught.values()), {k: v for k, v in caught.items() if not v}
    names = {c["check"] for c in result["checks"]}
    assert names == {c for failed in caught.values() for c in failed}, names - {c for v in caught.values() for c in v}
