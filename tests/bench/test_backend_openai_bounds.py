"""`--backend openai` against hostile servers and caches: every read bounded in time and size, the
key and the URL's password on no disk in any encoding, http-cache entries checked as untrusted
input, malformed log-probabilities left out (never 0.0).

Servers are real processes (tests/bench/fault_server.py); FIFOs, links, blocked folders and a full
disk (a small tmpfs in a user namespace) are real."""

from __future__ import annotations

import base64
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evprobe.bench.backends import openai_client as backend_module
from evprobe.bench.backends.http_cache import WARNINGS_SHOWN, RequestCache, answer_sha256, untrusted_json
from evprobe.bench.backends.openai_answer import AnswerBounds, read_answer
from evprobe.bench.backends.redact import redactor, shown_url, url_secrets
from evprobe.bench.runner import RunConfig, RunJob, run
from evprobe.core.errors import InputError, OneLineWarning
from tests.bench.test_backend_openai import _config, _digests, _lines, fault_server

KEY = 'sk-"te\\st/+=9Qv'  # the characters that escaped the old redaction: a quote, a backslash, / + =
PASSWORD = 'p@ss"w\\rd/+=7Zk'
USER = "evuser"


@pytest.fixture
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend_module, "BACKOFF_S", 0.01)


# --- time ------------------------------------------------------------------------------------------

def test_a_dripping_server_is_cut_off_at_the_deadline(small_bench: Path, tmp_path: Path, fast_backoff: None) -> None:
    """A body, or the headers, dripped a byte every 0.3 s (each read well within httpx's per-read
    timeout) is cut off --request-timeout-s after the request began, retried, and answered; with
    no retries left the run stops in one line within the deadline (main: held forever)."""
    limit_s = 1.5
    kw = dict(requests=("select",), limit=3, batch_size=3, concurrency=3, request_timeout_s=limit_s, max_retries=1)
    names = _digests(_config(small_bench, tmp_path / "run", "http://unused/v1", **kw))
    plan = {"drip_s": 0.3, "faults": {names[0]: ["drip", "ok"], names[1]: ["drip_headers", "ok"]}}
    with fault_server(tmp_path / "server", plan) as server:
        summary = run(_config(small_bench, tmp_path / "run", server.url, **kw), progress=False)
        posts = server.posts()
    rows = _lines(tmp_path / "run" / "records.jsonl")
    assert len(rows) == 3 and all(r["valid"] and r["reply"] == "A" for r in rows)
    assert summary.resources["retry_reasons"] == {"timeout": 2}
    for name in names[:2]:
        first, again = [p["t"] for p in posts if p["digest"] == name]
        assert limit_s - 0.1 <= again - first < limit_s + 1.0, again - first  # one deadline, not one per byte

    with fault_server(tmp_path / "server2", {"drip_s": 0.3, "all": ["drip"]}) as server:
        with pytest.raises(InputError, match="no whole answer within --request-timeout-s 1.5") as err:
            run(_config(small_bench, tmp_path / "run2", server.url, **{**kw, "max_retries": 0}), progress=False)
        stopped = time.time()
        began = min(p["t"] for p in server.posts())
    assert "\n" not in str(err.value) and stopped - began < limit_s + 1.0, stopped - began


