"""Typed schemas of a run's records.jsonl and a capture's index.jsonl / meta.json (issue 14, item 3).

For each format a damaged copy gives exactly one line, an `InputError` naming FILE:LINE and the
field; the undamaged file reads as before.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import get_type_hints

import numpy as np
import pytest

from evprobe.bench.items import Item
from evprobe.bench.records import RECORDS_FILE, Record, load_records
from evprobe.core.capture_schema import CAPTURE_FORMAT, INDEX_ITEM_TYPES, INDEX_OPTIONAL_ITEM_TYPES, INDEX_TYPES, row_problem
from evprobe.core.errors import InputError
from evprobe.experiments.capture.store import load_index
from evprobe.probes import captures as probe_captures
from evprobe.probes import label_sets as probe_label_sets
from evprobe.probes.synthetic import planted_acts, reference_rows, write_capture


def _one_line_error(call, where: str, field: str) -> str:
    """`call()` raises an InputError whose message is one line naming `where` and `field`."""
    with pytest.raises(InputError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message, message
    assert where in message, message
    assert field in message, message
    return message


def _replace_line(path: Path, number: int, new: bytes) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[number - 1] = new
    path.write_bytes(b"\n".join(lines))


# -- records.jsonl ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_dir(small_bench: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from evprobe.bench.runner import RunConfig, run

    out = tmp_path_factory.mktemp("run") / "run"
    run(RunConfig(model="policy:reference", bench=str(small_bench), out=str(out), limit=20), progress=False)
    return out


def _records_copy(run_dir: Path, tmp_path: Path) -> Path:
    path = tmp_path / RECORDS_FILE
    shutil.copyfile(run_dir / RECORDS_FILE, path)
    return path


def test_undamaged_records_read_as_before(run_dir: Path) -> None:
    path = run_dir / RECORDS_FILE
    lines = path.read_text(encoding="utf-8").splitlines()
    before = {row["item_id"]: Record.from_json(row) for row in map(json.loads, lines)}
    records = load_records(path)
    assert len(records) == 20 and records == before
    assert all(isinstance(r, Record) for r in records.values())
    assert [r.to_json() for r in records.values()] == [json.loads(line) for line in lines]
    probe_rows = probe_label_sets.load_records(run_dir)
    assert probe_rows == {row["item_id"]: row for row in map(json.loads, lines)}


@pytest.mark.parametrize(("field", "value"), [
    ("valid", "false"),
    ("choice", "F"),
    ("seconds", float("nan")),
    ("seconds", float("inf")),
    ("seconds", -1.0),
    ("value", float("-inf")),
    ("n_new_tokens", True),
    ("n_prompt_tokens", -3),
    ("route", None),
])
def test_a_bad_record_field_is_one_line_naming_file_line_and_field(
        run_dir: Path, tmp_path: Path, field: str, value: object) -> None:
    path = _records_copy(run_dir, tmp_path)
    row = json.loads(path.read_text().splitlines()[6])
    row[field] = value
    _replace_line(path, 7, json.dumps(row).encode())  # json.dumps writes NaN / Infinity for those floats
    _one_line_error(lambda: load_records(path), f"{path}:7:", repr(field))


def test_an_unknown_record_field_and_a_duplicate_are_refused(run_dir: Path, tmp_path: Path) -> None:
    path = _records_copy(run_dir, tmp_path)
    lines = path.read_text().splitlines()
    _replace_line(path, 3, json.dumps({**json.loads(lines[2]), "confidence": 0.9}).encode())
    message = _one_line_error(lambda: load_records(path), f"{path}:3:", "'confidence'")
    assert "unknown field" in message
    path.write_text("\n".join([*lines, lines[4]]) + "\n")
    message = _one_line_error(lambda: load_records(path), f"{path}:21:", "item_id")
    assert "line 5" in message


def test_a_record_line_that_is_not_utf8_is_named(run_dir: Path, tmp_path: Path) -> None:
    path = _records_copy(run_dir, tmp_path)
    line = path.read_bytes().split(b"\n")[10]
    _replace_line(path, 11, line.replace(b'"reply": "', b'"reply": "\xff', 1))
    message = _one_line_error(lambda: load_records(path), f"{path}:11:", "UTF-8")
    assert "\n" not in message
    _one_line_error(lambda: probe_label_sets.load_records(path), f"{path}:11:", "UTF-8")


@pytest.mark.parametrize(("field", "value"), [("valid", "false"), ("valid", 1), ("item_id", ""), ("action", 3)])
def test_probes_records_check_the_fields_they_use(run_dir: Path, tmp_path: Path, field: str, value: object) -> None:
    path = _records_copy(run_dir, tmp_path)
    row = json.loads(path.read_text().splitlines()[1])
    row[field] = value
    _replace_line(path, 2, json.dumps(row).encode())
    _one_line_error(lambda: probe_label_sets.load_records(path), f"{path}:2:", repr(field))


# -- a capture's index.jsonl and meta.json -------------------------------------------------------


def test_the_index_schema_fits_the_item_and_what_capture_writes() -> None:
    from evprobe.experiments.capture import FORMAT, INDEX_FIELDS

    assert CAPTURE_FORMAT == FORMAT
    assert tuple(INDEX_ITEM_TYPES) == INDEX_FIELDS
    plain = {"str": str, "id": str, "str?": str | None, "int?": int | None, "bool?": bool | None}
    hints = get_type_hints(Item)
    for name, kind in INDEX_ITEM_TYPES.items():
        assert plain[kind] == hints[name], name
    written = set(INDEX_TYPES) - set(INDEX_ITEM_TYPES) - set(INDEX_OPTIONAL_ITEM_TYPES)
    assert written == {"row", "item_id", "text_span", "n_tokens", "n_image_tokens", "n_text_tokens", "n_clipped"}


def test_the_benchmarks_cell_is_its_design(tmp_path: Path) -> None:
    """BENCHMARK_CELL_FIELDS (kept in core beside the schema: probes import no bench) are item fields
    that cross to the benchmark's 24 cells, every family in one system x initial property."""
    from evprobe.bench.generate import GenerateConfig, generate
    from evprobe.bench.manifest import read_items
    from evprobe.core.capture_schema import BENCHMARK_CELL_FIELDS

    assert set(BENCHMARK_CELL_FIELDS) <= set(INDEX_ITEM_TYPES)
    generate(tmp_path / "bench", GenerateConfig(families_per_system=2, subset_per_cell=0), progress=False)
    select = [it for it in read_items(tmp_path / "bench") if it.request == "select"]
    assert len({tuple(getattr(it, f) for f in BENCHMARK_CELL_FIELDS) for it in select}) == 24
    assert all(len({(it.system, it.initial_property) for it in select if it.family_id == fam}) == 1
               for fam in {it.family_id for it in select})


