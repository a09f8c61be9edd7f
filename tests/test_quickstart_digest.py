"""The quickstart digest (tests/quickstart_digest.py) ignores only what varies between two runs: a
changed value, file or tensor fails it; the folder's path and wall-clock fields do not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

import pytest

from tests.quickstart_digest import DIGEST_FILE, accepted, differences, digest, rewritten, with_machine


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


def test_an_entry_accepts_each_machine_kinds_value_and_no_other() -> None:
    """A machine-dependent file is recorded as the list of what main gave on each kind of CPU measured:
    any of them passes, a third value fails."""
    expected = {"acts/acts.npy": ["aaaa", "bbbb"], "run/records.jsonl": "cccc"}
    assert differences({"acts/acts.npy": "bbbb", "run/records.jsonl": "cccc"}, expected) == []
    assert differences({"acts/acts.npy": "aaaa", "run/records.jsonl": "cccc"}, expected) == []
    assert differences({"acts/acts.npy": "dddd", "run/records.jsonl": "cccc"}, expected) == ["changed acts/acts.npy"]
    assert differences({"acts/acts.npy": "aaaa", "run/records.jsonl": "bbbb"}, expected) == ["changed run/records.jsonl"]


def test_write_keeps_other_machines_values_only_for_unchanged_files() -> None:
    expected = {"a": ["x1", "x2"], "b": ["y1", "y2"], "c": "z"}
    assert rewritten({"a": "x2", "b": "y9", "c": "z", "d": "w"}, expected) == {"a": ["x1", "x2"], "b": "y9", "c": "z", "d": "w"}


def test_a_new_machine_is_added_only_for_the_same_files() -> None:
    expected = {"a": "x1", "b": ["y1", "y2"], "c": "z"}
    assert with_machine({"a": "x3", "b": "y1", "c": "z"}, expected) == {"a": ["x1", "x3"], "b": ["y1", "y2"], "c": "z"}
    with pytest.raises(SystemExit, match="new file d"):
        with_machine({"a": "x1", "b": "y1", "c": "z", "d": "w"}, expected)


def test_the_recorded_digest_lists_only_distinct_alternatives() -> None:
    """An entry with alternatives holds two or more different values (a list of one would hide
    nothing, a repeated value would be a copy, not a measurement)."""
    entries = json.loads(DIGEST_FILE.read_text())
    lists = {p: v for p, v in entries.items() if isinstance(v, list)}
    assert lists and all(len(set(v)) == len(v) >= 2 for v in lists.values())
    assert all(accepted(v) == [v] for v in entries.values() if isinstance(v, str))


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
