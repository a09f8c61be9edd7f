"""evprobe.steering_dose_response: the pipeline's dose-response on a user's own prompts.

Known answers on the model organism (the reduced quickstart's benchmark and directions): item for
item, the readouts equal `evprobe dose-response`'s for the same items, direction and doses; the
planted direction steers the unresolved items toward stopping beyond every random direction that
went through the same cross-fitted choice (specific), and a random direction playing the probe is
not specific.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import evprobe
from evprobe.bench.manifest import load_item_images, read_items
from evprobe.bench.protocols import build_prompt
from evprobe.core.errors import InputError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def organism_items(small_quickstart):
    """The reduced quickstart's held-out selections (what its dose-response steered), as own data."""
    out, _ = small_quickstart
    rows = [json.loads(line) for line in (out / "dose_response" / "results.jsonl").read_text().splitlines()]
    meta = json.loads((out / "dose_response" / "meta.json").read_text())
    items = {it.item_id: it for it in read_items(out / "bench")}
    chosen = [items[r["item_id"]] for r in rows if r["kind"] == "baseline"]
    handle = evprobe.load("organism")
    data = dict(
        prompts=[build_prompt(it, "direct", "standard") for it in chosen],
        images=[load_item_images(out / "bench", it.images) for it in chosen],
        target=[next(letter for letter in sorted(it.options) if it.options[letter] == "stop") for it in chosen],
        families=[it.family_id for it in chosen],
        groups=["resolved" if it.resolved else "unresolved" for it in chosen],
    )
    direction = evprobe.read_directions(out / "directions")[meta["layer_directions"]["3"]["name"]]
    return handle, data, rows, chosen, direction, meta


def _run(handle, data, direction, **kw):
    return evprobe.steering_dose_response(handle, data["prompts"], data["images"], candidates=list("ABCDE"),
                                          target=data["target"], families=data["families"], groups=data["groups"],
                                          direction=direction, positions="last", **kw)


def test_it_reproduces_the_pipeline_item_for_item(organism_items) -> None:
    handle, data, rows, chosen, direction, meta = organism_items
    # the pipeline steers toward measuring: a resolved=True direction (toward stopping) is negated
    result = _run(handle, data, {3: -direction.vector}, alphas=(0.625, -0.75), n_random=2, n_boot=200,
                  mean_norm=meta["alpha_units"]["3"]["unit_norm"])
    pipeline = {(r["item_id"], r["alpha"]): r["lp"]["log_odds"] for r in rows
                if r["kind"] == "probe" and r["layer"] == 3}
    pipeline.update({(r["item_id"], 0.0): r["lp"]["log_odds"] for r in rows if r["kind"] == "baseline"})
    got = [(chosen[row.item].item_id, row.alpha, row.log_odds) for row in result.items.itertuples()]
    compared = [abs(lo - pipeline[(i, a)]) for i, a, lo in got if (i, a) in pipeline]
    assert len(compared) == len(got) == 3 * len(chosen) > 0
    assert max(compared) <= 1e-6


