"""The prompt-gating job on a small generated benchmark with a tiny real LLaVA: files, the
Table-4-style 2x2 tables for both signs with n, alpha = 0 equal to unsteered log-probs exactly,
reuse on rerun, two shards merged equal to one run, the family split, and config errors raised
before any model is loaded."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from evprobe import hooks
from evprobe.bench.items import item_units
from evprobe.core.jobs import batches
from evprobe.bench.manifest import load_item_images
from evprobe.bench.protocols import build_prompt
from evprobe.experiments.config import ConfigError
from evprobe.bench.family import LETTERS
from evprobe.experiments.steering_conventions import alpha_key
from evprobe.experiments.gating import (
    REGIMES,
    GatingConfig,
    gating,
    load_gating_config,
    make_plan,
    split_families,
)

MODEL = "tiny:llava"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def bench(small_bench: Path) -> Path:
    return small_bench  # shared, read-only (tests/conftest.py)


def config(bench: Path, out: Path, **overrides) -> GatingConfig:
    """The shipped tiny config (layer 2, alphas -1/0/+1, answer and select requests) on 9 held-out items: the
    8 of one family and 1 of another, the fewest that two shards can split."""
    return load_gating_config("gating_tiny", {"bench": str(bench), "out": str(out), "limit": 9, "n_boot": 100,
                                              **overrides})


def rows_of(folder: Path) -> dict[tuple[str, str], dict]:
    lines = (folder / "results.jsonl").read_text().splitlines()
    return {(row["item_id"], row["condition"]): row for row in map(json.loads, lines)}


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(hooks, "load", boom)


@pytest.fixture(scope="module")
def first(bench: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[GatingConfig, dict]:
    cfg = config(bench, tmp_path_factory.mktemp("gate_out") / "run")
    return cfg, gating(cfg, progress=False)


def test_files_and_tables(first: tuple[GatingConfig, dict]) -> None:
    cfg, summary = first
    out = Path(cfg.out)
    for name in ("gating.json", "gating.md", "gating.png", "results.jsonl", "meta.json"):
        assert (out / name).stat().st_size > 0
    assert (out / "acts" / "standard" / "acts.npy").is_file() and (out / "acts" / "guided" / "acts.npy").is_file()
    assert summary.report.layer == 2 and summary.report.n_items == 9 and summary.n_conditions == 2 * (1 + 2 * 2)
    result = json.loads((out / "gating.json").read_text())
    tables = {(t["kind"], t["group"], t["alpha"]): t for t in result["tables"]}
    assert set(tables) == {("answer", "controls", 1.0), ("answer", "voids", -1.0),
                           ("select", "controls", 1.0), ("select", "voids", -1.0)}
    for t in tables.values():
        assert set(t["cells"]) == {f"{d}|{i}" for d in REGIMES for i in REGIMES}
        for cell in t["cells"].values():
            for part in ("base", "steered", "change"):
                assert cell[part]["n"] > 0 and len(cell[part]["ci"]) == 2
    md = (out / "gating.md").read_text()
    assert md.count("\n| standard | ") == md.count("\n| guided | ") == 4 * 2  # rows of 4 tables + 4 change tables
    assert "alpha = +1" in md and "alpha = -1" in md and " -> " in md and "(n=" in md
    # Directions never see the held-out families; the reported items are only held-out ones.
    meta = result["meta"]
    assert not set(meta["fit_families"]) & set(meta["heldout_families"])
    for d in REGIMES:
        prov = json.loads((out / "directions" / d / "directions.json").read_text())["directions"][0]
        assert {i.split(".")[0] for i in prov["items"]} <= set(meta["fit_families"])


def test_every_interval_says_its_families(first: tuple[GatingConfig, dict]) -> None:
    """Issue 52: each rate and paired change carries the held-out families holding an item of its
    (kind, group) cell, in gating.json and printed beside n. The 9 items lie in two families, one of
    them holding a single item, so most cells rest on one family: a count of every held-out family
    (2), or none, fails."""
    from evprobe.core.estimate_text import count_text
    from evprobe.experiments.gating.config import GROUPS, REQUEST_KINDS

    cfg, _ = first
    targets = make_plan(cfg).targets
    out = Path(cfg.out)
    result = json.loads((out / "gating.json").read_text())
    md = (out / "gating.md").read_text()

    def held(kind: str, group: str) -> int:
        return len({it.family_id for it in targets
                    if REQUEST_KINDS[it.request] == kind and bool(it.resolved) == GROUPS[group]})

    counts = {held(t["kind"], t["group"]) for t in result["tables"]}
    assert counts == {1, 2}  # the fixture gives cells of both sizes, so a constant count cannot pass
    for t in result["tables"]:
        want = held(t["kind"], t["group"])
        for cell in t["cells"].values():
            for part in ("base", "steered", "change"):
                assert cell[part]["n_families"] == want, (t["kind"], t["group"], part)
            for part in ("steered", "change"):
                assert count_text(cell[part]["n"], want) in md
    for row in result["rows"]:
        assert row["rate"]["n_families"] == row["change"]["n_families"] == held(row["kind"], row["group"])
    assert "in only 1 family: the interval may be too narrow)" in md


def test_alpha_zero_is_unsteered(first: tuple[GatingConfig, dict]) -> None:
    cfg, _ = first
    plan = make_plan(cfg)
    done = rows_of(Path(cfg.out))
    handle = hooks.load(MODEL)
    for regime in REGIMES:
        for units in batches(item_units(plan.targets), plan.batch_size):
            batch = [u.value for u in units]  # the runner's batches: one image count each
            prompts = [build_prompt(it, "direct", regime) for it in batch]
            images = [load_item_images(plan.bench, it.images) for it in batch]
            logp = hooks.next_token_logprobs(handle, prompts, images, list(LETTERS), batch_size=len(batch))
            stored = np.array([[done[(it.item_id, f"{regime}.base")]["logprobs"][x] for x in LETTERS]
                               for it in batch])
            assert np.array_equal(stored, logp)


def test_rerun_reuses(first: tuple[GatingConfig, dict], no_model: None) -> None:
    cfg, summary = first
    again = gating(cfg, progress=False)
    assert again.computed == 0 and again.reused == summary.n_rows
    assert again.report.tables == summary.report.tables


def test_two_shards_merged_equal_one_run(first: tuple[GatingConfig, dict], bench: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Each shard prepares (captures, fits) for itself; `evprobe merge` gives the single run's
    results.jsonl (its lines in its order: the shards' batches are the single run's, one family
    each), its gating.json and its meta (but out), from the shards' rows and meta alone."""
    from evprobe.experiments.cli import main

    cfg, summary = first
    single = Path(cfg.out)
    shards = [tmp_path / f"shard-{k}" for k in range(2)]
    for k, folder in enumerate(shards):
        part = gating(config(bench, folder, shard=f"{k}/2"), progress=False)
        assert part.meta["shard"] == f"{k}/2" and part.complete and 0 < part.report.n_items < summary.report.n_items
        assert part.meta["directions"] == summary.meta["directions"]  # the same preparation as the single run
    assert main(["merge", str(tmp_path / "merged"), *map(str, shards)]) == 0
    assert "merged 2 gating shards (9 units, 90 rows)" in capsys.readouterr().out
    merged = tmp_path / "merged"
    assert (merged / "results.jsonl").read_bytes() == (single / "results.jsonl").read_bytes()
    assert rows_of(merged) == rows_of(single)
    assert set(rows_of(shards[0])) | set(rows_of(shards[1])) == set(rows_of(single))
    assert json.loads((merged / "gating.json").read_text()) == json.loads((single / "gating.json").read_text())
    assert (merged / "gating.md").read_text() == (single / "gating.md").read_text()
    meta, one = (json.loads((f / "meta.json").read_text()) for f in (merged, single))
    assert meta["kind"] == "gating" and meta["shard"] is None and meta["config"]["out"] == str(merged)
    assert {**meta, "config": {**meta["config"], "out": cfg.out}} == one


