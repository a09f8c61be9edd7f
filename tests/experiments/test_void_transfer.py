"""`evprobe void-transfer` (experiments.void_transfer): the cross-void table on a real model (the
organism, which learned to abstain on voids; the steering numbers are measured, not known by
construction), its files, and the bad inputs it refuses before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evprobe.bench.generate import GenerateConfig, generate
from evprobe.experiments.cli import main

from tests.intervals import zero_width

FLAGS = ["--model", "organism", "--n-random", "5", "--alphas=-1,1", "--layers", "2", "--n-boot", "100"]


@pytest.fixture(scope="module")
def void_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vt") / "bench"
    generate(out, GenerateConfig(families_per_system=2, subset_per_cell=0, voids=("occluded", "unstated")),
             progress=False)
    return out


def _estimates(tree):
    if isinstance(tree, dict) and "value" in tree and "n" in tree:
        yield tree
    elif isinstance(tree, dict):
        for v in tree.values():
            yield from _estimates(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from _estimates(v)


def test_every_path_gets_a_probe_and_a_steering_row(void_bench: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "vt"
    assert main(["void-transfer", "--config", "void_transfer_tiny", "--bench", str(void_bench), "--out", str(out),
                 "--quiet", *FLAGS]) == 0
    printed = capsys.readouterr().out
    result = json.loads((out / "void_transfer.json").read_text())
    paths = [(r["source"], r["target"]) for r in result["paths"]]
    assert paths == [("occluded", "occluded"), ("unstated", "occluded"), ("occluded", "unstated"),
                     ("unstated", "unstated")]
    assert "occluded -> unstated: probe AUROC" in printed
    for r in result["paths"]:
        assert r["probe_auroc"]["n"] == 24  # 12 voids of the target type and their 12 twins
        assert r["suppress_on_voids"]["n_random"] == 5 and r["suppress_on_voids"]["abstention_change"]["n"] == 6
        # the twins are shared by the void types: inducing on them is the source's, whatever the target
        same = [q for q in result["paths"] if q["source"] == r["source"]]
        assert all(q["induce_on_twins"] == r["induce_on_twins"] for q in same)
    # an interval is never a point: estimates identical in every unit say so (tests/intervals.py); the
    # organism, which learned the voids, moves every unit alike at the larger doses
    assert zero_width(result["paths"]) == []
    for e in _estimates(result["paths"]):
        lo, hi = e["ci"]
        assert e.get("identical_units") or lo is None or lo < hi or e["value"] in (0.0, 1.0), e
    assert set(result["fit_families"]).isdisjoint(result["heldout_families"])
    # each steering interval rests on the held-out families (one per system here, each holding voids of
    # both types and their twins), said in the JSON and beside n where printed (issue 52)
    held = len(result["heldout_families"])
    assert held == 3
    for r in result["paths"]:
        for effect in (r["suppress_on_voids"], r["induce_on_twins"]):
            assert effect["abstention_change"]["n_families"] == effect["log_odds_change"]["n_families"] == held
    assert f"(n=6 in only {held} families: the interval may be too narrow)" in printed
    directions = json.loads((out / "directions" / "directions.json").read_text())["directions"]
    assert sorted(d["condition"] for d in directions) == ["void=occluded", "void=unstated"]
    assert all(set(d["items"]) and all(i.split(".")[0] in result["fit_families"] for i in d["items"])
               for d in directions)  # fitted on the fitting families only
    md = (out / "void_transfer.md").read_text()
    assert "| occluded -> unstated |" in md and "| source -> twins |" in md
    assert (out / "sweep" / "transfer-void.md").is_file()
    # a rerun into the same folder continues the capture and recomputes the rest: the same table
    before = (out / "void_transfer.json").read_bytes()
    assert main(["void-transfer", "--config", "void_transfer_tiny", "--bench", str(void_bench), "--out", str(out),
                 "--quiet", *FLAGS]) == 0
    assert (out / "void_transfer.json").read_bytes() == before


def test_a_benchmark_without_voids_is_refused_before_a_model_loads(tmp_path: Path, capsys) -> None:
    bench = tmp_path / "bench"
    generate(bench, GenerateConfig(families_per_system=2, subset_per_cell=0), progress=False)
    out = tmp_path / "vt"
    assert main(["void-transfer", "--config", "void_transfer_tiny", "--bench", str(bench), "--out", str(out),
                 *FLAGS]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--voids occluded,unstated" in err
    assert not out.exists()


def test_a_layer_the_tiny_model_lacks_is_refused_in_one_line(void_bench: Path, tmp_path: Path, capsys) -> None:
    assert main(["void-transfer", "--config", "void_transfer_tiny", "--bench", str(void_bench), "--out",
                 str(tmp_path / "vt"), "--layers", "9"]) == 2
    assert "layer 9 is out of range" in capsys.readouterr().err


def test_a_crossfit_row_keeps_its_family_count() -> None:
    """The void-transfer JSON (evprobe.experiments.void_transfer.crossfit_estimate): the frame's n_families goes into the JSON, with or without an
    interval; a frame that holds no count (None read back as NaN) says none rather than inventing one."""
    import pandas as pd

    from evprobe.experiments.void_transfer import crossfit_estimate as _est

    frame = pd.DataFrame([{"value": 0.25, "lo": 0.1, "hi": 0.4, "n": 24, "n_families": 12, "identical": False},
                          {"value": 0.0, "lo": None, "hi": None, "n": 24, "n_families": 5, "identical": True},
                          {"value": 0.25, "lo": 0.1, "hi": 0.4, "n": 24, "n_families": None, "identical": False}])
    with_ci, identical, unknown = (_est(row).to_json() for _, row in frame.iterrows())
    assert with_ci == {"value": 0.25, "ci": [0.1, 0.4], "n": 24, "n_families": 12}
    assert identical["identical_units"] and identical["n_families"] == 5
    assert "n_families" not in unknown


def test_raw_alpha_units_reach_the_steering_and_the_report(void_bench: Path, tmp_path: Path, capsys) -> None:
    """--alpha-units raw (seed 002's doses, alpha x the unit direction): the own-data function steers in raw units
    (analysis.dose_response units='raw'), the report says so, and a unit that is neither is one line."""
    out = tmp_path / "raw"
    assert main(["void-transfer", "--config", "void_transfer_tiny", "--bench", str(void_bench), "--out", str(out),
                 "--quiet", *FLAGS, "--alpha-units", "raw", "--alphas=0,2"]) == 0
    result = json.loads((out / "void_transfer.json").read_text())
    assert result["config"]["alpha_units"] == "raw"
    assert "- doses: raw (alpha = 1 adds the unit direction" in (out / "void_transfer.md").read_text()
    capsys.readouterr()
    assert main(["void-transfer", "--config", "void_transfer_tiny", "--bench", str(void_bench), "--out",
                 str(tmp_path / "bad"), "--alpha-units", "metres"]) == 2
    err = capsys.readouterr().err
    assert "alpha-units" in err or "alpha_units" in err


def test_the_free_readout_reads_judged_replies_and_keeps_them(void_bench: Path, tmp_path: Path, capsys) -> None:
    """--readout free (seed 002's steering readout): the free protocol's greedy replies under the steering, read by
    the rule reader (abstained = answer "undetermined", invalid kept in the denominators); the same paths, nulls and
    intervals; every reply in replies.jsonl for a panel; the folder keeps its readout."""
    from evprobe.bench.manifest import read_items
    from evprobe.bench.parse import parse_reply
    from evprobe.bench.protocols import build_prompt
    from evprobe.experiments.config import load_model, load_model_config
    from evprobe.hooks.generation import generate

    out = tmp_path / "free"
    flags = [*FLAGS, "--n-random", "3", "--readout", "free"]
    assert main(["void-transfer", "--config", "void_transfer_tiny", "--bench", str(void_bench), "--out", str(out),
                 "--quiet", *flags]) == 0
    result = json.loads((out / "void_transfer.json").read_text())
    assert result["config"]["readout"] == "free"
    assert len(result["paths"]) == 4
    for r in result["paths"]:
        for effect in (r["suppress_on_voids"], r["induce_on_twins"]):
            assert "log_odds_change" not in effect and effect["invalid_change"]["n"] == 6
            assert effect["abstention_change"]["n"] == 6 and effect["n_random"] == 3
            assert set(effect["nulls"]) == {"random", "label-free"}
    assert zero_width(result["paths"]) == []
    md = (out / "void_transfer.md").read_text()
    assert "- readout: free-form greedy replies" in md and "| invalid (points) |" in md
    rows = [json.loads(line) for line in (out / "replies.jsonl").read_text().splitlines()]
    # per run (2 induce + 4 suppress), 6 items x (unsteered + probe at 2 doses + 3 random x 2 doses + label-free)
    assert {r["run"] for r in rows} == {"induce", "suppress"}
    assert {r["direction"] for r in rows} == {"unsteered", "probe", "random", "label-free"}
    # known answer: the unsteered replies are the plain greedy replies to the free prompts, read by the rule reader
    items = {it.item_id: it for it in read_items(void_bench)}
    base = [r for r in rows if r["direction"] == "unsteered" and r["run"] == "induce" and r["source"] == "occluded"]
    assert len(base) == 6
    model = load_model_config("organism")
    handle = load_model(model)
    from evprobe.bench.manifest import load_item_images

    plain = generate(handle, [build_prompt(items[r["item_id"]], "free") for r in base],
                     [load_item_images(void_bench, items[r["item_id"]].images) for r in base],
                     max_new_tokens=model.max_new_tokens_free, batch_size=8)
    assert [r["reply"] for r in base] == [g.text for g in plain]
    for r in rows:
        parsed = parse_reply(items[r["item_id"]], r["reply"], "standard", letters=False)
        assert r["abstain"] == (parsed.valid and parsed.answer == "undetermined") and r["valid"] == parsed.valid
    # a folder keeps one readout: a letters rerun into it is refused in one line, before any model work
    capsys.readouterr()
    assert main(["void-transfer", "--config", "void_transfer_tiny", "--bench", str(void_bench), "--out", str(out),
                 "--quiet", *FLAGS]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "readout 'free', not 'letters'" in err
    assert main(["void-transfer", "--config", "void_transfer_tiny", "--bench", str(void_bench), "--out",
                 str(tmp_path / "bad"), "--readout", "judged"]) == 2
    assert "readout" in capsys.readouterr().err


def test_a_layer_without_a_direction_is_refused_in_one_line(tmp_path: Path) -> None:
    """fit_directions skips (with a warning) a layer whose classes have identical mean states; void-transfer
    found out only at the steering, as a KeyError. Real fit on a capture whose layer 1 holds one state."""
    import warnings

    import numpy as np

    from evprobe.experiments.config import ConfigError
    from evprobe.experiments.void_transfer.run import check_fitted
    from evprobe.probes.captures import load_captures
    from evprobe.probes.directions import fit_directions
    from evprobe.probes.label_sets import labels
    from evprobe.probes.synthetic import reference_rows, write_capture

    rows = reference_rows(n_families=4)
    rng = np.random.default_rng(0)
    acts = np.ones((len(rows), 2, 1, 8), dtype=np.float32)
    acts[:, 0, 0, :] = rng.normal(size=(len(rows), 8))  # layer 0 separates the classes; layer 1 is one state
    cs = load_captures([write_capture(tmp_path / "acts", acts, rows, layers=[0, 1], positions=["last"])])
    ls = labels(cs, "resolved")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        directions = fit_directions(cs, ls, [0, 1], "last", "massmean", conditions=[("void=occluded", np.ones(len(rows), dtype=bool))])
    check_fitted([d for d in directions if d.provenance["layer"] == 0], ["occluded"], [0])  # fitted: passes
    with pytest.raises(ConfigError) as err:
        check_fitted(directions, ["occluded"], [0, 1])
    assert "\n" not in str(err.value) and "layer 1" in str(err.value) and "--layers" in str(err.value)
