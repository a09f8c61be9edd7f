"""Loading capture folders safely; labels from item fields and from a run's records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evprobe.core.lock import folder_lock
from evprobe.probes.captures import CaptureError, load_capture, load_captures
from evprobe.probes.label_sets import labels, load_records, restrict_wrong
from evprobe.probes.synthetic import planted_acts, write_capture, write_records


def _acts(n: int, seed: int = 0) -> np.ndarray:
    return planted_acts(np.zeros(n), 3, 2, 8, seed=seed)[0]


def test_partial_capture_loads_only_indexed_rows_in_any_line_order(tmp_path: Path, rows: list[dict]) -> None:
    acts = _acts(len(rows))
    indexed = [5, 0, 7, 3, 100]  # out of order, like the capture's batches by image count
    cap = load_capture(write_capture(tmp_path / "a", acts, rows, indexed=indexed))
    assert [r["row"] for r in cap.index] == [0, 3, 5, 7, 100]
    assert cap.acts.shape[0] == len(rows) and isinstance(cap.acts, np.memmap)
    cs = load_captures([cap.path])
    block = cs.block(1, np.array([0, 3]), [1])  # pooled rows 0, 3 -> file rows 0, 7
    assert block.dtype == np.float32 and block.shape == (2, 1, 8)
    assert np.array_equal(block[:, 0], acts[[0, 7], 1, 1].astype(np.float32))


def test_torn_last_index_line_is_left_out_while_a_capture_writes_the_folder(tmp_path: Path, rows: list[dict]) -> None:
    path = write_capture(tmp_path / "a", _acts(len(rows)), rows, indexed=range(10), torn_tail='{"row": 10, "item_')
    before = (path / "index.jsonl").read_bytes()
    with folder_lock(path, "evprobe capture"):  # a live writer: its torn append is a state, not damage
        cap = load_capture(path)
    assert len(cap.index) == 10 and cap.n_torn == 1
    assert (path / "index.jsonl").read_bytes() == before  # read-only: nothing truncated
    # a complete line without its newline is not committed either
    path2 = write_capture(tmp_path / "b", _acts(len(rows)), rows, indexed=range(3),
                          torn_tail=json.dumps({"row": 3, **rows[3]}))
    with folder_lock(path2, "evprobe capture"):
        assert len(load_capture(path2).index) == 3


def test_a_torn_index_no_process_writes_is_refused(tmp_path: Path, rows: list[dict]) -> None:
    """The broken input: a finished capture whose index.jsonl lost the end of its last line loaded with
    one row fewer (1,151 of 1,152) and no error."""
    last = json.dumps({"row": len(rows) - 1, **rows[-1]})
    path = write_capture(tmp_path / "a", _acts(len(rows)), rows, indexed=range(len(rows) - 1), torn_tail=last[:40])
    before = (path / "index.jsonl").read_bytes()
    with pytest.raises(CaptureError) as err:
        load_capture(path)
    assert str(err.value) == (
        f"{path / 'index.jsonl'}:{len(rows)}: the last line is incomplete and no process is writing {path} (its "
        "capture was killed, or the file was cut); rerun the `evprobe capture` that wrote it (same --out) to "
        "finish it, or move the folder aside")
    assert (path / "index.jsonl").read_bytes() == before


def test_a_bad_line_elsewhere_is_an_error_naming_it(tmp_path: Path, rows: list[dict]) -> None:
    path = write_capture(tmp_path / "a", _acts(len(rows)), rows, indexed=range(4))
    lines = (path / "index.jsonl").read_text().splitlines()
    lines[1] = "{not json"
    (path / "index.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(CaptureError, match="index.jsonl:2"):
        load_capture(path)
    lines[1] = json.dumps({"row": 0, **rows[0]})  # a row listed twice
    (path / "index.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(CaptureError, match="twice"):
        load_capture(path)
    lines[1] = json.dumps({"row": 10_000, **rows[1]})
    (path / "index.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(CaptureError, match="not a row of acts.npy"):
        load_capture(path)


def test_object_arrays_are_refused_never_unpickled(tmp_path: Path, rows: list[dict]) -> None:
    path = write_capture(tmp_path / "a", _acts(len(rows)), rows)
    evil = np.empty((len(rows), 3, 2, 8), dtype=object)
    np.save(path / "acts.npy", evil, allow_pickle=True)
    with pytest.raises(CaptureError, match="not a plain numeric .npy"):
        load_capture(path)


def test_meta_and_acts_must_agree(tmp_path: Path, rows: list[dict]) -> None:
    path = write_capture(tmp_path / "a", _acts(len(rows)), rows)
    meta = json.loads((path / "meta.json").read_text())
    meta["d_model"] = 16
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CaptureError, match="does not match meta.json"):
        load_capture(path)
    with pytest.raises(CaptureError, match="not a folder"):
        load_capture(tmp_path / "missing")


def test_field_and_derived_labels(planted, rows: list[dict]) -> None:
    cs = load_captures([planted[0]])
    res = labels(cs, "resolved")
    assert res.positive is True and res.n == len(rows) and res.y.sum() == len(rows) // 2
    assert res.varies_within_families
    level = labels(cs, "threshold_level")
    assert level.positive == "high" and level.y.sum() == len(rows) // 2
    missing = labels(cs, "missing_property")
    expect = [r["initial_property"] != "mass" for r in rows]  # the mass test is missing
    assert missing.positive == "mass" and missing.y.tolist() == [int(e) for e in expect]
    assert not missing.varies_within_families
    with pytest.raises(CaptureError, match="--label system=bouncing"):
        labels(cs, "system")
    sliding = labels(cs, "system=sliding")
    assert sliding.title == "system=sliding" and sliding.y.sum() == sum(r["system"] == "sliding" for r in rows)
    assert labels(cs, "history", positive="0").positive == 0
    with pytest.raises(CaptureError, match="unknown label"):
        labels(cs, "nonsense")
    with pytest.raises(CaptureError, match="--records"):
        labels(cs, "stopped")
    with pytest.raises(CaptureError, match="one value"):
        labels(cs, "request")
    only = labels(cs, "resolved", requests=["answer_initial", "select"])
    assert only.n == len(rows)


def test_behavioural_labels_join_records_and_drop_invalid(tmp_path: Path, planted, rows: list[dict]) -> None:
    actions = []
    for i, r in enumerate(rows):
        if i % 10 == 0:
            actions.append(None)  # invalid reply
        elif not r["resolved"] and i % 3 == 0:
            actions.append("stop")  # confabulated: stopped although unresolved
        else:
            actions.append(r["reference_action"])
    run = write_records(tmp_path / "run", rows[:-4], actions[:-4])  # the last family has no records
    records = load_records(run)
    cs = load_captures([planted[0]])
    stopped = labels(cs, "stopped", records)
    invalid = sum(a is None for a in actions[:-4])
    assert stopped.dropped == {"invalid reply": invalid, "no record": 4}
    assert stopped.n == len(rows) - 4 - invalid
    chose = labels(cs, "chose_reference", records)
    assert chose.y.sum() == sum(a == r["reference_action"] for a, r in zip(actions[:-4], rows))
    assert labels(cs, "valid", records).n == len(rows) - 4
    # the Cf restriction: confabulated rows and their image/threshold-pair partners
    cf = restrict_wrong(cs, labels(cs, "resolved"), records)
    wrong = {r["item_id"] for r, a in zip(rows[:-4], actions[:-4]) if a == "stop" and not r["resolved"]}
    kept = {cs.index[i]["item_id"] for i in cf.rows}
    assert wrong <= kept
    for item in wrong:
        row = next(r for r in rows if r["item_id"] == item)
        partners = {r["item_id"] for r in rows if r["image_pair_id"] == row["image_pair_id"]
                    or r["threshold_pair_id"] == row["threshold_pair_id"]}
        assert partners <= kept
    assert cf.restriction.startswith("confabulated") and 0 < cf.y.sum() < cf.n
    pair_keys = {(k, r[k]) for r in rows if r["item_id"] in wrong for k in ("image_pair_id", "threshold_pair_id")}
    for i in cf.rows:  # nothing else is kept
        row = cs.index[i]
        assert row["item_id"] in wrong or any((k, row[k]) in pair_keys for k in ("image_pair_id", "threshold_pair_id"))
    assert not any(cs.index[i]["resolved"] is False and cs.index[i]["item_id"] not in wrong for i in cf.rows)
