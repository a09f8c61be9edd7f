"""A direction's capture is found from the file that names it and checked to be the one it was fitted
on (issue 53 item 7): never from the working directory, where another project's capture of the same
width supplied the control and relabelled directions. Real capture folders, real symlinks."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from evprobe.analysis.label_null import direction_rows
from evprobe.core.errors import InputError
from evprobe.probes.captures import CaptureError, load_captures
from evprobe.probes.label_sets import labels
from evprobe.probes.directions import direction_file, fit_directions, read_directions, write_directions
from evprobe.probes.provenance import capture_paths
from evprobe.probes.synthetic import planted_acts, write_capture

NAME = "resolved.massmean.L8.last"


def _project(root: Path, rows: list[dict], seed: int = 11, model: str = "synthetic", **meta) -> Path:
    """root/acts (a capture of `rows`; `meta` written into its meta.json) and root/dirs, its directions."""
    y = np.array([r["resolved"] for r in rows], dtype=int)
    acts, _ = planted_acts(y, 5, 2, 32, signal_layers=[2], strength=4.0, seed=seed)
    path = write_capture(root / "acts", acts, rows, layers=[0, 4, 8, 12, 16], model=model)
    if meta:
        data = json.loads((path / "meta.json").read_text())
        (path / "meta.json").write_text(json.dumps({**data, **meta}))
    cs = load_captures([path])
    write_directions(root / "dirs", fit_directions(cs, labels(cs, "resolved"), [8], "last"))
    return root / "dirs"


def _one_line(error: type[Exception], match: str, call) -> str:
    with pytest.raises(error, match=match) as err:
        call()
    assert "\n" not in str(err.value)
    return str(err.value)


def test_the_capture_is_found_from_the_directions_folder_not_the_working_directory(rows, tmp_path, monkeypatch):
    """The writer stores "../acts" (relative to dirs/); run from a folder where "../acts" is another
    project's capture of the same model, width and items (the decoy), the rows still come from the
    direction's own capture; with that capture gone, one line names it and the decoy is never read."""
    dirs = _project(tmp_path / "proj", rows)
    entry = json.loads((dirs / "directions.json").read_text())["directions"][0]
    assert entry["captures"] == ["../acts"] and entry["captures_relative_to"] == "folder"
    _project(tmp_path / "other", rows, seed=99)  # the decoy: other activations, same shape and items
    (tmp_path / "other" / "deep").mkdir()
    monkeypatch.chdir(tmp_path / "other" / "deep")  # "../acts" from here is the decoy
    d = read_directions(dirs)[NAME]
    assert capture_paths(d) == [dirs / "../acts"]
    own = load_captures([tmp_path / "proj" / "acts"])
    X = own.block(own.layer_index(8), labels(own, "resolved").rows, [0])[:, 0]
    assert np.array_equal(direction_rows(d).acts, X)
    shutil.rmtree(tmp_path / "proj" / "acts")
    message = _one_line(InputError, "cannot read the rows", lambda: direction_rows(d))
    assert str(dirs / "../acts") in message and "other" not in message


def test_a_copied_folder_is_rewritten_relative_to_its_new_place(rows, tmp_path):
    dirs = _project(tmp_path / "proj", rows)
    write_directions(tmp_path / "elsewhere" / "deep" / "dirs", read_directions(dirs).values())
    moved = read_directions(tmp_path / "elsewhere" / "deep" / "dirs")[NAME]
    assert moved.provenance["captures"] == ["../../../proj/acts"]
    assert [p.resolve() for p in capture_paths(moved)] == [(tmp_path / "proj" / "acts").resolve()]