@pytest.fixture()
def capture_dir(tmp_path: Path) -> Path:
    rows = reference_rows(3, seed=1)
    acts = planted_acts(np.zeros(len(rows)), 2, 2, 8, seed=0)[0]
    return write_capture(tmp_path / "acts", acts, rows)


def _both_index_readers(folder: Path):
    return (lambda: probe_captures.load_capture(folder), lambda: load_index(folder / "index.jsonl"))


def test_undamaged_capture_reads_as_before(capture_dir: Path) -> None:
    lines = [json.loads(line) for line in (capture_dir / "index.jsonl").read_text().splitlines()]
    cap = probe_captures.load_capture(capture_dir)
    assert list(cap.index) == lines and cap.acts.shape == (12, 2, 2, 8)
    assert load_index(capture_dir / "index.jsonl") == {row["row"]: row for row in lines}


@pytest.mark.parametrize(("field", "value"), [
    ("resolved", "false"),
    ("history", "1"),
    ("row", -1),
    ("row", True),
    ("row", 2.0),
    ("item_id", ""),
    ("family_id", 7),
    ("reference_action", False),
])
def test_a_bad_index_field_is_one_line_naming_file_line_and_field(
        capture_dir: Path, field: str, value: object) -> None:
    index = capture_dir / "index.jsonl"
    row = json.loads(index.read_text().splitlines()[4])
    row[field] = value
    _replace_line(index, 5, json.dumps(row).encode())
    for read in _both_index_readers(capture_dir):
        _one_line_error(read, f"{index}:5:", repr(field))


def test_an_unknown_or_missing_index_field_and_a_bad_byte_are_named(capture_dir: Path) -> None:
    index = capture_dir / "index.jsonl"
    original = index.read_bytes()
    row = json.loads(original.split(b"\n")[2])
    _replace_line(index, 3, json.dumps({**row, "label": 1}).encode())
    for read in _both_index_readers(capture_dir):
        assert "unknown field" in _one_line_error(read, f"{index}:3:", "'label'")
    del row["family_id"]
    _replace_line(index, 3, json.dumps(row).encode())
    for read in _both_index_readers(capture_dir):
        assert "missing field" in _one_line_error(read, f"{index}:3:", "'family_id'")
    index.write_bytes(original.replace(b'"system": "', b'"system": "\xfe', 1))
    for read in _both_index_readers(capture_dir):
        _one_line_error(read, f"{index}:1:", "UTF-8")
    index.write_bytes(original)
    _replace_line(index, 2, original.split(b"\n")[0])  # row 0 twice
    message = _one_line_error(lambda: load_index(index), f"{index}:2:", "'row'")
    assert "line 1" in message
    with pytest.raises(InputError, match="listed twice"):
        probe_captures.load_capture(capture_dir)


