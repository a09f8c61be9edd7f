"""Seed 002's two judges (bench.seed002_judges, bench.seed002_panel; appendix D.2-D.4): the prompts are
the seed's text, the JSON replies are read strictly, the panel's combination is a hand table, and
`evprobe judge --panel seed002` end to end against scripted judges served over HTTP, so every
decision, and so every score and kappa, is known."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from evprobe.bench import seed002_judges as sj
from evprobe.bench.judge_agreement import fleiss_kappa
from evprobe.bench.manifest import read_items
from evprobe.bench.protocols import build_prompt
from evprobe.bench.records import load_records
from evprobe.experiments.cli import main

from tests.bench.scripted_judge import ScriptedJudge, judge_with
from tests.bench.scripted_judge import free_run as scripted_free_run

SEED = Path("/work/shared/seeds/002_9a822cb4fffae59b.txt")
# The seed's text as its extraction prints it (curly quotes for LaTeX's), appendix D.2 and D.3.
SEED_D2 = ("You are a classification judge. Your task is to determine whether a model ABSTAINED from answering a physics "
           "question about a video, or whether it PROVIDED AN ANSWER.\nABSTAINED means the model: refused to answer or "
           "said the question cannot be determined; indicated insufficient information or missing evidence; declined "
           "to commit to a specific answer; gave an evasive non-answer such as ‘neither’, ‘none of the above’, ‘I don’t "
           "know’, ‘cannot tell’, or ‘not applicable’ when the question asks for a specific choice.\nPROVIDED AN ANSWER "
           "means the model gave a definitive answer that directly addresses the question, even if it expressed some "
           "uncertainty along the way.\nIMPORTANT: If the model hedges but still commits to an answer (e.g., ‘I’m not "
           "entirely sure, but it appears to go left’), that counts as PROVIDED AN ANSWER. But if the model says "
           "‘neither’ or ‘none’ on a binary question, that is ABSTAINED.\nRespond with ONLY a JSON object:\n"
           "{‘‘abstained’’: true/false, ‘‘confidence’’: ‘‘high/medium/low’’, ‘‘reasoning’’: ‘‘one sentence’’}")
SEED_D3 = ("You are an answer extraction judge. Given a physics question about a video, the ground truth answer, and a "
           "model’s response, extract the model’s predicted answer and determine if it matches ground truth.\nRules:\n"
           "- For numeric answers: extract the model’s final predicted numeric value. Do NOT judge numeric correctness "
           "yourself -- just extract the value.\n- For categorical answers (left/right, a side name): set correct=true "
           "if the model clearly indicates the correct answer, even if it hedges.\n- If the model says UNANSWERABLE but "
           "mentions the correct answer in its reasoning, still extract that answer.\nRespond with ONLY a JSON object:\n"
           "{‘‘correct’’: true/false, ‘‘extracted_value’’: <number or string>, ‘‘reasoning’’: ‘‘one sentence’’}")


def _typeset(text: str) -> str:
    """The extraction's curly quotes as the plain ones the prompt sends (bench.seed002_judges' docstring)."""
    return text.replace("‘‘", '"').replace("’’", '"').replace("‘", "'").replace("’", "'")


def test_the_prompts_are_the_seeds_text() -> None:
    assert sj.ABSTENTION_PROMPT == _typeset(SEED_D2)
    assert sj.CORRECTNESS_PROMPT == _typeset(SEED_D3)
    if SEED.is_file():  # the copy above is the seed's, character for character
        text = SEED.read_text(encoding="utf-8")
        assert f"D.2 Abstention Judge Prompt\n\n{SEED_D2}\n\nD.3 Correctness Judge Prompt\n\n{SEED_D3}\n\n" in text
    # only the inputs are added, after the seed's text
    assert sj.abstention_prompt("Q?", "R.") == sj.ABSTENTION_PROMPT + "\n\nQuestion:\n<<<\nQ?\n>>>\n\nModel response:\n<<<\nR.\n>>>"
    assert sj.correctness_prompt("Q?", "yes", "R.").startswith(sj.CORRECTNESS_PROMPT + "\n\nQuestion:\n<<<\nQ?\n>>>")
    assert "Ground truth answer: yes\n\nModel response:\n<<<\nR.\n>>>" in sj.correctness_prompt("Q?", "yes", "R.")


@pytest.mark.parametrize("reply, abstained", [
    # the seed's own reply format (D.2), filled in
    ('{"abstained": true, "confidence": "high", "reasoning": "It says the answer cannot be determined."}', True),
    ('  {"abstained": false, "confidence": "low", "reasoning": "It hedges but commits: left."}\n', False),
    ('{"reasoning": "r", "confidence": "medium", "abstained": false}', False),  # key order free
    # anything else is no decision
    ('```json\n{"abstained": true, "confidence": "high", "reasoning": "r"}\n```', None),
    ('Answer: {"abstained": true, "confidence": "high", "reasoning": "r"}', None),
    ('{"abstained": "true", "confidence": "high", "reasoning": "r"}', None),
    ('{"abstained": 1, "confidence": "high", "reasoning": "r"}', None),
    ('{"abstained": true, "confidence": "certain", "reasoning": "r"}', None),
    ('{"abstained": true, "confidence": "high/medium/low", "reasoning": "r"}', None),
    ('{"abstained": true, "confidence": "high"}', None),
    ('{"abstained": true, "confidence": "high", "reasoning": "r", "extra": 1}', None),
    ('{"abstained": true, "abstained": false, "confidence": "high", "reasoning": "r"}', None),
    ('{"abstained": true/false, "confidence": "high", "reasoning": "r"}', None),
    ('[{"abstained": true, "confidence": "high", "reasoning": "r"}]', None),
    ('{"abstained": true, "confidence": "high", "reasoning": ' + "[" * 200 + "]" * 200 + "}", None),
    ('{"abstained": true, "confidence": "high", "reasoning": "' + "x" * 20_000 + '"}', None),
    ("ABSTAINED", None), ("", None),
])
def test_an_abstention_reply_is_the_schema_or_no_decision(reply: str, abstained: bool | None) -> None:
    verdict = sj.read_abstention(reply)
    assert (None if verdict is None else verdict.abstained) is abstained


@pytest.mark.parametrize("reply, extracted, matches_yes", [
    ('{"correct": true, "extracted_value": "yes", "reasoning": "It says yes."}', "yes", True),
    ('{"correct": false, "extracted_value": "No.", "reasoning": "It says no."}', "No.", False),
    ('{"correct": true, "extracted_value": " \\"Yes\\" ", "reasoning": "r"}', ' "Yes" ', True),
    ('{"correct": false, "extracted_value": 3, "reasoning": "a bin number"}', 3, False),
    ('{"correct": false, "extracted_value": 2.5, "reasoning": "r"}', 2.5, False),
    ('{"correct": true, "extracted_value": "yes, it slides", "reasoning": "r"}', "yes, it slides", False),
    ('{"correct": true, "extracted_value": true, "reasoning": "r"}', None, None),
    ('{"correct": true, "extracted_value": null, "reasoning": "r"}', None, None),
    ('{"correct": true, "extracted_value": ["yes"], "reasoning": "r"}', None, None),
    ('{"correct": true, "extracted_value": NaN, "reasoning": "r"}', None, None),
    ('{"correct": "yes", "extracted_value": "yes", "reasoning": "r"}', None, None),
    ('{"correct": true, "extracted_value": "yes"}', None, None),
])
def test_a_correctness_reply_is_the_schema_or_no_decision(reply: str, extracted: object, matches_yes: bool | None) -> None:
    verdict = sj.read_correctness(reply)
    if extracted is None:
        assert verdict is None
    else:
        assert verdict is not None and verdict.extracted == extracted and verdict.matches("yes") is matches_yes


# (resolved, truth, rule, judges' abstained, judges' extracted) -> (abstained, correct, answer, route)
COMBINATIONS = [
    ((True, "yes", "yes", [False, False, False], ["yes", "Yes.", "yes"]), (False, True, "yes", "panel")),
    ((True, "yes", "no", [False, False, True], ["no", "no", "yes"]), (False, False, "no", "panel")),
    ((True, "yes", None, [False, False, None], ["maybe", "no", None]), (False, False, None, "invalid:panel_unread")),
    ((True, "no", "undetermined", [True, True, False], ["no", None, "no"]), (True, True, "undetermined", "panel")),
    ((True, "no", None, [True, False, None], ["yes", "no", "no"]), (None, True, None, "invalid:panel_undecided")),
    ((True, "no", "no", [False, False, False], ["yes", "no", None]), (False, None, None, "invalid:panel_undecided")),
    ((False, None, "yes", [False, False, True], [None, None, None]), (False, None, "yes", "panel:rule_answer")),
    ((False, None, "undetermined", [False, False, True], [None, None, None]), (False, None, None, "invalid:panel_unread")),
    ((False, None, None, [True, True, None], [None, None, None]), (True, None, "undetermined", "panel")),
    ((False, None, "no", [True, None, None], [None, None, None]), (None, None, None, "invalid:panel_undecided")),
]


@pytest.mark.parametrize("given, expected", COMBINATIONS)
def test_the_panel_combines_the_two_judges_as_the_table_says(given: tuple, expected: tuple) -> None:
    got = sj.combine(*given)
    assert (got.abstained, got.correct, got.answer, got.route) == expected


def _verdict(abstained: bool) -> str:
    return json.dumps({"abstained": abstained, "confidence": "high", "reasoning": "one sentence"})


def _extraction(value: str, truth: str) -> str:
    return json.dumps({"correct": value == truth, "extracted_value": value, "reasoning": "one sentence"})


@pytest.fixture(scope="module")
def free_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The exact reader's free-form replies ("Yes.", "No.", "The evidence does not settle the answer.")."""
    return scripted_free_run(tmp_path_factory.mktemp("seed002"), "exact-reader")


