"""The dose-response job on a small generated benchmark with a tiny real LLaVA and directions
fitted on a real capture: readouts, files, reuse, resume after a torn write, and one-line config
errors raised before any model is loaded. No mocks of models."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from evprobe import hooks
from evprobe.bench.manifest import read_items, resolve_image
from evprobe.bench.protocols import build_prompt
from evprobe.core.errors import InputError
from evprobe.experiments.config import ConfigError
from evprobe.experiments.dose_response.config import (
    LETTERS,
    RESULTS_FILE,
    DoseResponseConfig,
    load_dose_response_config,
)
from evprobe.experiments.dose_response.plan import make_plan
from evprobe.experiments.steering_conventions import measure_sign
from evprobe.experiments.dose_response.readouts import logprob_readout
from evprobe.experiments.dose_response import add_dose_response_parser, dose_response, load_results
from evprobe.experiments.dose_response.stats import MEASURES
from evprobe.probes.directions import read_directions

MODEL = "tiny:llava"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 6-family benchmark; a capture of the sliding and bouncing selections at layers 1 and 2;
    directions fitted per system (resolved=True, mass-mean) at both layers."""
    from evprobe.bench.generate import GenerateConfig, generate
    from evprobe.experiments.capture import CaptureConfig, capture
    from evprobe.probes.captures import load_captures
    from evprobe.probes.label_sets import labels
    from evprobe.probes.directions import fit_directions, write_directions
    from evprobe.probes.transfer import conditions

    root = tmp_path_factory.mktemp("dose")
    bench, acts, dirs = root / "bench", root / "acts", root / "dirs"
    generate(bench, GenerateConfig(families_per_system=2, subset_per_cell=0), progress=False)
    capture(CaptureConfig(model=MODEL, bench=str(bench), out=str(acts), requests=("select",), layers="1,2",
                          limit=16, batch_size=8), progress=False)
    cs = load_captures([acts])
    ls = labels(cs, "resolved")
    conds = [(f"system={c.name}", c.mask) for c in conditions(cs, ls, "system")]
    write_directions(dirs, fit_directions(cs, ls, [1, 2], "last", "massmean", conds))
    return {"root": root, "bench": bench, "dirs": dirs}


def config(setup: dict[str, Path], out: str, **changes) -> DoseResponseConfig:
    """The shipped tiny config (2 layers, alphas -1/0/+1, 8 items, 3 controls) on the fixture, with 3
    random and 3 relabelled directions (tiny:llava prompts are ~1,200 tokens: 50 would take minutes on CPU)."""
    overrides = {"bench": str(setup["bench"]), "directions": str(setup["dirs"]), "out": str(setup["root"] / out)}
    return replace(load_dose_response_config("dose_response_tiny", overrides), **{"n_random": 3, "n_relabel": 3,
                                                                                  **changes})


@pytest.fixture(scope="module")
def first(setup: dict[str, Path]) -> tuple[DoseResponseConfig, dict]:
    cfg = config(setup, "run1")
    return cfg, dose_response(cfg, progress=False)


@pytest.fixture
def no_model_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any model load fails the test: what follows must not build a model."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(hooks, "load", refuse)


def _images(bench: Path, item) -> list:
    from PIL import Image

    out = []
    for rel in item.images:
        with Image.open(resolve_image(bench, rel)) as im:
            out.append(im.convert("RGB"))
    return out