def test_split_is_half_per_system(bench: Path) -> None:
    from evprobe.bench.manifest import read_items

    items = read_items(bench)
    fit, held = split_families(items, 0)
    assert len(fit) == len(held) == 3 and not set(fit) & set(held)
    assert sorted(f.split("-")[0] for f in fit) == ["bouncing", "sliding", "spring"]
    assert split_families(items, 0) == (fit, held)


@pytest.mark.parametrize(("overrides", "needle"), [
    ({"requests": ("read_ruler",)}, "key 'requests' has 'read_ruler'"),
    ({"layer": 9}, "layer 9 is out of range"),
    ({"alphas": (0.0,)}, "no nonzero dose"),
    ({"alphas": (1.0, 1.0)}, "repeats a dose"),
])
def test_config_errors_before_model_load(bench: Path, tmp_path: Path, no_model: None, overrides: dict,
                                         needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        make_plan(config(bench, tmp_path / "x", **overrides))
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "x").exists()


def test_unknown_key_in_file(tmp_path: Path, no_model: None) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("model: tiny_llava\nbench: b\nout: o\nlayers: 2\n")
    with pytest.raises(ConfigError, match="unknown key 'layers'"):
        load_gating_config(str(path))


def test_parser_registers(tmp_path: Path) -> None:
    import argparse

    from evprobe.experiments.gating import add_gating_parser, config_from_args

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    add_gating_parser(sub)
    args = parser.parse_args(["gating", "--config", "gating_tiny", "--layer", "best", "--alphas=-2,0,2",
                              "--requests", "select", "--out", str(tmp_path)])
    cfg = config_from_args(args)
    assert cfg.layer == "best" and cfg.alphas == (-2.0, 0.0, 2.0) and cfg.requests == ("select",)
    assert callable(args.run)


