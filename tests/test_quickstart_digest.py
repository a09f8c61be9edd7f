"""The quickstart digest (tests/quickstart_digest.py) ignores only what varies between two runs: a
changed value, file or tensor fails it; the folder's path and wall-clock fields do not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

import pytest

from tests.quickstart_digest import (differences, digest, machine_kind, read_digest, rewritten, unmeasured,
                                     with_machine)


def _write(folder: Path, value: float, seconds: float, tensor: np.ndarray) -> Path:
    (folder / "run").mkdir(parents=True)
    (folder / "run" / "run.json").write_text(json.dumps({"out": f"{folder}/run", "auroc": value, "seconds": seconds}))
    (folder / "run" / "records.jsonl").write_text(json.dumps({"id": "a", "seconds": seconds}) + "\n")
    (folder / "run" / "scores.md").write_text(f"| hf | 1 | 288 | 166464 | 27072 | {seconds} | 6943.73 | not measured |\n")
    save_file({"v": tensor}, str(folder / "d.safetensors"), metadata={"captures": f"{folder}/acts"})
    return folder


def test_paths_and_timings_do_not_count_values_do(tmp_path: Path) -> None:
    v = np.arange(4, dtype=np.float32) / 7
    base = digest(_write(tmp_path / "a", 0.75, 1.0, v))
    assert differences(digest(_write(tmp_path / "b", 0.75, 2.5, v)), base) == []
    assert differences(digest(_write(tmp_path / "c", 0.76, 1.0, v)), base) == ["changed run/run.json"]
    assert differences(digest(_write(tmp_path / "d", 0.75, 1.0, v + 1e-3)), base) == ["changed d.safetensors"]
    e = _write(tmp_path / "e", 0.75, 1.0, v)
    (e / "run" / "extra.md").write_text("x")
    (e / "run" / "records.jsonl").unlink()
    assert differences(digest(e), base) == ["new file run/extra.md", "missing file run/records.jsonl"]


def test_library_versions_do_not_count_the_capture_record_does(tmp_path: Path) -> None:
    def meta(folder: Path, transformers: str, layers: list[int]) -> dict[str, str]:
        (folder / "acts").mkdir(parents=True)
        (folder / "acts" / "meta.json").write_text(json.dumps({"layers": layers, "versions": {"transformers": transformers}}))
        return digest(folder)

    base = meta(tmp_path / "a", "5.24.0", [0, 1])
    assert differences(meta(tmp_path / "b", "5.25.0", [0, 1]), base) == []  # a release is not an output
    assert differences(meta(tmp_path / "c", "5.24.0", [0, 2]), base) == ["changed acts/meta.json"]


def test_a_per_kind_entry_is_compared_on_its_kind_and_on_no_other() -> None:
    """A machine-dependent file is recorded per kind of CPU measured: on a recorded kind only that
    kind's value passes (another kind's fails), on a kind not recorded it is not compared at all."""
    expected = {"acts/acts.npy": {"k1": "aaaa", "k2": "bbbb"}, "run/records.jsonl": "cccc"}
    assert differences({"acts/acts.npy": "bbbb", "run/records.jsonl": "cccc"}, expected, "k2") == []
    assert differences({"acts/acts.npy": "aaaa", "run/records.jsonl": "cccc"}, expected, "k2") == ["changed acts/acts.npy"]
    assert differences({"acts/acts.npy": "dddd", "run/records.jsonl": "cccc"}, expected, "k1") == ["changed acts/acts.npy"]
    assert differences({"acts/acts.npy": "aaaa", "run/records.jsonl": "bbbb"}, expected, "k1") == ["changed run/records.jsonl"]
    # an unrecorded kind: the per-kind file is listed as not compared, every other file still is
    assert differences({"acts/acts.npy": "dddd", "run/records.jsonl": "cccc"}, expected, "k3") == []
    assert unmeasured(expected, "k3") == ["acts/acts.npy"] and unmeasured(expected, "k1") == []
    assert differences({"acts/acts.npy": "dddd", "run/records.jsonl": "eeee"}, expected, "k3") == \
        ["changed run/records.jsonl"]
    assert differences({"run/records.jsonl": "cccc"}, expected, "k3") == ["missing file acts/acts.npy"]


def test_write_keeps_other_kinds_values_only_for_unchanged_files() -> None:
    expected = {"a": {"k1": "x1", "k2": "x2"}, "b": {"k1": "y1", "k2": "y2"}, "c": "z"}
    assert rewritten({"a": "x2", "b": "y9", "c": "z", "d": "w"}, expected, "k2") == \
        {"a": {"k1": "x1", "k2": "x2"}, "b": {"k2": "y9"}, "c": "z", "d": "w"}
    with pytest.raises(SystemExit, match="--add-machine"):  # a kind with no values: measured nothing to keep
        rewritten({"a": "x2", "b": "y2", "c": "z"}, expected, "k3")


def test_a_new_machine_is_added_only_for_the_same_files() -> None:
    expected = {"a": "x1", "b": {"k1": "y1"}, "c": "z"}
    assert with_machine({"a": "x3", "b": "y2", "c": "z"}, expected, "k2", written_on="k1") == \
        {"a": {"k1": "x1", "k2": "x3"}, "b": {"k1": "y1", "k2": "y2"}, "c": "z"}
    with pytest.raises(SystemExit, match="new file d"):
        with_machine({"a": "x1", "b": "y1", "c": "z", "d": "w"}, expected, "k2", written_on="k1")
    with pytest.raises(SystemExit, match="main has changed"):  # a recorded kind's value is not overwritten
        with_machine({"a": "x1", "b": "y9", "c": "z"}, expected, "k1", written_on="k1")


def test_the_machine_kind_is_stable_here_and_follows_the_numerics(monkeypatch: pytest.MonkeyPatch) -> None:
    import tests.quickstart_digest as qd

    first, again = machine_kind(), machine_kind()
    assert first == again and len(first.key) == 12 and "torch" in first.label
    monkeypatch.setattr(qd, "_numerics", lambda: b"other bits")  # a CPU whose kernels round otherwise
    assert machine_kind().key != first.key and machine_kind().label == first.label


def test_the_recorded_digest_names_its_kinds_and_lists_only_distinct_values() -> None:
    """A per-kind entry holds values of named kinds (every kind named is used), and no two kinds of
    one entry hold one value only by copy: a single-valued per-kind entry is a measurement on one kind."""
    recorded = read_digest()
    entries, kinds = recorded["files"], recorded["kinds"]
    per_kind = {p: v for p, v in entries.items() if isinstance(v, dict)}
    assert per_kind and all(set(v) <= set(kinds) and v for v in per_kind.values())
    assert {k for v in per_kind.values() for k in v} == set(kinds)
    assert recorded["written_on"] in kinds
    assert all(len(v) == 16 for v in entries.values() if isinstance(v, str))


def test_a_moved_dose_response_module_reads_as_cited_before_and_nothing_else_does(tmp_path: Path) -> None:
    # the subpackage move changed only these citations; any other text change still counts
    moved, before = tmp_path / "moved", tmp_path / "before"
    for folder, cite in ((moved, "experiments.dose_response.specificity, experiments.dose_response.formatting"),
                         (before, "experiments.dose_specificity, experiments.dose_format")):
        folder.mkdir()
        (folder / "dose_response.md").write_text(f"specific at p <= 0.05 ({cite})\n")
    assert digest(moved) == digest(before)
    (moved / "dose_response.md").write_text("specific at p <= 0.05 (experiments.dose_response.job)\n")
    assert digest(moved) != digest(before)
    (moved / "dose_response.md").write_text("specific at p <= 0.01 (experiments.dose_specificity, "
                                            "experiments.dose_format)\n")
    assert digest(moved) != digest(before)
