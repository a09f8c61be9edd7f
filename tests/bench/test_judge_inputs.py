"""`evprobe judge` like every other writer (issue 53, item 6): its inputs checked against their
schemas in one line before any request, the folder lock of RUN and RUN/judged, keys from the
environment only (reaching a real server, on no file), and judge replies read strictly with the
judge's words kept. Every server is a fault_server.py process on 127.0.0.1, stopped by its pid."""

from __future__ import annotations

import base64
import json
import shutil
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evprobe.bench.records import load_records
from evprobe.experiments.cli import main
from tests.bench.test_backend_openai import KEY, FaultServer, _stop
from tests.bench.test_judges import LETTER, _planned, free_run  # noqa: F401 - free_run: the module's fixture
from tests.core.test_lock import holding

UNREACHABLE = ["--judge", "a@http://127.0.0.1:9/v1", "--judge", "b@http://127.0.0.1:9/v1"]


@pytest.fixture()
def run_copy(free_run: Path, tmp_path: Path) -> Path:  # noqa: F811 - the imported fixture
    run = tmp_path / "run"
    shutil.copytree(free_run, run, ignore=shutil.ignore_patterns("judged"))
    return run


@pytest.fixture()
def servers(tmp_path: Path, free_run: Path) -> list[FaultServer]:  # noqa: F811
    """Two judges that read every reply as the rule does, accepting only KEY (EVPROBE_FAULT_KEY)."""
    right = _planned(free_run, lambda it, rec: LETTER[rec.answer])
    started = [FaultServer(tmp_path / f"s{k}", {"models": [f"key-{k}"], "replies": right, "key_env": "EVPROBE_FAULT_KEY"})
               for k in range(2)]
    yield started
    for s in started:
        _stop(s.proc)


def _flags(servers: list[FaultServer]) -> list[str]:
    return [x for k, s in enumerate(servers) for x in ("--judge", f"key-{k}@{s.url}")]


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def _rewrite_line(path: Path, number: int, **fields: object) -> None:
    lines = path.read_text().splitlines()
    row = json.loads(lines[number - 1])
    row.update(fields)
    lines[number - 1] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("text, where", [
    ("{", "run.json:1: not valid JSON"),
    ('{"model": "m", "protocol": 5, "regime": "standard", "items_sha256": "' + "0" * 64 + '", "bench": "b"}',
     "run.json:1: field 'protocol'"),
    ('{\n"model": "m",\n"protocol": "free",\n"regime": "standard",\n"bench": "b"\n}', "missing field 'items_sha256'"),
    ("[]", "run.json:1: expected a JSON object"),
])
def test_a_damaged_run_json_is_one_line_before_any_request(run_copy: Path, servers: list[FaultServer], text: str,
                                                           where: str, capsys: pytest.CaptureFixture[str]) -> None:
    (run_copy / "run.json").write_text(text)
    assert main(["judge", str(run_copy), *_flags(servers), "--api-key-env", "EVPROBE_FAULT_KEY"]) == 2
    err = _one_line(capsys)
    assert where in err and "rerun `evprobe run`" in err
    assert all(s.requests() == [] for s in servers) and not (run_copy / "judged").exists()


