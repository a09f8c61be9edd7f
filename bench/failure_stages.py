"""Where a failed reply's reasoning breaks (seed 003, section 4.5, Table 3), read from its trace by rule.

Seed 003 sorts failures into three sequential stages:

- Stage I, active discovery failure: the trace "fails to acknowledge the presence of the specific
  implicit information required for the task".
- Stage II, valuation and selection failure: the trace "explicitly notices the valid visual evidence but
  fails to establish a logical connection with the target".
- Stage III, logical calculation failure: the trace "successfully bridges the anchor and the target but
  fails at the stage of physical modeling or numerical computation".

Here the implicit information is the sheet's ruler, its marker dot and the reading they give. A trace
(`bench.doubt.reasoning_trace`: a <think> block or the working above the ANSWER line) is read by rule,
as the parser reads replies (no model judges it):

- it *notices* the evidence when it names the ruler, the dot or marker, the marked position, tick marks
  or graduations (`NOTICE`), or states a reading (below);
- a *reading* is a length in m, cm or mm that the prompt does not print (the prompt's own numbers are
  the setup; at level 3 the printed readings count, since there the prompt gives them); "(2 m)" in a
  formula, where m is the mass, is not one (a unit followed by ")", "/", "^" or "*" is a symbol);
- it *bridges* when a sentence that infers a target quantity (mass, friction, restitution, stiffness,
  distance, energy, period, or kg, N/m, J, with so, therefore, thus, hence, gives, implies, means or
  "=") uses a reading's number: the reading is carried into the calculation. A reading stated and then
  left aside ("the dot is at 0.47 m ... wooden blocks weigh about 1.5 kg, so ...") does not bridge;
- stage III if it bridges, else II if it notices, else I.

A failure is a reply that is not correct: an estimate not within 10% of the true value (the seed's
delta of section 4.5; invalid replies fail), a selection other than the reference action, an answer other
than the reference answer. A failed reply without a trace is `untraced`; it stays in the denominator, so
the four shares of a level add up to 1 over its failures. Shares are rates over failures with family-
bootstrap intervals (`bench.tally.Tally`, the run's seed), per level and per group (estimates,
decisions); `accuracy` is the share correct over every reply of the group. scores.json's injection
block carries them (`injection.failure_stages`) when some reply of an injected request has a trace.
Seed 003 averages Table 3's shares over models with equal weight; a run is one model, and the shares of
several runs are compared as any score is (`evprobe compare`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence

from evprobe.bench.doubt import reasoning_trace
from evprobe.bench.injection import INJECTED_REQUESTS, NUMERIC_INJECTED
from evprobe.bench.items import Item
from evprobe.bench.records import Record
from evprobe.bench.score_index import decode_reply
from evprobe.bench.tally import Tally
from evprobe.bench.threshold import within
from evprobe.core.bootstrap import FamilyBootstrap
from evprobe.core.json_types import JsonObject

STAGES: tuple[str, ...] = ("stage_I", "stage_II", "stage_III", "untraced")
DELTA = "0.10"  # section 4.5: "correct if the relative error falls within a 10% threshold"
NOTICE = re.compile(r"\b(?:rulers?|dots?|markers?|marked\s+(?:position|point)|tick\s+marks?|graduations?)\b", re.I)
_NUMBER = r"(?<![\w.])(\d+(?:\.\d+)?|\.\d+)"
LENGTH = re.compile(_NUMBER + r"\s*(?:m|cm|mm|metres?|meters?)\b(?!\s*[)/^*])", re.I)
TARGET = re.compile(r"\b(?:mass|friction|restitution|stiffness|distance|energy|period|kg|N/m|J)\b", re.I)
INFERENCE = re.compile(r"\b(?:so|therefore|thus|hence|gives?|giving|implies|means)\b|=", re.I)
_SENTENCE = re.compile(r"(?<!\d)[.!?](?!\d)|\n")
_READING_LINE = re.compile(r"^- (?:panel|frame) \d+ \(")
NO_TRACES = "no reply of an injected request has a reasoning trace"
DEFINITION = ("failed replies (estimates not within 10%, invalid ones included; selections and answers not the "
              "reference) by their trace: stage I names no evidence, stage II names the ruler, dot or a reading "
              "but no inference of the target uses a reading, stage III carries a reading into the target's "
              "calculation; untraced: no trace. Shares over the failures, accuracy over every reply")


def _setup_numbers(prompt: str) -> set[float]:
    """The numbers a prompt prints, less its readings lines (level 3's readings are evidence, not setup)."""
    text = "\n".join(line for line in prompt.split("\n") if not _READING_LINE.match(line))
    return {float(x) for x in re.findall(_NUMBER, text)}


def stage(trace: str, prompt: str) -> str:
    """The stage of a failed reply's trace (module docstring): stage_I, stage_II or stage_III."""
    setup = _setup_numbers(prompt)
    readings = {float(x) for x in LENGTH.findall(trace)} - setup
    sentences = [s for s in _SENTENCE.split(trace) if s.strip()]
    if any(TARGET.search(s) and INFERENCE.search(s) and readings & {float(x) for x in re.findall(_NUMBER, s)}
           for s in sentences):
        return "stage_III"
    if NOTICE.search(trace) or readings:
        return "stage_II"
    return "stage_I"


def correct(item: Item, rec: Record) -> bool:
    """Whether a reply is correct (module docstring); an invalid reply is not."""
    if item.request in NUMERIC_INJECTED:
        return rec.valid and within(item.reference_value, rec.value, DELTA)  # type: ignore[arg-type]
    answer = decode_reply(item, rec)
    return answer == (item.reference_action if item.request == "select" else item.reference_answer)


def classify(item: Item, rec: Record) -> str | None:
    """None for a correct reply, else its stage or `untraced`."""
    if correct(item, rec):
        return None
    trace = reasoning_trace(rec.reply or "")
    return "untraced" if trace is None else stage(trace, item.prompt)


def tally_stages(tally: Tally, prefix: tuple[str, ...], units: Sequence[tuple[int, str | None]]) -> None:
    """Accuracy over every (family index, classification) unit, each stage's share over the failures."""
    tally.rate((*prefix, "accuracy"), ((f, c is None) for f, c in units))
    failures = [(f, c) for f, c in units if c is not None]
    for name in STAGES:
        if failures:
            tally.rate((*prefix, name), ((f, c == name) for f, c in failures))
        else:
            tally.skip((*prefix, name), "no failed replies")


def failure_stage_block(items: Sequence[Item], records: Iterable[Record], *, n_boot: int, seed: int) -> JsonObject:
    """`injection.failure_stages`: per level and group, accuracy and the stage shares (module docstring)."""
    index = {it.item_id: it for it in items}
    by_level: dict[int, dict[str, list[tuple[str, str | None, bool]]]] = defaultdict(lambda: defaultdict(list))
    for rec in records:
        it = index.get(rec.item_id)
        if it is None or it.request not in INJECTED_REQUESTS or it.variant is not None or it.void is not None:
            continue
        group = "estimates" if it.request in NUMERIC_INJECTED else "decisions"
        traced = reasoning_trace(rec.reply or "") is not None
        by_level[it.injection][group].append((it.family_id, classify(it, rec), traced))
    if not any(t for groups in by_level.values() for units in groups.values() for _, _, t in units):
        return {"reason": NO_TRACES}
    families = list(dict.fromkeys(it.family_id for it in items))
    boot = FamilyBootstrap(families, n_boot, seed)
    fam = {f: i for i, f in enumerate(families)}
    tally = Tally(boot)
    counts: JsonObject = {}
    for level in sorted(by_level):
        for group, units in by_level[level].items():
            tally_stages(tally, (str(level), group), [(fam[f], c) for f, c, _ in units])
            counts.setdefault(str(level), {})[group] = {  # type: ignore[union-attr]
                "replies": len(units), "failures": sum(c is not None for _, c, _ in units),
                **{name: sum(c == name for _, c, _ in units) for name in STAGES}}
    _, est = tally.resolve()
    levels: JsonObject = {}
    for (level, group, name), e in est.items():
        levels.setdefault(level, {}).setdefault(group, {})[name] = e.to_json()  # type: ignore[union-attr]
    return {"definition": DEFINITION, "levels": levels, "counts": counts}


__all__ = ["STAGES", "classify", "correct", "failure_stage_block", "stage", "tally_stages"]
