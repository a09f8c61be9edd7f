"""One known-answer check's result (`CheckRow`, made by `check_row`): what experiments.known_answer.checks
and experiments.known_answer.steering write, one row each, into known_answer.json/.md."""

from __future__ import annotations

from dataclasses import dataclass

from evprobe.core.json_types import JsonObject


@dataclass(frozen=True)
class CheckRow:
    """One check: its name, whether it passed (None: it did not run), what was measured, its target."""

    check: str
    passed: bool | None
    measured: str
    target: str

    def to_json(self) -> JsonObject:
        return {"check": self.check, "passed": self.passed, "measured": self.measured, "target": self.target}


def check_row(name: str, passed: bool | None, measured: str, target: str) -> CheckRow:
    """passed None: the check did not run (a missing file or stage)."""
    return CheckRow(name, passed, measured, target)
