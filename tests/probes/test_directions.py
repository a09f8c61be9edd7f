"""Directions: fit, write, read back with provenance; geometry."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evprobe.probes.captures import CaptureError, labels, load_captures
from evprobe.probes.directions import fit_directions, read_directions, write_directions
from evprobe.probes.geometry import cosine_matrix, geometry_markdown, heatmap_png
from evprobe.probes.transfer import conditions


def test_directions_round_trip_with_provenance(planted, tmp_path: Path) -> None:
    path, planted_u = planted
    cs = load_captures([path])
    ls = labels(cs, "resolved")
    found = fit_directions(cs, ls, [8, 16], "last", "massmean")
    assert [d.name for d in found] == ["resolved=True.massmean.L8.last", "resolved=True.massmean.L16.last"]
    assert np.dot(found[0].vector, planted_u) > 0.95  # the planted direction, toward resolved
    X = cs.block(cs.layer_index(8), ls.rows, [0])[:, 0].astype(np.float64)
    assert abs(found[0].mean_norm - np.linalg.norm(X, axis=1).mean()) < 1e-6 * found[0].mean_norm
    write_directions(tmp_path / "dirs", found)
    back = read_directions(tmp_path / "dirs")
    d = back["resolved=True.massmean.L8.last"]
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
    assert len(back) == 3 and np.dot(back["resolved=False.centroid.L8.last"].vector, planted_u) < -0.95


def test_reading_refuses_pickles_and_paths_out_of_the_folder(planted, tmp_path: Path) -> None:
    cs = load_captures([planted[0]])
    found = fit_directions(cs, labels(cs, "resolved"), [8], "last")
    folder = tmp_path / "dirs"
    write_directions(folder, found)
    np.save(folder / f"{found[0].name}.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(CaptureError, match="not a plain numeric"):
        read_directions(folder)
    index = json.loads((folder / "directions.json").read_text())
    index["directions"][0]["file"] = "../elsewhere.npy"
    (folder / "directions.json").write_text(json.dumps(index))
    with pytest.raises(CaptureError, match="plain name"):
        read_directions(folder)


def test_geometry_per_condition(planted, tmp_path: Path) -> None:
    cs = load_captures([planted[0]])
    ls = labels(cs, "resolved")
    conds = [(f"system={c.name}", c.mask) for c in conditions(cs, ls, "system")]
    found = fit_directions(cs, ls, [8, 0], "last", "massmean", conds)
    assert len(found) == 6 and found[0].provenance["condition"] == "system=bouncing"
    m = cosine_matrix([d.vector for d in found])
    assert m.shape == (6, 6) and np.allclose(np.diag(m), 1) and np.allclose(m, m.T)
    assert (m[:3, :3] > 0.8).all()  # the planted layer: one shared direction across systems
    assert (np.abs(m[3:, :3]) < 0.6).all()  # noise layer vs planted layer
    md = geometry_markdown([d.name for d in found], m)
    assert "system=sliding" in md and "+1.00" in md
    assert heatmap_png(tmp_path / "g.png", [d.name for d in found], m, "t").stat().st_size > 1000
