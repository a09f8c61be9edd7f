"""TRAPS's Cf -> Cf with the seed's 1:1 pairing (`--restrict confabulated_twin`): each void the model
confabulated on, with exactly its twin; voids without a captured twin dropped and counted."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from evprobe.bench.manifest import read_items
from evprobe.experiments.capture import INDEX_FIELDS
from evprobe.experiments.cli import main
from evprobe.probes.captures import CaptureError, load_captures
from evprobe.probes.label_sets import (
    NOT_A_VOID,
    NOT_PAIRED,
    TWIN_NOT_CAPTURED,
    labels,
    load_records,
    restrict_wrong,
)
from evprobe.probes.synthetic import planted_acts, write_capture

REQUESTS = ("select", "answer_initial", "voids")


def _index_rows(bench: Path) -> list[dict]:
    """The index rows `evprobe capture --requests select,answer_initial,voids` writes for `bench`'s items
    (its fields, with the void fields where set), so the capture joins a real run's records."""
    rows = []
    for it in read_items(bench):
        if it.injection or it.variant is not None or (it.void is None and it.request not in REQUESTS[:2]):
            continue
        row = {"item_id": it.item_id, **{f: getattr(it, f) for f in INDEX_FIELDS}}
        rows.append(row | ({"void": it.void, "twin_id": it.twin_id} if it.void else {}))
    return rows


def _capture(path: Path, rows: list[dict]) -> Path:
    y = np.array([r["resolved"] for r in rows], dtype=int)
    acts, _ = planted_acts(y, 2, 1, 8, signal_layers=[1], seed=1)
    return write_capture(path, acts, rows, positions=["last"])


