"""Reply budgets (bench.budgets, issue 55 item 1): every protocol's limit from the model config, a flag
and the seeds' presets, pinned in run.json; a reply its budget cut off recorded and counted as such;
a reasoning block's own budget (hooks.thinking_budget)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evprobe.bench.backends.base import Reply
from evprobe.bench.budgets import CUT_OFF_ROUTE, PRESETS, reply_budget, thinking_budget
from evprobe.bench.model_config import ModelConfig
from evprobe.bench.runner import RunConfig, _record, run
from evprobe.core.errors import InputError
from evprobe.experiments.cli import main

TINY = ModelConfig.of("tiny:llava")


def test_the_defaults_are_what_every_run_had_and_the_model_config_sets_each_protocol() -> None:
    got = {(p, r): reply_budget(TINY, p, r) for p in ("direct", "brief", "free") for r in ("standard", "json")}
    assert got == {("direct", "standard"): 16, ("direct", "json"): 256, ("brief", "standard"): 256,
                   ("brief", "json"): 256, ("free", "standard"): 96, ("free", "json"): 256}
    own = ModelConfig.of("tiny:llava", max_new_tokens_direct=4, max_new_tokens_free=500, max_new_tokens_json=300)
    assert reply_budget(own, "direct", "standard") == 4
    assert reply_budget(own, "direct", "json") == 300  # the json floor is the config's too
    assert reply_budget(own, "free", "json") == 500
    with pytest.raises(ValueError, match="key 'max_new_tokens_free' must be a positive integer"):
        ModelConfig.of("tiny:llava", max_new_tokens_free=0)
    with pytest.raises(ValueError, match="key 'max_thinking_tokens' must be a positive integer or null"):
        ModelConfig.of("tiny:llava", max_thinking_tokens=0)


def test_the_flag_and_the_seeds_presets_override_the_config_and_bad_ones_are_one_line() -> None:
    assert reply_budget(TINY, "direct", "json", max_new_tokens=5) == 5  # as given, no floor
    assert reply_budget(TINY, "brief", "standard", preset="seed002-api") == 8000
    assert reply_budget(TINY, "free", "standard", preset="seed002-local") == 512
    assert reply_budget(TINY, "free", "standard", preset="seed002-qwen8b") == 1024
    assert [reply_budget(TINY, p, "standard", preset="seed000") for p in ("direct", "brief")] == [16, 256]
    for preset in PRESETS.values():  # each says where its seed states it
        assert preset.source.startswith("seed 00")
    cases = [(dict(preset="seed000"), "free", "--budget seed000 sets the direct, brief protocols' limits"),
             (dict(preset="seed002-apj"), "direct", "unknown --budget 'seed002-apj'; did you mean seed002-api, "),
             (dict(preset="seed000", max_new_tokens=8), "direct", "both set the reply budget; give one"),
             (dict(max_new_tokens=0), "direct", "--max-new-tokens must be a positive integer, got 0")]
    for settings, protocol, words in cases:
        with pytest.raises(InputError, match=words.replace("?", r"\?")) as err:
            reply_budget(TINY, protocol, "standard", **settings)
        assert "\n" not in str(err.value)


def test_a_thinking_budget_comes_from_the_flag_or_the_config_and_never_with_thinking_off() -> None:
    assert thinking_budget(TINY, None) is None
    assert thinking_budget(TINY, 64) == 64
    assert thinking_budget(ModelConfig.of("tiny:llava", max_thinking_tokens=32), None) == 32
    assert thinking_budget(ModelConfig.of("tiny:llava", max_thinking_tokens=32), 8) == 8
    with pytest.raises(InputError, match="--thinking-budget must be a positive integer, got -1"):
        thinking_budget(TINY, -1)
    with pytest.raises(InputError, match="with thinking off: the model writes no reasoning block"):
        thinking_budget(ModelConfig.of("tiny:llava", thinking="off"), 16)


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


def test_a_run_pins_its_budget_records_cut_off_replies_and_counts_them(tiny_text_folder: Path, small_bench: Path,
                                                                      tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    base = ["run", "--model", str(tiny_text_folder), "--bench", str(small_bench), "--requests", "both_given",
            "--limit", "4", "--quiet", "--out", str(tmp_path / "run")]
    assert main([*base, "--max-new-tokens", "3"]) == 0
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["max_new_tokens"] == 3 and "thinking_budget" not in meta
    rows = _rows(tmp_path / "run")
    assert len(rows) == 4 and all(r["n_new_tokens"] <= 3 for r in rows)
    cut = [r for r in rows if r.get("cut_off")]
    assert cut and all(r["n_new_tokens"] == 3 for r in cut)  # the random model never ends: its budget cuts it
    assert all(r["route"] == CUT_OFF_ROUTE for r in cut if not r["valid"])  # its own route, not no_option & co
    assert all("cut_off" not in r for r in rows if r not in cut)
    capsys.readouterr()
    assert main([*base, "--max-new-tokens", "4"]) == 2  # another budget into the same folder: one line
    err = capsys.readouterr().err
    assert "max_new_tokens" in err and err.count("\n") == 1
    assert main(["score", str(tmp_path / "run"), "--n-boot", "200", "--quiet"]) == 0
    scores = json.loads((tmp_path / "run" / "scores.json").read_text())
    assert scores["budget"]["cut_off"]["value"] == pytest.approx(len(cut) / 4)
    assert scores["budget"]["cut_off_invalid"]["n"] == 4  # every scored reply in the denominator
    assert "## Reply budget" in (tmp_path / "run" / "scores.md").read_text()


def test_a_run_without_a_cut_off_reply_has_no_budget_section_and_the_model_config_is_honoured(
        small_bench: Path, tmp_path: Path) -> None:
    config = RunConfig(model="policy:reference", bench=str(small_bench), out=str(tmp_path / "p"), limit=20)
    run(config, progress=False)
    assert json.loads((tmp_path / "p" / "run.json").read_text())["max_new_tokens"] == 16
    assert main(["score", str(tmp_path / "p"), "--n-boot", "100", "--quiet"]) == 0
    assert "budget" not in json.loads((tmp_path / "p" / "scores.json").read_text())
    own = RunConfig(model=ModelConfig.of("policy:reference", max_new_tokens_direct=4), bench=str(small_bench),
                    out=str(tmp_path / "q"), limit=20)
    run(own, progress=False)
    assert json.loads((tmp_path / "q" / "run.json").read_text())["max_new_tokens"] == 4
    preset = RunConfig(model="policy:reference", bench=str(small_bench), out=str(tmp_path / "r"), limit=20,
                       protocol="brief", budget="seed002-api")
    run(preset, progress=False)
    assert json.loads((tmp_path / "r" / "run.json").read_text())["max_new_tokens"] == 8000


@pytest.mark.parametrize(("settings", "words"), [
    (dict(model="policy:reference", thinking_budget=32), "is a scripted policy; it writes no reasoning"),
    (dict(backend="openai", base_url="http://127.0.0.1:1/v1", thinking_budget=32),
     "is honoured by the hf backend, not openai"),
    (dict(backend="vllm", thinking_budget=32), "is honoured by the hf backend, not vllm"),
    (dict(rubric="strict"), "--rubric reads the free protocol's replies; protocol direct's are read strictly"),
    (dict(budget="seed000", protocol="free", requests=("answer_initial",)), "--budget seed000 sets the direct"),
])
def test_settings_a_run_cannot_honour_are_refused_in_one_line_before_any_work(small_bench: Path, tmp_path: Path,
                                                                            settings: dict, words: str) -> None:
    from evprobe.bench.runner import RunJob

    config = RunConfig.of(**{"model": "tiny:llava", "bench": str(small_bench), "out": str(tmp_path / "x"), **settings})
    with pytest.raises(InputError, match=words) as err:
        RunJob(config)
    assert "\n" not in str(err.value) and not (tmp_path / "x").exists()


def test_the_rubric_flag_reaches_the_reader_of_a_free_run(small_bench: Path) -> None:
    from evprobe.bench.manifest import read_items

    item = next(it for it in read_items(small_bench) if it.request == "answer_initial")
    hedge = Reply("I'm not sure, but it appears to be yes.")
    routes = {}
    for rubric in (None, "seed002", "strict"):
        config = RunConfig(model="tiny:llava", bench=str(small_bench), out="unused", protocol="free", rubric=rubric)
        record = _record(config, item, hedge, 0.0)
        routes[rubric] = (record.valid, record.route, record.answer)
    assert routes[None] == routes["seed002"] == (True, "name", "yes")
    assert routes["strict"] == (False, "invalid:hedged", None)


def test_a_server_that_stops_at_max_tokens_is_a_cut_off_reply() -> None:
    from evprobe.bench.backends.openai_answer import AnswerBounds, read_answer

    bounds = AnswerBounds.of(8, 100, 0)
    answer = lambda reason: {"choices": [{"message": {"content": "The ball is"}, "finish_reason": reason}],
                             "usage": {"prompt_tokens": 10, "completion_tokens": 8}}
    assert read_answer(answer("length"), None, bounds).cut_off is True
    assert read_answer(answer("stop"), None, bounds).cut_off is False


def test_a_budget_beyond_the_models_context_is_refused_before_any_reply(small_bench: Path, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    """A hostile budget (10^8 tokens, or a thinking budget that makes it so) cannot allocate or run: the hf backend
    refuses a prompt plus its whole budget beyond the model's context, in one line, before any record."""
    base = ["run", "--model", "tiny:llava", "--bench", str(small_bench), "--requests", "both_given", "--limit", "2",
            "--quiet"]
    for flags in (["--max-new-tokens", "100000000"], ["--thinking-budget", "100000000"]):
        out = tmp_path / flags[0].strip("-")
        assert main([*base, "--out", str(out), *flags]) == 2
        err = capsys.readouterr().err
        assert "beyond the 4096-token context" in err and "lower the budget" in err and err.count("\n") == 1
        assert not (out / "records.jsonl").exists() or not (out / "records.jsonl").read_text()
