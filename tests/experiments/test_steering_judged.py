"""Steered free-form replies judged by the LLM panel and read back (issue 55 item 3): `evprobe judge OUT` on a
gating / void-transfer `--readout free` output (bench.judge_steered), `evprobe gating --judged`, `evprobe
void-transfer --judged` and the library's write_replies / JudgedReplies, against scripted judges served over
real HTTP (tests/bench/scripted_judge.py), so every decision, and so every re-scored rate, is known."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from evprobe.bench.model_config import ModelConfig
from evprobe.experiments.cli import main
from evprobe.experiments.gating import gating, load_gating_config
from evprobe.experiments.steering_conventions import free_readout
from tests.bench.scripted_judge import ScriptedJudge, judge_with

pytestmark = pytest.mark.usefixtures("one_torch_thread")
LETTER = {"yes": "A", "no": "B", "undetermined": "C", None: "D"}
HEDGE, NONE = "I'm not sure, but it appears to be yes.", "None of the above."  # seed 002's D.2 examples


def _reply(prompt: str, opening: str) -> str:
    return prompt.split(opening, 1)[1].rsplit("\n>>>", 1)[0]


def fourway(says: dict[str, str] | None = None):
    """A four-way judge: the rule reader's reading as a letter, except the replies `says` overrides."""
    def reply(prompt: str) -> str:
        text = _reply(prompt, "The reply:\n<<<\n")
        if says and text in says:
            return says[text]
        return LETTER[RULE.get(text)]
    return reply


RULE: dict[str, str | None] = {}  # reply -> the rule reader's answer (filled from the rows judged)


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file() and "judged" not in p.relative_to(folder).parts}


def _judge(out: Path, scripts, name: str, *extra: str) -> tuple[int, list[ScriptedJudge]]:
    return judge_with(out, scripts, name, *extra)