@pytest.fixture(scope="module")
def always_stop(small_void_bench: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run of the scripted policy `always-stop`: it stops on every selection (so on every occluded
    selection, a confabulation) and answers every answer request with the exact reader ("undetermined"
    on every void)."""
    run = tmp_path_factory.mktemp("always_stop") / "run"
    assert main(["run", "--model", "policy:always-stop", "--bench", str(small_void_bench), "--out", str(run),
                 "--requests", ",".join(REQUESTS)]) == 0
    return run


def test_each_confabulated_void_is_kept_with_exactly_its_twin(small_void_bench: Path, always_stop: Path,
                                                              tmp_path: Path) -> None:
    rows = _index_rows(small_void_bench)
    cs = load_captures([_capture(tmp_path / "acts", rows)])
    records = load_records(always_stop)
    ls = labels(cs, "resolved")
    cf = restrict_wrong(cs, ls, records, "confabulated_twin")
    kept = [cs.index[r] for r in cf.rows]
    voids = [r for r in kept if r.get("void")]
    # the known answer: every occluded selection (2 per family, 6 families) and nothing else confabulated
    # on a void, each with its own twin, 1:1
    assert len(voids) == 12 and {(r["void"], r["request"]) for r in voids} == {("occluded", "select")}
    twins = [r for r in kept if not r.get("void")]
    assert sorted(r["item_id"] for r in twins) == sorted(r["twin_id"] for r in voids)
    assert cf.n == 24 and int(cf.y.sum()) == 12  # resolved twins are the positives
    assert cf.restriction == ("confabulated_twin (12 confabulated voids + 12 twins, 1:1 per void type; "
                              "0 without a captured twin dropped)")
    # every unresolved main selection was confabulated too (always-stop), but has no twin: counted apart
    main_unresolved = sum(r["request"] == "select" and r["resolved"] is False and not r.get("void") for r in rows)
    assert main_unresolved > 0 and cf.dropped[NOT_A_VOID] == main_unresolved
    assert cf.dropped[NOT_PAIRED] == ls.n - cf.n - main_unresolved
    assert sum(cf.dropped.values()) == sum(ls.dropped.values()) + ls.n - cf.n


def test_the_pair_id_restriction_never_reaches_the_twins(small_void_bench: Path, always_stop: Path,
                                                         tmp_path: Path) -> None:
    """Today's `confabulated` (pair ids, kept for its outputs) finds no partner for a void: void items
    have no pair ids, so a void row adds nothing beside itself, and what it keeps besides are the
    main set's confabulations with up to two partners each. This is what the twin pairing fixes."""
    rows = _index_rows(small_void_bench)
    records = load_records(always_stop)
    cs = load_captures([_capture(tmp_path / "acts", rows)])
    cf = restrict_wrong(cs, labels(cs, "resolved"), records, "confabulated")
    main_only = load_captures([_capture(tmp_path / "main", [r for r in rows if not r.get("void")])])
    cf_main = restrict_wrong(main_only, labels(main_only, "resolved"), records, "confabulated")
    kept = [cs.index[r]["item_id"] for r in cf.rows]
    assert [i for i in kept if ".void-" not in i] == [main_only.index[r]["item_id"] for r in cf_main.rows]
    assert sum(".void-" in i for i in kept) == 12  # the voids, alone
    assert cf.restriction.startswith("confabulated (") and "partners" in cf.restriction


def test_a_void_whose_twin_was_not_captured_is_dropped_and_counted(small_void_bench: Path, always_stop: Path,
                                                                    tmp_path: Path) -> None:
    rows = _index_rows(small_void_bench)
    occluded = [r for r in rows if r.get("void") == "occluded" and r["request"] == "select"]
    gone = {occluded[0]["twin_id"], occluded[5]["twin_id"]}
    cs = load_captures([_capture(tmp_path / "acts", [r for r in rows if r["item_id"] not in gone])])
    cf = restrict_wrong(cs, labels(cs, "resolved"), load_records(always_stop), "confabulated_twin")
    assert cf.dropped[TWIN_NOT_CAPTURED] == 2 and cf.n == 20
    assert "10 confabulated voids + 10 twins" in cf.restriction and "2 without a captured twin" in cf.restriction
    # with no twin captured at all, nothing is left: one line says to capture them
    bare = load_captures([_capture(tmp_path / "bare", [r for r in rows if r["item_id"] not in
                                                        {o["twin_id"] for o in occluded}])])
    with pytest.raises(CaptureError, match="12 confabulated void.* none of their twins among the labelled rows"):
        restrict_wrong(bare, labels(bare, "resolved"), load_records(always_stop), "confabulated_twin")


def test_a_twin_shared_by_two_confabulated_voids_is_one_row(small_void_bench: Path, tmp_path: Path) -> None:
    """An answer twin anchors an occluded and an unstated void; a model answering both (yes) keeps the
    two voids and their one twin; invalid replies and abstentions are not confabulations."""
    rows = _index_rows(small_void_bench)
    answers = [r for r in rows if r.get("void") and r["request"] == "answer_initial"]
    twin = answers[0]["twin_id"]
    both = [r for r in answers if r["twin_id"] == twin]
    assert {r["void"] for r in both} == {"occluded", "unstated"}
    run = tmp_path / "run"
    run.mkdir()
    lines = [{"item_id": r["item_id"], "valid": True, "action": None, "answer": "yes"} for r in both]
    others = [r for r in answers if r["twin_id"] != twin]
    lines += [{"item_id": others[0]["item_id"], "valid": False, "action": None, "answer": None},  # invalid
              {"item_id": others[1]["item_id"], "valid": True, "action": None, "answer": "undetermined"}]
    (run / "records.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    cs = load_captures([_capture(tmp_path / "acts", rows)])
    cf = restrict_wrong(cs, labels(cs, "resolved"), load_records(run), "confabulated_twin")
    assert sorted(cs.index[r]["item_id"] for r in cf.rows) == sorted([twin, *(r["item_id"] for r in both)])
    assert "2 confabulated voids + 1 twins" in cf.restriction


def test_no_void_and_one_class_are_refused_in_one_line(planted, rows, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "records.jsonl").write_text("".join(json.dumps({"item_id": r["item_id"], "valid": True, "action": "stop",
                                                           "answer": None}) + "\n" for r in rows))
    cs = load_captures([planted[0]])
    with pytest.raises(CaptureError, match="no confabulated void .* --voids occluded,unstated"):
        restrict_wrong(cs, labels(cs, "resolved"), load_records(run), "confabulated_twin")
    with pytest.raises(CaptureError, match="unknown restriction 'nonsense'; use one of .*confabulated_twin"):
        restrict_wrong(cs, labels(cs, "resolved"), load_records(run), "nonsense")


def test_the_sweep_command_takes_the_twin_pairing(small_void_bench: Path, always_stop: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    acts = _capture(tmp_path / "acts", _index_rows(small_void_bench))
    out = tmp_path / "cf"
    assert main(["sweep", str(acts), "--records", str(always_stop), "--restrict", "confabulated_twin",
                 "--n-boot", "100", "--no-nested", "--no-controls", "--refits", "0", "--chance-permutations", "0",
                 "--quiet", "--out", str(out)]) == 0
    data = json.loads((out / "sweep.json").read_text())
    assert data["restriction"].startswith("confabulated_twin (12 confabulated voids + 12 twins")
    assert data["rows"][0]["n"] == 24
