"""One known-answer check as a row (`check_row`) and an estimate as text (`estimate_text`): the shape
experiments.known_answer and experiments.known_answer_steering write into known_answer.json/.md."""

from __future__ import annotations

from typing import Any

from evprobe.bench.score_report import plain


def estimate_text(e: dict[str, Any] | None) -> str:
    """`0.542 [0.453, 0.628] (n=144)`, or n/a for a missing or undefined estimate."""
    return "n/a" if not e or e.get("value") is None else plain(e)


def check_row(name: str, passed: bool | None, measured: str, target: str) -> dict[str, Any]:
    """passed None: the check did not run (a missing file or stage)."""
    return {"check": name, "passed": passed, "measured": measured, "target": target}
