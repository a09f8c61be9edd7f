"""Seed 002's two judges (appendix D.2, D.3): their prompts, the JSON their replies must be, and how
the panel combines them (`evprobe judge --panel seed002`; the run is `bench.seed002_panel`).

The prompts are the seed's text verbatim (`ABSTENTION_PROMPT`, `CORRECTNESS_PROMPT`), typeset as
plain text: the seed's extracted text prints LaTeX quotes as curly ones (‘‘abstained’’, ‘neither’,
model’s), written here as ASCII '"' and "'". The seed gives no slots for the inputs (D.1: judges
"receive only text (the model's response and ground truth)"), so evprobe appends them after the
seed's text (`INPUTS`, `CORRECTNESS_INPUTS`: the question as the model was asked it, the ground
truth on the correctness judge, the model's reply), a choice of ours.

A judge's reply is read strictly: the whole reply (blanks around it aside) is one JSON object of at
most `MAX_REPLY_CHARS` characters, parsed by `core.json_files.parse_json` (nesting bounded before
parsing), holding exactly the schema's keys (no other, none twice) with values of the schema's
types: `abstained` true or false, `confidence` one of high / medium / low, `reasoning` a string;
`correct` true or false, `extracted_value` a finite number or a string. Anything else (a code fence,
words around the object, a missing key, "yes" for true) is no decision, kept with the judge's words
(`bench.judge_server.Answer`). The schemas are sent as the request's response_format (Table 8:
"structured output: yes (JSON schema)").

Combination (D.3's last paragraph, section 4.2, where the seed is silent our choice is said so):

- abstention (both tasks): the panel abstained when a strict majority of the judges (of all, not of
  those that decided) says abstained true; answered when a strict majority says false; else undecided.
- correctness (controls only; D.4's "correctness" task): for categorical answers the seed decides
  correctness by exact string matching of the extracted value against the ground truth, not by the
  judge's `correct`. evprobe's answers are yes / no; the match is `same_answer`: both sides compared
  after trimming blanks, surrounding quotes and a final period, without case (our reading of
  "exact"). Each judge's correctness is that match on its extracted value; the panel's is the
  strict majority's. The judge's own `correct` is kept beside it and its agreement with the match
  reported.
- the record's answer (evprobe scores one answer per reply; the seed scores the two tracks
  apart): abstained -> "undetermined"; undecided -> invalid (`invalid:panel_undecided`); answered on
  a control -> the ground truth when the panel says correct, the other answer (yes <-> no) when it
  says incorrect and a strict majority of the judges extracted that other answer, else invalid
  (`invalid:panel_unread`); answered on a void -> the seed judges no answer there (D.3 runs on
  controls), so the rule's reading (`bench.parse`) when it reads yes or no, else invalid
  (`invalid:panel_unread`). An invalid reply stays in every denominator, neither correct nor an
  abstention. Where the seed differs: a control reply that abstains but names the right answer
  counts there as correct (the correctness track extracts it, D.3) and as a false abstention; here
  it is an abstention only. judge.json counts such replies (`abstained_but_correct`), so the
  difference is seen. Acc, FalseAbs and AbsRec then follow `bench.pecs` on these records.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from evprobe.core.errors import InputError
from evprobe.core.json_files import parse_json
from evprobe.core.json_types import JsonObject

PANEL = "seed002"
ABSTENTION, CORRECTNESS = "abstention", "correctness"  # the two judges (the prompt keys' task prefixes)
ABSTENTION_PROMPT = (
    "You are a classification judge. Your task is to determine whether a model ABSTAINED from answering a physics "
    "question about a video, or whether it PROVIDED AN ANSWER.\n"
    "ABSTAINED means the model: refused to answer or said the question cannot be determined; indicated insufficient "
    "information or missing evidence; declined to commit to a specific answer; gave an evasive non-answer such as "
    "'neither', 'none of the above', 'I don't know', 'cannot tell', or 'not applicable' when the question asks for a "
    "specific choice.\n"
    "PROVIDED AN ANSWER means the model gave a definitive answer that directly addresses the question, even if it "
    "expressed some uncertainty along the way.\n"
    "IMPORTANT: If the model hedges but still commits to an answer (e.g., 'I'm not entirely sure, but it appears to "
    "go left'), that counts as PROVIDED AN ANSWER. But if the model says 'neither' or 'none' on a binary question, "
    "that is ABSTAINED.\n"
    "Respond with ONLY a JSON object:\n"
    '{"abstained": true/false, "confidence": "high/medium/low", "reasoning": "one sentence"}'
)
CORRECTNESS_PROMPT = (
    "You are an answer extraction judge. Given a physics question about a video, the ground truth answer, and a "
    "model's response, extract the model's predicted answer and determine if it matches ground truth.\n"
    "Rules:\n"
    "- For numeric answers: extract the model's final predicted numeric value. Do NOT judge numeric correctness "
    "yourself -- just extract the value.\n"
    "- For categorical answers (left/right, a side name): set correct=true if the model clearly indicates the "
    "correct answer, even if it hedges.\n"
    "- If the model says UNANSWERABLE but mentions the correct answer in its reasoning, still extract that answer.\n"
    "Respond with ONLY a JSON object:\n"
    '{"correct": true/false, "extracted_value": <number or string>, "reasoning": "one sentence"}'
)
INPUTS = "\n\nQuestion:\n<<<\n{question}\n>>>\n\nModel response:\n<<<\n{response}\n>>>"
CORRECTNESS_INPUTS = ("\n\nQuestion:\n<<<\n{question}\n>>>\n\nGround truth answer: {truth}\n\n"
                      "Model response:\n<<<\n{response}\n>>>")
CONFIDENCES = ("high", "medium", "low")
SCHEMAS: dict[str, JsonObject] = {
    ABSTENTION: {"type": "object", "additionalProperties": False, "required": ["abstained", "confidence", "reasoning"],
                 "properties": {"abstained": {"type": "boolean"}, "confidence": {"type": "string",
                                                                                 "enum": list(CONFIDENCES)},
                                "reasoning": {"type": "string"}}},
    CORRECTNESS: {"type": "object", "additionalProperties": False,
                  "required": ["correct", "extracted_value", "reasoning"],
                  "properties": {"correct": {"type": "boolean"},
                                 "extracted_value": {"anyOf": [{"type": "number"}, {"type": "string"}]},
                                 "reasoning": {"type": "string"}}},
}
TEMPERATURE, MAX_TOKENS = 0.8, 512  # Table 8, judge calls
MAX_REPLY_CHARS = 16_000  # more than 512 tokens of JSON can hold in practice; longer is never parsed
ANSWERS = ("yes", "no")


def abstention_prompt(question: str, response: str) -> str:
    return ABSTENTION_PROMPT + INPUTS.format(question=question, response=response)


def correctness_prompt(question: str, truth: str, response: str) -> str:
    return CORRECTNESS_PROMPT + CORRECTNESS_INPUTS.format(question=question, truth=truth, response=response)


@dataclass(frozen=True)
class AbstentionVerdict:
    """An abstention judge's reply, read (D.2)."""

    abstained: bool
    confidence: str
    reasoning: str