@pytest.mark.parametrize("fields, where", [
    ({"item_id": "no-such-item"}, "field 'item_id' is 'no-such-item', not an item of"),
    ({"request": "answer_after_test"}, "field 'request' is 'answer_after_test', but item"),
    ({"valid": "yes"}, "field 'valid'"),
])
def test_a_record_that_is_no_item_of_the_benchmark_is_one_line_naming_its_line(
        run_copy: Path, servers: list[FaultServer], fields: dict, where: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    first = json.loads((run_copy / "records.jsonl").read_text().splitlines()[6])
    if "request" in fields:
        fields = {"request": "answer_after_test" if first["request"] == "answer_initial" else "answer_initial"}
        where = f"field 'request' is {fields['request']!r}, but item"
    _rewrite_line(run_copy / "records.jsonl", 7, **fields)
    assert main(["judge", str(run_copy), *_flags(servers), "--api-key-env", "EVPROBE_FAULT_KEY"]) == 2
    err = _one_line(capsys)
    assert f"records.jsonl:7: {where}" in err, err
    assert all(s.requests() == [] for s in servers) and not (run_copy / "judged").exists()


def test_a_run_of_another_benchmark_is_refused_and_bench_names_the_right_one(
        run_copy: Path, free_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    meta = json.loads((run_copy / "run.json").read_text())
    meta["bench"] = str(tmp_path / "gone")
    (run_copy / "run.json").write_text(json.dumps(meta))
    assert main(["judge", str(run_copy), *UNREACHABLE]) == 2
    assert "bench.json not found; pass the run's benchmark with --bench DIR" in _one_line(capsys)
    # with the right --bench it gets as far as the (unreachable) servers
    assert main(["judge", str(run_copy), *UNREACHABLE, "--bench", str(free_run.parent / "bench")]) == 2
    assert "cannot reach the server at http://127.0.0.1:9/v1" in _one_line(capsys)


MUTATIONS = st.tuples(st.sampled_from(["run.json", "records.jsonl"]), st.sampled_from(["cut", "flip", "insert"]),
                      st.floats(0, 1), st.binary(min_size=1, max_size=4))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutation=MUTATIONS)
def test_damaged_inputs_are_one_line_never_a_traceback(run_copy: Path, free_run: Path, mutation: tuple,
                                                       capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    """A cut, a changed byte or inserted bytes anywhere in run.json or records.jsonl: exit 2 with one
    error line (what would pass every check meets the unreachable judges, also one line)."""
    name, how, where, data = mutation
    for original in ("run.json", "records.jsonl"):
        shutil.copyfile(free_run / original, run_copy / original)
    raw = (free_run / name).read_bytes()
    at = int(where * (len(raw) - 1))
    raw = raw[:at] if how == "cut" else raw[:at] + data + raw[at + (how == "flip"):]
    (run_copy / name).write_bytes(raw)
    capsys.readouterr()
    assert main(["judge", str(run_copy), *UNREACHABLE]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("evprobe: error: ") and not any("Traceback" in x for x in err), err


@pytest.mark.parametrize("held", [".", "judged"])
def test_a_run_being_written_or_judged_refuses_the_judge(run_copy: Path, servers: list[FaultServer], held: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    before = (run_copy / "records.jsonl").read_bytes()
    with holding(run_copy / held, "evprobe run" if held == "." else "evprobe judge"):
        assert main(["judge", str(run_copy), *_flags(servers), "--api-key-env", "EVPROBE_FAULT_KEY"]) == 2
    err = _one_line(capsys)
    assert f"{run_copy / held} is being written by evprobe" in err  # run_copy / "." is run_copy
    assert "wait for it to finish, then judge the run" in err
    assert all(s.requests() == [] for s in servers) and (run_copy / "records.jsonl").read_bytes() == before


def test_the_key_comes_from_the_environment_reaches_the_server_and_no_file(
        run_copy: Path, servers: list[FaultServer], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("EVPROBE_JUDGE_KEY", KEY)
    assert main(["judge", str(run_copy), *_flags(servers), "--api-key-env", "EVPROBE_JUDGE_KEY", "--n-boot", "50"]) == 0
    for s in servers:  # every request carried it: the server answers 401 otherwise
        assert s.posts() and all(r["key_ok"] for r in s.requests())
    result = json.loads((run_copy / "judged" / "judge.json").read_text())
    assert [j["api_key_env"] for j in result["judges"]] == ["EVPROBE_JUDGE_KEY"] * 2
    assert result["panel_undecided"] == 0 and result["rule_vs_panel"]["value"] == 1.0
    _assert_nowhere(KEY, run_copy)


def _assert_nowhere(key: str, run: Path, skip: str | None = None) -> None:
    """The key in none of the files under run (raw, JSON-escaped, URL-encoded, base64)."""
    forms = [key, json.dumps(key)[1:-1], urllib.parse.quote(key), base64.b64encode(key.encode()).decode(),
             base64.b64encode(f"Bearer {key}".encode()).decode()]
    files = [p for p in run.rglob("*") if p.is_file() and (skip is None or skip not in p.parts)]
    assert files
    for path in files:
        data = path.read_bytes()
        assert not any(f.encode() in data for f in forms), path


def test_keys_never_come_from_a_flag_value_and_a_missing_key_is_one_line(
        run_copy: Path, servers: list[FaultServer], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["judge", str(run_copy), *_flags(servers), "--api-key-env", KEY]) == 2  # the key pasted as the name
    err = _one_line(capsys)
    assert "the NAME of an environment variable" in err and KEY not in err
    monkeypatch.delenv("EVPROBE_UNSET_KEY", raising=False)
    assert main(["judge", str(run_copy), *_flags(servers), "--api-key-env", "EVPROBE_UNSET_KEY"]) == 2
    assert "the environment variable EVPROBE_UNSET_KEY is not set" in _one_line(capsys)
    assert all(s.requests() == [] for s in servers)
    assert main(["judge", str(run_copy), *_flags(servers)]) == 2  # no key: the first server refuses it
    assert "refused a request without a key" in _one_line(capsys)
    assert all(s.posts() == [] for s in servers)
    assert main(["judge", str(run_copy), *_flags(servers), *["--api-key-env", "EVPROBE_FAULT_KEY"] * 3]) == 2
    assert "--api-key-env given 3 times for 2 judges" in _one_line(capsys)
    assert not (run_copy / "judged").exists()


def test_replies_that_name_two_letters_are_no_decision_kept_with_the_judges_words(
        run_copy: Path, free_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Judges answering "A is wrong; the answer is C" (the old reader: A), a terminal escape and the
    key, or a letter with another letter's words and, to every other request, a refusal echoing the
    key: none decides, the words are kept escaped, the key is in none of RUN/judged's files."""
    right = _planned(free_run, lambda it, rec: LETTER[rec.answer])
    hostile = {"A is wrong; the answer is C": {}, f"\x1b[31mA\x1b[0m {KEY}": {},
               # every other request refused, echoing the key (all refused alike would stop the run, rightly)
               "A) It answers no.": {"faults": {d: ["echo_key"] * 4 for d in sorted(right)[::2]}}}
    servers = [FaultServer(tmp_path / f"r{k}", {"models": [f"r-{k}"], "replies": right, "key_env": "EVPROBE_FAULT_KEY"})
               for k in range(2)]
    servers += [FaultServer(tmp_path / f"h{k}", {"models": [f"h-{k}"], "reply": reply, "key_env": "EVPROBE_FAULT_KEY",
                                                 **extra}) for k, (reply, extra) in enumerate(hostile.items())]
    monkeypatch.setenv("EVPROBE_JUDGE_KEY", KEY)
    flags = [x for s, name in zip(servers, ["r-0", "r-1", "h-0", "h-1", "h-2"]) for x in ("--judge", f"{name}@{s.url}")]
    try:
        assert main(["judge", str(run_copy), *flags, "--api-key-env", "EVPROBE_JUDGE_KEY", "--n-boot", "50"]) == 0
    finally:
        for s in servers:
            _stop(s.proc)
    out = run_copy / "judged"
    rows = [json.loads(x) for x in (out / "judgments.jsonl").read_text().splitlines()]
    assert len(rows) == 108
    for r in rows:
        assert [r["judges"][f"h-{k}"] for k in range(3)] == [None] * 3
        assert r["invalid"] | {"h-2": None} == {"h-0": {"reply": "A is wrong; the answer is C"},
                                                "h-1": {"reply": "\\x1b[31mA\\x1b[0m ***"}, "h-2": None}
        assert r["invalid"]["h-2"] in ({"error": "HTTP 400: bad request from Bearer ***"},
                                       {"reply": "A) It answers no."})
        assert r["panel"] is None  # 2 of 5 decisions: no strict majority, scored invalid
    assert {next(iter(r["invalid"]["h-2"])) for r in rows} == {"error", "reply"}
    result = json.loads((out / "judge.json").read_text())
    assert result["no_decision"] == {"r-0": 0, "r-1": 0, "h-0": 108, "h-1": 108, "h-2": 108}
    judged = load_records(out / "records.jsonl")
    assert len(judged) == 108 and not any(r.valid for r in judged.values())
    _assert_nowhere(KEY, run_copy, skip="http-cache")  # the cache is the openai backend's (issue 53 item 2)


@pytest.mark.parametrize("spec, model, shown", [
    ("judge-a@http://127.0.0.1:8000/v1", "judge-a", "http://127.0.0.1:8000/v1"),
    ("org/m@v2@https://user:p%40ss@host.example/v1", "org/m@v2", "https://***@host.example/v1"),
])
def test_a_judge_is_model_at_url_and_judge_json_names_no_password(spec: str, model: str, shown: str) -> None:
    from evprobe.bench.judges import Judge

    judge = Judge.parse(spec)
    assert judge.model == model and judge.shown_url == shown


@pytest.mark.parametrize("spec", ["http://127.0.0.1:8000/v1", "m@ftp://host", "m@http://", "\x1b[2Jm@http://h/v1",
                                  "m@http://h/v1 extra"])
def test_a_judge_spec_that_is_not_model_at_url_is_one_line(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["judge", "RUN", "--judge", spec, "--judge", "b@http://127.0.0.1:9/v1"]) == 2
    err = _one_line(capsys)
    assert "write MODEL@URL" in err and "\x1b" not in err
