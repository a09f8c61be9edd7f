"""The LLM-judge panel (bench.judges; seed 002, appendix D): Fleiss' kappa on the published example,
how judge replies and majorities are read, and `evprobe judge` end to end against three server
processes on 127.0.0.1 whose replies are planned per request, so every decision is known."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from evprobe.bench.generate import GenerateConfig, generate
from evprobe.bench.judges import JUDGE_PROMPT, Judge, fleiss_kappa, judge_decision, panel_decision
from evprobe.bench.manifest import read_items
from evprobe.bench.protocols import build_prompt
from evprobe.bench.records import load_records
from evprobe.core.errors import InputError
from evprobe.experiments.cli import main
from tests.bench.fault_server import digest
from tests.bench.test_backend_openai import FaultServer, _stop

# Fleiss (1971) as Wikipedia's "Fleiss' kappa" article works it: 10 subjects, 14 raters, 5 categories.
FLEISS_EXAMPLE = [[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
                  [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]]
LETTER = {"yes": "A", "no": "B", "undetermined": "C"}


def test_fleiss_kappa_is_the_published_value() -> None:
    assert fleiss_kappa(np.array(FLEISS_EXAMPLE)) == pytest.approx(0.20993, abs=5e-5)
    assert fleiss_kappa(np.array([[3, 0], [0, 3], [3, 0]])) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="same number"):
        fleiss_kappa(np.array([[2, 0], [1, 2]]))


@pytest.mark.parametrize("reply, decision", [("A", "yes"), ("(C)", "undetermined"), ("b.", "no"),
                                             ("D. None of these clearly.", "unclear"), ("D. It hedges.", None),
                                             ("The reply says yes", None), ("E", None), ("", None),
                                             ("A or B", None), ("A is wrong; the answer is C", None)])
def test_a_judge_reply_is_one_letter_or_no_decision(reply: str, decision: str | None) -> None:
    assert judge_decision(reply) == decision


def test_the_panel_decides_by_strict_majority_only() -> None:
    assert panel_decision(["yes", "yes", "no"]) == "yes"
    assert panel_decision(["yes", "no", "undetermined"]) is None  # split
    assert panel_decision(["unclear", "unclear", "yes"]) is None  # a majority for D decides no answer
    assert panel_decision(["yes", None, None]) is None  # one decision of three is no majority
    with pytest.raises(InputError, match="MODEL@URL"):
        Judge.parse("http://127.0.0.1:8000/v1")


@pytest.fixture(scope="module")
def free_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The exact reader's free-form replies ("Yes.", "No.", "The evidence does not settle the answer.")."""
    root = tmp_path_factory.mktemp("judged")
    generate(root / "bench", GenerateConfig(families_per_system=1, subset_per_cell=0), progress=False)
    assert main(["run", "--model", "policy:exact-reader", "--bench", str(root / "bench"), "--out", str(root / "run"),
                 "--protocol", "free", "--requests", "answer_initial,answer_after_test", "--quiet"]) == 0
    return root / "run"


def _planned(run: Path, decide) -> dict[str, str]:
    """digest of each judge request -> the planned judge reply (`decide(item, record)` gives its letter)."""
    items = {it.item_id: it for it in read_items(run.parent / "bench")}
    out = {}
    for key, rec in load_records(run / "records.jsonl").items():
        text = JUDGE_PROMPT.format(question=build_prompt(items[key], "free"), reply=rec.reply)
        out[digest(text, [])] = decide(items[key], rec)
    return out


def _judge(run: Path, tmp_path: Path, plans: list[dict[str, str]], default: str = "D", name: str = "judge") -> int:
    """`evprobe judge RUN` with one server process per plan (its planned replies; `default` to the rest).
    Judges are named `name-k`: the request cache (RUN/judged/http-cache) keys on the served model, so
    a panel of other behaviour needs other names."""
    servers = [FaultServer(tmp_path / f"judge{k}", {"models": [f"{name}-{k}"], "replies": plan, "reply": default})
               for k, plan in enumerate(plans)]
    flags = [x for k, s in enumerate(servers) for x in ("--judge", f"{name}-{k}@{s.url}")]
    try:
        return main(["judge", str(run), "--n-boot", "200", *flags])
    finally:
        for s in servers:
            _stop(s.proc)