# --- size ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_a_bound_that_bounds_nothing_is_one_line(small_bench: Path, tmp_path: Path, value: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from evprobe.experiments.cli import main

    for flag in ("--max-response-mb", "--request-timeout-s"):
        code = main(["run", "--model", "fault-model", "--bench", str(small_bench), "--out", str(tmp_path / "run"),
                     "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", flag, value, "--no-progress"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and f"{flag} must be a positive number" in err, err


def test_a_key_pasted_as_the_variable_name_is_refused_unshown(small_bench: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """--api-key-env takes a variable's name; a pasted key was printed back in the 'is not set' line."""
    from evprobe.experiments.cli import main

    code = main(["run", "--model", "fault-model", "--bench", str(small_bench), "--out", str(tmp_path / "run"),
                 "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "sk-live+Secret/9",
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "NAME of an environment variable" in err, err
    assert "Secret" not in err and not (tmp_path / "run" / "run.json").exists()


def test_oversized_answers_are_invalid_records_and_read_no_further(small_bench: Path, tmp_path: Path) -> None:
    """An endless chunked body, a body whose Content-Length is past the cap and a reply far longer
    than 16 tokens can hold are invalid records saying why, each item once, nothing of them stored
    (main: 84 MB of records.jsonl for 2 items); the answers within bounds are read and cached."""
    out = tmp_path / "run"
    kw = dict(requests=("select",), limit=5, batch_size=5, concurrency=5, max_response_mb=1.0)
    names = _digests(_config(small_bench, out, "http://unused/v1", **kw))
    plan = {"huge_mb": 50, "long_chars": 200_000,
            "faults": {names[0]: ["endless"], names[1]: ["huge"], names[2]: ["long_reply"]}}
    with fault_server(tmp_path / "server", plan) as server:
        cfg = _config(small_bench, out, server.url, **kw)
        summary = run(cfg, progress=False)
        assert len(server.posts()) == 5  # not retried: the server gave that answer
    ids = [it.item_id for it in RunJob(cfg).items]
    rows = {r["item_id"]: r for r in _lines(out / "records.jsonl")}
    assert sorted(rows) == sorted(ids) and len(_lines(out / "records.jsonl")) == 5  # each once
    for i in (0, 1):
        r = rows[ids[i]]
        assert not r["valid"] and r["route"] == "invalid:backend" and r["reply"] == ""
        assert r["error"].startswith("the answer is larger than 1 MB (--max-response-mb"), r["error"]
    long = rows[ids[2]]
    assert not long["valid"] and long["reply"] == ""
    assert long["error"].startswith("the reply holds 200,000 characters, more than the 4,096 that max_tokens 16 can")
    assert all(rows[ids[i]]["valid"] for i in (3, 4)) and summary.resources["retries"] == 0
    assert (out / "records.jsonl").stat().st_size < 20_000
    assert len(list((out / "http-cache").rglob("*.json"))) == 2  # the two readable answers only


RSS_CHILD = """
import json, sys
from evprobe.bench.backends.base import ModelPrompt
from evprobe.bench.backends.openai import open_backend
from evprobe.bench.runner import RunConfig

def status(field):
    with open("/proc/self/status") as fh:
        return next(int(x.split()[1]) * 1024 for x in fh if x.startswith(field))

url, folder = sys.argv[1], sys.argv[2]
backend = open_backend(RunConfig.of(model="fault-model", bench=folder, out=folder, backend="openai", base_url=url,
                                    max_retries=0))
before = status("VmRSS")
# the peak of the call only (Linux resets VmHWM to the current RSS on "5"): ru_maxrss also holds any
# peak before it; in one full-suite run it read 1.4 GB "added" that alone never shows (3 of 3 under 64 MB)
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")
reply = backend([ModelPrompt("k", "hello")])[0]
print(json.dumps({"added": status("VmHWM") - before, "error": reply.error}))
"""


def test_an_endless_body_costs_the_cap_not_memory(tmp_path: Path) -> None:
    """Peak RSS while a server sends an endless chunked body: main grew past 2.4 GB in 11 s (and on);
    now the read stops at the 4 MB default cap (+16 MB measured)."""
    with fault_server(tmp_path / "server", {"all": ["endless"]}) as server:
        done = subprocess.run([sys.executable, "-c", RSS_CHILD, server.url, str(tmp_path / "out")], capture_output=True,
                              text=True, timeout=120, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["error"].startswith("the answer is larger than 4 MB") and result["added"] < 64e6, result


# --- secrets ---------------------------------------------------------------------------------------

def encodings(secret: str) -> set[str]:
    """The forms a server might echo a secret in: raw, JSON-escaped (once, twice), URL-encoded,
    base64 (standard, URL-safe, unpadded)."""
    raw = secret.encode()
    return {secret, json.dumps(secret)[1:-1], json.dumps(json.dumps(secret))[1:-1], urllib.parse.quote(secret, safe=""),
            urllib.parse.quote(secret), urllib.parse.quote_plus(secret), base64.b64encode(raw).decode(),
            base64.urlsafe_b64encode(raw).decode(), base64.b64encode(raw).decode().rstrip("=")}


def test_the_key_and_the_url_password_reach_no_file_and_no_message(small_bench: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  fast_backoff: None) -> None:
    """A key with a quote and a backslash, a password in --base-url: a server echoing both (and the
    Basic header) in every encoding, in an answer's text, a JSON refusal, a plain-text refusal, a
    503 that is retried, a 503 that stops the run and a model list; every file the runs wrote and
    everything printed holds no encoding of either (main: the key in records.jsonl and the cache,
    escaped past the redaction, the password in run.json and error lines)."""
    from evprobe.experiments.cli import main

    monkeypatch.setenv("EVPROBE_TEST_KEY", KEY)
    kw = dict(requests=("select",), limit=5)
    names = _digests(_config(small_bench, tmp_path / "unused", "http://unused/v1", **kw))
    plan = {"echo": [KEY, PASSWORD], "faults": {names[0]: ["echo"], names[1]: ["echo_error"], names[2]: ["echo_text"],
                                                names[3]: ["echo_503", "ok"]}}

    def cli(out: Path, url: str, *extra: str) -> tuple[int, str]:
        code = main(["run", "--model", "fault-model", "--bench", str(small_bench), "--out", str(out), "--backend",
                     "openai", "--base-url", url, "--api-key-env", "EVPROBE_TEST_KEY", "--requests", "select",
                     "--limit", "5", "--no-progress", *extra])
        captured = capsys.readouterr()
        return code, captured.out + captured.err

    printed = []
    with fault_server(tmp_path / "server", plan) as server:
        host = server.url.removeprefix("http://")
        url = f"http://{USER}:{urllib.parse.quote(PASSWORD, safe='')}@{host}"
        code, text = cli(tmp_path / "a", url)
        printed.append(text)
        assert code == 0, text
        assert [p["fault"] for p in server.posts() if p["digest"] == names[3]] == ["echo_503", "ok"]
    with fault_server(tmp_path / "server2", {"echo": [KEY, PASSWORD], "all": ["echo_503"]}) as server:
        host = server.url.removeprefix("http://")
        code, text = cli(tmp_path / "b", f"http://{USER}:{urllib.parse.quote(PASSWORD, safe='')}@{host}",
                         "--max-retries", "0")
        printed.append(text)
        assert code == 2 and "gave up on item" in text and "HTTP 503 (bad request: Basic *** | " in text, text
    with fault_server(tmp_path / "server3", {"models": sorted(encodings(KEY) | encodings(PASSWORD))}) as server:
        host = server.url.removeprefix("http://")
        code, text = cli(tmp_path / "c", f"http://{USER}:{urllib.parse.quote(PASSWORD, safe='')}@{host}")
        printed.append(text)
        assert code == 2 and "does not serve 'fault-model'; it serves " in text and "'***', '***'" in text, text

    rows = _lines(tmp_path / "a" / "records.jsonl")
    assert len(rows) == 5 and sum("***" in r["reply"] + r.get("error", "") for r in rows) == 3  # the echoes, redacted
    shown = json.loads((tmp_path / "a" / "run.json").read_text())["config"]["base_url"]
    assert shown.startswith("http://***@127.0.0.1:") and shown.endswith("/v1"), shown
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.parent.name not in ("server", "server2", "server3")]
    assert sum(p.suffix == ".json" and "http-cache" in p.parts for p in written) == 3  # the echo, the 2 clean answers
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()  # the header, echoed encoded again
    forms = encodings(KEY) | encodings(PASSWORD) | encodings(f"{USER}:{PASSWORD}") | encodings(f"Basic {basic}")
    for path in written:
        data = path.read_bytes()
        leaked = [f for f in forms if f.encode() in data]
        assert not leaked, (path, leaked)
    for text in printed:
        assert not [f for f in forms if f in text], text


def test_urls_are_shown_without_their_credentials() -> None:
    assert shown_url("http://u:pw@127.0.0.1:8000/v1") == "http://***@127.0.0.1:8000/v1"
    assert shown_url("https://TOKEN@api.example/v1?api_key=abc&api-version=2") == \
        "https://***@api.example/v1?api_key=***&api-version=2"
    assert shown_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1" and shown_url(None) is None
    assert set(url_secrets("http://u:p%40ss@h/v1?token=t0k")) == {"p@ss", "u:p@ss", "dTpwQHNz", "t0k"}
    assert url_secrets("https://TOKEN@h/v1") == ("TOKEN",)


@settings(max_examples=60, deadline=None)
@given(secret=st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zs", "Zl", "Zp"),
                                    exclude_characters="*"), min_size=8, max_size=40),
       before=st.text("abc xyz.:;\n", max_size=20), after=st.text("abc xyz.:;\n", max_size=20))
def test_a_secret_is_redacted_in_every_encoding(secret: str, before: str, after: str) -> None:
    """Any secret (quotes, backslashes, /, +, =, non-ASCII), embedded in any text, in each encoding
    (and inside a longer base64 text at each alignment) is gone after redaction."""
    redact = redactor(secret, None)
    for form in encodings(secret):
        assert form not in redact(before + form + after), form
    for pad in (b"", b"u", b"us"):  # Basic base64(user:password): the password at each alignment
        whole = base64.b64encode(pad + b":" + secret.encode()).decode()
        kept = redact(whole)
        assert kept != whole and len(kept.replace("***", "")) <= 8, (whole, kept)
    tree = redact.tree({"a": [secret, {secret: before + secret}], "b": 1})
    assert secret not in json.dumps(tree, ensure_ascii=False)


# --- the http cache --------------------------------------------------------------------------------

def _release_fifo_after(path: Path, seconds: float) -> threading.Event:
    """A reader blocked on the FIFO is released after `seconds` (the event says it had to be)."""
    released = threading.Event()

    def release() -> None:
        time.sleep(seconds)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # succeeds only when a reader waits on it
        except OSError:
            return
        released.set()
        os.close(fd)

    threading.Thread(target=release, daemon=True).start()
    return released


def test_http_cache_entries_are_untrusted_input(small_bench: Path, tmp_path: Path) -> None:
    """An edited answer ("ANSWER: B <poisoned>"), a token count of 1e12 with its sha256 made to
    match, a FIFO, another key's entry copied in, a symbolic link and an entry of no known format:
    each a miss with a warning, asked again, and replaced; the untouched entry is a hit (main:
    the edits trusted, the FIFO hung the run)."""
    cache = tmp_path / "cache"
    kw = dict(requests=("select",), limit=7, http_cache=str(cache))
    with fault_server(tmp_path / "server", {}) as server:
        run(_config(small_bench, tmp_path / "first", server.url, **kw), progress=False)
        entries = sorted(cache.rglob("*.json"))
        assert len(entries) == 7
        first = json.loads(entries[0].read_text())
        first["answer"]["choices"][0]["message"]["content"] = "ANSWER: B <poisoned>"
        entries[0].write_text(json.dumps(first))
        second = json.loads(entries[1].read_text())
        second["answer"]["usage"]["completion_tokens"] = 1e12
        second["answer_sha256"] = answer_sha256(second["answer"])
        entries[1].write_text(json.dumps(second))
        entries[2].unlink()
        os.mkfifo(entries[2])
        shutil.copyfile(entries[6], entries[3])
        entries[4].unlink()
        entries[4].symlink_to(entries[6])
        entries[5].write_text(json.dumps(json.loads(entries[5].read_text())["answer"]))
        released = _release_fifo_after(entries[2], 20)
        before = len(server.posts())
        t = time.monotonic()
        with pytest.warns(OneLineWarning) as caught:
            summary = run(_config(small_bench, tmp_path / "second", server.url, **kw), progress=False)
        assert time.monotonic() - t < 15 and not released.is_set()
        assert len(server.posts()) - before == 6
    res = summary.resources
    assert res["cache_hits"] == 1 and res["requests"] == 6 and res["cache_refused"] == 6
    rows = _lines(tmp_path / "second" / "records.jsonl")
    assert len(rows) == 7 and all(r["valid"] and r["reply"] == "A" for r in rows)
    said = [str(w.message) for w in caught if "http cache entry" in str(w.message)]
    assert len(said) == WARNINGS_SHOWN and all("treated as a miss" in s for s in said)
    assert not [w for w in caught if "cannot write" in str(w.message)]  # a refused link is replaced, not followed
    assert [(p.is_file(), p.is_symlink()) for p in entries] == [(True, False)] * 7  # each replaced: asked again


def test_a_cache_that_cannot_be_written_leaves_every_answer_recorded(small_bench: Path, tmp_path: Path) -> None:
    """--http-cache naming a file: one warning, the run goes on without caching, every record written."""
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder should be\n")
    kw = dict(requests=("select",), limit=4, http_cache=str(blocked))
    with fault_server(tmp_path / "server", {}) as server:
        with pytest.warns(OneLineWarning) as caught:
            run(_config(small_bench, tmp_path / "run", server.url, **kw), progress=False)
    said = [str(w.message) for w in caught if "cannot write the http cache" in str(w.message)]
    assert len(said) == 1 and "goes on without it" in said[0]
    rows = _lines(tmp_path / "run" / "records.jsonl")
    assert len(rows) == 4 and all(r["valid"] for r in rows)


FULL_DISK = 'mount -t tmpfs -o size=4k tmpfs "$1" && dd if=/dev/zero of="$1/fill" bs=4k count=1 2>/dev/null; shift; exec "$@"'


def test_a_full_cache_disk_leaves_every_answer_recorded(small_bench: Path, tmp_path: Path) -> None:
    """The cache on a full disk (a 4 KB tmpfs, filled, in a user namespace): one warning, rc 0, every
    answer recorded (main: the run stopped after the answers were paid for, on every rerun)."""
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True).returncode != 0:
        pytest.skip("no user namespaces here (unshare) to mount a small tmpfs in")
    cache, out = tmp_path / "cache", tmp_path / "run"
    cache.mkdir()
    with fault_server(tmp_path / "server", {}) as server:
        cli = [sys.executable, "-c", "import sys; from evprobe.experiments.cli import main; sys.exit(main(sys.argv[1:]))",
               "run", "--model", "fault-model", "--bench", str(small_bench), "--out", str(out), "--backend", "openai",
               "--base-url", server.url, "--requests", "select", "--limit", "4", "--no-progress",
               "--http-cache", str(cache)]
        done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", FULL_DISK, "sh",
                               str(cache), *cli], capture_output=True, text=True, timeout=300,
                              cwd=Path(__file__).parents[2])
        assert len(server.posts()) == 4
    assert done.returncode == 0, done.stderr[-3000:]
    warned = [x for x in done.stderr.splitlines() if "cannot write the http cache" in x]
    assert len(warned) == 1 and "the disk is full" in warned[0], done.stderr
    rows = _lines(out / "records.jsonl")
    assert len(rows) == 4 and all(r["valid"] for r in rows)