@dataclass(frozen=True)
class CorrectnessVerdict:
    """A correctness judge's reply, read (D.3): its own `correct` and the value it extracted."""

    correct: bool
    extracted: float | int | str
    reasoning: str

    def matches(self, truth: str) -> bool:
        """The seed's correctness: the extracted value against the ground truth (`same_answer`)."""
        return same_answer(self.extracted, truth)


def strict_object(reply: str, keys: Sequence[str]) -> JsonObject | None:
    """The reply as one JSON object with exactly `keys`, else None (module docstring)."""
    text = reply.strip()
    if len(text) > MAX_REPLY_CHARS or not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        value = parse_json(text, "judge reply", "")
    except InputError:
        return None
    if not isinstance(value, dict) or sorted(value) != sorted(keys):
        return None
    pairs = json.loads(text, object_pairs_hook=lambda p: p)  # depth bounded above: a key given twice is no decision
    return value if len(pairs) == len(keys) else None


def read_abstention(reply: str) -> AbstentionVerdict | None:
    """The abstention judge's reply read strictly, else None."""
    v = strict_object(reply, ("abstained", "confidence", "reasoning"))
    if v is None or type(v["abstained"]) is not bool or v["confidence"] not in CONFIDENCES \
            or not isinstance(v["reasoning"], str):
        return None
    return AbstentionVerdict(v["abstained"], v["confidence"], v["reasoning"])


