"""The four-way panel's question and how its answers are read (`evprobe judge`, `--panel fourway`; the
module docstring of `bench.judges` says the why): the options, the prompt, a judge's decision and the
panel's strict majority. Shared by a run's judging (`bench.judges`) and a steering output's
(`bench.judge_steered`)."""

from __future__ import annotations

from collections import Counter

from evprobe.bench.judge_reader import check_options, read_label

JUDGE_OPTIONS = {"A": "It answers yes.", "B": "It answers no.",
                 "C": "It says the answer cannot be determined from the evidence (it abstains).",
                 "D": "None of these clearly (it hedges, gives both answers, or answers something else)."}
DECISIONS = {"A": "yes", "B": "no", "C": "undetermined", "D": "unclear"}
CATEGORIES = tuple(DECISIONS.values())
JUDGE_PROMPT = (
    "You are grading how a reply answers a question. Do not solve the question yourself; only say what the "
    "reply says.\n\nThe question, as it was asked:\n<<<\n{question}\n>>>\n\nThe reply:\n<<<\n{reply}\n>>>\n\n"
    "Which describes the reply?\n" + "".join(f"{k}. {v}\n" for k, v in JUDGE_OPTIONS.items())
    + "\nReply with the letter only."
)
check_options(JUDGE_OPTIONS)  # no option's words name another letter: two letters never read as one


def judge_decision(reply: str) -> str | None:
    """A judge's reply as a decision (DECISIONS' values), or None when it gives no one letter
    (`bench.judge_reader.read_label`)."""
    label = read_label(reply, JUDGE_OPTIONS)
    return None if label is None else DECISIONS[label]


def panel_decision(decisions: list[str | None]) -> str | None:
    """The answer a strict majority of the panel gives (yes, no, undetermined), else None."""
    counts = Counter(d for d in decisions if d is not None)
    if not counts:
        return None
    best, n = counts.most_common(1)[0]
    return best if n * 2 > len(decisions) and best != "unclear" else None


__all__ = ["CATEGORIES", "DECISIONS", "JUDGE_OPTIONS", "JUDGE_PROMPT", "judge_decision", "panel_decision"]