# --- log-probabilities -----------------------------------------------------------------------------

def test_malformed_logprobs_are_left_out_never_zero(small_bench: Path, tmp_path: Path) -> None:
    """+5.0, true, NaN and -Infinity from the server: those letters are missing and the record says
    why; the well-formed one is read (main: log p 0.0 on a valid record)."""
    out = tmp_path / "run"
    kw = dict(requests=("select",), limit=1, option_logprobs=True)
    plan = {"top": [["A", 5.0], ["B", True], ["C", math.nan], ["D", -1.0], ["E", -math.inf]]}
    with fault_server(tmp_path / "server", plan) as server:
        run(_config(small_bench, out, server.url, **kw), progress=False)
        again = run(_config(small_bench, tmp_path / "again", server.url, http_cache=str(out / "http-cache"), **kw),
                    progress=False)
    (row,) = _lines(out / "records.jsonl")
    assert row["valid"] and row["option_logprobs"] == {"D": -1.0}
    why = row["logprobs_missing"]
    for said in ("A is 5.0", "B is true", "C is 'NaN'", "E is '-Infinity'", "not a number in (-inf, 0]"):
        assert said in why, why
    # the answer as cached reads back whole (its NaN and -Infinity kept as text): a hit, the same record
    (reread,) = _lines(tmp_path / "again" / "records.jsonl")
    assert again.resources["cache_hits"] == 1 and {**reread, "seconds": 0} == {**row, "seconds": 0}


