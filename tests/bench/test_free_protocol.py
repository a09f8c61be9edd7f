"""The free protocol (bench.protocols; seed 002, section 4.2): answer prompts without option letters,
replies read by their words alone, and the judged scores beside the letter-based ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evprobe.bench.generate import GenerateConfig, build, generate
from evprobe.bench.items import Item
from evprobe.bench.parse import parse_reply
from evprobe.bench.prompts import ANSWER_INSTRUCTION
from evprobe.bench.protocols import FREE_QUESTION, GUIDED_FREE, build_prompt, prompt_template_sha256
from evprobe.experiments.cli import main

ANSWERS = ("answer_initial", "answer_after_test", "both_given")


@pytest.fixture(scope="module")
def items() -> list[Item]:
    return build(GenerateConfig(families_per_system=1, subset_per_cell=0))[1]


def _answer(items: list[Item]) -> Item:
    return next(it for it in items if it.request == "answer_initial")


def test_the_free_prompt_is_the_answer_prompt_without_its_menu(items: list[Item]) -> None:
    for it in (x for x in items if x.request in ANSWERS):
        text = build_prompt(it, "free")
        assert text.endswith(FREE_QUESTION) and ANSWER_INSTRUCTION not in text
        assert not any(f"\n{letter}. " in text for letter in it.options)  # no option letters shown
        assert text.removesuffix(FREE_QUESTION) == it.prompt.rsplit("\n\nWhat is the answer", 1)[0] + "\n\n"
    guided = build_prompt(_answer(items), "free", "guided")
    assert guided.endswith(GUIDED_FREE) and "undetermined option" not in guided
    select = next(it for it in items if it.request == "select")
    with pytest.raises(ValueError, match="the free protocol asks answer requests only"):
        build_prompt(select, "free")
    # the template hash pins the free text, and the other protocols' hashes are what they were
    assert len({prompt_template_sha256(p, "standard") for p in ("direct", "brief", "free")}) == 3
    assert prompt_template_sha256("free", "standard") != prompt_template_sha256("free", "guided")


REPLIES = [
    # (free-form reply, its reading: an answer, or None for invalid)
    ("Yes, it will slide farther than that.", "yes"),
    ("No.", "no"),
    ("The evidence does not settle the answer.", "undetermined"),
    ("It cannot be determined from the sheet.", "undetermined"),
    ("Probably yes.", "yes"),  # hedged, but commits: seed 002's rubric (tests/bench/test_parse_rubric.py)
    ("None of the above.", "undetermined"),  # an evasive non-answer abstains (seed 002, D.2)
    ("Yes or no, depending on the friction.", None),  # alternatives
    ("A block this heavy would not slide that far, so no.", "no"),  # the article is no option letter
    ("C", None),  # a letter names nothing where none was shown
    ("B: no", "no"),
]


@pytest.mark.parametrize("reply, reading", REPLIES)
def test_free_replies_are_read_by_their_words_alone(items: list[Item], reply: str, reading: str | None) -> None:
    it = _answer(items)
    parsed = parse_reply(it, reply, letters=False)
    assert parsed.answer == reading and parsed.valid == (reading is not None), reply


def test_a_letter_still_counts_under_the_letter_protocols(items: list[Item]) -> None:
    it = _answer(items)
    letter = next(k for k, v in it.options.items() if v == "yes")
    assert parse_reply(it, letter).answer == "yes" and not parse_reply(it, letter, letters=False).valid


def test_judged_scores_sit_beside_the_letter_scores(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bench = tmp_path / "bench"
    generate(bench, GenerateConfig(families_per_system=1, subset_per_cell=0), progress=False)
    assert main(["run", "--model", "policy:exact-reader", "--bench", str(bench), "--out", str(tmp_path / "free"),
                 "--protocol", "free"]) == 2
    assert "--protocol free asks answer requests only" in capsys.readouterr().err
    requests = ",".join(ANSWERS)
    for protocol in ("direct", "free"):
        assert main(["run", "--model", "policy:exact-reader", "--bench", str(bench), "--out",
                     str(tmp_path / protocol), "--protocol", protocol, "--requests", requests]) == 0
        assert main(["score", str(tmp_path / protocol)]) == 0
    free = [json.loads(x) for x in (tmp_path / "free" / "records.jsonl").read_text().splitlines()]
    assert all(r["protocol"] == "free" and r["valid"] and r["route"] == "name" for r in free)
    assert {r["reply"] for r in free} <= {"Yes.", "No.", "The evidence does not settle the answer."}
    scores = {p: json.loads((tmp_path / p / "scores.json").read_text()) for p in ("direct", "free")}
    # the exact reader says the same thing in words as in letters: the judged scores are the letter scores
    for name in ("pecs_acc", "pecs_abs_rec", "pecs_false_abs"):
        assert scores["free"][name]["value"] == scores["direct"][name]["value"] == (0.0 if "false" in name else 1.0)
    assert main(["compare", str(tmp_path / "direct"), str(tmp_path / "free")]) == 0
    assert "free/standard" in capsys.readouterr().out
