"""Seed 002's own prompts as opt-in regimes (appendix C, verbatim): the text is the seed's, it opens the turn,
nothing of evprobe's regime text is added, a seed002-json reply is read as JSON, and the main regimes are unchanged."""

from __future__ import annotations

import re
from pathlib import Path

from evprobe.bench.manifest import read_items
from evprobe.bench.parse import parse_reply
from evprobe.bench.protocols import (GUIDED, GUIDED_FREE, JSON_SUFFIX, REGIMES, SEED002_PROMPTS, build_prompt,
                                     is_json_regime, prompt_template_sha256)

SEED = Path("/work/shared/seeds/002_9a822cb4fffae59b.txt")  # where the seeds are kept beside this checkout
# Appendix C as the seed's text has it (its typeset quotes included), character for character
SEED_C = (
    "C.1 Standard System Prompt\n\nYou are a physical reasoning module deployed in a robotic system. You are analyzing a "
    "physics scenario from a sequence of video frames in chronological order. Your output directly informs real-time "
    "robot control decisions -- accuracy and efficiency are both critical.\nINSTRUCTIONS:\n- Focus on the physical "
    "events relevant to the question. Do NOT narrate every frame.\n- Do not repeat observations or think in circles."
    "\n- State your analysis briefly, then provide your final answer.\n\nC.2 Guided System Prompt\n\nIdentical to "
    "Standard, with the following appended:\n\nIf a question is unanswerable because there is insufficient evidence "
    "to definitively provide an answer, don\u2019t provide a guess and respond \u2018\u2018I don\u2019t know\u2019\u2019."
    "\n\nC.3 JSON System Prompt\n\nIdentical to Standard, with the following appended:\n\nYou MUST respond with a "
    "JSON object in this exact format:\n{\u2018\u2018reason\u2019\u2019: \u2018\u2018<your step-by-step analysis>"
    "\u2019\u2019, \u2018\u2018final_answer\u2019\u2019: \u2018\u2018<your answer>\u2019\u2019}\nDo NOT include "
    "any text before or after the JSON.\n\n"
)


def _ascii(text: str) -> str:
    """The extraction's typeset quotes as ASCII (the one departure the regimes' text takes)."""
    return text.replace("\u2018\u2018", '"').replace("\u2019\u2019", '"').replace("\u2019", "'").replace("\u2018", "'")


def test_the_prompts_are_the_seeds_appendix_c_word_for_word() -> None:
    if SEED.is_file():  # the copy above is the seed's own text
        assert SEED_C in SEED.read_text(encoding="utf-8")
    c = _ascii(SEED_C)
    standard = c.split("C.1 Standard System Prompt\n\n")[1].split("\n\nC.2")[0]
    appended = [part.split("\n\nC.3")[0].strip() for part in c.split("with the following appended:\n\n")[1:]]
    assert SEED002_PROMPTS["seed002-standard"] == standard
    assert SEED002_PROMPTS["seed002-guided"] == standard + "\n\n" + appended[0]
    assert SEED002_PROMPTS["seed002-json"] == standard + "\n\n" + appended[1]


def test_the_seed_text_opens_the_turn_and_nothing_of_ours_is_added(small_bench: Path) -> None:
    items = read_items(small_bench)
    select = next(it for it in items if it.request == "select")
    answer = next(it for it in items if it.request == "answer_initial")
    for regime, text in SEED002_PROMPTS.items():
        for item, protocol in ((select, "direct"), (answer, "direct"), (answer, "free"), (select, "brief")):
            prompt = build_prompt(item, protocol, regime)
            assert prompt.startswith(text + "\n\n")
            ours = [*GUIDED.values(), GUIDED_FREE, *(JSON_SUFFIX.format(slot=x) for x in ("<option letter>",
                                                                                   "<your answer in words>"))]
            assert not any(o in prompt for o in ours)
            body = build_prompt(item, protocol, "standard")  # the item and the protocol's text, as in standard
            if not (protocol == "brief" and regime == "seed002-json"):
                assert prompt == text + "\n\n" + body
    assert {r: build_prompt(select, "direct", r) for r in ("standard", "guided", "json")} == {
        "standard": select.prompt, "guided": select.prompt + "\n\n" + GUIDED["select"],
        "json": select.prompt + "\n\n" + JSON_SUFFIX.format(slot="<option letter>")}  # the main regimes as before
    hashes = {prompt_template_sha256("direct", r) for r in REGIMES}
    assert len(hashes) == len(REGIMES)  # each pins its own text in run.json


def test_a_seed002_json_reply_is_read_as_json(small_bench: Path) -> None:
    answer = next(it for it in read_items(small_bench) if it.request == "answer_initial")
    undetermined = next(k for k, v in answer.options.items() if v == "undetermined")
    reply = '{"reason": "The wall hides the ball.", "final_answer": "' + undetermined + '"}'
    got = parse_reply(answer, reply, "seed002-json")
    assert (got.valid, got.route, got.answer) == (True, "json", "undetermined")
    assert parse_reply(answer, reply, "seed002-standard").route != "json"  # only the json regimes read JSON
    assert [r for r in REGIMES if is_json_regime(r)] == ["json", "seed002-json"]
    assert re.search(r"seed002-guided", " ".join(REGIMES))
