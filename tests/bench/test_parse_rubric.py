"""Seed 002's two-track rubric in the free-form rule reader (issue 55 item 2; bench.parse's docstring,
"Two readings of hedges and evasive words"): every sentence of the abstention judge's rubric
(appendix D.2) and the issue's examples as known answers, under the seed's reading ("seed002", the
free protocol's default) and the reading before it ("strict"); each guard (conflict, negation,
alternatives) still catching its broken input under both; and the reading pinned in a free run's
run.json, so a resume under the other reading is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evprobe.bench.generate import GenerateConfig, build, generate
from evprobe.bench.items import Item
from evprobe.bench.parse import FREE_RUBRIC, RUBRICS, parse_reply, reading_of
from evprobe.experiments.cli import main

ANSWERS = ("answer_initial", "answer_after_test", "both_given")


@pytest.fixture(scope="module")
def items() -> list[Item]:
    return build(GenerateConfig(families_per_system=1, subset_per_cell=0))[1]


def _read(item: Item, reply: str, rubric: str) -> str:
    """'name:<answer>' or 'invalid:<reason>': the reading of a free-form reply (no letters)."""
    p = parse_reply(item, reply, letters=False, rubric=rubric)  # type: ignore[arg-type]
    assert p.valid == (p.answer is not None) and p.valid == (not p.route.startswith("invalid:"))
    return f"{p.route}:{p.answer}" if p.valid else p.route


# (reply, its reading under "seed002", under "strict"); the questions are this benchmark's yes/no
# questions ("Will it slide more than 0.35 m before it stops?"), each with an undetermined option.
YES, NO, UNDET = "name:yes", "name:no", "name:undetermined"
KNOWN = [
    # D.2, IMPORTANT: "If the model hedges but still commits to an answer (e.g., 'I'm not entirely
    # sure, but it appears to go left'), that counts as PROVIDED AN ANSWER." The seed's example,
    # adapted: "not entirely sure" is no hedge word of the strict list, so strict reads it too.
    ("I'm not entirely sure, but it appears to be yes.", YES, YES),
    ("I'm not entirely sure, but it appears to slide farther, so yes.", YES, YES),
    ("I'm not sure, but it appears to be yes.", YES, "invalid:hedged"),  # the example
    ("I'm not sure, but it appears to go past the mark: no.", NO, "invalid:hedged"),
    # "PROVIDED AN ANSWER means the model gave a definitive answer ... even if it expressed some
    # uncertainty along the way."
    ("Probably yes.", YES, "invalid:hedged"),
    ("It is hard to say exactly, but it likely stops short of the mark, so no.", NO, "invalid:hedged"),
    ("Perhaps the friction is higher than it looks; still, yes.", YES, "invalid:hedged"),
    ("Maybe it cannot be determined.", UNDET, "invalid:hedged"),
    # "But if the model says 'neither' or 'none' on a binary question, that is ABSTAINED."
    ("Neither.", UNDET, "invalid:no_option"),
    ("None.", UNDET, "invalid:no_option"),
    ("Neither yes nor no.", UNDET, "invalid:negated"),
    ("Neither, since the sheet hides the friction.", UNDET, "invalid:no_option"),
    ("Neither answer can be given from the evidence.", UNDET, "invalid:no_option"),
    # ABSTAINED: "gave an evasive non-answer such as 'neither', 'none of the above', 'I don't know',
    # 'cannot tell', or 'not applicable' when the question asks for a specific choice."
    ("None of the above.", UNDET, "invalid:no_option"),  # the example
    ("None of them.", UNDET, "invalid:no_option"),
    ("I don't know.", UNDET, UNDET),  # the example; a name of undetermined before too
    ("I cannot tell.", UNDET, UNDET),
    ("Can't tell from this sheet.", UNDET, UNDET),
    ("Not applicable.", UNDET, "invalid:no_option"),
    ("N/A", UNDET, "invalid:no_option"),
    ("n / a.", UNDET, "invalid:no_option"),
    # ABSTAINED: "refused to answer or said the question cannot be determined"
    ("I cannot answer this from the evidence given.", UNDET, "invalid:no_option"),
    ("The question is unanswerable.", UNDET, "invalid:no_option"),
    ("It cannot be determined.", UNDET, UNDET),
    # ABSTAINED: "indicated insufficient information or missing evidence"
    ("There is not enough information to say.", UNDET, UNDET),
    ("Insufficient evidence.", UNDET, UNDET),
    # ABSTAINED: "declined to commit to a specific answer"
    ("I can't say.", UNDET, UNDET),
    # Neither reading guesses: a bare hedge or an answer in other words names no option (the LLM
    # panel reads those), and "neither ... nor" over non-options is a negation of nothing.
    ("I'm not sure.", "invalid:no_option", "invalid:no_option"),
    ("Probably not.", "invalid:no_option", "invalid:no_option"),
    ("It appears to slide farther than the mark.", "invalid:no_option", "invalid:no_option"),
    ("Neither the mass nor the friction is known, so no.", NO, NO),
    ("None of the blocks slides that far, so no.", NO, NO),
    # The guards, under both readings: conflict, negation, alternatives stay invalid.
    ("yes, no wait, no", "invalid:conflicting_options", "invalid:conflicting_options"),
    ("Yes. Actually no.", "invalid:conflicting_options", "invalid:conflicting_options"),
    ("not yes", "invalid:negated", "invalid:negated"),
    ("The answer is not no.", "invalid:negated", "invalid:negated"),
    ("yes or no", "invalid:alternatives", "invalid:alternatives"),
    ("Probably yes or no.", "invalid:alternatives", "invalid:alternatives"),
    ("I'm not sure, maybe yes, maybe no.", "invalid:conflicting_options", "invalid:conflicting_options"),
    ("I think yes, or it stops just short.", "invalid:hedged", "invalid:hedged"),  # an alternative offered
    ("Neither yes nor no; it is yes.", "invalid:conflicting_options", "invalid:negated"),
    ("None, it stops short, so no.", "invalid:conflicting_options", NO),  # says both: never picked for
    ("I don't know, but yes.", "invalid:conflicting_options", "invalid:conflicting_options"),
    ("Yes.", YES, YES),
    ("The evidence does not settle the answer.", UNDET, UNDET),
]


@pytest.mark.parametrize("reply, seed002, strict", KNOWN)
def test_the_seed_rubric_and_the_strict_reading_on_known_replies(
        items: list[Item], reply: str, seed002: str, strict: str) -> None:
    for it in (x for x in items if x.request in ANSWERS):  # every answer item: each has its own letters
        assert _read(it, reply, "seed002") == seed002, (it.item_id, reply)
        assert _read(it, reply, "strict") == strict, (it.item_id, reply)


def test_the_table_differs_where_the_seed_says_it_should() -> None:
    """The rows where the two readings differ are exactly hedged commitments and evasive words."""
    differ = [(a, b) for _, a, b in KNOWN if a != b]
    assert len(KNOWN) == 45 and len(differ) == 20
    read = [(a, b) for a, b in differ if a.startswith("name:")]  # read by the seed's rubric alone
    assert len(read) == 18 and {b for _, b in read} == {"invalid:hedged", "invalid:no_option", "invalid:negated"}
    # the other two say an evasive word and an answer: a conflict, never picked for
    assert [a for a, _ in differ if not a.startswith("name:")] == ["invalid:conflicting_options"] * 2


def test_the_free_protocol_reads_with_the_seed_rubric_by_default(items: list[Item]) -> None:
    it = next(x for x in items if x.request == "answer_initial")
    assert FREE_RUBRIC == "seed002" and RUBRICS == ("seed002", "strict")
    assert reading_of(letters=False) == "seed002" and reading_of(letters=True) == "strict"
    hedged = "I'm not sure, but it appears to be yes."
    assert parse_reply(it, hedged, letters=False).answer == "yes"
    assert parse_reply(it, hedged).route == "invalid:hedged"  # the letter protocols: unchanged
    assert parse_reply(it, "None of the above.").route == "invalid:no_option"
    letter = next(k for k, v in it.options.items() if v == "yes")
    assert parse_reply(it, f"Probably {letter}", rubric="seed002").answer == "yes"  # chosen explicitly
    with pytest.raises(ValueError, match="unknown rubric 'seed000'; choose from seed002, strict"):
        parse_reply(it, "Yes.", letters=False, rubric="seed000")  # type: ignore[arg-type]


def test_final_answers_follow_the_rubric_too(items: list[Item]) -> None:
    it = next(x for x in items if x.request == "answer_after_test")
    for reply, seed002, strict in [
        ('{"reason": "the sheet hides it", "final_answer": "None of the above"}', "json:undetermined",
         "invalid:json_final_answer_unreadable"),
        ('{"reason": "r", "final_answer": "probably no"}', "json:no", "invalid:hedged"),
        ("Hard to tell from one sheet.\nANSWER: neither", "answer_line:undetermined",
         "invalid:answer_line_unreadable"),
        ("ANSWER: probably yes", "answer_line:yes", "invalid:hedged"),
    ]:
        for rubric, want in (("seed002", seed002), ("strict", strict)):
            p = parse_reply(it, reply, "json" if reply.startswith("{") else "standard", letters=False,
                            rubric=rubric)  # type: ignore[arg-type]
            assert (f"{p.route}:{p.answer}" if p.valid else p.route) == want, (rubric, reply)


def test_other_requests_have_no_abstention_to_map_evasive_words_to(items: list[Item]) -> None:
    """select (and the numeric requests) have no undetermined option: "none", "neither", "not
    applicable" read as under strict there (a negation cue or no option); the hedge rule changes."""
    select = next(x for x in items if x.request == "select" and x.system == "sliding")
    for reply in ("None of the above.", "Neither.", "Not applicable.", "Neither test, stop now."):
        assert (parse_reply(select, reply, letters=False, rubric="seed002")
                == parse_reply(select, reply, letters=False, rubric="strict")), reply
    assert parse_reply(select, "Neither.", letters=False).route == "invalid:no_option"
    assert parse_reply(select, "Neither test, stop now.", letters=False).action == "stop"  # "neither" ends at ","
    assert parse_reply(select, "Neither the mass test nor stop.", letters=False).route == "invalid:negated"
    assert parse_reply(select, "Probably the mass test.", letters=False).action == "test_mass"
    assert parse_reply(select, "Probably the mass test.", letters=False, rubric="strict").route == "invalid:hedged"


def test_a_free_run_pins_its_reading(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bench = tmp_path / "bench"
    generate(bench, GenerateConfig(families_per_system=1, subset_per_cell=0), progress=False)
    args = ["--model", "policy:exact-reader", "--bench", str(bench), "--requests", ",".join(ANSWERS),
            "--limit", "6"]
    for protocol in ("direct", "free"):
        assert main(["run", *args, "--out", str(tmp_path / protocol), "--protocol", protocol]) == 0
    meta = {p: json.loads((tmp_path / p / "run.json").read_text()) for p in ("direct", "free")}
    assert meta["free"]["rubric"] == "seed002" and "rubric" not in meta["direct"]  # letter runs: as before
    # a free run written before the rubric was pinned was read "strict": resuming it is refused
    old = {k: v for k, v in meta["free"].items() if k != "rubric"}
    (tmp_path / "free" / "run.json").write_text(json.dumps(old))
    capsys.readouterr()
    assert main(["run", *args, "--out", str(tmp_path / "free"), "--protocol", "free", "--limit", "9"]) == 2
    assert "rubric=None, this run has rubric='seed002'" in capsys.readouterr().err
