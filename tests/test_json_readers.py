"""Every reader of a JSON file a user or a server can hand us is bounded (core.json_files.parse_json).

The broken input: a JSON value nested 3,000 deep, which Python's parser meets with a RecursionError
(a traceback: RecursionError is no ValueError, so the readers' `except ValueError` let it through).
Each reader here now gives its one-line error, or, for a reader that treats an unreadable file as
absent (a summary part, a hint), its "absent" answer. The readers checked in their own test files
(records, indexes, metas, configs, lock files) are in tests/core/test_json_files.py, test_fuzz.py
and tests/core/test_lock_files.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evprobe.core.errors import InputError
from evprobe.core.json_files import MAX_NESTING

DEEP = '{"a": ' + "[" * 3000 + "]" * 3000 + "}\n"
NESTED = f"nested more than {MAX_NESTING} levels deep"


def deep_file(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(DEEP)
    return path


def test_readers_that_treat_a_bad_file_as_absent_do_so(tmp_path: Path) -> None:
    from evprobe.bench.generate import _is_benchmark
    from evprobe.experiments.layer_sweep.config import SETTINGS_FILE
    from evprobe.experiments.layer_sweep.steps import same_settings
    from evprobe.experiments.report.summary import _load
    from evprobe.experiments.scoring_io import SCORES_JSON, _read_scores

    assert _load(deep_file(tmp_path / "part" / "scores.json")) is None  # the summary leaves the part out
    scores = deep_file(tmp_path / "run" / SCORES_JSON)
    assert _read_scores(tmp_path / "run") == (None, f"{scores} is not valid JSON")
    folder = tmp_path / "sweep"
    deep_file(folder / SETTINGS_FILE)
    assert same_settings(folder, {"a": 1}, ()) is False  # not the same settings: recomputed
    bench = tmp_path / "bench"
    for name in ("families.jsonl", "items.jsonl"):
        deep_file(bench / name)
    deep_file(bench / "bench.json")
    assert _is_benchmark(bench) is False


def test_readers_that_need_the_file_refuse_it_in_one_line(tmp_path: Path) -> None:
    from evprobe.experiments.quickstart import RERUN, headline_lines
    from evprobe.organism.checkpoint import planted_location
    from evprobe.organism.train import STATE_FILE, read_train_state

    scores = deep_file(tmp_path / "quick" / "run" / "scores.json")
    with pytest.raises(InputError) as err:
        headline_lines(tmp_path / "quick")
    assert str(err.value) == f"{scores}:1: arrays or objects {NESTED}; {RERUN}"
    organism = deep_file(tmp_path / "organism" / "organism.json")
    with pytest.raises(InputError, match=rf"^{organism}:1: arrays or objects {NESTED}; retrain it"):
        planted_location(organism.parent)
    state = deep_file(tmp_path / "train" / STATE_FILE)
    with pytest.raises(InputError, match=rf"^{state}:1: arrays or objects {NESTED}; delete the train_state files"):
        read_train_state(state.parent)


def test_a_models_processor_config_is_read_bounded(tmp_path: Path) -> None:
    from evprobe.hooks.loading import _saved_processor_class

    config = deep_file(tmp_path / "model" / "processor_config.json")
    with pytest.raises(InputError, match=rf"{config}:1: arrays or objects {NESTED}; the model's"):
        _saved_processor_class(str(config.parent))
    config.write_text(json.dumps({"processor_class": "LlavaProcessor"}))
    assert _saved_processor_class(str(config.parent)) == "LlavaProcessor"


def test_direction_files_are_read_bounded(tmp_path: Path) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    from evprobe.probes.captures import CaptureError
    from evprobe.probes.directions import FORMAT, TENSOR_KEY, load_direction, read_directions

    vector = tmp_path / "d.safetensors"
    save_file({TENSOR_KEY: np.eye(4, dtype=np.float32)[0]}, str(vector),
              metadata={"format": json.dumps(FORMAT), "name": json.dumps("d"), "layer": DEEP})
    with pytest.raises(CaptureError, match="its metadata values are not JSON text"):
        load_direction(vector)
    index = deep_file(tmp_path / "dirs" / "directions.json")
    with pytest.raises(CaptureError, match=rf"^{index}:1: arrays or objects {NESTED}; move it aside"):
        read_directions(index.parent)