def test_plan_holds_out_the_fitted_families_and_flips_the_sign(setup) -> None:
    plan = make_plan(config(setup, "plan"))
    assert plan.name == "resolved.massmean.L1.last.system-bouncing"  # the first name, sorted
    assert plan.fit_families == ["bouncing-000", "bouncing-001"] == plan.excluded
    assert {it.family_id for it in plan.items} == {"sliding-000", "sliding-001"} and len(plan.items) == 8
    assert plan.layers == [1, 2] and plan.flipped
    stored = {d.layer: d for d in read_directions(setup["dirs"]).values()
              if d.provenance["condition"] == "system=bouncing"}
    for layer, d in plan.directions.items():  # measuring = -resolved, unit norm, the stored layer's norm
        assert np.allclose(d.vector, -stored[layer].vector, atol=1e-6) and abs(np.linalg.norm(d.vector) - 1) < 1e-12
        assert d.mean_norm == stored[layer].mean_norm
    keys = [c.key for c in plan.conditions]
    assert keys == ["base", "L1.probe.-1", "L1.random.-1", "L1.relabel.-1", "L1.controls.-1", "L1.probe.+1",
                    "L1.random.+1", "L1.relabel.+1", "L1.controls.+1", "L1.ablate", "L2.probe.-1", "L2.random.-1",
                    "L2.relabel.-1", "L2.controls.-1", "L2.probe.+1", "L2.random.+1", "L2.relabel.+1",
                    "L2.controls.+1", "L2.ablate"]
    assert plan.random.shape == (3, plan.d_model)
    for layer, rel in plan.relabel.items():  # label-free: fitted like the direction on its rows (analysis.label_null)
        # 2 fit families allow 2 non-constant flip patterns, (+, -) and (-, +): fewer than the 3 asked, said so
        assert rel.vectors.shape == (2, plan.d_model) and np.allclose(np.linalg.norm(rel.vectors, axis=1), 1)
        assert "all 2 sign patterns of 2 families" in rel.source
        assert np.allclose(rel.cosines, rel.vectors @ plan.directions[layer].vector)
        assert np.allclose(rel.cosines, 0.0, atol=1e-9)  # mass-mean on rows without the label's line
    assert np.allclose(plan.relabel[1].vectors[0], -plan.relabel[1].vectors[1])  # the two patterns: +-one direction
    assert [c.name for c in plan.controls[1]] == ["history", "threshold_level", "shuffled"]
    # other systems or families as targets; in-sample on request
    assert {it.system for it in make_plan(config(setup, "p", systems=("spring",))).items} == {"spring"}
    insample = make_plan(config(setup, "p", heldout=False, limit=None))
    assert insample.excluded == [] and "bouncing-000" in {it.family_id for it in insample.items}


def test_sign_convention_from_provenance() -> None:
    assert measure_sign({"label": "resolved", "positive": True}, "d") == -1
    assert measure_sign({"label": "resolved", "positive": False}, "d") == 1
    assert measure_sign({"label": "stopped", "positive": "True"}, "d") == -1
    with pytest.raises(ConfigError, match="history=1 direction"):
        measure_sign({"label": "history", "positive": 1}, "d")


def test_readout_measures_from_logprobs(setup) -> None:
    item = next(it for it in read_items(setup["bench"]) if it.request == "select" and not it.resolved)
    stop = next(k for k, v in item.options.items() if v == "stop")
    missing = "test_other" if item.initial_property == "mass" else "test_mass"
    want = next(k for k, v in item.options.items() if v == missing)
    logp = np.full(len(LETTERS), -5.0)
    logp[LETTERS.index(want)], logp[LETTERS.index(stop)] = -1.0, -2.0
    r = logprob_readout(item, logp)
    assert (r["choice"], r["action"], r["stop"], r["missing"]) == (want, missing, False, True)
    assert r["min_cost"] == (item.reference_action == missing) and r["log_odds"] == pytest.approx(-1.0)