def test_numbers_that_are_not_finite_read_back_from_the_cache(tmp_path: Path) -> None:
    answer = untrusted_json('{"a": -1e999, "b": NaN, "c": [Infinity, 0.5, 7]}')
    assert answer == {"a": "-1e999", "b": "NaN", "c": ["Infinity", 0.5, 7]}
    cache = RequestCache(tmp_path / "cache")
    cache.put("ab" * 32, answer)
    assert cache.get("ab" * 32) == answer and cache.rejected == 0


LOGPROB_VALUES = st.one_of(st.floats(), st.booleans(), st.integers(-10**20, 10**20), st.text(max_size=5), st.none(),
                           st.lists(st.integers(), max_size=2))


@settings(max_examples=200, deadline=None)
@given(values=st.lists(LOGPROB_VALUES, min_size=3, max_size=3))
def test_every_letter_is_a_log_probability_or_said_missing(values: list[Any]) -> None:
    letters = ("A", "B", "C")
    answer = {"choices": [{"message": {"content": "A"}, "logprobs": {"content": [
        {"token": "A", "logprob": values[0], "top_logprobs": [{"token": x, "logprob": v}
                                                              for x, v in zip(letters, values)]}]}}]}
    reply = read_answer(answer, letters, AnswerBounds.of(16, 100, 0))
    found = reply.option_logprobs or {}
    for x, v in zip(letters, values):
        if x in found:
            assert type(v) in (int, float) and math.isfinite(v) and v <= 0 and found[x] == float(v)
        else:
            assert f"{x} is " in (reply.logprobs_missing or ""), (x, v, reply)
