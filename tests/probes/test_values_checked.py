"""Values checked before statistics (issue 29, item 2): captures holding NaN or inf are refused at
read (or their families dropped on request), directions are validated before any product, the
degeneracy verdict is robust to a few extreme rows, and no printed number reads "nan"."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evprobe.core.errors import InputError, OneLineWarning
from evprobe.probes.captures import CaptureError, load_capture, load_captures, nonfinite_rows
from evprobe.probes.label_sets import NONFINITE_DROPPED, labels
from evprobe.probes.controls import EXTREME_SDS, robust_spread, within_family_variance
from evprobe.probes.directions import (
    Direction,
    check_width,
    direction_bytes,
    direction_file,
    fit_directions,
    read_directions,
    write_directions,
)
from evprobe.probes import nonfinite
from evprobe.probes.geometry import geometry_markdown, number_text
from evprobe.probes.report import sweep_markdown
from evprobe.probes.sweep import SweepConfig, sweep
from evprobe.probes.synthetic import planted_acts, reference_rows, write_capture

LAYERS = [0, 4, 8]
FAST = {"n_boot": 100, "refits": 0, "control_tasks": 0, "nested": False, "leakage_shuffles": 2}


def _capture(path: Path, n_families: int = 6, d: int = 8, seed: int = 0, indexed: list[int] | None = None) -> Path:
    rows = reference_rows(n_families, seed=seed)
    y = np.array([r["resolved"] for r in rows], dtype=int)
    acts, _ = planted_acts(y, len(LAYERS), 2, d, signal_layers=[1], seed=seed)
    return write_capture(path, acts, rows, layers=LAYERS, indexed=indexed)


def _poke(folder: Path, cell: tuple[int, int, int, int], value: float) -> float:
    """Write `value` into one cell of acts.npy (as a damaged file would hold it); the old value."""
    acts = np.load(folder / "acts.npy", mmap_mode="r+")
    old = float(acts[cell])
    acts[cell] = value
    acts.flush()
    del acts
    return old


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text and isinstance(err.value, InputError)
    return text


# -- captures: refused at read -------------------------------------------------------------------


@pytest.mark.parametrize("value, kind", [(np.nan, "NaN"), (np.inf, "inf"), (-np.inf, "-inf")])
def test_a_non_finite_cell_is_refused_naming_file_row_item_layer_and_position(tmp_path: Path, value: float,
                                                                             kind: str) -> None:
    folder = _capture(tmp_path / "acts")
    _poke(folder, (10, 1, 0, 5), value)
    with pytest.raises(CaptureError) as err:
        load_capture(folder)
    text = _one_line(err)
    item = json.loads((folder / "index.jsonl").read_text().splitlines()[10])["item_id"]
    assert text.startswith(f"{folder / 'acts.npy'}: row 10 (item {item!r}, index.jsonl line 11) holds {kind} at "
                           "layer 4, position 'last' (dimension 5)")
    assert "--nonfinite drop" in text and "evprobe capture" in text
    with pytest.raises(CaptureError, match="row 10"):
        load_captures([folder])


def test_the_first_bad_row_is_named_and_uncommitted_rows_are_not_read(tmp_path: Path) -> None:
    """An unfinished capture's unfilled rows may hold anything; only committed rows are checked."""
    n = 4 * 6
    folder = _capture(tmp_path / "acts", indexed=[i for i in range(n) if i != 7])
    _poke(folder, (7, 0, 1, 0), np.nan)  # not committed
    assert len(load_capture(folder).index) == n - 1
    _poke(folder, (20, 2, 1, 3), np.inf)
    _poke(folder, (13, 0, 0, 0), np.nan)
    with pytest.raises(CaptureError, match=r"row 13 \(item .*holds NaN at layer 0, position 'last'"):
        load_capture(folder)


def test_the_check_reads_in_chunks_and_across_gaps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import evprobe.probes.captures as captures

    folder = _capture(tmp_path / "acts")
    acts = np.load(folder / "acts.npy", mmap_mode="r")
    monkeypatch.setattr(nonfinite, "CHECK_BYTES", 3 * acts[0].nbytes)  # 3 rows a chunk
    _poke(folder, (5, 0, 0, 0), np.nan)
    _poke(folder, (17, 2, 1, 7), -np.inf)
    acts = np.load(folder / "acts.npy", mmap_mode="r")
    rows = np.array([0, 1, 2, 3, 5, 6, 9, 17, 18])
    assert nonfinite_rows(acts, rows).tolist() == [5, 17]
    assert nonfinite_rows(acts, rows, first_only=True).tolist() == [5]
    assert nonfinite_rows(acts, np.array([0, 1, 2, 3, 4, 6, 9])).tolist() == []


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _capture(tmp_path_factory.mktemp("clean") / "acts", n_families=3, d=4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cell=st.tuples(st.integers(0, 11), st.integers(0, 2), st.integers(0, 1), st.integers(0, 3)),
       value=st.sampled_from([np.nan, np.inf, -np.inf]))