def test_run_writes_every_file_and_alpha_zero_is_the_unsteered_model(setup, first) -> None:
    cfg, summary = first
    out = Path(cfg.out)
    assert summary.computed == summary.n_rows == 8 * 19 and summary.reused == 0
    for name in ("results.jsonl", "meta.json", "dose_response.json", "dose_response.md", "stop_rate.png",
                 "missing_test_rate.png", "min_cost_accuracy.png", "log_odds.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 200, name
    rows = load_results(out / RESULTS_FILE)
    assert len(rows) == 152
    plan = make_plan(cfg)
    handle = hooks.load(MODEL)
    prompts = [build_prompt(it, "direct", "standard") for it in plan.items]
    images = [_images(setup["bench"], it) for it in plan.items]
    plain = hooks.next_token_logprobs(handle, prompts, images, list(LETTERS), batch_size=8)  # (8, 5)
    from evprobe.hooks.steering import Steering, option_logprobs

    zero = option_logprobs(handle, prompts, images, LETTERS,
                           Steering(plan.directions[1].vector, 1, 0.0), batch_size=8)  # a zero-dose hook
    assert np.array_equal(zero, plain)
    for i, it in enumerate(plan.items):
        base = rows[(it.item_id, "base")]
        assert [base["logprobs"][letter] for letter in LETTERS] == plain[i].tolist()  # exact
        steered = rows[(it.item_id, "L1.probe.+1")]
        assert steered["logprobs"] != base["logprobs"]  # the edit lands
        assert steered["lp"] == logprob_readout(it, np.array([steered["logprobs"][x] for x in LETTERS]))
    # the +1 dose along "measuring" lowers stop log-odds on average at the steered layer
    def mean(key: str) -> float:
        return float(np.mean([rows[(it.item_id, key)]["lp"]["log_odds"] for it in plan.items]))

    assert mean("L1.probe.+1") < mean("base") < mean("L1.probe.-1")


def test_aggregates_carry_intervals_and_n(first) -> None:
    cfg, _ = first
    result = json.loads((Path(cfg.out) / "dose_response.json").read_text())
    meta = result["meta"]
    assert meta["flipped"] and meta["excluded_families"] == ["bouncing-000", "bouncing-001"]
    assert (meta["n_items"], meta["n_resolved"], meta["n_unresolved"], meta["n_families"]) == (8, 4, 4, 2)
    kinds = {r["kind"] for r in result["rows"]}
    assert kinds == {"baseline", "probe", "ablation"}
    for r in result["rows"]:
        assert set(r) >= {"value", "ci", "n", "delta_vs_0"} and r["measure"] in MEASURES["logprobs"]
        assert r["n"] == {"all": 8, "resolved": 4, "unresolved": 4}[r["group"]]
        if r["value"] is not None:
            lo, hi = r["ci"]
            assert lo <= r["value"] + 1e-12 and r["value"] <= hi + 1e-12
        if r["alpha"] == 0.0 and r["value"] is not None:  # the unsteered model against itself: 0 by definition
            assert r["delta_vs_0"] == {"value": 0.0, "ci": [0.0, 0.0], "n": r["n"], "fixed_by_design": True}
        elif r["delta_vs_0"]["value"] is not None:  # every other change has an interval that is not a point
            assert r["delta_vs_0"]["ci"][0] < r["delta_vs_0"]["ci"][1] and "fixed_by_design" not in r["delta_vs_0"]
    # the same numbers as core.bootstrap.FamilyBootstrap on the rows (ratio estimator, paired change)
    from evprobe.core.bootstrap import FamilyBootstrap

    rows = load_results(Path(cfg.out) / RESULTS_FILE)
    items = make_plan(cfg).items
    boot = FamilyBootstrap(sorted({it.family_id for it in items}), cfg.n_boot, cfg.seed)
    fam = boot.family_index([it.family_id for it in items])
    ones = boot.per_family(fam, np.ones(len(items)))
    parts = {key: boot.resample(boot.per_family(fam, np.array([rows[(it.item_id, key)]["lp"]["log_odds"]
                                                               for it in items])), ones)
             for key in ("base", "L1.probe.+1")}
    want, want_delta = boot.estimate(parts["L1.probe.+1"]), boot.difference(parts["L1.probe.+1"], parts["base"])
    got = next(r for r in result["rows"] if (r["kind"], r["layer"], r["alpha"], r["group"], r["measure"])
               == ("probe", 1, 1.0, "all", "log_odds"))
    # the interval is the hull of that percentile interval and the cluster t interval over the families
    # (t on F - 1 degrees of freedom, the linearised standard error of the ratio; core.cluster_t), here by hand
    from scipy.stats import t as student

    def sums(key: str) -> np.ndarray:
        return boot.per_family(fam, np.array([rows[(it.item_id, key)]["lp"]["log_odds"] for it in items]))

    def hull_t(value: float, e: np.ndarray, pct: tuple) -> list[float]:
        half = student.ppf(0.975, len(e) - 1) * np.sqrt(len(e) / (len(e) - 1) * np.sum(e ** 2))
        return [min(pct[0], value - half), max(pct[1], value + half)]

    y1, y0, n_f = sums("L1.probe.+1"), sums("base"), ones
    r1, r0 = y1.sum() / n_f.sum(), y0.sum() / n_f.sum()
    e1, e0 = (y1 - r1 * n_f) / n_f.sum(), (y0 - r0 * n_f) / n_f.sum()
    assert got["value"] == pytest.approx(want.value) and got["ci"] == pytest.approx(hull_t(r1, e1, want.ci))
    assert got["delta_vs_0"]["ci"] == pytest.approx(hull_t(r1 - r0, e1 - e0, want_delta.ci))
    assert got["n"] == want.n == 8 and got["n_families"] == 2
    band = result["null_band"]
    assert band and all(b["band_lo"] - 1e-12 <= b["mean"] <= b["band_hi"] + 1e-12 and b["n_directions"] == 3
                        for b in band)
    goals = {(h["layer"], h["goal"], h["group"], h["alpha"]) for h in result["by_layer"]}
    assert goals == {(1, "induce measuring", "resolved", 1.0), (1, "induce stopping", "unresolved", -1.0),
                     (2, "induce measuring", "resolved", 1.0), (2, "induce stopping", "unresolved", -1.0)}
    md = (Path(cfg.out) / "dose_response.md").read_text()
    assert "positive alpha = toward measuring" in md and "held out" in md
    numbers = [line for line in md.splitlines() if line.startswith("| ") and "[" in line]
    assert numbers and all("n=" in cell for line in numbers for cell in line.split(" | ")[1:] if "[" in cell)


def test_rerun_reuses_everything_and_loads_no_model(setup, first, no_model_load) -> None:
    cfg, _ = first
    path = Path(cfg.out) / RESULTS_FILE
    before = path.read_bytes()
    again = dose_response(cfg, progress=False)
    assert (again.computed, again.reused) == (0, 152)
    assert path.read_bytes() == before


def test_a_torn_run_resumes_without_duplicates(setup, first) -> None:
    cfg, _ = first
    full = load_results(Path(cfg.out) / RESULTS_FILE)
    cut_cfg = replace(cfg, out=str(Path(cfg.out).parent / "torn"))
    Path(cut_cfg.out).mkdir()
    data = (Path(cfg.out) / RESULTS_FILE).read_bytes()
    cut = int(len(data) * 0.6)
    assert data[cut - 1: cut] != b"\n"  # mid-line: a kill during an append
    (Path(cut_cfg.out) / RESULTS_FILE).write_bytes(data[:cut])
    kept = data[:cut].count(b"\n")
    summary = dose_response(cut_cfg, progress=False)
    assert (summary.reused, summary.computed) == (kept, 152 - kept)
    lines = (Path(cut_cfg.out) / RESULTS_FILE).read_text().splitlines()
    assert len(lines) == 152 and len({(json.loads(x)["item_id"], json.loads(x)["condition"]) for x in lines}) == 152
    resumed = load_results(Path(cut_cfg.out) / RESULTS_FILE)
    for key, row in full.items():  # recomputed rows agree (other batch mixes: float noise at most)
        if "lp_set" in row:
            assert np.allclose(row["lp_set"]["log_odds"], resumed[key]["lp_set"]["log_odds"], atol=1e-5)
            continue
        assert np.allclose([row["logprobs"][x] for x in LETTERS], [resumed[key]["logprobs"][x] for x in LETTERS],
                           atol=1e-5)


def test_other_settings_in_the_same_folder_are_refused(first, no_model_load) -> None:
    cfg, _ = first
    with pytest.raises(InputError, match="readout='logprobs', this run has readout='generate'"):
        dose_response(replace(cfg, readout="generate"), progress=False)
    with pytest.raises(InputError, match="random_seed=0, this run has random_seed=5"):
        dose_response(replace(cfg, random_seed=5), progress=False)
    with pytest.raises(InputError, match="n_relabel=3, this run has n_relabel=4"):
        dose_response(replace(cfg, n_relabel=4), progress=False)


def test_generated_replies_readout(setup) -> None:
    cfg = config(setup, "gen", readout="both", layers=(1,), alphas=(0.0, 1.0), n_random=0, n_relabel=0, controls=(),
                 ablation=False, limit=4)
    summary = dose_response(cfg, progress=False)
    assert summary.computed == 4 * 2
    rows = load_results(Path(cfg.out) / RESULTS_FILE)
    for row in rows.values():
        g = row["gen"]
        assert set(g) >= {"reply", "valid", "route", "stop", "min_cost"} and "logprobs" in row
        assert g["valid"] or (g["route"].startswith("invalid") and not g["stop"] and not g["min_cost"])
    result = json.loads((Path(cfg.out) / "dose_response.json").read_text())
    assert {r["readout"] for r in result["rows"]} == {"logprobs", "generate"}
    assert any(r["measure"] == "invalid_rate" for r in result["rows"])
    assert (Path(cfg.out) / "generate.stop_rate.png").is_file() and (Path(cfg.out) / "stop_rate.png").is_file()


def test_sets_read_by_logprobs_only_without_generate_sets(setup) -> None:
    """--no-generate-sets: the probe and baseline rows have both readouts, the random and control
    sets only log-probs; the generated readout is summarised without a null band or controls."""
    cfg = config(setup, "gen_nosets", readout="both", generate_sets=False, layers=(1,), alphas=(0.0, 1.0),
                 n_random=2, controls=("history",), ablation=False, limit=4)
    dose_response(cfg, progress=False)
    rows = load_results(Path(cfg.out) / RESULTS_FILE)
    sets = [r for r in rows.values() if "lp_set" in r]
    singles = [r for r in rows.values() if "lp" in r]
    assert sets and all("gen_set" not in r for r in sets)
    assert singles and all("gen" in r for r in singles)
    result = json.loads((Path(cfg.out) / "dose_response.json").read_text())
    assert {r["readout"] for r in result["null_band"]} == {"logprobs"}
    assert {r["readout"] for r in result["controls"]} == {"logprobs"}
    assert {r["readout"] for r in result["rows"]} == {"logprobs", "generate"}
    with pytest.raises(InputError, match="readout=None, this run has|generate_sets=False, this run has"):
        dose_response(replace(cfg, generate_sets=True), progress=False)
    with pytest.raises(ValueError, match="'generate_sets' is false but readout is not both"):
        replace(cfg, readout="logprobs")


# ---------------------------------------------------------------- errors before any model load


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="evprobe")
    add_dose_response_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["dose-response", *argv])
    return args.run(args)


