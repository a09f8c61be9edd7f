"""The backend seam of `evprobe run`: one registry, settings refused where they do not belong,
the hf backend's sampling and option log-probabilities, and one record format."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evprobe.bench.backends.base import Reply, Sampling
from evprobe.bench.records import Record, load_records
from evprobe.bench.runner import RunConfig, RunJob, run
from evprobe.core.errors import InputError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _config(bench: Path, out: Path, **settings) -> RunConfig:
    return RunConfig.of(**{"model": "tiny:llava", "bench": str(bench), "out": str(out), **settings})


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(("settings", "words"), [
    (dict(base_url="http://127.0.0.1:1/v1"), "--base-url is a setting of --backend openai"),
    (dict(backend="openai", base_url="http://x/v1", tensor_parallel=2), "--tensor-parallel is a setting of --backend vllm"),
    (dict(backend="vllm", decode_cache="static"), "--decode-cache is a setting of --backend hf"),
    (dict(backend="openai"), "--backend openai needs --base-url"),
    (dict(backend="openai", base_url="http://x/v1", concurrency=0), "--concurrency must be a positive integer"),
    (dict(backend="openai", base_url="http://x/v1", usd_per_mtok=(1.0,)), "--usd-per-mtok takes two"),
    (dict(backend="sglang"), "unknown backend 'sglang'"),
    (dict(temperature=-0.5), "--temperature must be a number >= 0"),
    (dict(temperature=0.8, top_p=0.0), "--top-p must be in (0, 1]"),
    (dict(option_logprobs=True, protocol="brief"), "--option-logprobs reads the first reply token"),
    (dict(option_logprobs=True, regime="json"), "--option-logprobs reads the first reply token"),
    (dict(model="policy:random", backend="vllm"), "is a scripted policy; it needs no --backend vllm"),
])
def test_a_setting_that_does_not_fit_the_backend_is_one_line_before_any_work(settings, words, small_bench,
                                                                             tmp_path) -> None:
    with pytest.raises(InputError) as err:
        RunJob(_config(small_bench, tmp_path / "run", **settings))
    assert words in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()


def test_a_text_only_model_refuses_items_with_images_before_any_record(small_bench, tiny_text_folder,
                                                                        tmp_path) -> None:
    out = tmp_path / "run"
    with pytest.raises(InputError, match="is a text-only model and 2 selected items have images"):
        run(_config(small_bench, out, model=str(tiny_text_folder), requests=("select",), limit=2), progress=False)
    assert not (out / "records.jsonl").exists() and not (out / "run.json").exists()


def test_a_tokenizer_given_images_raises_instead_of_dropping_them(tiny_text_folder) -> None:
    from PIL import Image

    from evprobe.hooks import load
    from evprobe.hooks.inputs import encode_inputs

    handle = load(str(tiny_text_folder))
    with pytest.raises(ValueError, match="is a tokenizer and takes no images"):
        encode_inputs(handle, ["hi"], [[Image.new("RGB", (8, 8))]])
    assert encode_inputs(handle, ["hi"], [[]])["input_ids"].shape[0] == 1


@pytest.fixture(scope="module")
def logprob_runs(small_bench: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("logprobs")
    selection = dict(requests=("select", "answer_initial"), limit=6, batch_size=3)
    plain, read = base / "plain", base / "read"
    run(_config(small_bench, plain, **selection), progress=False)
    run(_config(small_bench, read, option_logprobs=True, **selection), progress=False)
    return plain, read


def test_option_logprobs_change_no_reply_and_plain_records_are_the_lines_they_were(logprob_runs) -> None:
    plain, read = (_rows(p) for p in logprob_runs)
    assert all("option_logprobs" not in r and "error" not in r and "logprobs_missing" not in r for r in plain)
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("seconds", "option_logprobs")} for r in rows]
    assert strip(plain) == strip(read)
    # the fields in Record's order; a reply its budget cut off (a tiny random model never ends) says so
    assert [f for f in Record.__dataclass_fields__ if f in plain[0]] == list(plain[0])
    assert all(r.get("cut_off") is True for r in plain if r["n_new_tokens"] == 16)


def test_option_logprobs_are_the_models_next_token_logprobs(logprob_runs, small_bench) -> None:
    from evprobe.bench.manifest import load_item_images, read_items
    from evprobe.bench.protocols import build_prompt
    from evprobe.hooks import load
    from evprobe.hooks.generation import next_token_logprobs

    rows = _rows(logprob_runs[1])
    items = {it.item_id: it for it in read_items(small_bench)}
    handle = load("tiny:llava")  # tiny models are built from a fixed seed: the run's weights
    largest = 0.0
    for row in rows:
        item = items[row["item_id"]]
        letters = list(item.options)
        assert list(row["option_logprobs"]) == letters
        expected = next_token_logprobs(handle, [build_prompt(item, "direct")],
                                       [load_item_images(small_bench, item.images)], letters)[0]
        largest = max(largest, float(np.max(np.abs(np.array(list(row["option_logprobs"].values())) - expected))))
    # generate's first-step logits (batched, KV cache) against one uncached forward of the row alone
    assert largest < 1e-4, largest


def test_records_written_before_the_optional_fields_still_load(logprob_runs, tmp_path) -> None:
    rows = _rows(logprob_runs[1])
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "option_logprobs"}) + "\n" for r in rows))
    loaded = load_records(path)
    assert len(loaded) == len(rows) and all(r.option_logprobs is None for r in loaded.values())
    bad = {**rows[0], "option_logprobs": {"A": 0.5}}  # a log-probability above 0
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(InputError, match=r"records.jsonl:1: .*option_logprobs"):
        load_records(path)


def test_a_backend_error_is_kept_as_an_invalid_record_with_the_servers_words(small_bench) -> None:
    from evprobe.bench.runner import _record

    job = RunJob(_config(small_bench, Path("unused"), requests=("select",), limit=1))
    item = job.items[0]
    record = _record(job.config, item, Reply("", error="HTTP 200 but the body ended mid-JSON: '{\"choi'"), 0.1)
    assert not record.valid and record.route == "invalid:backend" and record.choice is None
    assert record.to_json()["error"].startswith("HTTP 200")
    good = _record(job.config, item, Reply("A"), 0.1)
    assert "error" not in good.to_json()


def test_sampled_hf_runs_repeat_with_their_seed_and_differ_with_another(small_bench, tiny_text_folder,
                                                                         tmp_path) -> None:
    settings = dict(model=str(tiny_text_folder), requests=("both_given",), limit=6, batch_size=3,
                    temperature=1.5, top_p=0.95)
    replies = {}
    for name, seed in (("a", 1), ("again", 1), ("b", 2)):
        run(_config(small_bench, tmp_path / name, seed=seed, **settings), progress=False)
        replies[name] = [r["reply"] for r in _rows(tmp_path / name)]
    assert replies["a"] == replies["again"]
    assert replies["a"] != replies["b"]
    meta = json.loads((tmp_path / "a" / "run.json").read_text())
    assert meta["temperature"] == 1.5 and meta["top_p"] == 0.95 and meta["backend"] is None
    with pytest.raises(InputError, match="temperature=1.5, this run has temperature=1.0"):
        run(_config(small_bench, tmp_path / "a", seed=1, **{**settings, "temperature": 1.0}), progress=False)


def test_greedy_runs_pin_no_sampling_and_run_json_counts_resources(logprob_runs) -> None:
    plain, read = logprob_runs
    meta = json.loads((plain / "run.json").read_text())
    assert meta["temperature"] is None and meta["top_p"] is None and meta["option_logprobs"] is None
    assert json.loads((read / "run.json").read_text())["option_logprobs"] is True
    res = meta["resources"]
    rows = _rows(plain)
    assert res["backend"] == "hf" and res["calls"] == 2  # 6 items in batches of 3
    assert res["generated_tokens"] == sum(r["n_new_tokens"] for r in rows)
    assert res["prompt_tokens"] == sum(r["n_prompt_tokens"] for r in rows)
    assert res["seconds"] > 0 and res["generated_tokens_per_s"] > 0


def test_a_calls_seed_depends_on_the_runs_seed_and_its_prompts_only() -> None:
    s = Sampling(0.8, 0.95, seed=3)
    assert s.call_seed(["a", "b"]) == Sampling(0.8, 0.95, seed=3).call_seed(["a", "b"])
    assert len({s.call_seed(["a", "b"]), s.call_seed(["b", "a"]), Sampling(0.8, 0.95, 4).call_seed(["a", "b"])}) == 3
    assert 0 <= s.call_seed(["x"]) < 2**31 and not s.greedy and Sampling().greedy


def test_a_resumed_run_adds_its_sessions_resources(small_bench, tmp_path) -> None:
    out = tmp_path / "run"
    for limit in (4, 8, 8):  # the third session has nothing to do and calls nothing
        run(_config(small_bench, out, requests=("select",), limit=limit, batch_size=2), progress=False)
    res = json.loads((out / "run.json").read_text())["resources"]
    rows = _rows(out)
    assert res["calls"] == 4 and res["sessions"] == 2 and len(rows) == 8
    assert res["generated_tokens"] == sum(r["n_new_tokens"] for r in rows)
    assert res["prompt_tokens"] == sum(r["n_prompt_tokens"] for r in rows)
