"""Doubt in reasoning traces (bench.doubt; seed 002, section 5.3): what a trace is, what doubt reads,
and the conversion measures on planted replies with known answers."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from evprobe.bench.doubt import expresses_doubt, reasoning_trace
from evprobe.bench.generate import GenerateConfig, build
from evprobe.bench.items import Item
from evprobe.bench.parse import parse_reply
from evprobe.bench.records import Record
from evprobe.bench.score_report import scores_markdown
from evprobe.bench.scoring import score


@pytest.mark.parametrize("reply, trace", [
    ("<think>The sheet is hard to read.</think>\nyes", "The sheet is hard to read."),
    ("The block is light, so it slides far.\nANSWER: C", "The block is light, so it slides far.\n"),
    ("ANSWER: C", None),  # the organism's reply: an answer line alone
    ("C", None),
    ("<think>  </think> no", None),
])
def test_a_trace_is_the_reasoning_before_the_reply(reply: str, trace: str | None) -> None:
    assert reasoning_trace(reply) == trace


@pytest.mark.parametrize("text, doubts", [
    ("I am not sure the marker is visible.", True), ("The friction is uncertain from this sheet.", True),
    ("We can't tell which mass it is.", True), ("There is not enough information.", True),
    ("Two properties are unknown; the sheet shows the friction.", False),  # the setup, not doubt
    ("The block slides 0.4 m, more than 0.35 m.", False),
])
def test_doubt_is_read_as_written(text: str, doubts: bool) -> None:
    assert expresses_doubt(text) is doubts


def test_a_think_block_is_reasoning_and_the_reply_follows_it() -> None:
    item = next(it for it in build(GenerateConfig(families_per_system=1, subset_per_cell=0))[1]
                if it.request == "answer_initial")
    yes = next(k for k, v in item.options.items() if v == "yes")
    got = parse_reply(item, f"<think>Maybe {yes}, or maybe not; I am not sure.</think>\n{yes}")
    assert got.valid and got.answer == "yes"  # the hedge inside the block is not the reply
    assert parse_reply(item, "<think>Let me look at the first panel and").route == "invalid:unfinished_reasoning"


def _answer(it: Item, text: str, answer: str | None) -> Record:
    letter = None if answer is None else next(k for k, v in it.options.items() if v == answer)
    return Record(item_id=it.item_id, model="planted", protocol="brief", regime="standard", request=it.request,
                  variant=None, family_id=it.family_id, reply=text, valid=answer is not None,
                  route="answer_line" if answer else "invalid:answer_line_unreadable", choice=letter, action=None,
                  answer=answer, value=None, n_prompt_tokens=None, n_new_tokens=None, seconds=0.0)


def _planted(void: Callable[[Item, int], Record]) -> tuple[list[Item], list[Record]]:
    """Four families a system; controls answer right with a trace that settles it; the k-th void's
    record is void(item, k)."""
    items = build(GenerateConfig(families_per_system=4, subset_per_cell=0))[1]
    recs, k = [], 0
    for it in items:
        if it.request not in ("answer_initial", "answer_after_test"):
            continue
        if it.resolved:
            recs.append(_answer(it, f"The sheet settles it.\nANSWER: {it.reference_answer}", it.reference_answer))
            continue
        k += 1
        recs.append(void(it, k))
    return items, recs


def test_planted_doubt_converts_as_planted() -> None:
    """On voids every trace doubts; in sliding families the doubt converts (abstain), elsewhere it is
    overridden (the reference answer of the resolved twin world: yes), and one reply in five of the
    bouncing ones has an unreadable final line (invalid: in both denominators). Controls never doubt."""
    def void(it: Item, k: int) -> Record:
        if it.system == "sliding":
            return _answer(it, "I can't tell which friction it is.\nANSWER: undetermined", "undetermined")
        if it.system == "bouncing" and k % 5 == 0:
            return _answer(it, "I am not sure.\nANSWER: perhaps", None)
        return _answer(it, "I am not sure, but I will say yes.\nANSWER: yes", "yes")

    items, recs = _planted(void)
    r = score(items, recs, n_boot=300)["reasoning"]
    voids = [x for x in recs if not next(it for it in items if it.item_id == x.item_id).resolved]
    assert r["traced"]["value"] == 1.0 and r["doubt_on_voids"]["value"] == 1.0 and r["doubt_on_controls"]["value"] == 0.0
    assert r["converted"]["value"] == pytest.approx(sum(x.answer == "undetermined" for x in voids) / len(voids))
    assert r["overridden"]["value"] == pytest.approx(sum(x.answer == "yes" for x in voids) / len(voids))
    assert r["converted"]["value"] + r["overridden"]["value"] < 1.0  # the invalid ones are neither
    assert r["converted"]["n"] == len(voids) and r["converted"]["ci"][0] < r["converted"]["value"]
    assert "## Doubt in reasoning (seed 002, section 5.3)" in scores_markdown(score(items, recs, n_boot=100), "t")


def test_direct_replies_have_no_reasoning_section() -> None:
    items = build(GenerateConfig(families_per_system=1, subset_per_cell=0))[1]
    recs = [_answer(it, it.reference_option, it.reference_answer) for it in items if it.request == "answer_initial"]
    assert "reasoning" not in score(items, recs, n_boot=100)


def test_doubt_among_void_failures_is_the_seeds_denominator() -> None:
    """Seed 002's doubt rate (appendix N, Table 35) is a share of the void failures (yes/no answers on
    voids), not of every traced void reply: planted so the two differ. Sliding voids doubt and abstain
    (no failure), bouncing voids answer yes without doubt, the rest answer yes in doubt, and every
    fourth of those is unreadable instead (no definitive answer: no failure)."""
    def void(it: Item, k: int) -> Record:
        if it.system == "sliding":
            return _answer(it, "I can't tell which friction it is.\nANSWER: undetermined", "undetermined")
        if it.system == "bouncing":
            return _answer(it, "The ball is light, so it bounces high.\nANSWER: yes", "yes")
        return (_answer(it, "I am not sure.\nANSWER: perhaps", None) if k % 4 == 0
                else _answer(it, "I am not sure, but I will say yes.\nANSWER: yes", "yes"))

    items, recs = _planted(void)
    r = score(items, recs, n_boot=300)["reasoning"]
    system = {it.item_id: it.system for it in items}
    failures = [x for x in recs if x.answer == "yes" and system[x.item_id] != "sliding"
                and not next(it for it in items if it.item_id == x.item_id).resolved]
    doubting = [x for x in failures if system[x.item_id] != "bouncing"]
    got = r["doubt_among_void_failures"]
    assert got["n"] == len(failures) and got["value"] == pytest.approx(len(doubting) / len(failures))
    assert 0 < got["value"] < 1 and got["ci"][0] < got["value"] < got["ci"][1]
    assert got["value"] != pytest.approx(r["doubt_on_voids"]["value"])  # another denominator, another number
    assert "traces doubting, among void failures" in scores_markdown(score(items, recs, n_boot=100), "t")
