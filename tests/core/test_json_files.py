"""JSON read from files with limits (core.json_files): depth, long numbers, bad text, one line each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evprobe.core.errors import InputError
from evprobe.core.json_files import MAX_NESTING, nesting, parse_json, read_json_lines, read_json_object

FIX = "move the file aside"
# strings full of what could confuse a bracket count: brackets, quotes, backslashes, escapes
TRICKY = st.text(alphabet=st.sampled_from(list('[]{}"\\/ab\n\t\u00e9\U0001f600')), max_size=12)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TRICKY,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TRICKY, inner, max_size=4),
    max_leaves=30)


def depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


def wrapped(value: Any, levels: int) -> Any:
    for _ in range(levels):
        value = [value]
    return value


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(value=VALUES, levels=st.integers(0, 2 * MAX_NESTING), ascii_only=st.booleans())
def test_nesting_is_the_depth_of_any_json_value(value: Any, levels: int, ascii_only: bool) -> None:
    """Open-ended: for any JSON value, the bracket scan (the vectorised path, past the fast count)
    gives its depth exactly, whatever brackets, quotes and escapes its strings hold."""
    value = wrapped(value, levels)
    text = json.dumps(value, ensure_ascii=ascii_only)
    found = nesting(text)
    if text.count("[") + text.count("{") <= MAX_NESTING:
        assert found >= depth(value)  # the fast path: a bound
    else:
        assert found == depth(value)
    padded = json.dumps([value, "[" * (MAX_NESTING + 1)], ensure_ascii=ascii_only)  # forces the scan
    assert nesting(padded) == depth(value) + 1


def test_the_issues_deep_line_is_one_line_naming_file_and_line(tmp_path: Path) -> None:
    deep = '{"item_id": "a", "x": ' + "[" * 3000 + "]" * 3000 + "}"
    with pytest.raises(InputError) as err:
        parse_json(deep, tmp_path / "r.jsonl", FIX, line=7)
    assert str(err.value) == (f"{tmp_path / 'r.jsonl'}:7: arrays or objects nested more than {MAX_NESTING} "
                              f"levels deep; {FIX}")
    ok = wrapped(1, MAX_NESTING)
    assert parse_json(json.dumps(ok), "f", FIX) == ok


@pytest.mark.parametrize(("text", "expected"), [
    ('{"a": ' + "9" * 5000 + "}", ":3: not valid JSON (Exceeds the limit (4300 digits)"),
    ('{"a":\n\n 1,,}', ":5: not valid JSON (Expecting property name enclosed in double quotes)"),
    ('["' + "[" * 300, ":3: not valid JSON (Unterminated string starting at)"),
])
def test_what_json_loads_refuses_is_one_line(text: str, expected: str) -> None:
    with pytest.raises(InputError) as err:
        parse_json(text, "f.jsonl", FIX, line=3)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_whole_files_and_logs_go_through_the_limit(tmp_path: Path) -> None:
    whole = tmp_path / "meta.json"
    whole.write_text('{"a": ' + "[" * 500 + "]" * 500 + "}\n")
    with pytest.raises(InputError, match=r"meta\.json:1: arrays or objects nested"):
        read_json_object(whole, FIX)
    log = tmp_path / "rows.jsonl"
    log.write_text('{"a": 1}\n[1]\n')
    with pytest.raises(InputError, match=r"rows\.jsonl:2: expected a JSON object, got a list; move"):
        read_json_lines(log, FIX)
    assert read_json_lines(log, FIX, objects=False) == [(1, {"a": 1}), (2, [1])]
    log.write_text('{"a": 1}\n{"b": ' + "{" * 200 + "}" * 200 + "}\n")
    with pytest.raises(InputError, match=r"rows\.jsonl:2: arrays or objects nested"):
        read_json_lines(log, FIX)


def test_the_issues_readers_refuse_a_deep_line_in_one_line(small_bench: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    """The broken input: a 3,000-deep JSON line in records.jsonl was a RecursionError traceback on
    `evprobe run` resume and in `to_dataframe`."""
    from evprobe.core.frames import to_dataframe
    from evprobe.core.jobs import JsonlRows
    from evprobe.experiments.cli import main

    run = tmp_path / "run"
    args = ["run", "--model", "policy:random", "--bench", str(small_bench), "--out", str(run), "--limit", "4", "--quiet"]
    assert main(args) == 0
    records = run / "records.jsonl"
    with records.open("a") as fh:
        fh.write('{"item_id": "deep", "x": ' + "[" * 3000 + "]" * 3000 + "}\n")
    capsys.readouterr()
    assert main([*args[:-3], "--limit", "8", "--quiet"]) == 2  # resume: the runner's read of its own rows
    err = capsys.readouterr().err
    assert err == f"evprobe: error: {records}:5: arrays or objects nested more than {MAX_NESTING} levels deep; move the folder aside\n"
    with pytest.raises(InputError, match=rf"records\.jsonl:5: arrays or objects nested more than {MAX_NESTING}"):
        to_dataframe(records)
    with pytest.raises(InputError, match=r"records\.jsonl:5: arrays or objects nested"):
        JsonlRows(records, lambda row: (row["item_id"], "")).done()