def test_the_figure_panels_say_their_families(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each panel's title states its items with the families its bands rest on (gating.json's count),
    in the printers' wording; a title that dropped the count fails."""
    from dataclasses import fields

    import matplotlib.axes

    from evprobe.core.bootstrap import Estimate
    from evprobe.core.estimate_text import count_text
    from evprobe.experiments.gating.report import GateRow, GatingMeta, GatingResult, plot

    def rate(n: int, families: int) -> Estimate:
        return Estimate(0.5, (0.3, 0.7), n, n_families=families)

    rows = tuple(GateRow(kind=kind, group="controls", direction=d, inference=i, alpha=a, rate=rate(n, f),
                         change=rate(n, f))
                 for kind, n, f in (("answer", 24, 12), ("select", 10, 5)) for d in REGIMES for i in REGIMES
                 for a in (0.0, 1.0))
    # the figure reads the model's name, the layer and the held-out families of the meta only
    meta = GatingMeta(**{**{f.name: None for f in fields(GatingMeta)},
                         "model_name": "m", "layer": 2, "n_families": 17})
    titles: list[str] = []
    set_title = matplotlib.axes.Axes.set_title
    monkeypatch.setattr(matplotlib.axes.Axes, "set_title",
                        lambda self, label, *a, **k: (titles.append(label), set_title(self, label, *a, **k))[1])
    plot(GatingResult(meta, rows, ()), tmp_path / "g.png")
    assert titles == [f"answer requests, controls\nitems {count_text(24, 12)}",
                      f"select requests, controls\nitems {count_text(10, 5)}"]


def test_raw_alpha_units_add_alpha_times_the_unit_direction(first: tuple[GatingConfig, dict], bench: Path,
                                                            tmp_path: Path) -> None:
    """alpha_units raw: alpha = 1 adds the unit direction (norm 1). So a raw dose equal to a direction's mean norm is
    exactly the norm-unit dose 1 of that direction, row for row; the report and the folder's pins say raw."""
    cfg, _ = first
    meta = json.loads((Path(cfg.out) / "meta.json").read_text())
    name, d = next(iter(meta["directions"].items()))
    raw_cfg = replace(cfg, out=str(tmp_path / "raw"), alpha_units="raw", alphas=(0.0, d["mean_norm"]))
    done = gating(raw_cfg, progress=False)
    norm_rows, raw_rows = rows_of(Path(cfg.out)), rows_of(tmp_path / "raw")
    pairs = [(r, norm_rows[(r["item_id"], r["condition"].replace(alpha_key(d["mean_norm"]), "+1"))])
             for r in raw_rows.values() if r["direction"] == name and r["alpha"] != 0]
    assert pairs and all(r["logprobs"] == n["logprobs"] for r, n in pairs)
    assert json.loads((tmp_path / "raw" / "meta.json").read_text())["raw_alpha"] is True
    assert done.computed > 0 and "units: alpha in raw units" in (tmp_path / "raw" / "gating.md").read_text()
    with pytest.raises(ValueError, match="key 'alpha_units' is 'big'; choose from norm, raw"):
        replace(cfg, alpha_units="big")


