"""The public capture writer: your own arrays and labels -> a capture folder the sweep reads."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

import evprobe
from evprobe.probes.capture_writer import write_capture
from evprobe.probes.captures import CaptureError, load_capture, load_captures
from evprobe.probes.label_sets import labels
from evprobe.probes.cli import add_sweep_parser
from evprobe.probes.sweep import SweepConfig, sweep

N_FAMILIES, PER_FAMILY, LAYERS, D = 48, 4, (3, 7, 11), 16
SIGNAL = 1  # layer 7


def _data(seed: int = 0) -> tuple[np.ndarray, list[dict]]:
    """(n, layers, d) float32 with a boolean user label `truthful` planted at layer 7 only; the
    label varies within each family (two of four items true), plus a string and a float field."""
    rng = np.random.default_rng(seed)
    n = N_FAMILIES * PER_FAMILY
    y = np.tile([0, 1, 1, 0], N_FAMILIES)
    u = rng.standard_normal(D)
    u /= np.linalg.norm(u)
    acts = rng.standard_normal((n, len(LAYERS), D)).astype(np.float32)
    acts[:, SIGNAL] += (2.0 * y - 1.0)[:, None] * 1.5 * u  # 3 units between class means
    rows = [{"family_id": f"doc-{i // PER_FAMILY}", "truthful": bool(y[i]), "topic": ("a", "b")[i % 2],
             "score": float(np.float32(i) / 7)} for i in range(n)]
    return acts, rows


def test_user_arrays_sweep_to_the_planted_layer(tmp_path: Path) -> None:
    acts, rows = _data()
    folder = evprobe.write_capture(tmp_path / "mine", acts, rows, layers=list(LAYERS), model="my-model")
    assert evprobe.write_capture is write_capture
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["fields"] == {"truthful": "bool?", "topic": "str?", "score": "number?"}
    assert meta["shape"] == [len(rows), 3, 1, D] and meta["positions"] == ["pos0"] and meta["model"] == "my-model"
    cap = load_capture(folder)
    assert cap.acts.dtype == np.dtype("<f2") and cap.index[5]["item_id"] == "5" and cap.index[5]["family_id"] == "doc-1"
    assert np.allclose(cap.acts[:, :, 0].astype(np.float32), acts, atol=2e-3)
    cs = load_captures([folder])
    ls = labels(cs, "truthful")
    assert ls.n == len(rows) and ls.title == "truthful=True" and ls.varies_within_families
    res = sweep(cs, ls, SweepConfig(n_boot=300, refits=0, nested=True))
    by_layer = {r.layer: r for r in res.rows}
    assert by_layer[7].auroc.value > 0.9 and by_layer[7].auroc.ci[0] > 0.8
    for noise in (3, 11):
        lo, hi = by_layer[noise].auroc.ci
        assert lo < 0.5 + 0.1 and hi > 0.5 - 0.1  # chance within reach of the interval
    assert res.best is not None and res.best.layer == 7
    assert res.control_tasks.skipped == "no cell fields are named"  # no cells in user data: said, not faked


def test_evprobe_sweep_cli_reads_it(tmp_path: Path) -> None:
    acts, rows = _data(1)
    acts4 = np.stack([acts, -acts], axis=2)  # (n, layers, 2 positions, d)
    folder = write_capture(tmp_path / "mine", acts4, rows, layers=list(LAYERS), positions=["a", "b"])
    p = argparse.ArgumentParser(prog="evprobe")
    add_sweep_parser(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(["sweep", str(folder), "--label", "truthful", "--probe", "massmean", "--n-boot", "200",
                         "--no-nested", "--quiet", "--out", str(tmp_path / "s")])
    assert args.run(args) == 0
    data = json.loads((tmp_path / "s" / "sweep.json").read_text())
    top = max(data["rows"], key=lambda r: r["auroc"])
    assert top["layer"] == 7 and top["auroc"] > 0.9 and len(data["rows"]) == 6


def _refusal(tmp_path: Path, acts, rows, **kw) -> str:
    target = tmp_path / "bad"
    with pytest.raises(CaptureError) as info:
        write_capture(target, acts, rows, **kw)
    message = str(info.value)
    assert "\n" not in message  # one line
    assert not (target / "index.jsonl").exists() and not (target / "acts.npy").exists()  # nothing committed
    assert not list(target.glob(".*.tmp")) if target.exists() else True  # no temporary left behind
    return message


def test_bad_inputs_are_refused_with_one_line_each(tmp_path: Path) -> None:
    acts, rows = _data()
    no_family = [dict(r) for r in rows]
    del no_family[3]["family_id"]
    assert "row 3 has no family_id" in _refusal(tmp_path, acts, no_family)
    nan = acts.copy()
    nan[10, 2, 5] = np.nan
    assert "acts row 10 holds NaN or inf" in _refusal(tmp_path, nan, rows)
    inf = acts.copy()
    inf[130, 0, 0] = np.inf  # in a later chunk
    assert "acts row 130 holds NaN or inf" in _refusal(tmp_path, inf, rows)
    big = acts.astype(np.float64)
    big[7, 1, 1] = 1e6
    assert "acts row 7 has values beyond float16's range" in _refusal(tmp_path, big, rows)
    assert "acts has 192 rows but 191 row dicts" in _refusal(tmp_path, acts, rows[:-1])
    assert "dtype complex64" in _refusal(tmp_path, acts.astype(np.complex64), rows)
    assert "dtype object" in _refusal(tmp_path, np.empty((2, 1, 3), dtype=object), rows[:2])
    assert "expected (items, layers, positions, d_model)" in _refusal(tmp_path, acts[:, 0], rows)
    assert "layers [1, 2] must be 3 integers" in _refusal(tmp_path, acts, rows, layers=[1, 2])
    assert "repeat a layer" in _refusal(tmp_path, acts, rows, layers=[1, 1, 2])
    assert 'positions ["a", "b"] must be 1 distinct' in _refusal(tmp_path, acts, rows, positions=["a", "b"])
    nan_label = [dict(r) for r in rows]
    nan_label[4]["score"] = float("nan")
    assert "row 4: field 'score' is nan; write None" in _refusal(tmp_path, acts, nan_label)
    mixed = [dict(r) for r in rows]
    mixed[9]["truthful"] = "yes"
    assert "field 'truthful' mixes value types (bool, str)" in _refusal(tmp_path, acts, mixed)
    listed = [dict(r) for r in rows]
    listed[2]["topic"] = ["a"]
    assert "labels are scalars" in _refusal(tmp_path, acts, listed)
    typed = [dict(r) for r in rows]
    typed[0]["history"] = "one"  # a field of the capture schema keeps its kind
    assert "row 0: field 'history' must be an integer or null" in _refusal(tmp_path, acts, typed)
    reserved = [dict(r) for r in rows]
    reserved[1]["stopped"] = True  # a derived label would shadow it
    assert "field 'stopped' is a name evprobe computes" in _refusal(tmp_path, acts, reserved)
    twice = [dict(r, item_id="x" if i < 2 else str(i)) for i, r in enumerate(rows)]
    assert "rows 0 and 1 share item_id 'x'" in _refusal(tmp_path, acts, twice)
    float_family = [dict(r, family_id=float(i // 4)) for i, r in enumerate(rows)]  # pandas: ints with a NaN
    assert "row 0: field 'family_id' must be a non-empty string or an integer, got 0.0" in _refusal(
        tmp_path, acts, float_family)
    bare = [{"family_id": r["family_id"]} for r in rows]
    assert "carry no label field" in _refusal(tmp_path, acts, bare)


def test_existing_capture_is_kept_unless_overwrite(tmp_path: Path) -> None:
    acts, rows = _data()
    folder = write_capture(tmp_path / "c", acts, rows)
    before = (folder / "acts.npy").read_bytes()
    with pytest.raises(CaptureError, match="already holds a capture"):
        write_capture(folder, acts * 0, rows)
    assert (folder / "acts.npy").read_bytes() == before
    bad = acts.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(CaptureError, match="NaN"):
        write_capture(folder, bad, rows, overwrite=True)  # refused before anything is replaced
    assert (folder / "acts.npy").read_bytes() == before and (folder / "index.jsonl").exists()
    write_capture(folder, acts[:8] * 0, rows[:8], overwrite=True)
    assert load_capture(folder).acts.shape[0] == 8 and len(load_capture(folder).index) == 8


def test_integer_ids_and_numpy_scalars_as_from_pandas(tmp_path: Path) -> None:
    acts, _ = _data()
    rows = [{"family_id": np.int64(i // 4), "item_id": i, "label": np.bool_(i % 2), "level": np.int32(i % 3)}
            for i in range(len(acts))]
    folder = write_capture(tmp_path / "ids", acts.astype(np.float16), rows)
    cap = load_capture(folder)
    assert cap.index[5]["family_id"] == "1" and cap.index[5]["item_id"] == "5" and cap.index[5]["label"] is True
    assert json.loads((folder / "meta.json").read_text())["fields"] == {"label": "bool?", "level": "int?"}


def test_reader_refuses_undeclared_and_bad_declared_fields(tmp_path: Path) -> None:
    acts, rows = _data()
    folder = write_capture(tmp_path / "c", acts, rows)
    meta = json.loads((folder / "meta.json").read_text())
    del meta["fields"]["topic"]  # an undeclared field is refused as before
    (folder / "meta.json").write_text(json.dumps(meta, indent=2))
    with pytest.raises(CaptureError, match="unknown field 'topic'"):
        load_capture(folder)
    meta["fields"] = {"topic": "str?", "truthful": "bool?", "score": "list"}
    (folder / "meta.json").write_text(json.dumps(meta, indent=2))
    with pytest.raises(CaptureError, match="kind 'list'"):
        load_capture(folder)
    meta["fields"] = {"topic": "str?", "truthful": "bool?", "score": "number?", "history": "str?"}
    (folder / "meta.json").write_text(json.dumps(meta, indent=2))
    with pytest.raises(CaptureError, match="redeclares 'history'"):
        load_capture(folder)
    meta["fields"] = {"topic": "str?", "truthful": "int?", "score": "number?"}  # declared, but the values are bools
    (folder / "meta.json").write_text(json.dumps(meta, indent=2))
    with pytest.raises(CaptureError, match="field 'truthful' must be an integer or null"):
        load_capture(folder)