def _error(argv: list[str]) -> str:
    with pytest.raises(ValueError) as err:
        _cli(argv)
    text = str(err.value)
    assert "\n" not in text
    return text


def test_config_errors_are_one_line_and_come_before_the_model(setup, tmp_path, no_model_load) -> None:
    paths = ["--bench", str(setup["bench"]), "--directions", str(setup["dirs"]), "--out", str(tmp_path / "o")]
    assert "config file nope.yaml not found" in _error(["--config", "nope.yaml", *paths])
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: tiny_llava\nbench: b\ndirections: d\nout: o\nalpha: [1]\n")
    assert f"{bad}: unknown key 'alpha' in DoseResponseConfig" in _error(["--config", str(bad)])
    text = _error(["--config", "dose_response_tiny", *paths, "--layers", "1,7"])
    assert "layer 7 is out of range: tiny:llava has 4 decoder layers; use 0 .. 3" in text
    text = _error(["--config", "dose_response_tiny", *paths, "--layers", "3"])
    assert "no direction like" in text and "at layer 3" in text and "it has layers 1, 2" in text
    assert "is not in" in _error(["--config", "dose_response_tiny", *paths, "--direction", "nope"])
    assert "directions folder" in _error(["--config", "dose_response_tiny", *paths[:2], "--directions",
                                          str(tmp_path / "none"), "--out", str(tmp_path / "o")])
    assert "benchmark" in _error(["--config", "dose_response_tiny", "--bench", str(tmp_path), *paths[2:]])
    assert "fitted on 'tiny:llava', not 'tiny:qwen2_5_vl'" in _error(
        ["--config", "dose_response_tiny", *paths, "--model", "tiny:qwen2_5_vl"])
    assert "key 'alphas' is empty" in _error(["--config", "dose_response_tiny", *paths, "--alphas=,"])
    assert "no items left" in _error(["--config", "dose_response_tiny", *paths, "--families", "bouncing-000"])
    assert not (tmp_path / "o").exists()  # nothing written either


