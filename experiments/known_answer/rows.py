"""One known-answer check as a row (`check_row`): the shape experiments.known_answer.checks and
experiments.known_answer.steering write into known_answer.json/.md."""

from __future__ import annotations

from typing import Any

def check_row(name: str, passed: bool | None, measured: str, target: str) -> dict[str, Any]:
    """passed None: the check did not run (a missing file or stage)."""
    return {"check": name, "passed": passed, "measured": measured, "target": target}