def test_its_effects_and_null_places_are_the_pipelines_number_for_number(organism_items, small_quickstart) -> None:
    """The same items, directions, doses and seeds: every curve point of `evprobe dose-response`
    (value, interval, n; its paired change) and the probe's place among the random and among the
    label-free directions equal steering_dose_response's. The command builds its curves with the
    estimator the function uses (analysis.effects), reads the same random directions and
    fits the same label-free ones (analysis.label_null, from the direction's fit rows)."""
    handle, data, rows, chosen, direction, meta = organism_items
    out, _ = small_quickstart
    report = json.loads((out / "dose_response" / "dose_response.json").read_text())
    config = meta["config"]
    sign = -1.0 if report["meta"]["flipped"] else 1.0
    vectors = {int(layer): sign * evprobe.read_directions(out / "directions")[d["name"]].vector
               for layer, d in meta["layer_directions"].items()}
    result = _run(handle, data, vectors, alphas=config["alphas"], n_random=config["n_random"],
                  n_boot=config["n_boot"], seed=config["seed"], random_seed=config["random_seed"],
                  mean_norm={int(k): u["unit_norm"] for k, u in meta["alpha_units"].items()}, ablation=True,
                  n_relabel=report["meta"]["n_relabel"],
                  fit_rows={int(layer): evprobe.direction_rows(evprobe.read_directions(out / "directions")[d["name"]])
                            for layer, d in meta["layer_directions"].items()})
    for layer, free in result.label_free.items():  # the same directions the command steered (same sha256)
        assert free.sha256 == report["meta"]["relabel_directions"][str(layer)]["sha256"]
    assert config["positions"] == "last" and len(result.units) == len(vectors) >= 1
    own = {(r.direction, None if r.layer != r.layer else int(r.layer), None if r.alpha != r.alpha else float(r.alpha),
            r.group, r.measure): r for r in result.effects.itertuples()}  # NaN (no layer, no dose) as None
    names = {"stop_rate": "chose", "log_odds": "log_odds"}
    compared = 0
    for row in report["rows"]:
        if row["readout"] != "logprobs" or row["system"] != "all" or row["measure"] not in names:
            continue
        if row["kind"] == "baseline":
            where = ("unsteered", None, 0.0)
        elif row["kind"] == "probe" and row["alpha"] != 0:
            where = ("probe", row["layer"], float(row["alpha"]))
        else:
            continue
        for theirs, suffix in ((row, ""), (row["delta_vs_0"], "_change")):
            if row["kind"] == "baseline" and suffix:
                continue  # alpha 0 against itself: fixed by design in the report, not an estimate
            key = (*where, row["group"], names[row["measure"]] + suffix)
            mine = own[key]
            assert mine.n == theirs["n"], key
            assert mine.value == pytest.approx(theirs["value"], abs=1e-6), key
            assert [None if x != x else x for x in (mine.lo, mine.hi)] == pytest.approx(theirs["ci"], abs=1e-6), key
            compared += 1
    n_doses = len([a for a in config["alphas"] if a != 0])
    assert compared == 3 * 2 * (1 + 2 * n_doses * len(vectors))  # groups x measures x (base + steered and change)
    null = result.null.set_index(["null", "layer", "alpha", "group", "measure"])
    placed = 0
    for key, kind, k in (("null_band", "random", config["n_random"]), ("relabel_band", "label-free",
                                                                       report["meta"]["n_relabel"])):
        for band in report[key]:
            if band["readout"] != "logprobs" or band["system"] != "all" or band["measure"] not in names \
                    or band["alpha"] == 0:
                continue
            mine = null.loc[(kind, band["layer"], band["alpha"], band["group"], names[band["measure"]] + "_change")]
            assert mine["n_directions"] == band["n_directions"] == k > 0
            for field in ("percentile", "p_null"):
                assert mine[field] == pytest.approx(band[field], abs=1e-9), (kind, band["layer"], band["alpha"], field)
            assert (mine["lo"], mine["hi"]) == pytest.approx((band["effect_lo"], band["effect_hi"]), abs=1e-6)
            placed += 1
    assert placed == 2 * 3 * 2 * n_doses * len(vectors)
    # the ablation: the direction projected out of each layer, no dose
    ablated = [e for e in report["ablation"] if e["readout"] == "logprobs"]
    assert config["ablation"] and len(ablated) == 3 * len(vectors)
    for entry in ablated:
        for field, measure in (("stop_rate", "chose"), ("change", "chose_change"),
                               ("log_odds_change", "log_odds_change")):
            mine, theirs = own[("ablation", entry["layer"], None, entry["group"], measure)], entry[field]
            assert mine.n == theirs["n"] and mine.value == pytest.approx(theirs["value"], abs=1e-6), field
            assert [mine.lo, mine.hi] == pytest.approx(theirs["ci"], abs=1e-6), (entry["layer"], field)


def test_paired_effects_recomputes_the_effects_from_the_item_table(organism_items) -> None:
    """evprobe.paired_effects on the result's own per-item table gives its effects frame: a user who
    reads a model elsewhere (an engine, an API) gets the same statistics from a table of readouts."""
    handle, data, rows, chosen, direction, meta = organism_items
    result = _run(handle, data, {3: -direction.vector}, alphas=(-0.75, 0.625), n_random=0, n_boot=200)
    def condition(frame: pd.DataFrame) -> list[str]:
        return [f"{d} L{int(layer)} {a:+g}" if d != "unsteered" else d
                for d, layer, a in zip(frame.direction, frame.layer, frame.alpha, strict=True)]

    again = evprobe.paired_effects(result.items.assign(condition=condition(result.items)), baseline="unsteered",
                                   measures=["log_odds", "chose"], proportions=["chose"], group="group", n_boot=200)
    mine = result.effects.assign(condition=condition(result.effects))
    cols = ["condition", "group", "measure", "value", "lo", "hi", "n", "identical"]
    a = mine[cols].sort_values(cols[:3]).reset_index(drop=True)
    b = again[cols].sort_values(cols[:3]).reset_index(drop=True)
    assert len(a) == len(b) == 3 * (2 + 2 * 4) > 0  # groups x (unsteered's 2 + two doses' 4 numbers)
    pd.testing.assert_frame_equal(a, b, check_dtype=False)