def test_any_non_finite_cell_is_refused_naming_its_row(clean: Path, cell: tuple[int, int, int, int],
                                                        value: float) -> None:
    old = _poke(clean, cell, value)
    try:
        with pytest.raises(CaptureError) as err:
            load_capture(clean)
        text = _one_line(err)
        layer, position = LAYERS[cell[1]], ["last", "image_mean"][cell[2]]
        assert f"acts.npy: row {cell[0]} (item " in text
        assert f"layer {layer}, position {position!r} (dimension {cell[3]})" in text
    finally:
        _poke(clean, cell, old)
    assert len(load_capture(clean).index) == 12  # restored: the folder reads again


# -- captures: the drop policy -------------------------------------------------------------------


def test_drop_leaves_families_out_whole_counted_and_warned(tmp_path: Path) -> None:
    rows = reference_rows(6, seed=0)
    # a user capture whose image pair crosses families: the partner's family goes too
    rows[9]["image_pair_id"] = rows[1]["image_pair_id"]
    rows[8]["image_pair_id"] = "lonely"
    y = np.array([r["resolved"] for r in rows], dtype=int)
    acts, _ = planted_acts(y, len(LAYERS), 2, 8, signal_layers=[1], seed=0)
    folder = write_capture(tmp_path / "acts", acts, rows, layers=LAYERS)
    _poke(folder, (1, 2, 1, 0), np.nan)  # family 0; its image pair partner (row 9) is in family 2
    _poke(folder, (2, 0, 0, 0), np.inf)
    with pytest.warns(OneLineWarning, match=r"2 committed row\(s\) hold NaN or inf .*2 families, 8 rows"):
        cap = load_capture(folder, nonfinite="drop")
    fams = {rows[0]["family_id"], rows[8]["family_id"]}
    assert cap.nonfinite is not None and set(cap.nonfinite.families) == fams and cap.nonfinite.rows == (1, 2)
    assert cap.nonfinite.n_dropped == 8 and len(cap.index) == 16
    assert not {r["family_id"] for r in cap.index} & fams
    with pytest.warns(OneLineWarning):
        cs = load_captures([folder], nonfinite="drop")
    ls = labels(cs, "resolved")
    assert ls.dropped == {NONFINITE_DROPPED: 8} and ls.n == 16
    X = cs.block(1, ls.rows)
    assert np.isfinite(X).all()
    res = sweep(cs, ls, SweepConfig(folds=3, **FAST))
    assert any(w.startswith("ROWS LEFT OUT FOR NaN OR inf:") for w in res.warnings)
    md = sweep_markdown(res)
    assert f"left out: {NONFINITE_DROPPED}: 8" in md and "ROWS LEFT OUT FOR NaN OR inf" in md


def test_drop_keeps_the_captures_of_one_item_set_matched(tmp_path: Path) -> None:
    a = _capture(tmp_path / "a")
    b = _capture(tmp_path / "b", seed=1)
    _poke(b, (4, 0, 0, 0), np.nan)
    with pytest.warns(OneLineWarning) as seen:
        cs = load_captures([a, b], nonfinite="drop")
    assert [c.nonfinite.n_dropped for c in cs.captures] == [4, 4]
    assert {r["item_id"] for r in cs.captures[0].index} == {r["item_id"] for r in cs.captures[1].index}
    assert any("in another capture of this set" in str(w.message) for w in seen)


def test_drop_that_leaves_nothing_and_an_unknown_policy_are_refused(tmp_path: Path) -> None:
    folder = _capture(tmp_path / "acts", n_families=1)
    _poke(folder, (0, 0, 0, 0), np.nan)
    with pytest.raises(CaptureError, match="every family holds a row with NaN or inf"):
        load_capture(folder, nonfinite="drop")
    with pytest.raises(CaptureError, match="nonfinite='skip': use one of refuse, drop"):
        load_capture(folder, nonfinite="skip")