def _script(run: Path, abstains, extracts):
    """prompt text -> reply: abstains(item, record) -> bool, extracts(item, record) -> the value said."""
    meta = json.loads((run / "run.json").read_text())
    items = {it.item_id: it for it in read_items(meta["bench"])}
    plan = {}
    for key, rec in load_records(run / "records.jsonl").items():
        it = items[key]
        question = build_prompt(it, "free")
        plan[sj.abstention_prompt(question, rec.reply)] = _verdict(abstains(it, rec))
        if it.resolved:
            plan[sj.correctness_prompt(question, it.reference_answer, rec.reply)] = _extraction(
                extracts(it, rec), it.reference_answer)
    return lambda text: plan.get(text, "I cannot say.")


def _judge(run: Path, scripts, name: str, *extra: str) -> tuple[int, list[ScriptedJudge]]:
    return judge_with(run, scripts, name, "--panel", "seed002", *extra)


def test_judges_that_read_the_replies_give_the_rules_scores(free_run: Path) -> None:
    right = _script(free_run, lambda it, rec: rec.answer == "undetermined", lambda it, rec: rec.answer)
    always = _script(free_run, lambda it, rec: True, lambda it, rec: "maybe")  # abstains on all, extracts no answer
    rc, judges = _judge(free_run, [right, right, always], "reader")
    assert rc == 0
    out = free_run / "judged"
    rows = [json.loads(x) for x in (out / "judgments.jsonl").read_text().splitlines()]
    controls = [r for r in rows if r["task"] == "ctrl-abstain"]
    assert len(rows) == 108 and len(controls) == 78 and all(r["panel"] == r["rule"] for r in rows)
    result = json.loads((out / "judge.json").read_text())
    assert result["panel"] == "seed002" and result["scores"]["panel"] == result["scores"]["rule"]
    assert result["prompts"]["abstention"].startswith(_typeset(SEED_D2))
    assert result["panel_undecided"] == result["panel_unread"] == result["abstained_but_correct"] == 0
    # the abstention judge's kappa by hand: judges 0 and 1 say answered on controls, abstained on voids; judge 2 abstained
    table = np.array([[1, 2] if r["task"] == "ctrl-abstain" else [3, 0] for r in rows])
    assert result["agreement"]["abstention"]["fleiss_kappa"]["value"] == pytest.approx(fleiss_kappa(table))
    corr = np.array([[2, 1]] * 78)  # two correct, one "maybe": every row alike, kappa by hand
    assert result["agreement"]["correctness"]["fleiss_kappa"]["value"] == pytest.approx(fleiss_kappa(corr))
    tasks = {c["task"] for c in result["agreement_by_task_dataset"]["cells"]}
    assert tasks == {"void-abstain", "ctrl-abstain", "correctness"}
    # the seed's call settings went with every request (Table 8), the task's schema as response_format
    for j in judges:
        assert len(j.bodies) == 108 + 78
        for body in j.bodies:
            assert body["temperature"] == 0.8 and body["max_tokens"] == 512
            fmt = body["response_format"]
            assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] == sj.SCHEMAS[fmt["json_schema"]["name"]]
    # and a folder judged by one panel refuses the other
    assert main(["judge", str(free_run), "--judge", f"x@{judges[0].url}", "--judge", f"y@{judges[1].url}"]) == 2
    # its audit.csv is scored as the four-way panel's: a human agreeing with the panel everywhere
    import csv

    with open(out / "audit.csv") as fh:
        audit = list(csv.reader(fh))
    assert audit[0][4:-2] == ["reader-0", "reader-1", "reader-2"] and audit[1][4:-2][2] == "abstained/incorrect"
    filled = out / "filled.csv"
    with open(filled, "w", newline="") as fh:
        csv.writer(fh).writerows([audit[0], *[[*row[:-1], row[-2]] for row in audit[1:]]])
    assert main(["judge", "--score-audit", str(filled), "--n-boot", "200"]) == 0
    assert json.loads((out / "filled_score.json").read_text())["accuracy"]["value"] == 1.0