def test_cli_flags_override_the_config(setup, first, capsys, no_model_load) -> None:
    cfg, _ = first
    # the finished run again through the CLI: flags select the same run, which is all reused
    rc = _cli(["--config", "dose_response_tiny", "--bench", str(setup["bench"]), "--directions", str(setup["dirs"]),
               "--out", cfg.out, "--alphas=-1,0,1", "--layers", "1,2", "--n-random", "3", "--n-relabel", "3",
               "--quiet"])
    assert rc == 0
    assert "0 computed" in capsys.readouterr().out


# ---------------------------------------------------------------- alpha units, direction sets, controls


def test_alpha_unit_is_the_norm_where_the_vector_is_added(setup, first) -> None:
    """Fails if the unit is read at the last token (or from directions.json) while the edit is at every position."""
    cfg, _ = first
    meta = json.loads((Path(cfg.out) / "meta.json").read_text())
    plan = make_plan(cfg)
    handle = hooks.load(MODEL)
    from evprobe.hooks.steering import Steering, option_logprobs
    from evprobe.hooks.steer_rows import residual_norms_at

    prompts = [build_prompt(it, "direct", "standard") for it in plan.norm_items]
    images = [_images(setup["bench"], it) for it in plan.norm_items]
    every = residual_norms_at(handle, prompts, images, [1, 2], "all")
    last = residual_norms_at(handle, prompts, images, [1, 2], "last")
    assert plan.norm_source == "fit items" and {it.family_id for it in plan.norm_items} <= set(plan.fit_families)
    for layer in (1, 2):
        unit = meta["alpha_units"][str(layer)]
        assert unit["positions"] == cfg.positions == "all"
        assert unit["unit_norm"] == pytest.approx(every[layer][0], rel=1e-5)
        assert unit["unit_norm"] != pytest.approx(last[layer][0], rel=1e-3)  # the two units differ here
        assert unit["n_tokens"] == every[layer][1] > len(plan.norm_items)
    # the probe rows were steered with exactly alpha * unit_norm
    rows = load_results(Path(cfg.out) / RESULTS_FILE)
    targets = [build_prompt(it, "direct", "standard") for it in plan.items]
    timgs = [_images(setup["bench"], it) for it in plan.items]
    raw = meta["alpha_units"]["1"]["unit_norm"]
    want = option_logprobs(handle, targets, timgs, LETTERS, Steering(plan.directions[1].vector, 1, raw), batch_size=8)
    got = np.array([[rows[(it.item_id, "L1.probe.+1")]["logprobs"][x] for x in LETTERS] for it in plan.items])
    assert np.allclose(got, want, atol=1e-6)
    with pytest.raises(ValueError, match="measured at positions 'last' but the vector is added at 'all'"):
        Steering.from_norm_units(plan.directions[1].vector, 1, 1.0, raw, positions="all", measured_at="last")