def test_the_cli_refuses_in_one_line_and_drops_on_request(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from evprobe.experiments.cli import main

    folder = _capture(tmp_path / "acts")
    _poke(folder, (3, 1, 1, 2), np.nan)
    common = ["--n-boot", "50", "--refits", "0", "--control-tasks", "0", "--no-nested", "--layers", "4",
              "--quiet", "--out", str(tmp_path / "s")]
    assert main(["sweep", str(folder), *common]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "row 3 (item" in err and "layer 4, position 'image_mean'" in err
    assert not (tmp_path / "s" / "sweep.json").exists()  # refused before any work
    with pytest.warns(OneLineWarning, match="left out with their families"):
        assert main(["sweep", str(folder), *common, "--nonfinite", "drop"]) == 0
    data = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert data["dropped"] == {NONFINITE_DROPPED: 4} and data["n"] == 20
    with pytest.warns(OneLineWarning):
        assert main(["directions", str(folder), "--layer", "4", "--nonfinite", "drop", "--out",
                     str(tmp_path / "d")]) == 0
    assert "nan" not in capsys.readouterr().out.lower()


# -- the degeneracy verdict, robust to a few extreme rows ----------------------------------------


def _extreme_families(path: Path, n_families: int = 36, n_bad: int = 5) -> tuple[Path, list[dict]]:
    """Five families whose rows are all 60,000 (finite: the check at read lets them through)."""
    rows = reference_rows(n_families, seed=4)
    y = np.array([r["resolved"] for r in rows], dtype=int)
    acts, _ = planted_acts(y, 2, 1, 16, signal_layers=[1], strength=4.0, seed=5)
    acts[: 4 * n_bad] = 60000
    return write_capture(path, acts, rows, layers=[0, 1]), rows


def test_a_few_extreme_families_do_not_make_a_varying_layer_degenerate(tmp_path: Path) -> None:
    folder, rows = _extreme_families(tmp_path / "acts")
    cs = load_captures([folder])
    ls = labels(cs, "resolved")
    X = cs.block(1, ls.rows)[:, 0]
    assert within_family_variance(X, ls.families) < 1e-6  # the plain ratio alone read "degenerate"
    spread = robust_spread(X, ls.families)
    assert spread.ratio > 1e-3 and len(spread.extreme) == 20 and set(spread.extreme) == set(range(20))
    res = sweep(cs, ls, SweepConfig(**FAST))
    assert not any(r.degenerate for r in res.rows)
    assert res.rows[1].auroc.value > 0.8  # the planted layer is still read
    assert all(r.extreme_rows == 20 and r.extreme_example.startswith(rows[0]["family_id"][:-3]) for r in res.rows)
    row = res.to_json()["rows"][1]
    assert row["extreme_rows"]["n"] == 20 and row["extreme_rows"]["limit_sds"] == EXTREME_SDS
    assert row["within_family_variance_robust"] > 1e-3
    warn = next(w for w in res.warnings if w.startswith("EXTREME ROWS"))
    assert "at 2 of 2 layer/positions: up to 20 rows more than 50 robust SDs from the median (e.g. item '" in warn
    assert "EXTREME ROWS at 2 of 2" in sweep_markdown(res)


def test_identical_within_families_stays_degenerate_with_extreme_rows(tmp_path: Path) -> None:
    rows = reference_rows(20, seed=1)
    acts = planted_acts(np.zeros(len(rows)), 2, 1, 16, seed=2)[0]
    for i in range(0, len(rows), 4):
        acts[i : i + 4] = acts[i]  # identical within the family
    acts[:12] = 60000  # three families extreme, still identical within
    cs = load_captures([write_capture(tmp_path / "deg", acts, rows)])
    ls = labels(cs, "resolved")
    assert robust_spread(cs.block(0, ls.rows)[:, 0], ls.families).ratio == 0.0
    res = sweep(cs, ls, SweepConfig(**FAST))
    assert res.degenerate and all(r.degenerate for r in res.rows)
    assert "robust 0.00e+00, both < 1e-06" in res.rows[0].reason


def test_robust_spread_on_clean_rows_flags_nothing_and_constant_dims_are_left_out() -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 12)).astype(np.float32)
    X[:, 3] = 7.0  # a constant dimension
    fams = np.repeat(np.arange(100), 4).astype(str)
    spread = robust_spread(X, fams)
    assert len(spread.extreme) == 0 and 0.5 < spread.ratio < 1.0 and spread.distance.max() < 3
    assert robust_spread(np.ones((8, 3), np.float32), fams[:8]).ratio == 0.0