@pytest.fixture(scope="module")
def gate(small_bench: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real gating --readout free run (tiny LLaVA, 3 held-out items, alpha 0 and +1); then, in a copy, the replies
    of two known conditions scripted (the rows' reading re-read by the rule reader, so the output is consistent):
    every standard.base and standard.dir_guided.+1 reply is "None of the above." (so each item repeats one prompt)
    and every standard.dir_standard.+1 reply the D.2 hedge."""
    root = tmp_path_factory.mktemp("gate_judged")
    cfg = load_gating_config("gating_tiny", {"bench": str(small_bench), "out": str(root / "run"), "limit": 3,
                                             "n_boot": 100, "readout": "free", "requests": ("answer_initial",),
                                             "alphas": (0.0, 1.0),
                                             "model": ModelConfig.of("tiny:llava", max_new_tokens_free=4)})
    gating(cfg, progress=False)
    scripted = root / "scripted"
    shutil.copytree(root / "run", scripted)
    from evprobe.bench.manifest import read_items

    items = {it.item_id: it for it in read_items(small_bench)}
    rows = [json.loads(x) for x in (scripted / "results.jsonl").read_text().splitlines()]
    for r in rows:
        text = {"standard.base": NONE, "standard.dir_guided.+1": NONE, "standard.dir_standard.+1": HEDGE}.get(
            r["condition"])
        if text is not None:
            r.update(free_readout(items[r["item_id"]], text, r["inference"]).to_json())
        RULE[r["reply"]] = r["answer"] if r["valid"] else None
    (scripted / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert gating(replace(cfg, out=str(scripted)), progress=False).computed == 0  # the report of the scripted rows
    return scripted


def _gating_json(folder: Path) -> dict:
    return json.loads((folder / "gating.json").read_text())


def test_a_panel_that_agrees_with_the_rule_gives_the_rule_readers_numbers(gate: Path, tmp_path: Path) -> None:
    out = tmp_path / "agree"
    shutil.copytree(gate, out, ignore=shutil.ignore_patterns("judged"))
    before = _tree(out)
    rc, judges = _judge(out, [fourway(), fourway(), fourway({NONE: "D"})], "agree")
    assert rc == 0 and _tree(out) == before  # the input folder is never written
    rows = [json.loads(x) for x in (out / "judged" / "judgments.jsonl").read_text().splitlines()]
    lines = (out / "results.jsonl").read_text().splitlines()
    assert [r["line"] for r in rows] == list(range(1, len(lines) + 1))  # one judgment per row, in order
    result = json.loads((out / "judged" / "judge.json").read_text())
    assert result["n_rows"] == len(lines) == 18 and result["n_prompts"] == 15  # a repeated reply is asked once
    assert 0 < len(judges[0].bodies) <= result["n_prompts"]  # (the backend asks identical texts once)
    assert main(["gating", "--judged", str(out / "judged")]) == 0
    rule, panel = _gating_json(gate), _gating_json(out / "judged")
    assert panel["rows"] == rule["rows"] and panel["tables"] == rule["tables"]  # one code path: every interval equal
    assert "read by the LLM panel (fourway: agree-0, agree-1, agree-2)" in panel["meta"]["readout"]
    assert "read by the LLM panel" in (out / "judged" / "gating.md").read_text()


def test_a_panel_that_reads_otherwise_moves_exactly_the_rows_it_reads_otherwise(gate: Path, tmp_path: Path) -> None:
    """Known answer: the panel reads "None of the above." as undecided (D: invalid, no abstention) where the rule
    reader abstains, and the hedge as an abstention (C) where the rule reads yes: standard.base's abstention on the
    controls goes from 100% to 0%, direction standard's +1 from 0% to 100%, every other cell as the rule read it."""
    out = tmp_path / "otherwise"
    shutil.copytree(gate, out, ignore=shutil.ignore_patterns("judged"))
    says = {NONE: "D", HEDGE: "C"}
    rc, _ = _judge(out, [fourway(says), fourway(says), fourway()], "other")
    assert rc == 0
    result = json.loads((out / "judged" / "judge.json").read_text())
    results = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    # undecided: the rows the rule reads invalid (the panel says D too) and every "None of the above."
    assert result["panel_undecided"] == sum(r["reply"] == NONE or not r["valid"] for r in results) >= 6
    assert main(["gating", "--judged", str(out / "judged")]) == 0
    rule, panel = _gating_json(gate), _gating_json(out / "judged")
    for a, b in zip(rule["rows"], panel["rows"]):
        key = (b["inference"], b["direction"], b["alpha"])
        if key[0] == "standard" and b["alpha"] == 0.0:
            assert (a["rate"]["value"], b["rate"]["value"]) == (1.0, 0.0) and b["rate"]["n"] == a["rate"]["n"]
        elif key == ("standard", "standard", 1.0):
            assert (a["rate"]["value"], b["rate"]["value"]) == (0.0, 1.0) and b["change"]["value"] == 1.0
        elif b["inference"] == "guided":
            assert a == b
    # the refusals, each one line before any work (no report written)
    judged = out / "judged"
    (judged / "gating.json").unlink()
    keep = (judged / "judgments.jsonl").read_text()
    (judged / "judgments.jsonl").write_text("".join(keep.splitlines(keepends=True)[:-1]))
    assert main(["gating", "--judged", str(judged)]) == 2 and not (judged / "gating.json").exists()
    (judged / "judgments.jsonl").write_text(keep)
    results = (out / "results.jsonl").read_text()
    (out / "results.jsonl").write_text(results.replace(json.dumps(HEDGE)[1:-1], "I am sure: yes.", 1))
    assert main(["gating", "--judged", str(judged)]) == 2 and not (judged / "gating.json").exists()
    (out / "results.jsonl").write_text(results)
    meta = (out / "meta.json").read_text()
    (out / "meta.json").write_text(meta.replace('"split_seed": 0', '"split_seed": 0 ', 1))
    assert main(["gating", "--judged", str(judged)]) == 2 and not (judged / "gating.json").exists()
    (out / "meta.json").write_text(meta)
    assert main(["gating", "--judged", str(judged), "--limit", "2"]) == 2
    assert main(["gating", "--judged", str(judged)]) == 0


def test_the_refusals_name_what_they_catch(gate: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "refuse"
    shutil.copytree(gate, out, ignore=shutil.ignore_patterns("judged"))
    assert _judge(out, [fourway(), fourway()], "ref")[0] == 0
    judged, capsys_err = out / "judged", []
    keep = {p: p.read_text() for p in (judged / "judgments.jsonl", out / "results.jsonl", out / "meta.json")}

    def refused(path: Path, text: str, want: str) -> None:
        path.write_text(text)
        capsys.readouterr()
        assert main(["gating", "--judged", str(judged)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and want in err, err
        capsys_err.append(err)
        path.write_text(keep[path])

    lines = keep[judged / "judgments.jsonl"].splitlines(keepends=True)
    refused(judged / "judgments.jsonl", "".join(lines[1:]), "missing rows")
    first = json.loads(keep[out / "results.jsonl"].splitlines()[0])
    refused(out / "results.jsonl", keep[out / "results.jsonl"].replace(json.dumps(first["reply"]), json.dumps(
        first["reply"] + " (edited)"), 1), "the reply differs from the one judged")
    refused(out / "meta.json", keep[out / "meta.json"] + " ", "another run")
    assert not (judged / "gating.json").exists()


def test_judging_resumes_and_does_not_depend_on_concurrency(gate: Path, tmp_path: Path) -> None:
    one, four = tmp_path / "one", tmp_path / "four"
    for out in (one, four):
        shutil.copytree(gate, out, ignore=shutil.ignore_patterns("judged"))
    rc, judges = _judge(one, [fourway(), fourway()], "res", "--concurrency", "1")
    assert rc == 0
    asked = len(judges[0].bodies)
    first = (one / "judged" / "judgments.jsonl").read_bytes()
    rc, again = _judge(one, [fourway(), fourway()], "res")  # the request cache answers every prompt
    assert rc == 0 and len(again[0].bodies) == 0 and (one / "judged" / "judgments.jsonl").read_bytes() == first
    assert _judge(four, [fourway(), fourway()], "res", "--concurrency", "4")[0] == 0
    assert (four / "judged" / "judgments.jsonl").read_bytes() == first and asked > 0


def test_seed_002s_judges_read_the_hedge_as_an_answer_and_none_of_the_above_as_abstaining(gate: Path,
                                                                                          tmp_path: Path) -> None:
    from evprobe.bench import seed002_judges as sj

    def judge(prompt: str) -> str:
        text = _reply(prompt, "Model response:\n<<<\n")
        if prompt.startswith(sj.ABSTENTION_PROMPT):  # the seed's rubric: none of the above abstains, a hedge answers
            return json.dumps({"abstained": text == NONE or RULE.get(text) == "undetermined", "confidence": "high",
                               "reasoning": "r"})
        said = "yes" if text == HEDGE else (RULE.get(text) or "unclear")
        return json.dumps({"correct": False, "extracted_value": said, "reasoning": "r"})

    out = tmp_path / "seed002"
    shutil.copytree(gate, out, ignore=shutil.ignore_patterns("judged"))
    rc, _ = _judge(out, [judge, judge, judge], "s2", "--panel", "seed002")
    assert rc == 0
    rows = [json.loads(x) for x in (out / "judged" / "judgments.jsonl").read_text().splitlines()]
    results = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    for j, r in zip(rows, results):
        if r["reply"] == NONE:
            assert j["abstain"] and j["panel"] == "undetermined"
        if r["reply"] == HEDGE:
            assert not j["abstain"] and j["panel"] in ("yes", "no")
    assert json.loads((out / "judged" / "judge.json").read_text())["panel"] == "seed002"
    assert main(["gating", "--judged", str(out / "judged")]) == 0
    assert "(seed002:" in _gating_json(out / "judged")["meta"]["readout"]


def test_void_transfer_rescored_by_the_panel(small_void_bench: Path, tmp_path: Path, capsys) -> None:
    """A real void-transfer --readout free run judged by a panel that reads as the rule reader does: the re-score
    (steering again, each reply read by its decision) gives every path's numbers, nulls and intervals exactly; a panel
    that abstains on every reply leaves no abstention change and no invalid change anywhere."""
    out = tmp_path / "vt"
    flags = ["--model", "organism", "--n-random", "3", "--n-relabel", "2", "--alphas=-1,1", "--layers", "2",
             "--n-boot", "100", "--readout", "free"]
    assert main(["void-transfer", "--config", "void_transfer_tiny", "--bench", str(small_void_bench), "--out",
                 str(out), "--quiet", *flags]) == 0
    rows = [json.loads(x) for x in (out / "replies.jsonl").read_text().splitlines()]
    RULE.update({r["reply"]: r["answer"] if r["valid"] else None for r in rows})
    before = _tree(out)
    assert _judge(out, [fourway(), fourway()], "vt")[0] == 0
    assert main(["void-transfer", "--judged", str(out / "judged"), "--quiet"]) == 0 and _tree(out) == before
    rule, panel = (json.loads((d / "void_transfer.json").read_text()) for d in (out, out / "judged"))
    assert panel["paths"] == rule["paths"] and panel["reader"].startswith("the LLM panel (fourway: vt-0, vt-1)")
    assert "read by the LLM panel" in (out / "judged" / "void_transfer.md").read_text()
    shutil.rmtree(out / "judged")
    assert _judge(out, [lambda p: "C", lambda p: "C"], "all")[0] == 0
    assert main(["void-transfer", "--judged", str(out / "judged"), "--quiet"]) == 0
    for p in json.loads((out / "judged" / "void_transfer.json").read_text())["paths"]:
        for effect in (p["suppress_on_voids"], p["induce_on_twins"]):
            assert effect["abstention_change"]["value"] == 0.0 and effect["invalid_change"]["value"] == 0.0
    capsys.readouterr()
    assert main(["void-transfer", "--judged", str(out / "judged"), "--layers", "1"]) == 2
    assert "give it alone" in capsys.readouterr().err


def test_the_librarys_replies_judged_and_read_back(tmp_path: Path) -> None:
    """Own data: write_replies, evprobe judge, JudgedReplies.readout into the same steering_dose_response call. A
    panel reading as the caller's reader did gives the same effects, nulls and cross-fit; a reply never judged is
    refused in one line naming its item."""
    import numpy as np

    import evprobe
    from evprobe.analysis.judged_replies import JudgedReplies, write_replies
    from evprobe.core.errors import InputError

    prompts = ["Answer A or B.", "Pick one: A or B?", "Is it A or B? Say which.", "Say A or B."]
    ids, families = [f"q{i}" for i in range(4)], ["a", "a", "b", "c"]

    def reader(i: int, reply: str) -> tuple[float, float]:
        return float("e" in reply.lower()), 0.0

    handle = evprobe.tiny("llava")
    v = np.random.default_rng(3).standard_normal(handle.d_model)
    kwargs = dict(direction=v / np.linalg.norm(v), layer=1, families=families, alphas=(0.0, 6.0), units="raw",
                  n_random=2, n_relabel=0, n_boot=50, batch_size=4)
    first = evprobe.steering_dose_response(handle, prompts, None, readout=evprobe.GeneratedReadout(
        ("abstained", "invalid"), read=reader, max_new_tokens=4, rates=("abstained", "invalid")), **kwargs)
    folder = write_replies(tmp_path / "own", first, item_ids=ids, questions=prompts, max_new_tokens=4)
    said = {r.reply: "C" if "e" in r.reply.lower() else "A" for r in first.replies.itertuples()}
    judge = lambda p: said[_reply(p, "The reply:\n<<<\n")]  # noqa: E731
    assert _judge(folder, [judge, judge], "own")[0] == 0
    judged = JudgedReplies.read(folder)
    again = evprobe.steering_dose_response(handle, prompts, None, readout=judged.readout(ids, 4), **kwargs)
    for table in ("effects", "null", "crossfit"):
        assert getattr(again, table).equals(getattr(first, table)), table
    with pytest.raises(InputError, match="reply 'Something else.' of item 'q1' was never judged"):
        judged.readout(ids, 4).read(1, "Something else.")
    with pytest.raises(InputError, match="exists"):
        write_replies(folder, first, item_ids=ids, questions=prompts)
