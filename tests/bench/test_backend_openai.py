"""`--backend openai`: a real `transformers serve` process, vLLM's own OpenAI server, and a fault
server (tests/bench/fault_server.py) that drops, delays, refuses and garbles chosen requests.

Every server here is a process on 127.0.0.1, started by the test and stopped by its pid."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evprobe.bench.backends import openai_client as backend_module
from evprobe.bench.records import load_records
from evprobe.bench.runner import RunConfig, RunJob, run
from evprobe.core.errors import InputError
from tests.bench.fault_server import digest

FAULT_SERVER = Path(__file__).with_name("fault_server.py")
KEY = "sk-evprobe-test-4f1c9a7e2b"  # a made-up key: the test greps the run's files for it


# --- servers --------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """End the server we started (its process group: uvicorn's and vLLM's workers too)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _wait_healthy(proc: subprocess.Popen, port: int, timeout_s: float, log: Path) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    _stop(proc)
    pytest.fail(f"the server on port {port} was not healthy within {timeout_s} s:\n{log.read_text()[-3000:]}")


# `transformers serve` takes ~10 s to come up on an idle machine and passed 60 s on cores shared with other
# test workers (load 9-10); a wait that only bounds a hang, not a speed claim
SERVE_START_S = 240


@contextlib.contextmanager
def serving(command: list[str], port: int, log: Path, timeout_s: float,
            env: dict[str, str] | None = None) -> Iterator[str]:
    """A server process started from `command`, healthy on `port`: yields its base URL; stopped after."""
    with open(log, "w") as fh:
        proc = subprocess.Popen(command, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    try:
        _wait_healthy(proc, port, timeout_s, log)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        _stop(proc)


class FaultServer:
    def __init__(self, folder: Path, plan: dict[str, Any]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.plan_path, self.log_path = folder / "plan.json", folder / "requests.jsonl"
        self.plan_path.write_text(json.dumps(plan))
        self.log_path.write_text("")
        env = {**os.environ, "EVPROBE_FAULT_KEY": KEY}
        self.proc = subprocess.Popen([sys.executable, str(FAULT_SERVER), str(self.plan_path), str(self.log_path)],
                                     stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("PORT "), line
        self.url = f"http://127.0.0.1:{int(line.split()[1])}/v1"

    def requests(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.log_path.read_text().splitlines()]

    def posts(self) -> list[dict[str, Any]]:
        return [r for r in self.requests() if r["method"] == "POST"]


@contextlib.contextmanager
def fault_server(folder: Path, plan: dict[str, Any]) -> Iterator[FaultServer]:
    server = FaultServer(folder, plan)
    try:
        yield server
    finally:
        _stop(server.proc)


def _config(bench: Path, out: Path, url: str, **kw: Any) -> RunConfig:
    return RunConfig.of(**{"model": "fault-model", "bench": str(bench), "out": str(out), "backend": "openai",
                        "base_url": url, **kw})


def _digests(config: RunConfig) -> list[str]:
    """The fault server's name of each selected item's request (its prompt's digest), in order."""
    job = RunJob(config)
    names = [digest(p.text, [x.read_bytes() for x in p.images]) for p in job.model_prompts(job.items)]
    assert len(set(names)) == len(names)  # one request each: the server's fault plan names them apart
    return names


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.fixture
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend_module, "BACKOFF_S", 0.01)


# --- the fault server -----------------------------------------------------------------------------

def test_faults_lose_and_duplicate_nothing_and_a_rerun_pays_nothing(small_bench: Path, tmp_path: Path,
                                                                     fast_backoff: None) -> None:
    """Drops, a delay past the timeout, 429 with Retry-After, 503s and a body cut mid-way are
    retried into valid records; malformed, truncated and choice-less answers are invalid records
    with the server's words; run.json counts the retries; a rerun (resume, then the cache from
    another folder) sends only the requests never answered readably."""
    out = tmp_path / "run"
    kw = dict(requests=("select",), limit=12, batch_size=4, concurrency=4, request_timeout_s=2.0, max_retries=3)
    names = _digests(_config(small_bench, out, "http://unused/v1", **kw))
    plan = {"delay_s": 3.0, "retry_after": "1",  # the delay: past the 2 s timeout
            "faults": {names[0]: ["drop"], names[1]: ["delay"], names[2]: ["429"], names[3]: ["503", "503"],
                       names[4]: ["malformed"], names[5]: ["truncated"], names[6]: ["no_choices"],
                       names[7]: ["cut"], names[8]: ["500", "drop"]}}
    with fault_server(tmp_path / "server", plan) as server:
        cfg = _config(small_bench, out, server.url, **kw)
        summary = run(cfg, progress=False)
        rows = _lines(out / "records.jsonl")
        ids = [it.item_id for it in RunJob(cfg).items]
        assert sorted(r["item_id"] for r in rows) == sorted(ids) and len(rows) == 12  # each once
        by_id = {r["item_id"]: r for r in rows}
        for i in (0, 1, 2, 3, 7, 8, 9, 10, 11):  # retried or clean: the server's reply, read
            r = by_id[ids[i]]
            assert r["reply"] == "A" and r["valid"] and r["choice"] == "A" and "error" not in r, r
        for i, words in ((4, "not JSON"), (5, "not JSON"), (6, "no choices")):
            r = by_id[ids[i]]
            assert r["valid"] is False and r["route"] == "invalid:backend" and r["reply"] == "", r
            assert words in r["error"], r["error"]
        assert "oops" in by_id[ids[4]]["error"]  # the server's own words
        res = json.loads((out / "run.json").read_text())["resources"]
        assert res == summary.resources
        assert res["retries"] == 8, res
        assert res["retry_reasons"] == {"connection": 3, "timeout": 1, "HTTP 429": 1, "HTTP 503": 2, "HTTP 500": 1}
        assert res["requests"] == 12 + 8 == len(server.posts()) and res["cache_hits"] == 0 and res["calls"] == 12
        assert res["backend"] == "openai" and res["usd"] is None and res["prompt_tokens"] > 0
        tries = [r["t"] for r in server.posts() if r["digest"] == names[2]]
        assert len(tries) == 2 and tries[1] - tries[0] >= 0.95  # Retry-After: 1 honoured
        assert all(r["n_images"] == 1 for r in server.posts())  # each select item's image, as a data URL

        sent = len(server.posts())
        again = run(cfg, progress=False)  # resume: nothing to do, no request
        assert again.last_session.items == 0 and len(server.posts()) == sent
        assert _lines(out / "records.jsonl") == rows

        other = tmp_path / "run2"  # another folder sharing the cache: only the unreadable three are asked
        fresh = run(_config(small_bench, other, server.url, **{**kw, "http_cache": str(out / "http-cache")}),
                    progress=False)
        asked = server.posts()[sent:]
        assert sorted(r["digest"] for r in asked) == sorted(names[4:7])
        assert fresh.resources["cache_hits"] == 9 and fresh.resources["requests"] == 3
        assert all(r["valid"] for r in _lines(other / "records.jsonl"))  # the server answers them now


def test_giving_up_stops_the_run_in_one_line_and_the_rerun_resumes(small_bench: Path, tmp_path: Path,
                                                                  fast_backoff: None) -> None:
    out = tmp_path / "run"
    kw = dict(requests=("select",), limit=6, batch_size=2, concurrency=2, max_retries=2)
    names = _digests(_config(small_bench, out, "http://unused/v1", **kw))
    # 429s with Retry-After 0.3: the other item of the batch is answered before this one gives up
    with fault_server(tmp_path / "server", {"retry_after": "0.3", "faults": {names[2]: ["429"] * 3}}) as server:
        cfg = _config(small_bench, out, server.url, **kw)
        with pytest.raises(InputError) as err:
            run(cfg, progress=False)
        message = str(err.value)
        assert "\n" not in message and f"{server.url}/chat/completions" in message and "after 2 retries" in message
        assert "HTTP 429 (rate limited)" in message and "rerun the same command" in message
        ids = [it.item_id for it in RunJob(cfg).items]
        first = _lines(out / "records.jsonl")
        assert [r["item_id"] for r in first] == ids[:2]  # the batch before the failing one, kept
        before = len(server.posts())
        summary = run(cfg, progress=False)
        rows = _lines(out / "records.jsonl")
        assert rows[:2] == first and sorted(r["item_id"] for r in rows) == sorted(ids)  # nothing lost or twice
        asked = {r["digest"] for r in server.posts()[before:]}
        assert names[0] not in asked and names[1] not in asked  # the written batch is not asked again
        assert names[3] not in asked and summary.resources["cache_hits"] == 1  # answered before the stop


def test_option_logprobs_from_the_alternatives_and_what_records_say_without_them(small_bench: Path,
                                                                                 tmp_path: Path) -> None:
    out = tmp_path / "run"
    kw = dict(requests=("select",), limit=4, option_logprobs=True, temperature=0.7, top_p=0.9, seed=3)
    names = _digests(_config(small_bench, out, "http://unused/v1", **kw))
    plan = {"top": [["A", -0.25], ["B", -1.75], ["\u2581C", -3.0], ["C", -2.5], ["Ġ D", -4.0]],
            "faults": {names[1]: ["nologprobs"], names[2]: ["refuse_logprobs"]}}
    with fault_server(tmp_path / "server", plan) as server:
        run(_config(small_bench, out, server.url, **kw), progress=False)
        rows = {r["item_id"]: r for r in _lines(out / "records.jsonl")}
        ids = [it.item_id for it in RunJob(_config(small_bench, out, server.url, **kw)).items]
        full = rows[ids[0]]
        # exact tokens win (C is -2.5, not the word-start -3.0); E is among no alternative
        assert full["option_logprobs"] == {"A": -0.25, "B": -1.75, "C": -2.5, "D": -4.0}
        assert "E not among the server's 5 most likely first tokens" in full["logprobs_missing"]
        bare = rows[ids[1]]
        assert "option_logprobs" not in bare and "returned no log-probabilities" in bare["logprobs_missing"]
        refused = rows[ids[2]]
        assert refused["valid"] and "refused logprobs" in refused["logprobs_missing"] and "not supported" in \
            refused["logprobs_missing"]
        posts = server.posts()
        assert [p["logprobs"] for p in posts if p["digest"] == names[2]] == [True, None]  # asked again without
        seeds = {p["digest"]: p["seed"] for p in posts}
        assert len(set(seeds.values())) == 4  # one seed per item (Sampling.call_seed)
        from evprobe.bench.backends.base import Sampling

        assert seeds[names[0]] == Sampling(0.7, 0.9, 3).call_seed([ids[0]])


def test_unreachable_url_unknown_model_and_missing_key_are_one_line_each(small_bench: Path, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from evprobe.experiments.cli import main

    def cli(out: Path, url: str, *extra: str) -> str:
        code = main(["run", "--model", "fault-model", "--bench", str(small_bench), "--out", str(out),
                     "--backend", "openai", "--base-url", url, "--requests", "select", "--limit", "2",
                     "--no-progress", *extra])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and err.startswith("evprobe: error: "), err
        assert not (out / "run.json").exists() and not (out / "records.jsonl").exists()  # nothing written
        return err

    dead = f"http://127.0.0.1:{_free_port()}/v1"
    err = cli(tmp_path / "a", dead)
    assert f"cannot reach the server at {dead}" in err and "fix --base-url" in err
    monkeypatch.delenv("EVPROBE_TEST_NO_SUCH_KEY", raising=False)
    err = cli(tmp_path / "b", dead, "--api-key-env", "EVPROBE_TEST_NO_SUCH_KEY")
    assert "EVPROBE_TEST_NO_SUCH_KEY is not set" in err and dead in err
    with fault_server(tmp_path / "server", {"models": ["org/other-model", "another"]}) as server:
        err = cli(tmp_path / "c", server.url)
        assert f"the server at {server.url} does not serve 'fault-model'" in err
        assert "'org/other-model', 'another'" in err and "--served-model" in err
        err = cli(tmp_path / "d", server.url.removesuffix("/v1"), "--served-model", "another")
        assert "HTTP 404" in err and "e.g. http://127.0.0.1:8000/v1" in err
        assert not server.posts()
    with fault_server(tmp_path / "keyed", {"key_env": "EVPROBE_FAULT_KEY"}) as server:
        monkeypatch.setenv("EVPROBE_TEST_WRONG_KEY", "sk-wrong-key-0000")
        err = cli(tmp_path / "e", server.url, "--api-key-env", "EVPROBE_TEST_WRONG_KEY")
        assert "refused the key in $EVPROBE_TEST_WRONG_KEY (HTTP 401" in err and "sk-wrong-key-0000" not in err
        err = cli(tmp_path / "f", server.url)
        assert "refused a request without a key" in err and "--api-key-env NAME" in err


def test_a_first_batch_refused_alike_stops_before_any_record(small_bench: Path, tmp_path: Path) -> None:
    """One refused item is an invalid record; every item of the first batch refused in the same
    words is a setting the server rejects: one line, no record."""
    out = tmp_path / "run"
    kw = dict(requests=("select",), limit=4, batch_size=2)
    names = _digests(_config(small_bench, out, "http://unused/v1", **kw))
    with fault_server(tmp_path / "server", {"faults": {n: ["400"] for n in names}}) as server:
        with pytest.raises(InputError, match="refused every request of the first batch alike .HTTP 400: this prompt "
                                             "is too long for the model.; change what the server refuses"):
            run(_config(small_bench, out, server.url, **kw), progress=False)
        assert not (out / "records.jsonl").exists() or not (out / "records.jsonl").read_text()
    with fault_server(tmp_path / "server2", {"faults": {names[0]: ["400"], names[3]: ["400"]}}) as server:
        run(_config(small_bench, out, server.url, **kw), progress=False)
        rows = _lines(out / "records.jsonl")
        errors = [r.get("error") for r in rows]
        assert len(rows) == 4 and errors.count("HTTP 400: this prompt is too long for the model") == 2


def test_the_key_is_sent_and_written_nowhere(small_bench: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVPROBE_TEST_KEY", KEY)
    out = tmp_path / "run"
    kw = dict(requests=("select",), limit=3, api_key_env="EVPROBE_TEST_KEY", usd_per_mtok=(2.0, 8.0))
    names = _digests(_config(small_bench, out, "http://unused/v1", **kw))
    plan = {"key_env": "EVPROBE_FAULT_KEY", "faults": {names[1]: ["echo_key"]}}
    with fault_server(tmp_path / "server", plan) as server:
        summary = run(_config(small_bench, out, server.url, **kw), progress=False)
        assert all(r["key_ok"] for r in server.requests())
    rows = {r["item_id"]: r for r in _lines(out / "records.jsonl")}
    echoed = [r for r in rows.values() if "error" in r]
    assert len(echoed) == 1 and echoed[0]["error"] == "HTTP 400: bad request from Bearer ***"
    res = summary.resources
    assert res["usd"] == pytest.approx((res["prompt_tokens"] * 2.0 + res["generated_tokens"] * 8.0) / 1e6)
    assert res["usd"] > 0 and json.loads((out / "run.json").read_text())["served_model"] == "fault-model"
    written = [p for p in out.rglob("*") if p.is_file()]
    assert any("http-cache" in p.parts for p in written) and len(written) >= 4
    for path in written:
        assert KEY.encode() not in path.read_bytes(), path
    assert "EVPROBE_TEST_KEY" in (out / "run.json").read_text()  # the variable's name only


def test_cache_keys_hash_images_and_leave_out_the_url(small_bench: Path, tmp_path: Path) -> None:
    """The same request from a server on another port is a cache hit; another seed is not."""
    out = tmp_path / "run"
    kw = dict(requests=("select",), limit=2)
    with fault_server(tmp_path / "s1", {}) as server:
        run(_config(small_bench, out, server.url, **kw), progress=False)
    cached = list((out / "http-cache").rglob("*.json"))
    assert len(cached) == 2 and all(b"base64" not in p.read_bytes() for p in cached)  # answers, not requests
    with fault_server(tmp_path / "s2", {}) as server:
        again = run(_config(small_bench, tmp_path / "run2", server.url, http_cache=str(out / "http-cache"), **kw),
                    progress=False)
        assert again.resources["cache_hits"] == 2 and not server.posts()
        other = run(_config(small_bench, tmp_path / "run3", server.url, http_cache=str(out / "http-cache"),
                            temperature=1.0, **kw), progress=False)
        assert other.resources["cache_hits"] == 0 and len(server.posts()) == 2


# --- real servers ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_llava_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from evprobe.hooks.tiny_models import tiny

    handle = tiny("llava")
    folder = tmp_path_factory.mktemp("llava") / "model"
    handle.model.save_pretrained(folder)
    handle.processor.save_pretrained(folder)
    return folder


def _needs_transformers_serve() -> list[str]:
    """The `transformers` command of this environment, with serve's extras (the test extra)."""
    from transformers.utils.import_utils import is_serve_available

    if not is_serve_available():
        message = "transformers serve needs fastapi, uvicorn and openai (pip install -e .[test])"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    script = Path(sys.executable).with_name("transformers")
    return [str(script)] if script.is_file() else [sys.executable, "-c",
                                                   "from transformers.cli.transformers import main; main()"]


def test_transformers_serve_replies_as_the_hf_backend(small_bench: Path, tiny_llava_folder: Path,
                                                      tmp_path: Path) -> None:
    """A real `transformers serve` process on the tiny LLaVA folder: items with images, sent as data
    URLs, get the hf backend's replies and token counts on the same folder; the server ignores
    `logprobs`, so the records say the log-probabilities are missing."""
    port = _free_port()
    command = [*_needs_transformers_serve(), "serve", str(tiny_llava_folder), "--host", "127.0.0.1", "--port",
               str(port), "--device", "cpu"]
    kw = dict(model=str(tiny_llava_folder), bench=str(small_bench), requests=("select", "answer_initial"), limit=4,
              option_logprobs=True)
    with serving(command, port, tmp_path / "serve.log", SERVE_START_S, {**os.environ, "HF_HUB_OFFLINE": "1"}) as url:
        served = run(RunConfig.of(out=str(tmp_path / "served"), backend="openai", base_url=url, **kw), progress=False)
    assert served.n_records == 4 and served.resources["requests"] == 4
    meta = json.loads((tmp_path / "served" / "run.json").read_text())
    assert meta["served_model"] == str(tiny_llava_folder) and meta["model_source"] == "served"
    run(RunConfig(out=str(tmp_path / "hf"), **kw), progress=False)
    mine = load_records(tmp_path / "served" / "records.jsonl")
    theirs = load_records(tmp_path / "hf" / "records.jsonl")
    assert mine.keys() == theirs.keys()
    assert Counter(r.request for r in mine.values()) == {"select": 2, "answer_initial": 2}  # each with an image
    for key, r in mine.items():
        h = theirs[key]
        assert r.error is None and (r.reply, r.n_prompt_tokens, r.n_new_tokens) == (h.reply, h.n_prompt_tokens,
                                                                                     h.n_new_tokens)
        assert r.option_logprobs is None and "returned no log-probabilities" in r.logprobs_missing
        assert h.option_logprobs is not None and h.logprobs_missing is None


def test_the_thinking_switch_reaches_the_servers_template(small_bench: Path, tmp_path: Path) -> None:
    """`--thinking off` sent as the request's chat_template_kwargs to a real `transformers serve` on the
    tiny text Llama whose template has the switch: each setting gets the hf backend's replies and prompt
    token counts for that setting, and off's prompts are longer by the empty reasoning block."""
    from evprobe.bench.model_config import ModelConfig
    from evprobe.hooks.chat_templates import THINK_OFF
    from evprobe.hooks.tiny_text import save_tiny_text_model
    from transformers import AutoTokenizer

    folder = save_tiny_text_model(tmp_path / "model", thinking_switch=True)
    port = _free_port()
    command = [*_needs_transformers_serve(), "serve", str(folder), "--host", "127.0.0.1", "--port", str(port),
               "--device", "cpu"]
    records = {}
    with serving(command, port, tmp_path / "serve.log", SERVE_START_S, {**os.environ, "HF_HUB_OFFLINE": "1"}) as url:
        for thinking in ("on", "off"):
            kw = dict(model=ModelConfig.of(str(folder), thinking=thinking), bench=str(small_bench),
                      requests=("both_given",), limit=3)
            run(RunConfig.of(out=str(tmp_path / f"served-{thinking}"), backend="openai", base_url=url, **kw),
                progress=False)
            run(RunConfig(out=str(tmp_path / f"hf-{thinking}"), **kw), progress=False)
            records[thinking] = [load_records(tmp_path / f"{side}-{thinking}" / "records.jsonl")
                                 for side in ("served", "hf")]
    extra = len(AutoTokenizer.from_pretrained(folder)(THINK_OFF, add_special_tokens=False)["input_ids"])
    for thinking, (mine, theirs) in records.items():
        assert mine.keys() == theirs.keys() and len(mine) == 3
        for key, r in mine.items():
            h = theirs[key]
            assert r.error is None and (r.reply, r.n_prompt_tokens, r.n_new_tokens) == (
                h.reply, h.n_prompt_tokens, h.n_new_tokens), (thinking, key)
            if thinking == "off":
                assert r.n_prompt_tokens == records["on"][0][key].n_prompt_tokens + extra
    assert json.loads((tmp_path / "served-off" / "run.json").read_text())["thinking"] == "off"


def test_vllm_serve_replies_and_option_logprobs_as_the_hf_backend(small_bench: Path, tiny_text_folder: Path,
                                                                  vllm_python: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's own OpenAI server (the vLLM environment's `vllm.entrypoints.openai.api_server`) on the
    tiny text Llama: the same tokens as the hf backend and option log-probabilities within 1e-4.

    The tiny model's letters are not among its 20 likeliest first tokens, so the server is started
    with `--max-logprobs` of the whole vocabulary and asked for all of it (`--top-logprobs`). The
    generated token ids are compared too (vLLM's `return_token_ids`): a model that wrote broken
    UTF-8 would show the same tokens as different texts (transformers decodes U+FFFD, vLLM's
    detokenizer leaves the bytes out), which hooks.tiny_text's model never writes."""
    import httpx
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_text_folder)
    port = _free_port()
    command = [str(vllm_python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_text_folder),
               "--dtype", "float32", "--gpu-memory-utilization", "0.1", "--max-model-len", "2048", "--enforce-eager",
               "--max-logprobs", str(len(tok)), "--host", "127.0.0.1", "--port", str(port)]
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
           "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    kw = dict(model=str(tiny_text_folder), bench=str(small_bench), requests=("both_given",), limit=8,
              option_logprobs=True)
    with serving(command, port, tmp_path / "vllm.log", 150, env) as url:
        run(RunConfig.of(out=str(tmp_path / "served"), backend="openai", base_url=url, top_logprobs=len(tok), **kw),
            progress=False)
        mine = load_records(tmp_path / "served" / "records.jsonl")
        job = RunJob(RunConfig(out=str(tmp_path / "served"), **kw))
        prompts = {p.key: p for p in job.model_prompts(job.items)}
        token_ids = {}
        for key in mine:  # the generated tokens themselves (vLLM's `return_token_ids`), to tell text from tokens
            body = {"model": str(tiny_text_folder), "max_tokens": 16, "temperature": 0.0, "return_token_ids": True,
                    "messages": [{"role": "user", "content": [{"type": "text", "text": prompts[key].text}]}]}
            answer = httpx.post(f"{url}/chat/completions", json=body, timeout=60).json()
            assert answer["choices"][0]["message"]["content"] == mine[key].reply
            token_ids[key] = answer["choices"][0]["token_ids"]
    run(RunConfig(out=str(tmp_path / "hf"), **kw), progress=False)
    theirs = load_records(tmp_path / "hf" / "records.jsonl")
    assert mine.keys() == theirs.keys() and len(mine) == 8
    worst = 0.0
    for key, r in mine.items():
        h = theirs[key]
        assert (r.n_prompt_tokens, r.n_new_tokens) == (h.n_prompt_tokens, h.n_new_tokens)
        assert tok.decode(token_ids[key], skip_special_tokens=True) == h.reply  # the same tokens
        assert r.reply == h.reply  # hooks.tiny_text's model writes no broken UTF-8, so the texts compare
        assert r.logprobs_missing is None and r.option_logprobs.keys() == h.option_logprobs.keys()
        worst = max(worst, *(abs(r.option_logprobs[x] - h.option_logprobs[x]) for x in h.option_logprobs))
    # float32 arithmetic in other kernels (vLLM's CPU attention against SDPA): log-probs of several nats agree
    # to ~1e-5 (1.2e-5 measured), a handful of float32 ulps; a wrong position or token id moves them by >0.1
    assert worst < 1e-4, worst