@pytest.mark.parametrize(("field", "value"), [
    ("shape", [12, 2, 2, 16]),  # acts.npy is (12, 2, 2, 8)
    ("shape", [12, 2, 2]),
    ("shape", [12, 2, 2, "8"]),
    ("format", "evprobe-capture/2"),
    ("layers", ["0", "1"]),
    ("layers", [0, True]),
    ("positions", ["last", 1]),
    ("d_model", 8.0),
])
def test_a_bad_meta_field_is_one_line_naming_file_line_and_field(
        capture_dir: Path, field: str, value: object) -> None:
    path = capture_dir / "meta.json"
    meta = json.loads(path.read_text())
    meta[field] = value
    path.write_text(json.dumps(meta, indent=2) + "\n")
    number = path.read_text().splitlines().index(next(
        line for line in path.read_text().splitlines() if line.startswith(f'  "{field}":'))) + 1
    _one_line_error(lambda: probe_captures.load_capture(capture_dir), f"{path}:{number}:", repr(field))


def test_meta_missing_field_and_bad_byte_are_named(capture_dir: Path) -> None:
    path = capture_dir / "meta.json"
    original = path.read_bytes()
    meta = json.loads(original)
    del meta["format"]
    path.write_text(json.dumps(meta, indent=2) + "\n")
    _one_line_error(lambda: probe_captures.load_capture(capture_dir), f"{path}:1:", "missing field 'format'")
    path.write_bytes(original.replace(b'"model": "', b'"model": "\xff', 1))
    number = original[: original.index(b'"model"')].count(b"\n") + 1
    _one_line_error(lambda: probe_captures.load_capture(capture_dir), f"{path}:{number}:", "UTF-8")


# ---------------------------------------------------------------- the jobs' results rows


RESULT_ROWS = {
    "patching": ({"key": "s>t", "source": "s", "target": "t", "family_id": "f", "system": "spring",
                  "target_resolved": True, "ld_source": 1.5, "ld_target": -0.5, "ld_patched": [[0.1, 0.2]],
                  "top_source": 0, "top_target": 4, "top_patched": [[0, 4]]},
                 [("ld_patched", [[0.1, float("nan")]]), ("top_source", True), ("target_resolved", "true"),
                  ("extra", 1)]),
    "dose-response": ({"item_id": "i", "family_id": "f", "system": "spring", "resolved": False, "variant": None,
                       "condition": "L1.probe.+1", "kind": "probe", "layer": 1, "alpha": 1.0, "direction_index": None,
                       "logprobs": {"A": -0.1, "B": -2.3}, "lp": {"stop": True}},
                      [("alpha", "1"), ("logprobs", {"A": "x"}), ("layer", 1.0), ("kind", None)]),
    "gating": ({"item_id": "i", "family_id": "f", "system": "spring", "request": "select", "resolved": True,
                "condition": "standard.base", "inference": "standard", "direction": None, "alpha": 0.0,
                "logprobs": {"A": -0.1}, "choice": "A", "option": "stop", "abstain": False},
               [("abstain", "false"), ("alpha", float("inf")), ("choice", None)]),
}


@pytest.mark.parametrize("kind", sorted(RESULT_ROWS))
def test_results_rows_are_typed_and_a_bad_field_is_one_line_naming_it(tmp_path: Path, kind: str) -> None:
    from evprobe.core.jobs import JsonlRows
    from evprobe.experiments.gating import config as gating
    from evprobe.experiments.dose_response import job as dose_response
    from evprobe.experiments.patching import job as patching

    key_of = {"patching": lambda r: (r["key"], ""), "dose-response": lambda r: (r["item_id"], r["condition"]),
              "gating": lambda r: (r["item_id"], r["condition"])}[kind]
    good, bad_fields = RESULT_ROWS[kind]
    problem = {"patching": lambda r: patching.row_problem(r, patching.ROW_TYPES, patching.ROW_TYPES, "patching row"),
               "dose-response": dose_response._row_problem,
               "gating": lambda r: row_problem(r, gating.ROW_TYPES, gating.ROW_TYPES, "gating row")}[kind]
    assert problem(good) is None
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(good) + "\n")
    assert len(JsonlRows(path, key_of, check=problem).done()) == 1
    for field, value in bad_fields:
        row = {**good, field: value}
        path.write_text(json.dumps(good) + "\n" + json.dumps(row).replace('"key": "s>t"', '"key": "s>u"')
                        .replace('"condition": "L1.probe.+1"', '"condition": "L2"')
                        .replace('"condition": "standard.base"', '"condition": "guided.base"') + "\n")
        with pytest.raises(InputError) as err:
            JsonlRows(path, key_of, check=problem).done()
        message = str(err.value)
        assert "\n" not in message and message.startswith(f"{path}:2: ") and repr(field) in message, message