def test_random_set_rows_equal_one_direction_at_a_time(setup, first) -> None:
    """The batched null (K directions x n items per forward) reads what K separate steered runs read."""
    cfg, _ = first
    meta = json.loads((Path(cfg.out) / "meta.json").read_text())
    plan = make_plan(cfg)
    rows = load_results(Path(cfg.out) / RESULTS_FILE)
    handle = hooks.load(MODEL)
    from evprobe.hooks.steering import Steering, option_logprobs

    items = plan.items[:4]
    prompts = [build_prompt(it, "direct", "standard") for it in items]
    images = [_images(setup["bench"], it) for it in items]
    raw = -1.0 * meta["alpha_units"]["2"]["unit_norm"]
    sets = [("L2.random.-1", k, plan.random[k]) for k in range(plan.random.shape[0])]
    sets.append(("L2.relabel.-1", 1, plan.relabel[2].vectors[1]))  # the relabelled set rides the same path
    for key, k, vector in sets:
        logp = option_logprobs(handle, prompts, images, LETTERS, Steering(vector, 2, raw), batch_size=4)
        for i, it in enumerate(items):
            want = logprob_readout(it, logp[i])
            s = rows[(it.item_id, key)]["lp_set"]
            assert s["choice"][k] == want["choice"] and s["log_odds"][k] == pytest.approx(want["log_odds"], abs=1e-5)


