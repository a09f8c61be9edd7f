"""Schemas of the benchmark's files (bench.schema) and the readers that apply them (bench.manifest).

Each case copies the session's small benchmark, damages one file and expects the one-line
`InputError` naming file, line and field, and the fix; through `evprobe run` and `evprobe check`
the same line is printed and the exit status is 2, with no traceback.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evprobe.bench.family import Family
from evprobe.bench.generate import GenerateConfig, build
from evprobe.bench.items import Item
from evprobe.bench.manifest import FORMAT_KEY, FORMAT_VERSION, read_families, read_items, read_meta, stale_manifests
from evprobe.bench.schema import FamilyRow, ItemRow, row_model
from evprobe.core.errors import InputError
from evprobe.experiments.cli import main

FIX = "; regenerate the benchmark (evprobe generate) or fix the line"


@pytest.fixture
def bench(small_bench: Path, tmp_path: Path) -> Path:
    """A private copy of the session's small benchmark, free to damage."""
    dst = tmp_path / "bench"
    shutil.copytree(small_bench, dst)
    return dst


def _edit_row(path: Path, index: int, edit: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite line `index` (0-based) of a JSONL file after `edit` changes its object in place."""
    lines = path.read_text().splitlines()
    row = json.loads(lines[index])
    edit(row)
    lines[index] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")


def _set(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda row: row.__setitem__(field, value)


def _rehash(bench: Path) -> None:
    """Make bench.json agree with the damaged files (so only the schema can refuse them)."""
    meta = json.loads((bench / "bench.json").read_text())
    for name, key in (("items.jsonl", "items_sha256"), ("families.jsonl", "families_sha256")):
        meta[key] = hashlib.sha256((bench / name).read_bytes()).hexdigest()
    (bench / "bench.json").write_text(json.dumps(meta, indent=2) + "\n")


def _one_line_error(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    """Run the CLI; it must exit 2 and print exactly one line, no traceback. Returns that line."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err, captured.err
    return captured.err.strip()


def _run_argv(bench: Path, out: Path) -> list[str]:
    return ["run", "--model", "policy:reference", "--bench", str(bench), "--out", str(out), "--quiet"]


# -- the reviewer's cases --------------------------------------------------------------------------

ITEM_CASES = [
    # (name, edit of items.jsonl line 1, the error after "items.jsonl:1: ")
    ("resolved as a string", _set("resolved", "false"), "field 'resolved' must be true or false, got 'false'"),
    ("threshold as a string", _set("threshold", "abc"), "field 'threshold' must be a number, got 'abc'"),
    ("options as a string", _set("options", "ABCDE"), "field 'options' must be an object, got 'ABCDE'"),
    ("history as a bool", _set("history", True), "field 'history' must be an integer, got true"),
    ("unknown request", _set("request", "selct"), "field 'request' must be one of 'select', "),
    ("unknown action", _set("reference_action", "teleport"), "field 'reference_action' must be one of 'stop', "),
    ("unknown system", _set("system", "rolling"), "field 'system' must be one of 'sliding', 'bouncing' or 'spring', got 'rolling'"),
    ("unknown answer", _set("reference_answer", "maybe"), "field 'reference_answer' must be one of 'yes', 'no' or 'undetermined', got 'maybe'"),
    ("option letter F", lambda row: row["options"].__setitem__("F", "stop"), "a key of field 'options' must be one of 'A', 'B', 'C', 'D' or 'E', got 'F'"),
    ("negative threshold", _set("threshold", -1.5), "field 'threshold' must be greater than 0, got -1.5"),
    ("threshold NaN", _set("threshold", float("nan")), "field 'threshold' must be a finite number, got NaN"),
    ("empty item id", _set("item_id", ""), "field 'item_id' must be a non-empty string, got ''"),
    ("image path as a number", _set("images", [3]), "field 'images[0]' must be a string, got 3"),
    ("missing field", lambda row: row.pop("family_id"), "missing field 'family_id'"),
    ("unknown field", _set("resolvd", True), "unknown field 'resolvd' (not in format version 1)"),
    ("a select without resolved", _set("resolved", None), "field 'resolved' must be set for a select item, got null"),
    ("select options that are answers", _set("options", {"A": "yes", "B": "no", "C": "undetermined"}),
     "field 'options' must map the letters A, B, C, D, E to stop, test_mass, test_other, free_fall, combined_report, each once"),
    ("a wrong property", _set("initial_property", "stiffness"), "field 'initial_property' must be 'mass' or 'friction' for a sliding item, got 'stiffness'"),
]


@pytest.mark.parametrize("edit, message", [c[1:] for c in ITEM_CASES], ids=[c[0] for c in ITEM_CASES])
def test_a_bad_item_field_is_one_line_naming_file_line_and_field(bench: Path, edit, message: str) -> None:
    _edit_row(bench / "items.jsonl", 0, edit)
    _rehash(bench)  # the schema refuses it even where bench.json's hash was made to agree
    with pytest.raises(InputError) as caught:
        read_items(bench)
    text = str(caught.value)
    assert text.startswith(f"{bench / 'items.jsonl'}:1: {message}") and text.endswith(FIX), text
    assert "\n" not in text


def test_a_reference_letter_must_be_one_the_item_offers(bench: Path) -> None:
    lines = (bench / "items.jsonl").read_text().splitlines()
    number = next(i for i, line in enumerate(lines) if json.loads(line)["request"] == "answer_initial")
    _edit_row(bench / "items.jsonl", number, _set("reference_option", "E"))
    with pytest.raises(InputError, match=rf"items.jsonl:{number + 1}: field 'reference_option' must be one of "
                                         r"the item's option letters A, B, C, got 'E'"):
        read_items(bench)


def test_resolved_as_a_string_stops_evprobe_run_in_one_line(bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The reviewer's case: "false" once turned stop-if-enough from 1.0 into 0.5 with exit 0."""
    _edit_row(bench / "items.jsonl", 0, _set("resolved", "false"))
    out = tmp_path / "run"
    err = _one_line_error(_run_argv(bench, out), capsys)
    assert f"{bench / 'items.jsonl'}:1: field 'resolved' must be true or false, got 'false'{FIX}" in err
    assert not (out / "records.jsonl").exists()
    err = _one_line_error(["check", str(bench)], capsys)
    assert "items.jsonl:1: field 'resolved' must be true or false, got 'false'" in err


@pytest.mark.parametrize("field, value, message", [
    ("threshold", "abc", "field 'threshold' must be a number, got 'abc'"),
    ("options", "ABCDE", "field 'options' must be an object, got 'ABCDE'"),
])
def test_wrong_types_in_items_are_one_line_through_the_cli(bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                                           field: str, value: Any, message: str) -> None:
    _edit_row(bench / "items.jsonl", 0, _set(field, value))
    for argv in (_run_argv(bench, tmp_path / "run"), ["check", str(bench)]):
        assert f"items.jsonl:1: {message}" in _one_line_error(argv, capsys)


def test_a_repeated_item_id_is_refused(bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The reviewer's case: the runner wrote both records and then refused its own folder, and
    `check` failed with "too many values to unpack"."""
    path = bench / "items.jsonl"
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])["item_id"]
    path.write_text("\n".join([*lines, lines[0]]) + "\n")
    n = len(lines) + 1
    expected = f"{path}:{n}: field 'item_id' repeats {first!r} of line 1; item_id values must be unique{FIX}"
    with pytest.raises(InputError) as caught:
        read_items(bench)
    assert str(caught.value) == expected
    out = tmp_path / "run"
    assert _one_line_error(_run_argv(bench, out), capsys) == f"evprobe: error: {expected}"
    assert not (out / "records.jsonl").exists()
    assert _one_line_error(["check", str(bench)], capsys) == f"evprobe: error: {expected}"


def test_a_repeated_family_id_is_refused(bench: Path) -> None:
    path = bench / "families.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines, lines[2]]) + "\n")
    with pytest.raises(InputError, match=rf"families.jsonl:{len(lines) + 1}: field 'family_id' repeats "
                                         r"'bouncing-000' of line 3; family_id values must be unique"):
        read_families(bench)


@pytest.mark.parametrize("edit, message", [
    (_set("candidates", "x"), "field 'candidates' must be an object, got 'x'"),
    (_set("in_subset", "false"), "field 'in_subset' must be true or false, got 'false'"),
    (_set("thresholds", {"low": 2.0, "high": 1.0}), "field 'thresholds' must have low < high"),
    (lambda row: row["candidates"].__setitem__("mass", [1.0]), "field 'candidates.mass' must have at least 2 entries, got [1.0]"),
    (lambda row: row["candidates"].pop("friction"), "field 'candidates' of a sliding family must have the keys 'mass' and 'friction'"),
    (lambda row: row["constants"].pop("J"), "field 'constants' of a sliding family must have the keys 'J', 'g', got [\"g\"]"),
    (_set("options", {"A": "stop", "B": "stop", "C": "test_mass", "D": "free_fall", "E": "combined_report"}),
     "field 'options' must map the letters A, B, C, D, E to stop, test_mass, test_other, free_fall, combined_report, each once"),
    (_set("recover_options", {"A": 0, "B": True}), "field 'recover_options.B' must be an integer, got true"),
    (lambda row: row["calibration"]["test_mass"].__setitem__("force", "2.5"),
     "field 'calibration.test_mass.force' must be a positive number or a list of them, got '2.5'"),
])
def test_a_bad_family_field_is_one_line_naming_file_line_and_field(bench: Path, edit, message: str) -> None:
    _edit_row(bench / "families.jsonl", 0, edit)
    _rehash(bench)
    with pytest.raises(InputError) as caught:
        read_families(bench)
    text = str(caught.value)
    assert text.startswith(f"{bench / 'families.jsonl'}:1: {message}") and text.endswith(FIX), text


def test_candidates_as_a_string_is_one_line_through_run_and_check(bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _edit_row(bench / "families.jsonl", 0, _set("candidates", "x"))
    expected = f"{bench / 'families.jsonl'}:1: field 'candidates' must be an object, got 'x'{FIX}"
    assert _one_line_error(_run_argv(bench, tmp_path / "run"), capsys) == f"evprobe: error: {expected}"
    assert _one_line_error(["check", str(bench)], capsys) == f"evprobe: error: {expected}"


@pytest.mark.parametrize("name, what", [("items.jsonl", "items"), ("families.jsonl", "families")])
def test_an_empty_manifest_is_refused(bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture, name: str, what: str) -> None:
    """The reviewer's cases: an empty items.jsonl ran "0/0" with exit 0; an empty families.jsonl
    gave a traceback."""
    (bench / name).write_text("\n\n")
    expected = f"{bench / name}: holds no {what} (the file is empty); regenerate the benchmark (evprobe generate)"
    with pytest.raises(InputError) as caught:
        (read_items if what == "items" else read_families)(bench)
    assert str(caught.value) == expected
    assert _one_line_error(_run_argv(bench, tmp_path / "run"), capsys) == f"evprobe: error: {expected}"
    assert _one_line_error(["check", str(bench)], capsys) == f"evprobe: error: {expected}"


@pytest.mark.parametrize("name", ["items.jsonl", "families.jsonl"])
def test_a_byte_that_is_not_utf8_names_file_and_line(bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture, name: str) -> None:
    path = bench / name
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b'{"', b'{"\xff', 1)  # line 3 starts {"<0xff>
    path.write_bytes(b"\n".join(lines))
    expected = f"{path}:3: not UTF-8 text (byte 0xff at column 3){FIX}"
    with pytest.raises(InputError) as caught:
        read_items(bench) if name == "items.jsonl" else read_families(bench)
    assert str(caught.value) == expected
    assert _one_line_error(_run_argv(bench, tmp_path / "run"), capsys) == f"evprobe: error: {expected}"
    assert _one_line_error(["check", str(bench)], capsys) == f"evprobe: error: {expected}"


def test_not_json_and_not_an_object_name_the_line(bench: Path) -> None:
    path = bench / "items.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], lines[1][:-3], *lines[2:]]) + "\n")
    with pytest.raises(InputError, match=r"items.jsonl:2: not valid JSON \(.+\); regenerate"):
        read_items(bench)
    path.write_text("\n".join([lines[0], "[1, 2]", *lines[2:]]) + "\n")
    with pytest.raises(InputError, match=r"items.jsonl:2: expected a JSON object, got a list; regenerate"):
        read_items(bench)


# -- the hashes bench.json records ----------------------------------------------------------------


def test_items_hash_is_recomputed_on_read(bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A change that the schema accepts (a prompt edited by hand) is caught by bench.json's hash."""
    _edit_row(bench / "items.jsonl", 5, lambda row: row.__setitem__("prompt", row["prompt"] + " Think hard."))
    digest = hashlib.sha256((bench / "items.jsonl").read_bytes()).hexdigest()
    recorded = json.loads((bench / "bench.json").read_text())["items_sha256"]
    expected = (f"{bench / 'items.jsonl'}: sha256 {digest[:12]}... differs from items_sha256 {recorded[:12]}... "
                f"in {bench / 'bench.json'}: the file changed after generation; regenerate the benchmark "
                f"(evprobe generate --force --out {bench}) or restore the file")
    with pytest.raises(InputError) as caught:
        read_items(bench)
    assert str(caught.value) == expected
    assert _one_line_error(_run_argv(bench, tmp_path / "run"), capsys) == f"evprobe: error: {expected}"
    assert len(read_items(bench, verify_hash=False)) == 312  # `evprobe check` reads without it


def test_families_hash_is_recomputed_on_read(bench: Path, small_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = bench / "families.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(row, indent=None, separators=(",", ":")) + "\n" for row in rows))  # same values
    with pytest.raises(InputError, match=r"families.jsonl: sha256 [0-9a-f]{12}\.\.\. differs from families_sha256 "
                                         r"[0-9a-f]{12}\.\.\. in .*bench.json: the file changed after generation"):
        read_families(bench)
    assert read_families(bench, verify_hash=False) == read_families(small_bench)
    err = _one_line_error(_run_argv(bench, tmp_path / "run"), capsys)  # the policies read the families
    assert "families.jsonl: sha256" in err


def test_stale_manifests_lists_what_the_readers_would_refuse(bench: Path) -> None:
    """`evprobe check` reads with verify_hash=False (it compares every field) and asks this instead."""
    assert stale_manifests(bench) == []
    _edit_row(bench / "items.jsonl", 0, lambda row: row.__setitem__("prompt", row["prompt"] + " "))
    (line,) = stale_manifests(bench)
    with pytest.raises(InputError) as caught:
        read_items(bench)
    assert line == str(caught.value)


def test_a_count_that_disagrees_with_bench_json_is_refused(bench: Path) -> None:
    path = bench / "items.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))
    _rehash(bench)
    with pytest.raises(InputError, match=r"bench.json: n_items is 312 but items.jsonl holds 311; regenerate"):
        read_items(bench)


# -- bench.json ------------------------------------------------------------------------------------


def _edit_meta(bench: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    meta = json.loads((bench / "bench.json").read_text())
    edit(meta)
    (bench / "bench.json").write_text(json.dumps(meta, indent=2) + "\n")


def test_bench_json_carries_the_format_version_and_is_read_without_it(bench: Path) -> None:
    assert read_meta(bench)[FORMAT_KEY] == FORMAT_VERSION == 1
    _edit_meta(bench, lambda meta: meta.pop(FORMAT_KEY))  # a benchmark written before the key
    assert FORMAT_KEY not in read_meta(bench) and len(read_items(bench)) == 312


@pytest.mark.parametrize("edit, message", [
    (_set(FORMAT_KEY, 2), "bench.json:2: field 'format_version' is 2, but this evprobe reads format version 1 only; "
                          "upgrade evprobe to read it, or regenerate the benchmark with this one (evprobe generate --force --out "),
    (_set("items_sha256", 5), "field 'items_sha256' must be a string, got 5"),
    (_set("items_sha256", "abc"), "field 'items_sha256' must be a sha256 digest (64 lowercase hex digits), got 'abc'"),
    (_set("n_items", "312"), "field 'n_items' must be an integer, got '312'"),
    (_set("split", "dev"), "field 'split' must be one of 'main' or 'pilot', got 'dev'"),
    (lambda meta: meta["prices"].__setitem__("stop", -1), "field 'prices.stop' must be at least 0, got -1"),
    (lambda meta: meta.pop("items_sha256"), "bench.json:1: missing field 'items_sha256'"),
    (_set("n_families", 7), "field 'n_families' must be families_per_system x number of systems (2 x 3), got 7"),
])
def test_a_bad_bench_json_is_one_line(bench: Path, edit, message: str) -> None:
    _edit_meta(bench, edit)
    with pytest.raises(InputError) as caught:
        read_items(bench)
    text = str(caught.value)
    assert str(bench / "bench.json") in text and message in text and "regenerate the benchmark" in text, text


def test_bench_json_errors_name_the_line_of_their_key(bench: Path) -> None:
    _edit_meta(bench, _set("n_items", "312"))
    number = next(i for i, line in enumerate((bench / "bench.json").read_text().splitlines(), 1) if '"n_items"' in line)
    with pytest.raises(InputError, match=rf"bench.json:{number}: field 'n_items'"):
        read_meta(bench)


# -- the schemas are the dataclasses' ---------------------------------------------------------------


@pytest.mark.parametrize("cls, model", [(Item, ItemRow), (Family, FamilyRow)])
def test_row_schemas_have_exactly_the_dataclass_fields_in_order(cls: type, model: Any) -> None:
    assert list(model.model_fields) == [f.name for f in dataclasses.fields(cls)]
    # required, except the fields added later with a default (Item.injection: absent means 0; the
    # void fields: absent means no void)
    optional = {f.name for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    assert optional == ({"injection", "void", "twin_id"} if cls is Item else set())
    assert all(f.is_required() == (name not in optional) for name, f in model.model_fields.items())


def test_an_item_row_without_injection_reads_as_level_0_and_a_bad_level_is_refused() -> None:
    from evprobe.bench.schema import item_problem

    _, items = build(GenerateConfig(families_per_system=1, subset_per_cell=0, injection_levels=(2,)))
    row = items[0].to_json()
    assert "injection" not in row and ItemRow.model_validate(row).injection == 0
    level = next(it for it in items if it.injection == 2).to_json()
    assert level["injection"] == 2 and item_problem(ItemRow.model_validate(level)) is None
    with pytest.raises(Exception, match="injection"):
        ItemRow.model_validate({**row, "injection": 4})
    both = next(it for it in items if it.request == "both_given").to_json()
    assert "field 'injection' must be 0 for a both_given item" in item_problem(ItemRow.model_validate({**both, "injection": 1}))


def test_a_schema_type_must_fit_the_dataclass_field() -> None:
    row_model(Item, {"resolved": bool | None})
    with pytest.raises(TypeError, match="does not fit"):
        row_model(Item, {"resolved": int | None})
    with pytest.raises(TypeError, match="does not fit"):
        row_model(Item, {"threshold": float})  # the dataclass allows null
    with pytest.raises(TypeError, match="narrows fields it does not have"):
        row_model(Item, {"resolvd": bool})


def test_reading_returns_exactly_what_was_generated(small_bench: Path) -> None:
    families, items = build(GenerateConfig(families_per_system=2, subset_per_cell=0))
    assert read_families(small_bench) == families
    assert read_items(small_bench) == items
    assert all(type(it.threshold) is float for it in read_items(small_bench) if it.threshold is not None)
