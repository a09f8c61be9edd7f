"""Directions: fit, write, read back with provenance; geometry."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from evprobe.probes.captures import CaptureError, load_captures
from evprobe.probes.label_sets import labels
from evprobe.probes.directions import (
    direction_file,
    direction_name,
    fit_directions,
    load_direction,
    read_directions,
    write_directions,
)
from evprobe.probes.provenance import capture_paths
from evprobe.probes.geometry import cosine_matrix, geometry_markdown, heatmap_png
from evprobe.probes.transfer import conditions


def test_directions_round_trip_with_provenance(planted, tmp_path: Path) -> None:
    path, planted_u = planted
    cs = load_captures([path])
    ls = labels(cs, "resolved")
    found = fit_directions(cs, ls, [8, 16], "last", "massmean")
    assert [d.name for d in found] == ["resolved.massmean.L8.last", "resolved.massmean.L16.last"]
    assert np.dot(found[0].vector, planted_u) > 0.95  # the planted direction, toward resolved
    X = cs.block(cs.layer_index(8), ls.rows, [0])[:, 0].astype(np.float64)
    assert abs(found[0].mean_norm - np.linalg.norm(X, axis=1).mean()) < 1e-6 * found[0].mean_norm
    write_directions(tmp_path / "dirs", found)
    back = read_directions(tmp_path / "dirs")
    d = back["resolved.massmean.L8.last"]
    assert d.vector.dtype == np.float32 and np.allclose(d.vector, found[0].vector)
    prov = d.provenance
    assert (prov["model"], prov["layer"], prov["position"], prov["label"], prov["positive"]) == (
        "synthetic", 8, "last", "resolved", True)
    assert prov["n_items"] == ls.n and len(prov["items"]) == ls.n and prov["n_positive"] == ls.y.sum()
    assert prov["mean_norm"] == pytest.approx(found[0].mean_norm)
    # merging: a second write adds, the same name replaces
    flipped = fit_directions(cs, labels(cs, "resolved=False"), [8], "last", "centroid")
    write_directions(tmp_path / "dirs", flipped)
    back = read_directions(tmp_path / "dirs")
    assert len(back) == 3 and np.dot(back["resolved-false.centroid.L8.last"].vector, planted_u) < -0.95
    assert sorted(p.name for p in (tmp_path / "dirs").iterdir()) == [
        "directions.json", "resolved-false.centroid.L8.last.safetensors", "resolved.massmean.L16.last.safetensors",
        "resolved.massmean.L8.last.safetensors"]


def test_names_have_no_equals_and_split_into_their_parts() -> None:
    assert direction_name("resolved", True, "massmean", 12, "last", "half=half_a") == (
        "resolved.massmean.L12.last.half-half_a")
    assert direction_name("resolved", False, "logistic", 0, "last", None) == "resolved-false.logistic.L0.last"
    assert direction_name("system", "sliding", "centroid", 3, "text_mean", "regime=a.b c") == (
        "system-sliding.centroid.L3.text_mean.regime-a_b_c")  # dots and spaces inside a part become _
    assert direction_name("score", 0.5, "massmean", 1, "pos0", None).split(".") == [
        "score-0_5", "massmean", "L1", "pos0"]
    assert direction_file("resolved.massmean.L1.last") == "resolved.massmean.L1.last.safetensors"


def test_one_file_is_a_whole_direction_for_safetensors_readers(planted, tmp_path: Path) -> None:
    from safetensors import safe_open

    cs = load_captures([planted[0]])
    ls = labels(cs, "resolved")
    conds = [(f"half={c.name}", c.mask) for c in conditions(cs, ls, "half")]
    found = fit_directions(cs, ls, [8], "last", "massmean", conds)
    write_directions(tmp_path, found)
    file = tmp_path / "resolved.massmean.L8.last.half-half_a.safetensors"
    with safe_open(str(file), framework="numpy") as fh:  # what another tool sees
        meta = fh.metadata()
        vec = fh.get_tensor("direction")
    assert vec.dtype == np.float32 and vec.shape == (32,) and np.allclose(vec, found[0].vector)
    assert all(isinstance(v, str) for v in meta.values())
    decoded = {k: json.loads(v) for k, v in meta.items()}
    assert decoded["format"] == "evprobe-direction/1" and decoded["name"] == found[0].name
    assert (decoded["layer"], decoded["position"], decoded["probe"], decoded["label"], decoded["positive"]) == (
        8, "last", "massmean", "resolved", True)
    assert decoded["condition"] == "half=half_a" and decoded["model"] == "synthetic"
    assert decoded["mean_norm"] == pytest.approx(found[0].mean_norm)
    alone = load_direction(file)
    fitted = json.loads(json.dumps(found[0].provenance))
    assert alone.name == found[0].name and alone.provenance == {**fitted, "captures": [os.path.relpath(planted[0], tmp_path)],
                                                                "captures_relative_to": "folder"}
    assert [p.resolve() for p in capture_paths(alone)] == [planted[0].resolve()]  # relative to the file's folder
    assert alone.layer == 8 and np.array_equal(alone.vector, found[0].vector)


def test_reading_refuses_damage_and_paths_out_of_the_folder(planted, tmp_path: Path) -> None:
    from safetensors.numpy import save

    cs = load_captures([planted[0]])
    found = fit_directions(cs, labels(cs, "resolved"), [8, 16], "last")
    folder = tmp_path / "dirs"
    write_directions(folder, found)
    file = folder / direction_file(found[0].name)
    good = file.read_bytes()
    file.write_bytes(good[: len(good) // 2])  # cut short
    with pytest.raises(CaptureError, match="not a readable safetensors file"):
        read_directions(folder)
    file.write_bytes((folder / direction_file(found[1].name)).read_bytes())  # another direction's file
    with pytest.raises(CaptureError, match="holds direction 'resolved.massmean.L16.last'"):
        read_directions(folder)
    file.write_bytes(save({"direction": 2 * found[0].vector}, metadata={"format": json.dumps("evprobe-direction/1"),
                                                                         "name": json.dumps(found[0].name)}))
    with pytest.raises(CaptureError, match="not a unit vector"):
        read_directions(folder)
    file.write_bytes(save({"direction": found[0].vector}, metadata={"name": "plain"}))
    with pytest.raises(CaptureError, match="not JSON text"):
        load_direction(file)
    file.write_bytes(good)
    assert set(read_directions(folder)) == {d.name for d in found}
    index = json.loads((folder / "directions.json").read_text())
    index["directions"][0]["file"] = "../elsewhere.safetensors"
    (folder / "directions.json").write_text(json.dumps(index))
    with pytest.raises(CaptureError, match="plain name"):
        read_directions(folder)
    index["directions"][0]["file"] = "x.pt"
    (folder / "directions.json").write_text(json.dumps(index))
    with pytest.raises(CaptureError, match="neither .safetensors nor .npy"):
        read_directions(folder)


def test_older_npy_folders_are_still_read_never_unpickled(planted, tmp_path: Path) -> None:
    """A folder as written before safetensors: `<label>=<positive>....npy` files named in directions.json."""
    cs = load_captures([planted[0]])
    d = fit_directions(cs, labels(cs, "resolved"), [8], "last")[0]
    folder = tmp_path / "old"
    folder.mkdir()
    old_name = "resolved=True.massmean.L8.last"
    np.save(folder / f"{old_name}.npy", d.vector, allow_pickle=False)
    (folder / "directions.json").write_text(json.dumps(
        {"directions": [{"name": old_name, "file": f"{old_name}.npy", **d.provenance}]}))
    back = read_directions(folder)
    assert list(back) == [old_name] and np.array_equal(back[old_name].vector, d.vector)
    np.save(folder / f"{old_name}.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(CaptureError, match="not a plain numeric"):
        read_directions(folder)


def test_geometry_per_condition(planted, tmp_path: Path) -> None:
    cs = load_captures([planted[0]])
    ls = labels(cs, "resolved")
    conds = [(f"system={c.name}", c.mask) for c in conditions(cs, ls, "system")]
    found = fit_directions(cs, ls, [8, 0], "last", "massmean", conds)
    assert len(found) == 6 and found[0].provenance["condition"] == "system=bouncing"
    assert found[0].name == "resolved.massmean.L8.last.system-bouncing"
    m = cosine_matrix([d.vector for d in found])
    assert m.shape == (6, 6) and np.allclose(np.diag(m), 1) and np.allclose(m, m.T)
    assert (m[:3, :3] > 0.8).all()  # the planted layer: one shared direction across systems
    assert (np.abs(m[3:, :3]) < 0.6).all()  # noise layer vs planted layer
    md = geometry_markdown([d.name for d in found], m)
    assert "system-sliding" in md and "+1.00" in md
    assert heatmap_png(tmp_path / "g.png", [d.name for d in found], m, "t").stat().st_size > 1000


def test_no_direction_where_the_class_means_are_identical(rows: list[dict], tmp_path: Path) -> None:
    """A state that is the same for every row of a family (labels balanced within families) has
    identical class means: rounding noise must not become a "direction" (the organism's layer 0)."""
    from evprobe.probes.capture_writer import write_capture

    fams = sorted({r["family_id"] for r in rows})
    rng = np.random.default_rng(0)
    per_family = {f: rng.standard_normal(16) for f in fams}
    acts = np.stack([per_family[r["family_id"]] for r in rows])[:, None, :]  # (n, 1 layer, d)
    acts = np.concatenate([acts, acts + np.array([r["resolved"] for r in rows], float)[:, None, None]], axis=1)
    cs = load_captures([write_capture(tmp_path / "acts", acts.astype(np.float32), rows, layers=[0, 1])])
    with pytest.warns(UserWarning, match="layer 0/pos0: the two classes' mean states are identical"):
        found = fit_directions(cs, labels(cs, "resolved"), [0, 1], "pos0")
    assert [d.name for d in found] == ["resolved.massmean.L1.pos0"]


def test_heatmap_labels_are_what_varies_between_direction_names() -> None:
    """The broken input: 40-character names as axis labels ran over the plot; the labels are now
    the varying parts (the shared pattern goes to the title), or indexes into the table."""
    from evprobe.probes.geometry import short_labels

    names = [f"resolved=True.massmean.L{layer}.last.half=half_{h}" for layer in (1, 2) for h in "ab"]
    labels, common = short_labels(names)
    assert labels == ["L1 half=half_a", "L1 half=half_b", "L2 half=half_a", "L2 half=half_b"]
    assert common == "resolved=True.massmean.*.last.*"
    labels, common = short_labels(["a.b", "x.y.z" * 10])  # different shapes, too long: indexes
    assert labels == ["0", "1"] and "index" in common
    assert short_labels(["history", "resolved"]) == (["history", "resolved"], "")