def test_a_path_relative_to_an_unknown_working_directory_is_refused_with_the_refit(rows, tmp_path, monkeypatch):
    """A folder written before this release stored the path as typed ("acts", relative to wherever
    the fit ran): no file says where that was, so the rows are refused with the command to refit."""
    dirs = _project(tmp_path, rows)
    index = json.loads((dirs / "directions.json").read_text())
    for e in index["directions"]:
        e["captures"] = ["acts"]
        del e["captures_relative_to"]
    (dirs / "directions.json").write_text(json.dumps(index, indent=2))
    monkeypatch.chdir(tmp_path)  # where "acts" would have resolved before: not read
    d = read_directions(dirs)[NAME]  # the direction itself still reads (steering needs no capture)
    _one_line(InputError, r"directions.json:\d+: capture path 'acts' is relative to the working directory of an "
              r"older `evprobe directions` run.*refit: `evprobe directions CAPTURE --layer 8 --out .*dirs`",
              lambda: direction_rows(d))
    index["directions"][0]["captures"] = [str(tmp_path / "acts")]  # an absolute path is used as it is
    (dirs / "directions.json").write_text(json.dumps(index, indent=2))
    assert direction_rows(read_directions(dirs)[NAME]).acts.shape[1] == 32


def test_a_capture_of_another_model_is_refused_naming_both_files_and_the_field(rows, tmp_path):
    dirs = _project(tmp_path, rows, model_weights_sha256="a" * 64)
    d = read_directions(dirs)[NAME]
    assert d.provenance["model_fingerprint"] == {"model_weights_sha256": "a" * 64}
    meta_path = tmp_path / "acts" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "model": "other"}))
    message = _one_line(InputError, r"meta.json: field 'model' is 'other' but .*directions.json:\d+ says the "
                        r"direction was fitted on 'synthetic'", lambda: direction_rows(d))
    assert str(dirs / "../acts/meta.json") in message and str(dirs / "directions.json") in message
    meta_path.write_text(json.dumps({**meta, "model_weights_sha256": "b" * 64}))  # same name, other weights
    _one_line(InputError, r"meta.json: field 'model_weights_sha256' is 'bbb.* but .*directions.json:\d+ records "
              r"'aaa.*another model of the same name", lambda: direction_rows(d))


def test_a_capture_without_the_fit_items_or_with_other_labels_is_refused(rows, tmp_path):
    dirs = _project(tmp_path, rows)
    d = read_directions(dirs)[NAME]
    y = np.array([r["resolved"] for r in rows], dtype=int)
    acts, _ = planted_acts(y, 5, 2, 32, seed=11)
    write_capture(tmp_path / "acts", acts[:-4], rows[:-4], layers=[0, 4, 8, 12, 16])  # one family fewer
    _one_line(InputError, rf"index.jsonl: item '{rows[-4]['item_id']}' of .*directions.json:\d+ \('items': 4 of "
              rf"{len(rows)} missing\) is not in the capture", lambda: direction_rows(d))
    flipped = [{**r, "resolved": not r["resolved"]} if i < 3 else r for i, r in enumerate(rows)]
    write_capture(tmp_path / "acts", acts, flipped, layers=[0, 4, 8, 12, 16])
    _one_line(InputError, r"its labels give n_positive \d+ on the direction's items, but .* says 144",
              lambda: direction_rows(d))


def test_a_vector_file_whose_metadata_disagrees_with_the_index_is_refused(rows, tmp_path):
    dirs = _project(tmp_path, rows)
    index = json.loads((dirs / "directions.json").read_text())
    index["directions"][0]["model"] = "other"
    (dirs / "directions.json").write_text(json.dumps(index, indent=2))
    _one_line(CaptureError, rf"{direction_file(NAME)}: its metadata says model 'synthetic' but .*directions.json:3 "
              "says 'other'", lambda: read_directions(dirs))


def test_a_vector_symlinked_outside_its_folder_is_refused(rows, tmp_path):
    dirs = _project(tmp_path, rows)
    file = dirs / direction_file(NAME)
    outside = tmp_path / "outside.safetensors"
    shutil.move(file, outside)
    os.symlink(outside, file)
    _one_line(CaptureError, rf"{direction_file(NAME)}: a symlink to .*outside.safetensors, outside .*dirs",
              lambda: read_directions(dirs))
    (dirs / "sub").mkdir()
    shutil.move(outside, dirs / "sub" / "kept.safetensors")
    file.unlink()
    os.symlink(Path("sub") / "kept.safetensors", file)  # a link inside the folder is the folder's own file
    assert NAME in read_directions(dirs)
