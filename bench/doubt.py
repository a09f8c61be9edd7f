"""Doubt in reasoning traces and whether it converts into abstention (seed 002, section 5.3 and
appendix N: "Qwen3-VL Think overrides its own internal doubt to confabulate").

A reply's *trace* is its reasoning: the text inside `<think>...</think>` (a thinking model's block;
the reply is read after it, `bench.parse`), or else the working above the final `ANSWER:` line (the
`brief` protocol). A reply without either (a direct letter) has no trace. A trace *expresses doubt*
when it says the evidence is uncertain or insufficient (`DOUBT`: "not sure", "uncertain", "can't
tell", "unclear", "ambiguous", "cannot be determined", "not enough information", "insufficient",
"no way to know", ...; not "unknown", which restates the question's setup), read as written (a rule, like the parser; no model judges it here).

Per run (scores.json `reasoning`, present only when some answer reply has a trace), over the answer
requests (answer_initial, answer_after_test; voids = the unresolved ones, controls = the resolved),
each a rate with a family-bootstrap interval:

- `traced`: replies with a trace, among all answer replies;
- `doubt_on_voids`, `doubt_on_controls`: traces that express doubt, among traced replies;
- `converted`: doubting void replies whose final answer abstains ("undetermined");
- `overridden`: doubting void replies whose final answer is yes or no (the seed's confabulation
  despite doubt); an invalid final answer is neither, and stays in both denominators;
- `doubt_among_void_failures`: seed 002's own doubt rate (appendix N, O.1 axis 4, Table 35's
  "Doubt"), on its denominator: the void failures (O.2: void replies that did not abstain but gave a
  definitive answer, here yes or no) with a trace, and among them those whose trace doubts. The
  seed's rate is a share of confabulations; `doubt_on_voids` is a share of every traced void reply,
  and `overridden` a share of the doubting ones: three denominators, named apart. An invalid void
  reply gave no definitive answer, so it is no failure in the seed's sense and not in this
  denominator (it stays in the others); an untraced failure has no trace to read (the seed reads a
  non-thinking model's visible output instead: `evprobe confabulation` classifies those).

A reasoning on/off pair is two runs of the same items (a thinking and a non-thinking variant of a
model, or `--protocol brief` and `direct`): `evprobe compare --paired RUN_OFF RUN_ON` gives the paired
change in AbsRec beside each run's doubt rates (the seed's Figure 4b).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from evprobe.bench import pecs
from evprobe.bench.tally import Tally

if TYPE_CHECKING:
    from evprobe.bench.score_index import Bench, Replies

SECTION = "reasoning"
MEASURES = ("traced", "doubt_on_voids", "doubt_on_controls", "converted", "overridden", "doubt_among_void_failures")
_THINK = re.compile(r"<think>(.*?)</think>", re.S | re.I)
_ANSWER_LINE = re.compile(r"^[ \t*_#>-]*answer\s*:", re.I | re.M)
DOUBT = re.compile(
    r"\b(?:not\s+(?:sure|certain|clear|possible\s+to\s+(?:tell|know|determine|say))|unsure|uncertain(?:ty)?|"
    r"unclear|ambiguous|can(?:no|')t\s+(?:tell|know|be\s+(?:sure|certain|determined)|determine|say|see)|"
    r"cannot\s+(?:tell|know|be\s+(?:sure|certain|determined)|determine|say|see)|hard\s+to\s+(?:tell|say)|"
    r"(?:not|n't)\s+enough\s+(?:information|evidence)|insufficient|no\s+way\s+to\s+(?:know|tell)|"
    r"undetermined|indeterminate|doubt(?:ful)?)\b",
    re.I,
)


def reasoning_trace(reply: str) -> str | None:
    """The reply's reasoning (module docstring), or None when it has none (or only white space)."""
    blocks = _THINK.findall(reply)
    if blocks:
        text = "\n".join(blocks)
    else:
        lines = list(_ANSWER_LINE.finditer(reply))
        text = reply[: lines[-1].start()] if lines else ""
    return text if text.strip() else None


def expresses_doubt(trace: str) -> bool:
    return DOUBT.search(trace) is not None


def tally_doubt(tally: Tally, bench: Bench, replies: Replies) -> bool:
    """Tally the section's measures; False (nothing tallied) when no answer reply has a trace."""
    rows = []
    for item_id, answer in replies.decoded.items():
        item = bench.items[item_id]
        if item.request not in pecs.ANSWER_REQUESTS or item.variant is not None:
            continue
        trace = reasoning_trace(replies.records[item_id].reply or "")
        rows.append((bench.family_of[item.family_id], bool(item.resolved), trace, answer))
    if not any(trace is not None for _, _, trace, _ in rows):
        return False
    traced = [(f, r, expresses_doubt(t), a) for f, r, t, a in rows if t is not None]
    doubting = [(f, a) for f, resolved, d, a in traced if d and not resolved]
    tally.rate((SECTION, "traced"), ((f, t is not None) for f, _, t, _ in rows))
    tally.rate((SECTION, "doubt_on_voids"), ((f, d) for f, resolved, d, _ in traced if not resolved))
    tally.rate((SECTION, "doubt_on_controls"), ((f, d) for f, resolved, d, _ in traced if resolved))
    tally.rate((SECTION, "converted"), ((f, a == pecs.ABSTAIN) for f, a in doubting))
    tally.rate((SECTION, "overridden"), ((f, a in ("yes", "no")) for f, a in doubting))
    tally.rate((SECTION, "doubt_among_void_failures"),
               ((f, d) for f, resolved, d, a in traced if not resolved and a in ("yes", "no")))
    return True


__all__ = ["DOUBT", "MEASURES", "SECTION", "expresses_doubt", "reasoning_trace", "tally_doubt"]