def test_the_planted_direction_is_specific_and_a_random_one_is_not(organism_items) -> None:
    handle, data, rows, chosen, direction, meta = organism_items
    kw = dict(alphas=(-1.0, -0.75, 0.0, 0.625), goal=+1, goal_group="unresolved", n_random=40, n_relabel=40,
              n_boot=300, fit_rows={3: evprobe.direction_rows(direction)})
    planted = _run(handle, data, {3: -direction.vector}, **kw)  # toward measuring; negative doses toward stopping
    heads = planted.crossfit.set_index(["group", "measure", "null"])
    for kind in ("random", "label-free"):  # beyond every direction of both nulls
        head = heads.loc[("unresolved", "log_odds_change", kind)]
        assert head["specific"] and head["p_goal"] == pytest.approx(1 / 41) and head["lo"] > 5.0
        assert head["margin"] > 0 and head["near_share"] == 0.0
        assert all(head[f"chosen_on_{h}_layer"] == 3 and head[f"chosen_on_{h}_alpha"] < 0 for h in "AB")
    assert planted.verdict.specific is True and planted.verdict.text.startswith("the effect is specific to this direction")
    probe = planted.effects.set_index(["direction", "layer", "alpha", "group", "measure"])
    stop_rate = probe.loc[("probe", 3, -1.0, "unresolved", "chose_change")]
    # the unresolved items come to stop (every one of them, with no interval, where all units moved alike)
    assert stop_rate["value"] > 0.3 and (stop_rate["identical"] or stop_rate["lo"] > 0.3)
    random = np.random.default_rng(7).normal(size=handle.d_model)
    other = _run(handle, data, {3: random}, **kw)
    assert other.verdict.specific is False and other.verdict.text == "the effect is not shown to be specific to this direction"
    # a bare vector without its fit rows gets the random null only, and no verdict on specificity (said so)
    bare = _run(handle, data, {3: -direction.vector}, **{**kw, "fit_rows": None})
    assert bare.verdict.specific is None and bare.verdict.missing == ("relabel",)
    assert any("pass fit_rows=" in note for note in bare.notes)
    assert set(bare.crossfit["null"]) == {"random"}


def test_the_frames_and_the_figure(organism_items, tmp_path: Path) -> None:
    handle, data, rows, chosen, direction, meta = organism_items
    result = _run(handle, data, direction, alphas=(-0.5, 0.5), n_random=4, n_relabel=4, n_boot=100, ablation=True,
                  controls={"random control": np.random.default_rng(1).normal(size=handle.d_model)})
    assert set(result.effects["direction"]) == {"unsteered", "probe", "random control", "ablation"}
    assert result.effects.query("direction == 'ablation'")["alpha"].isna().all()
    assert set(result.effects["measure"]) == {"log_odds", "chose", "log_odds_change", "chose_change"}
    assert set(result.null["measure"]) == {"log_odds_change", "chose_change"}
    assert (result.null["n_directions"] == 4).all() and set(result.null["null"]) == {"random", "label-free"}
    assert set(result.label_free) == {3}  # read from the capture the Direction names
    # an interval is never a point: equal units are marked identical and carry none
    real = result.effects[~result.effects["identical"] & result.effects["value"].notna()]
    assert (real["lo"] < real["hi"]).all() or (real["measure"] == "chose").any()
    same = result.effects[result.effects["identical"]]
    assert same["lo"].isna().all() and same["hi"].isna().all()
    assert result.units[3].how.startswith("mean residual norm over") and result.units[3].layer == 3
    png = result.plot(tmp_path / "curve.png")
    assert png.stat().st_size > 10_000


def test_bad_input_is_one_line_before_any_forward(organism_items) -> None:
    handle, data, rows, chosen, direction, meta = organism_items
    cases = [
        (dict(families=data["families"][:-1]), "prompts but .* family ids"),
        (dict(families=["one"] * len(data["prompts"])), "at least 2 families"),
        (dict(target="Z"), "target 'Z' is not a candidate"),
        (dict(goal=2), "goal must be \\+1"),
        (dict(alphas=(0.0,)), "alphas has no dose but 0"),
        (dict(direction={9: direction.vector}), "layer 9 is out of range"),
        (dict(direction=direction.vector), "a bare vector needs layer="),
        (dict(goal_group="nobody"), "goal_group 'nobody' is not a group"),
        (dict(n_relabel=-1), "n_relabel must be an integer from 0 to 100000, got -1"),
        (dict(n_relabel=True), "n_relabel must be an integer from 0 to 100000, got a bool"),
        (dict(direction={3: direction.vector}, fit_rows=(np.zeros((4, 3)), [0, 1, 0, 1], list("aabb"))),
         "fit_rows at L3: acts must be \\(rows, d_model"),
        (dict(direction={3: direction.vector}, fit_rows={2: ()}), "fit_rows has no rows for layer 3"),
        (dict(direction={3: direction.vector}, fit_rows="rows"), "fit_rows must be \\(acts, labels, families\\)"),
        (dict(direction={3: direction.vector},
              fit_rows=(np.ones((4, handle.d_model)), [0, 1, 0, 1], ["a"] * 4)),
         "at least 2 families holding both classes"),
    ]
    for change, message in cases:
        kw = dict(prompts=data["prompts"], images=data["images"], candidates=list("ABCDE"), target=data["target"],
                  families=data["families"], groups=data["groups"], direction=direction, n_random=2)
        kw.update(change)
        with pytest.raises(InputError, match=message) as err:
            evprobe.steering_dose_response(handle, **kw)
        assert "\n" not in str(err.value)
    other = evprobe.tiny("llava")
    with pytest.raises(ValueError, match="fitted on 'organism'"):
        evprobe.steering_dose_response(other, ["x", "y"], None, direction=direction, candidates=["A", "B"],
                                       target="A", families=["a", "b"])
