"""A user's words, not the benchmark's (issue 54, item 5): `evprobe sweep FOLDER` on a capture of
your own reads its one label, or lists its labels when it has several; an unknown label names the
capture's labels; the cell fields default to the capture's own, so neither SweepConfig's nor a
SweepResult's repr shows the benchmark's cell unless it is in use. The benchmark's captures keep
`resolved` and their cell."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import evprobe
from evprobe.core.capture_schema import BENCHMARK_CELL_FIELDS
from evprobe.core.errors import InputError
from evprobe.experiments.cli import main
from evprobe.probes.captures import CaptureError, load_captures
from evprobe.probes.label_sets import labels
from evprobe.probes.runs import labelled
from evprobe.probes.sweep import SweepConfig, sweep

FAST = ["--n-boot", "100", "--refits", "0", "--control-tasks", "19", "--chance-permutations", "0", "--quiet"]


def own_capture(folder: Path, fields: tuple[str, ...] = ("topic", "sentiment")) -> Path:
    """24 items in 12 families; `sentiment` is planted at the last layer, `topic` is a cell field."""
    rng = np.random.default_rng(0)
    rows = [{"family_id": f"doc{i // 2}", "topic": ["food", "film", "travel"][(i // 2) % 3],
             "sentiment": ["pos", "neg"][(i + i // 2) % 2]} for i in range(24)]
    acts = rng.normal(size=(24, 2, 8)).astype(np.float32)
    acts[:, 1, 0] += 3.0 * np.array([r["sentiment"] == "pos" for r in rows])
    return evprobe.write_capture(folder, acts, [{k: r[k] for k in ("family_id", *fields)} for r in rows],
                                 layers=[3, 6])


def test_several_labels_and_none_named_list_them_with_the_flag(tmp_path, capsys) -> None:
    cap = own_capture(tmp_path / "mine")
    assert main(["sweep", str(cap), *FAST]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "resolved" not in err
    assert "no label named and the capture has 2: topic, sentiment; choose one with --label NAME" in err
    with pytest.raises(InputError, match="capture has 2: topic, sentiment"):
        labelled([cap])  # the Python path says the same


def test_one_label_is_read_without_naming_it(tmp_path, capsys) -> None:
    cap = own_capture(tmp_path / "mine", fields=("sentiment",))
    assert main(["sweep", str(cap), *FAST]) == 0
    out = capsys.readouterr().out
    assert out.startswith("sentiment=pos (logistic")
    js = json.loads((cap / "probes" / "sentiment=pos.logistic" / "sweep.json").read_text())
    assert js["label"] == "sentiment" and js["config"]["cell_fields"] == []
    assert labelled([cap])[1].name == "sentiment"


def test_an_unknown_label_names_the_captures_labels(tmp_path, capsys) -> None:
    cap = own_capture(tmp_path / "mine")
    assert main(["sweep", str(cap), "--label", "resolved", *FAST]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.endswith("unknown label 'resolved'; this capture's labels are topic, sentiment: choose one with "
                        "--label NAME (Python: label='NAME')")
    assert "missing_property" not in err and "item_id" not in err  # no derived benchmark labels, no ids


def test_a_capture_without_any_label_says_to_write_one(tmp_path) -> None:
    cap = own_capture(tmp_path / "bare", fields=("sentiment",))  # write_capture refuses label-less rows: edit it
    index = [json.loads(line) for line in (cap / "index.jsonl").read_text().splitlines()]
    (cap / "index.jsonl").write_text("".join(json.dumps({k: r[k] for k in ("row", "item_id", "family_id")}) + "\n"
                                             for r in index))
    with pytest.raises(InputError, match="the capture has none; write your label into its rows"):
        labelled([cap])


def test_reprs_show_the_benchmarks_cell_only_where_it_is_used(tmp_path) -> None:
    assert "system" not in repr(SweepConfig()) and SweepConfig().cell_fields is None
    cs = load_captures([own_capture(tmp_path / "mine")])
    res = sweep(cs, labels(cs, "sentiment=pos"), SweepConfig(n_boot=100, refits=0, nested=False, chance_permutations=0))
    assert res.config.cell_fields == () and res.control_tasks.cell_fields == ()
    assert not [w for w in BENCHMARK_CELL_FIELDS if w in repr(res)], repr(res)[:300]
    assert res.control_tasks.suggested_fields == ("topic",)
    named = sweep(cs, labels(cs, "sentiment=pos"), SweepConfig(cell_fields=("topic",), n_boot=100, refits=0,
                                                               nested=False, chance_permutations=0, control_tasks=0))
    assert named.config.cell_fields == ("topic",)


def test_the_benchmarks_captures_keep_resolved_and_their_cell(tmp_path) -> None:
    from evprobe.probes.synthetic import planted_acts, reference_rows, write_capture

    rows = reference_rows(16, seed=1)
    acts, _ = planted_acts([r["resolved"] for r in rows], 2, 1, 8, signal_layers=[1], strength=4.0, seed=2)
    cs, ls = labelled([write_capture(tmp_path / "acts", acts, rows, as_benchmark=True)])
    assert ls.name == "resolved"
    res = sweep(cs, ls, SweepConfig(n_boot=100, refits=0, nested=False, chance_permutations=0, control_tasks=0))
    assert res.config.cell_fields == BENCHMARK_CELL_FIELDS
    with pytest.raises(CaptureError, match=r"unknown label 'sentiment'; use an index field \(.*resolved.*\) or one "
                                           r"of missing_property, initial"):
        labels(cs, "sentiment")


def test_your_pages_say_what_a_number_is_not_the_benchmarks_name(tmp_path, capsys) -> None:
    cap = own_capture(tmp_path / "mine", fields=("sentiment",))
    assert main(["sweep", str(cap), *FAST]) == 0
    folder = cap / "probes" / "sentiment=pos.logistic"
    md, js = (folder / "sweep.md").read_text(), json.loads((folder / "sweep.json").read_text())
    assert "TRAPS" not in md + json.dumps(js)
    assert "test-fold AUROC (the layer chosen on the test folds, optimistic)" in md
    assert js["naive_best"]["note"] == "maximum over layers of test-fold AUROC (the layer chosen on the test folds; optimistic)"


def test_a_degenerate_capture_of_yours_is_not_explained_by_the_benchmark(tmp_path) -> None:
    rows = [{"family_id": f"doc{i // 2}", "sentiment": ["pos", "neg"][i % 2]} for i in range(24)]
    acts = np.repeat(np.random.default_rng(1).normal(size=(12, 2, 8)), 2, axis=0).astype(np.float32)  # same per family
    cs = load_captures([evprobe.write_capture(tmp_path / "flat", acts, rows)])
    res = sweep(cs, labels(cs, "sentiment=pos"), SweepConfig(n_boot=100, refits=0, nested=False, chance_permutations=0))
    text = next(w for w in res.warnings if w.startswith("DEGENERATE CAPTURE"))
    assert "ignores what varies within families, or the positions precede it" in text and "benchmark" not in text


def test_a_benchmark_capture_without_resolved_asks_for_a_label(tmp_path) -> None:
    from evprobe.probes.synthetic import planted_acts, reference_rows, write_capture

    rows = [{k: v for k, v in r.items() if k != "resolved"} for r in reference_rows(8, seed=1)]
    cap = write_capture(tmp_path / "acts", planted_acts([0] * len(rows), 1, 1, 8, seed=1)[0], rows, as_benchmark=True)
    with pytest.raises(InputError, match="^no label named and the capture has no 'resolved'; choose one with --label"):
        labelled([cap])