def test_null_controls_ablation_and_crossfit_are_reported(first) -> None:
    cfg, _ = first
    result = json.loads((Path(cfg.out) / "dose_response.json").read_text())
    b = next(b for b in result["null_band"] if (b["layer"], b["alpha"], b["group"], b["system"], b["measure"])
             == (1, 1.0, "resolved", "all", "log_odds"))
    assert b["n_directions"] == 3 and b["percentile"] is not None and 0 <= b["percentile"] <= 100
    assert b["p_null"] >= 1 / 4  # with 3 directions p_null cannot be small
    ctl = {(c["control"], c["layer"], c["alpha"]) for c in result["controls"]}
    assert ("shuffled", 2, -1.0) in ctl and ("history", 1, 1.0) in ctl
    for c in result["controls"]:
        assert -1 - 1e-9 <= c["cosine_with_probe"] <= 1 + 1e-9 and "delta_vs_0" in c
    assert {a["layer"] for a in result["ablation"]} == {1, 2}
    assert all(a["sentence"].startswith("Projecting the direction out at L") for a in result["ablation"])
    split = result["meta"]["split"]
    assert split["families"] == {"A": ["sliding-000"], "B": ["sliding-001"]} or \
        split["families"] == {"A": ["sliding-001"], "B": ["sliding-000"]}
    for h in result["headline"]:
        assert [c["chosen_on"] for c in h["choices"]] == ["A", "B"]
        assert [c["scored_on"] for c in h["choices"]] == ["B", "A"]
        assert h["target"]["change"]["n"] == 4
        for kind, k in (("random", 3), ("relabel", 2)):  # every null direction through the same cross-fitted choice
            null = h["target"]["null"][kind]["log_odds"]
            assert null["n_directions"] == k and len(null["effects"]) == k and null["p_goal"] >= 1 / (k + 1)
            assert null["specific"] is False  # 3 directions cannot give p <= 0.05
            assert null["margin"] is not None and null["near_share"] is not None
            assert len(h["other"]["null"][kind]["log_odds"]["effects"]) == k
        assert h["target"]["specific"]["log_odds"]["specific"] is False  # not beyond both nulls
        assert h["target"]["specific"]["log_odds"]["against"] == ["random", "relabel"]
    assert result["meta"]["n_relabel"] == 2 and set(result["meta"]["relabel_directions"]) == {"1", "2"}
    assert {r["layer"] for r in result["relabel_band"]} == {1, 2}
    assert all(c["relabel_p_null"] is not None for c in result["controls"] if c["alpha"] != 0)
    md = (Path(cfg.out) / "dose_response.md").read_text()
    assert "cross-fitted" in md and "What this shows" in md and "Specificity controls" in md
    assert "Only 3 random directions: p cannot go below" in md  # 3 directions: the text says the null is too small
    assert "Only 2 label-free directions: p cannot go below" in md and "log-odds vs label-free" in md