def test_a_nan_never_reads_as_a_degenerate_ratio() -> None:
    X = np.ones((8, 3))
    X[:, 0] = np.arange(8)
    X[2, 1] = np.nan  # the old code returned 0.0 here: "degenerate"
    fams = np.repeat(["a", "b"], 4)
    with pytest.raises(ValueError, match="NaN or inf"):
        within_family_variance(X, fams)
    with pytest.raises(ValueError, match="NaN or inf"):
        robust_spread(X, fams)


# -- directions: validated at read ---------------------------------------------------------------


@pytest.fixture()
def folder(planted, tmp_path: Path) -> tuple[Path, list[Direction]]:
    cs = load_captures([planted[0]])
    found = fit_directions(cs, labels(cs, "resolved"), [8, 16], "last")
    out = tmp_path / "dirs"
    write_directions(out, found)
    return out, found


def _edit_index(folder: Path, edit) -> Path:
    path = folder / "directions.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def _line_of_entry(path: Path, k: int) -> int:
    starts = [i + 1 for i, line in enumerate(path.read_text().splitlines()) if line == "    {"]
    return starts[k]


def test_an_entry_without_file_is_one_line_naming_its_line(folder) -> None:
    out, _ = folder
    path = _edit_index(out, lambda d: d["directions"][1].pop("file"))
    with pytest.raises(CaptureError) as err:
        read_directions(out)
    assert _one_line(err).startswith(f"{path}:{_line_of_entry(path, 1)}: direction entry 2 has no 'file'")


def test_entries_given_as_a_dict_or_not_objects_are_refused(folder) -> None:
    out, found = folder
    path = out / "directions.json"
    good = path.read_text()
    _edit_index(out, lambda d: d.update(directions={e["name"]: e for e in d["directions"]}))
    with pytest.raises(CaptureError) as err:
        read_directions(out)
    assert _one_line(err).startswith(f"{path}:1: not a directions index (expected") and "'directions' {" in str(err.value)
    path.write_text(good)
    _edit_index(out, lambda d: d["directions"].insert(0, found[0].name))
    with pytest.raises(CaptureError) as err:
        read_directions(out)
    assert re.match(rf"{re.escape(str(path))}:3: direction entry 1 is str 'resolved", _one_line(err))
    path.write_text("[1, 2]\n")
    with pytest.raises(CaptureError, match=r"directions.json:1: not a directions index \(expected .*got list"):
        read_directions(out)


@pytest.mark.parametrize("key, value, must", [("d_model", "32", "a positive integer"),
                                              ("layer", True, "a non-negative integer"),
                                              ("mean_norm", float("nan"), "a finite positive number"),
                                              ("name", "", "a non-empty string")])
def test_entry_fields_of_the_wrong_type_are_refused(folder, key: str, value, must: str) -> None:
    out, _ = folder
    path = _edit_index(out, lambda d: d["directions"][0].__setitem__(key, value))
    with pytest.raises(CaptureError) as err:
        read_directions(out)
    assert _one_line(err).startswith(f"{path}:{_line_of_entry(path, 0)}: direction entry 1: {key!r} must be {must}")


def test_an_index_width_unlike_the_vector_is_named_before_any_product(folder) -> None:
    out, found = folder
    path = _edit_index(out, lambda d: d["directions"][0].__setitem__("d_model", 64))
    with pytest.raises(CaptureError) as err:
        read_directions(out)
    file = out / json.loads(path.read_text())["directions"][0]["file"]
    assert _one_line(err) == (f"{file}: the vector has 32 entries but {path}:{_line_of_entry(path, 0)} says d_model 64; "
                              "write the folder again with `evprobe directions ACTS --layer L --out DIR`")


def test_a_width_unlike_the_capture_or_model_is_refused(folder, tmp_path: Path) -> None:
    out, found = folder
    assert set(read_directions(out, d_model=32)) == {d.name for d in found}
    with pytest.raises(CaptureError) as err:
        read_directions(out, d_model=64, against="capture X")
    assert "has width 32 but capture X has d_model 64" in _one_line(err)
    with pytest.raises(CaptureError, match="has width 32 but the model has d_model 48"):
        check_width(found[0], 48, "the model")
    check_width(found[0], 32, "the model")