def test_judges_that_read_wrong_answers_and_no_abstentions_move_every_score(free_run: Path, tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(free_run, run, ignore=shutil.ignore_patterns("judged"))
    flip = {"yes": "no", "no": "yes"}
    wrong = _script(run, lambda it, rec: False, lambda it, rec: flip[it.reference_answer])
    rc, _ = _judge(run, [wrong, wrong], "wrong")
    assert rc == 0
    result = json.loads((run / "judged" / "judge.json").read_text())
    panel, rule = result["scores"]["panel"], result["scores"]["rule"]
    assert rule["pecs_acc"]["value"] == 1.0 and panel["pecs_acc"]["value"] == 0.0
    assert rule["pecs_abs_rec"]["value"] == 1.0 and panel["pecs_abs_rec"]["value"] == 0.0
    assert panel["pecs_abs_rec"]["n"] == rule["pecs_abs_rec"]["n"]  # unread voids stay in the denominator
    assert result["panel_unread"] == 30  # voids answered, but the rule reads "undetermined": no answer to record
    judged = load_records(run / "judged" / "records.jsonl")
    rows = [json.loads(x) for x in (run / "judged" / "judgments.jsonl").read_text().splitlines()]
    assert all(judged[r["item_id"]].answer == flip[r["truth"]] for r in rows if r["task"] == "ctrl-abstain")
    assert result["judge_correct_vs_match"]["value"] == 1.0  # each judge's own `correct` is the match here


def test_a_judge_whose_replies_are_not_the_schema_decides_nothing(free_run: Path, tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(free_run, run, ignore=shutil.ignore_patterns("judged"))
    right = _script(run, lambda it, rec: rec.answer == "undetermined", lambda it, rec: rec.answer)
    fenced = lambda text: f"```json\n{right(text)}\n```"
    rc, _ = _judge(run, [right, right, fenced], "fenced")
    assert rc == 0
    result = json.loads((run / "judged" / "judge.json").read_text())
    assert result["no_decision"]["fenced-2"] == {"abstention": 108, "correctness": 78}
    assert result["agreement"]["abstention"]["n_decided_by_all"] == 0
    row = json.loads((run / "judged" / "judgments.jsonl").read_text().splitlines()[0])
    assert row["invalid"]["fenced-2"]["abstention"]["reply"].startswith("```json")
    assert result["scores"]["panel"] == result["scores"]["rule"]  # two of three still decide