def test_controls_fail_in_one_line_without_captures(setup, tmp_path, no_model_load) -> None:
    import shutil

    dirs = tmp_path / "dirs"
    shutil.copytree(setup["dirs"], dirs)
    index = json.loads((dirs / "directions.json").read_text())
    for d in index["directions"]:
        d["captures"] = [str(tmp_path / "moved")]
    (dirs / "directions.json").write_text(json.dumps(index))
    with pytest.raises(ConfigError, match=r"cannot fit it from the captures.*controls: \[\]") as err:
        make_plan(config(setup, "c", directions=str(dirs)))
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"label-free null at layer \d: cannot read the rows .* n_relabel: 0") as err:
        make_plan(config(setup, "c", directions=str(dirs), controls=()))  # the relabelled null needs them too
    assert "\n" not in str(err.value)
    plan = make_plan(config(setup, "c", directions=str(dirs), controls=(), n_relabel=0))
    assert plan.controls == {1: [], 2: []} and plan.relabel == {}
    assert not any(c.kind == "relabel" for c in plan.conditions)


def test_the_power_benchmark_runs_and_prints_every_rule(capsys) -> None:
    """benchmarks/steering_null_power.py (the docs quote its full run): size and power by simulation,
    the printed rule beside each null alone and the within-family null it replaced."""
    import runpy

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "steering_null_power.py"
    main = runpy.run_path(str(script))["main"]
    assert main(["--reps", "2", "--size-reps", "2", "--families", "8", "--designs", "pairs", "--reads", "linear"]) == 0
    out = capsys.readouterr().out
    assert "joint" in out and "label-free" in out and "within-family" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("linear ")]
    assert [(r[3], r[4]) for r in rows] == [("reads", s) for s in ("0.25", "1", "2", "4", "8")] + \
        [("unread", s) for s in ("0.25", "1", "2", "4", "8")] + [("meaningless", "0")]
    assert all(len(r) == 9 for r in rows)  # a measuring/stopping share for each of the four rules


def test_raw_alpha_units_add_the_unit_direction_itself(setup) -> None:
    """alpha_units raw (seed 002's alpha in {0, 2, 5, 10}): alpha = 1 adds the unit direction, a vector of norm 1;
    nothing is measured, meta.json says so, the report says so, and a norm-unit rerun in the folder is refused."""
    from evprobe.hooks.steering import Steering, option_logprobs

    cfg = config(setup, "raw", layers=(1,), alphas=(0.0, 2.0), alpha_units="raw", n_random=2, n_relabel=0,
                 controls=(), ablation=False, limit=4)
    dose_response(cfg, progress=False)
    meta = json.loads((Path(cfg.out) / "meta.json").read_text())
    assert meta["alpha_units"]["1"]["unit_norm"] == 1.0 and meta["alpha_units"]["1"]["items"] == "raw"
    assert meta["alpha_units"]["1"]["directions_mean_norm"] != 1.0  # for scale: not the unit used
    rows = load_results(Path(cfg.out) / RESULTS_FILE)
    plan = make_plan(cfg)
    handle = hooks.load(MODEL)
    prompts = [build_prompt(it, "direct", "standard") for it in plan.items]
    images = [_images(setup["bench"], it) for it in plan.items]
    vector = plan.directions[1].vector / np.linalg.norm(plan.directions[1].vector)
    want = option_logprobs(handle, prompts, images, LETTERS, Steering(vector, 1, 2.0), batch_size=8)  # raw size 2
    for i, it in enumerate(plan.items):
        got = rows[(it.item_id, "L1.probe.+2")]["logprobs"]
        assert np.allclose([got[x] for x in LETTERS], want[i], atol=1e-5)
    text = (Path(cfg.out) / "dose_response.md").read_text()
    assert "alpha is raw: alpha = 1 adds the unit direction itself" in text
    assert meta["raw_alpha"] is True and meta["config"]["alpha_units"] == "raw"
    with pytest.raises(InputError, match="raw_alpha=True, this run has raw_alpha=None"):
        dose_response(replace(cfg, alpha_units="norm"), progress=False)
    with pytest.raises(ValueError, match="key 'alpha_units' is 'metres'; choose from norm, raw"):
        replace(cfg, alpha_units="metres")
