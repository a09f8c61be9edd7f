"""to_dataframe: records, results rows and sweeps as one flat pandas table (core.frames)."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import evprobe
from evprobe.core.errors import IncompleteLineWarning, InputError
from evprobe.core.frames import PANDAS_MISSING, flatten, to_dataframe

pd = pytest.importorskip("pandas")


def test_flatten_rules() -> None:
    row = {"a": 1, "sel": {"value": 0.1, "ci": [0.05, 0.2], "n": 40, "deep": {"x": None}}, "ci": [None, None],
           "accuracy_ci": [0.4, 0.6], "items": ["i1", "i2"], "shuffles": [0.5, 0.49, 0.51], "empty": {},
           "flag_ci": [True, False]}
    assert flatten(row) == {
        "a": 1, "sel.value": 0.1, "sel.ci.lo": 0.05, "sel.ci.hi": 0.2, "sel.n": 40, "sel.deep.x": None,
        "ci.lo": None, "ci.hi": None, "accuracy_ci.lo": 0.4, "accuracy_ci.hi": 0.6, "items": ["i1", "i2"],
        "shuffles": [0.5, 0.49, 0.51], "empty": {}, "flag_ci": [True, False]}  # booleans are no interval
    assert flatten({"a": {"b": 1}}, sep="/") == {"a/b": 1}


def test_records_folder_with_nested_fields_and_a_torn_tail(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"item_id": f"i{i}", "family_id": f"f{i // 2}", "valid": i != 3, "action": "stop",
             "scores": {"A": -0.1 * i, "B": -2.0}} for i in range(5)]
    text = "".join(json.dumps(r) + "\n" for r in rows[:4]) + json.dumps(rows[4])[:20]  # torn last line
    (run / "records.jsonl").write_text(text)
    with pytest.warns(IncompleteLineWarning):
        df = evprobe.to_dataframe(run)
    assert list(df.columns) == ["item_id", "family_id", "valid", "action", "scores.A", "scores.B"]
    assert len(df) == 4 and df["scores.A"].tolist() == pytest.approx([0.0, -0.1, -0.2, -0.3])
    assert df.loc[df.valid, "item_id"].tolist() == ["i0", "i1", "i2"]


def test_results_rows_with_missing_columns(tmp_path: Path) -> None:
    rows = [{"item_id": "a", "family_id": "f", "condition": "base", "kind": "base", "lp": {"p_stop": 0.2}},
            {"item_id": "a", "family_id": "f", "condition": "probe+1", "kind": "probe", "layer": 2, "alpha": 1.0,
             "lp": {"p_stop": 0.6}, "logprobs": {"A": -0.5}}]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    df = to_dataframe(path)
    assert list(df.columns) == ["item_id", "family_id", "condition", "kind", "lp.p_stop", "layer", "alpha",
                                "logprobs.A"]
    assert np.isnan(df.loc[0, "layer"]) and df.loc[1, "lp.p_stop"] == 0.6
    assert to_dataframe(tmp_path).equals(df)  # the folder: its results.jsonl
    assert to_dataframe(rows).equals(df)  # the dicts themselves


def test_sweep_result_and_its_json_give_one_table(tmp_path: Path) -> None:
    from evprobe.probes.captures import load_captures
    from evprobe.probes.label_sets import labels
    from evprobe.probes.runs import sweep_to_folder
    from evprobe.probes.sweep import SweepConfig
    from evprobe.probes.synthetic import planted_acts, reference_rows, write_capture

    rows = reference_rows(16, seed=1)
    acts, _ = planted_acts([r["resolved"] for r in rows], 3, 1, 8, signal_layers=[1], strength=4.0, seed=2)
    cs = load_captures([write_capture(tmp_path / "acts", acts, rows)])
    run = sweep_to_folder(cs, labels(cs, "resolved"), tmp_path / "s",
                          SweepConfig(n_boot=200, nested=False, control_tasks=4, refits=0))
    df = to_dataframe(run.result)
    assert len(df) == 3 and df["layer"].tolist() == [0, 1, 2]
    assert {"label", "positive", "probe", "model", "auroc", "ci.lo", "ci.hi", "accuracy_ci.lo", "selectivity.value",
            "selectivity.ci.lo", "control_tasks.mean", "leakage_ci.hi"} <= set(df.columns)
    assert (df["label"] == "resolved").all()
    assert (df["ci.lo"] <= df["auroc"]).all() and (df["auroc"] <= df["ci.hi"]).all()
    assert df.loc[df.auroc.idxmax(), "layer"] == 1
    from_file = to_dataframe(tmp_path / "s" / "sweep.json")
    pd.testing.assert_frame_equal(df, from_file, check_dtype=False)


def test_refusals_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "records.jsonl").write_text('{"a": 1}\n')
    (tmp_path / "results.jsonl").write_text('{"a": 1}\nnot json\n')
    cases = [(tmp_path, "both records.jsonl and results.jsonl"), (tmp_path / "results.jsonl", "results.jsonl:2"),
             (tmp_path / "nothing", "not found"), (tmp_path / "other", "no records.jsonl or results.jsonl"),
             ({"rows": 3}, "must hold a list under 'rows'"), ([{"a": 1}, 5], "row 1 is int"), (7, "cannot read rows")]
    (tmp_path / "other").mkdir()
    for source, expected in cases:
        with pytest.raises(InputError) as info:
            to_dataframe(source)
        assert expected in str(info.value) and "\n" not in str(info.value)


def test_missing_pandas_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # what an environment without pandas gives: ImportError
    with pytest.raises(ImportError) as info:
        to_dataframe([{"a": 1}])
    assert str(info.value) == PANDAS_MISSING and "evprobe[pandas]" in PANDAS_MISSING
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert flatten({"a": {"b": 1}}) == {"a.b": 1}  # flattening itself needs no pandas