def test_a_direction_of_another_width_fails_dose_controls_in_one_line(folder, planted) -> None:
    """The broken input: the named direction's metadata says 16 while its capture has 32; the control
    fitted on the capture then met it in a numpy matmul error."""
    from evprobe.experiments.config import ConfigError
    from evprobe.experiments.dose_response.controls import control_directions

    _, found = folder
    v = np.zeros(16, np.float32)
    v[0] = 1
    narrow = Direction("narrow", v, {**found[0].provenance, "d_model": 16})
    with pytest.raises(ConfigError) as err:
        control_directions(("history",), narrow, {}, {8: narrow}, {8: v.astype(np.float64)}, seed=0)
    assert "\n" not in str(err.value) and "has width 16 but its capture" in str(err.value)
    assert "d_model 32" in str(err.value) and "matmul" not in str(err.value)


@pytest.mark.parametrize("suffix", [".safetensors", ".npy"])
def test_a_non_finite_direction_is_refused_naming_the_entry(folder, suffix: str) -> None:
    out, found = folder
    d = found[0]
    vec = d.vector.copy()
    vec[3] = np.nan
    file = out / direction_file(d.name)
    if suffix == ".safetensors":
        file.write_bytes(direction_bytes(Direction(d.name, vec, d.provenance)))
    else:
        file = out / f"{d.name}.npy"
        np.save(file, vec, allow_pickle=False)
        _edit_index(out, lambda data: data["directions"][0].__setitem__("file", file.name))
    with pytest.raises(CaptureError) as err:
        read_directions(out)
    assert _one_line(err).startswith(f"{file}: entry 3 of the vector is nan (1 non-finite in all); a direction "
                                     "must be finite")


# -- no "nan" in a printed number ----------------------------------------------------------------


def test_numbers_that_cannot_be_computed_print_as_a_named_missing_value() -> None:
    assert number_text(float("nan"), ".2g", "no rows") == "not computable: no rows"
    assert number_text(None, ".2g", "no rows") == "not computable: no rows"
    assert number_text(float("inf"), ".2g", "overflow") == "not computable: overflow"
    assert number_text(0.125, ".2g", "x") == "0.12"
    m = np.array([[1.0, np.nan], [np.nan, 1.0]])
    md = geometry_markdown(["a", "b"], m)
    assert "nan" not in md.lower() and "not computable: a non-finite vector" in md


def test_fit_directions_never_prints_distance_nan(planted, tmp_path: Path) -> None:
    """A NaN reaching a block (a CaptureSet built past the reader's check) is one error, never a
    "no direction ... identical (distance nan)" warning that reads as identical class means."""
    folder = tmp_path / "acts"
    shutil.copytree(planted[0], folder)
    cs = load_captures([folder])
    _poke(folder, (0, 2, 0, 0), np.nan)  # after the check: the open memmap sees it
    with pytest.raises(CaptureError) as err:
        fit_directions(cs, labels(cs, "resolved"), [8], "last")
    text = _one_line(err)
    assert "not computable: the activations hold NaN or inf" in text and "distance nan" not in text


def test_the_known_answer_direction_check_names_a_width_unlike_the_capture(tmp_path: Path) -> None:
    """The broken input: a stored direction of width 4 (its metadata says 4) beside a capture of
    width 8; the check's projection X @ v raised numpy's matmul message."""
    from evprobe.experiments.known_answer.capture import direction_check
    from evprobe.experiments.known_answer.counts import Expectations

    rows = reference_rows(6, seed=0)
    acts, _ = planted_acts(np.array([r["resolved"] for r in rows], dtype=int), 4, 1, 8, seed=0)
    folder = write_capture(tmp_path / "acts", acts, rows, layers=[0, 1, 2, 3])
    cs = load_captures([folder])
    (d,) = fit_directions(cs, labels(cs, "resolved"), [3], "last")
    narrow = Direction(d.name, np.eye(4, dtype=np.float32)[0], {**d.provenance, "d_model": 4})
    write_directions(tmp_path / "dirs", [narrow])
    with pytest.raises(CaptureError) as err:
        direction_check(folder, tmp_path / "dirs", {"aux_layer": 3}, Expectations(tmp_path))
    assert _one_line(err) == (f"direction {d.name!r} has width 4 but capture {folder} has d_model 8; use directions "
                              "fitted on that model's activations (`evprobe directions ACTS --layer L`)")