def read_correctness(reply: str) -> CorrectnessVerdict | None:
    """The correctness judge's reply read strictly, else None."""
    v = strict_object(reply, ("correct", "extracted_value", "reasoning"))
    if v is None or type(v["correct"]) is not bool or not isinstance(v["reasoning"], str):
        return None
    x = v["extracted_value"]
    if isinstance(x, bool) or not isinstance(x, (int, float, str)) or (isinstance(x, float) and not math.isfinite(x)):
        return None
    return CorrectnessVerdict(v["correct"], x, v["reasoning"])


def answer_text(value: float | str) -> str:
    """An extracted value as compared: blanks, surrounding quotes and a final period trimmed, no case."""
    text = str(value).strip()
    text = text.strip("\"'`").strip().rstrip(".").strip()
    return text.casefold()


def same_answer(value: float | str, truth: str) -> bool:
    return answer_text(value) == answer_text(truth)


def majority(values: Sequence[object | None]) -> object | None:
    """The value a strict majority of all the judges gives (None, no decision, counts against), else None."""
    counts = Counter(v for v in values if v is not None)
    if not counts:
        return None
    best, n = counts.most_common(1)[0]
    return best if n * 2 > len(values) else None


@dataclass(frozen=True)
class PanelAnswer:
    """The panel's reading of one reply: abstained (None: undecided), correct (controls; None: not
    asked or undecided) and the record's answer (None: invalid, `route` says why)."""

    abstained: bool | None
    correct: bool | None
    answer: str | None
    route: str


def combine(resolved: bool, truth: str | None, rule: str | None, abstained: Sequence[bool | None],
            extracted: Sequence[float | int | str | None]) -> PanelAnswer:
    """The panel's answer from each judge's abstention and extracted value (module docstring).
    resolved: a control; truth: its ground truth (yes / no); rule: the rule's reading."""
    panel_abstained = majority(abstained)
    correct = None
    if resolved and truth is not None:
        correct = majority([None if x is None else same_answer(x, truth) for x in extracted])
    if panel_abstained is None:
        return PanelAnswer(None, correct, None, "invalid:panel_undecided")
    if panel_abstained:
        return PanelAnswer(True, correct, "undetermined", "panel")
    if not resolved:
        return (PanelAnswer(False, None, rule, "panel:rule_answer") if rule in ANSWERS
                else PanelAnswer(False, None, None, "invalid:panel_unread"))
    if correct is None:
        return PanelAnswer(False, None, None, "invalid:panel_undecided")
    if correct:
        return PanelAnswer(False, True, truth, "panel")
    other = next(a for a in ANSWERS if a != truth) if truth in ANSWERS else None
    said = majority([None if x is None else answer_text(x) for x in extracted])
    return (PanelAnswer(False, False, other, "panel") if other is not None and said == other
            else PanelAnswer(False, False, None, "invalid:panel_unread"))


COMBINATION = ("abstained (strict majority of all judges) -> undetermined; answered on a control -> the ground truth "
               "if a strict majority's extracted value matches it (trimmed, no case), the other answer if a strict "
               "majority extracted that, else invalid; answered on a void -> the rule's yes/no reading, else invalid; "
               "undecided -> invalid (bench.seed002_judges)")

__all__ = ["ABSTENTION", "ABSTENTION_PROMPT", "COMBINATION", "CORRECTNESS", "CORRECTNESS_PROMPT", "MAX_TOKENS",
           "PANEL", "SCHEMAS", "TEMPERATURE", "AbstentionVerdict", "CorrectnessVerdict", "PanelAnswer",
           "abstention_prompt", "answer_text", "combine", "correctness_prompt", "majority", "read_abstention",
           "read_correctness", "same_answer", "strict_object"]