def test_the_free_readout_reads_generated_replies_by_the_rule_reader(bench: Path, tmp_path: Path) -> None:
    """readout free (seed 002's steering read on free-form replies): each row holds the steered greedy reply of the
    free protocol and the rule reader's reading; alpha = 0 is the plain greedy reply; pinned; select refused."""
    from evprobe.bench.model_config import ModelConfig
    from evprobe.bench.parse import parse_reply
    from evprobe.experiments.steering_conventions import free_readout

    model = ModelConfig.of(MODEL, max_new_tokens_free=4)
    cfg = config(bench, tmp_path / "free", model=model, readout="free", requests=("answer_initial",), limit=3,
                 alphas=(0.0, 1.0))
    done = gating(cfg, progress=False)
    rows = rows_of(tmp_path / "free")
    assert done.computed == len(rows) > 0
    assert all(set(r) >= {"reply", "valid", "route", "answer", "abstain"} and "logprobs" not in r for r in rows.values())
    plan = make_plan(cfg)
    handle = hooks.load(MODEL)
    for regime in REGIMES:
        items = plan.targets
        prompts = [build_prompt(it, "free", regime) for it in items]
        images = [load_item_images(plan.bench, it.images) for it in items]
        plain = hooks.generate(handle, prompts, images, max_new_tokens=4, batch_size=1)
        for it, g in zip(items, plain):
            row = rows[(it.item_id, f"{regime}.base")]
            assert row["reply"] == g.text  # alpha = 0: the unsteered model's reply
            parsed = parse_reply(it, g.text, regime, letters=False)
            assert (row["valid"], row["route"], row["answer"]) == (parsed.valid, parsed.route, parsed.answer)
            assert row["abstain"] == (parsed.answer == "undetermined")
    meta = json.loads((tmp_path / "free" / "meta.json").read_text())
    assert (meta["protocol"], meta["readout"], meta["rubric"], meta["max_new_tokens"]) == ("free", "free", "seed002", 4)
    assert "Readout: a generated free-form reply" in (tmp_path / "free" / "gating.md").read_text()
    # the reader: abstains only on an undetermined reading; an invalid reply is no abstention
    item = plan.targets[0]
    assert free_readout(item, "The evidence does not settle it.", "standard").abstain
    assert not free_readout(item, "Yes or no.", "standard").abstain
    with pytest.raises(ValueError, match="key 'readout' is free, which asks the answer requests only"):
        config(bench, tmp_path / "x", readout="free", requests=("answer_initial", "select"))


def test_identical_class_states_are_refused_in_one_line(tmp_path: Path) -> None:
    """A layer where the resolved and unresolved rows' mean states are identical has no direction:
    fit_directions skips it with a warning, and gating's fit said so only as a raw unpack ValueError."""
    from types import SimpleNamespace

    from evprobe.experiments.gating.plan import fit_direction
    from evprobe.probes.synthetic import reference_rows, write_capture

    rows = reference_rows(n_families=4)
    acts = np.ones((len(rows), 1, 1, 8), dtype=np.float32)  # every row the same state: identical class means
    folder = write_capture(tmp_path / "acts", acts, rows, layers=[0], positions=["last"])
    plan = SimpleNamespace(fit_families=sorted({r["family_id"] for r in rows}), out=tmp_path / "out")
    with pytest.warns(UserWarning, match="identical"), pytest.raises(ConfigError) as err:
        fit_direction(plan, "standard", folder, 0)
    message = str(err.value)
    assert "\n" not in message and "layer 0" in message and "identical mean states" in message
    assert not (tmp_path / "out" / "directions").exists()