def test_a_panel_that_reads_the_replies_agrees_with_the_rule(free_run: Path, tmp_path: Path) -> None:
    right = _planned(free_run, lambda it, rec: LETTER[rec.answer])
    assert _judge(free_run, tmp_path, [right, right, {}]) == 0  # the third judge says D to everything
    out = free_run / "judged"
    rows = [json.loads(x) for x in (out / "judgments.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * 3 * 9 and all(r["panel"] == r["rule"] for r in rows)  # 2 of 3: the majority holds
    assert all(r["judges"]["judge-2"] == "unclear" for r in rows)
    result = json.loads((out / "judge.json").read_text())
    table = np.array([[sum(v == c for v in r["judges"].values()) for c in ("yes", "no", "undetermined", "unclear")]
                      for r in rows])
    assert result["fleiss_kappa"]["value"] == pytest.approx(fleiss_kappa(table))
    lo, hi = result["fleiss_kappa"]["ci"]
    # every family holds the same mix of replies here, so every resample gives this kappa: no interval, and why
    assert (lo is None and result["fleiss_kappa"]["reason"] == "the same on every family resample") or lo < hi
    assert result["rule_vs_panel"]["value"] == 1.0 and result["panel_undecided"] == 0
    assert result["scores"]["panel"] == result["scores"]["rule"]  # the same decisions, the same scores
    assert result["pairwise_agreement"]["judge-0 / judge-1"]["value"] == 1.0
    assert result["pairwise_agreement"]["judge-0 / judge-2"]["value"] == 0.0
    with open(out / "audit.csv") as fh:
        audit = list(csv.DictReader(fh))
    strata = {a["stratum"] for a in audit}
    assert strata == {f"{r['request']}|{r['rule']}|{r['panel']}" for r in rows}  # every cell sampled
    assert all(sum(a["stratum"] == s for a in audit) <= 5 for s in strata) and all(a["human"] == "" for a in audit)
    assert "Fleiss' kappa" in (out / "judge.md").read_text()


def test_a_split_panel_leaves_replies_undecided_and_they_stay_in_the_denominators(free_run: Path,
                                                                                   tmp_path: Path) -> None:
    right = _planned(free_run, lambda it, rec: LETTER[rec.answer])
    says_no = _planned(free_run, lambda it, rec: "B")
    assert _judge(free_run, tmp_path, [right, says_no, {}], name="split") == 0
    out = free_run / "judged"
    result = json.loads((out / "judge.json").read_text())
    rows = [json.loads(x) for x in (out / "judgments.jsonl").read_text().splitlines()]
    undecided = [r for r in rows if r["rule"] != "no"]  # yes / undetermined / unclear / D: no majority
    assert result["panel_undecided"] == len(undecided) > 0
    judged = load_records(out / "records.jsonl")
    assert all(not judged[r["item_id"]].valid for r in undecided)
    rule, panel = result["scores"]["rule"], result["scores"]["panel"]
    assert panel["pecs_abs_rec"]["n"] == rule["pecs_abs_rec"]["n"]  # invalid, not dropped
    assert panel["pecs_abs_rec"]["value"] == 0.0 < rule["pecs_abs_rec"]["value"]


def test_a_letter_run_and_too_few_judges_are_refused_in_one_line(free_run: Path, tmp_path: Path, capsys) -> None:
    assert main(["judge", str(free_run), "--judge", "a@http://127.0.0.1:1/v1"]) == 2
    assert "two or more distinct judges" in capsys.readouterr().err
    direct = tmp_path / "direct"
    assert main(["run", "--model", "policy:exact-reader", "--bench", str(free_run.parent / "bench"), "--out",
                 str(direct), "--requests", "answer_initial", "--quiet"]) == 0
    assert main(["judge", str(direct), "--judge", "a@http://127.0.0.1:1/v1", "--judge", "b@http://127.0.0.1:1/v1"]) == 2
    assert "is a 'direct' run" in capsys.readouterr().err


def test_a_real_served_model_can_sit_on_the_panel(free_run: Path, tiny_text_folder: Path, tmp_path: Path) -> None:
    """A `transformers serve` process (the tiny random text model) as the third judge: its replies are
    no letters, so it decides nothing, and that is what judge.json says; the two others still decide."""
    from tests.bench.test_backend_openai import SERVE_START_S, _free_port, _needs_transformers_serve, serving

    right = _planned(free_run, lambda it, rec: LETTER[rec.answer])
    servers = [FaultServer(tmp_path / f"j{k}", {"models": [f"real-{k}"], "replies": right}) for k in range(2)]
    port = _free_port()
    command = [*_needs_transformers_serve(), "serve", str(tiny_text_folder), "--host", "127.0.0.1", "--port",
               str(port), "--device", "cpu"]
    import os

    try:
        with serving(command, port, tmp_path / "serve.log", SERVE_START_S, {**os.environ, "HF_HUB_OFFLINE": "1"}) as url:
            flags = [x for k, s in enumerate(servers) for x in ("--judge", f"real-{k}@{s.url}")]
            assert main(["judge", str(free_run), "--n-boot", "200", *flags, "--judge",
                         f"{tiny_text_folder}@{url}"]) == 0
    finally:
        for s in servers:
            _stop(s.proc)
    result = json.loads((free_run / "judged" / "judge.json").read_text())
    assert result["no_decision"][str(tiny_text_folder)] == result["n_replies"] == 108
    assert result["n_decided_by_all"] == 0 and result["fleiss_kappa"]["reason"] == "no reply decided by every judge"
    assert result["panel_undecided"] == 0 and result["rule_vs_panel"]["value"] == 1.0  # 2 of 3 agree


def test_a_reply_the_backend_never_gave_stays_invalid_in_both_scorings(free_run: Path, tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(free_run, run, ignore=shutil.ignore_patterns("judged"))
    rows = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
    lost = next(r for r in rows if r["request"] == "answer_initial")
    lost.update(reply="", valid=False, route="invalid:backend", choice=None, answer=None, error="HTTP 500: gave up")
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    right = _planned(free_run, lambda it, rec: LETTER[rec.answer])
    assert _judge(run, tmp_path, [right, right], name="lost") == 0
    result = json.loads((run / "judged" / "judge.json").read_text())
    assert result["n_replies"] == len(rows) - 1  # nothing to judge in it
    judged = load_records(run / "judged" / "records.jsonl")
    assert len(judged) == len(rows) and not judged[lost["item_id"]].valid
    for name in ("pecs_acc", "pecs_abs_rec", "pecs_false_abs"):  # the same denominators, the lost reply in them
        assert result["scores"]["panel"][name]["n"] == result["scores"]["rule"][name]["n"]
