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


def test_the_planted_direction_is_specific_and_a_random_one_is_not(organism_items) -> None:
    handle, data, rows, chosen, direction, meta = organism_items
    kw = dict(alphas=(-1.0, -0.75, 0.0, 0.625), goal=+1, goal_group="unresolved", n_random=20, n_boot=300)
    planted = _run(handle, data, {3: -direction.vector}, **kw)  # toward measuring; negative doses toward stopping
    head = planted.crossfit.set_index(["group", "measure"]).loc[("unresolved", "log_odds_change")]
    assert head["specific"] and head["p_goal"] == pytest.approx(1 / 21) and head["lo"] > 5.0
    assert head["chosen_on_A"].startswith("L3 alpha -") and head["chosen_on_B"].startswith("L3 alpha -")
    probe = planted.effects.set_index(["direction", "layer", "alpha", "group", "measure"])
    stop_rate = probe.loc[("probe", 3, -1.0, "unresolved", "chose_change")]
    # the unresolved items come to stop (every one of them, with no interval, where all units moved alike)
    assert stop_rate["value"] > 0.3 and (stop_rate["identical"] or stop_rate["lo"] > 0.3)
    random = np.random.default_rng(7).normal(size=handle.d_model)
    other = _run(handle, data, {3: random}, **kw).crossfit.set_index(["group", "measure"])
    assert not other.loc[("unresolved", "log_odds_change")]["specific"]


def test_the_frames_and_the_figure(organism_items, tmp_path: Path) -> None:
    handle, data, rows, chosen, direction, meta = organism_items
    result = _run(handle, data, direction, alphas=(-0.5, 0.5), n_random=4, n_boot=100,
                  controls={"random control": np.random.default_rng(1).normal(size=handle.d_model)})
    assert set(result.effects["direction"]) == {"unsteered", "probe", "random control"}
    assert set(result.effects["measure"]) == {"log_odds", "chose", "log_odds_change", "chose_change"}
    assert set(result.null["measure"]) == {"log_odds_change", "chose_change"}
    assert (result.null["n_directions"] == 4).all()
    # an interval is never a point: equal units are marked identical and carry none
    real = result.effects[~result.effects["identical"] & result.effects["value"].notna()]
    assert (real["lo"] < real["hi"]).all() or (real["measure"] == "chose").any()
    same = result.effects[result.effects["identical"]]
    assert same["lo"].isna().all() and same["hi"].isna().all()
    assert result.units[3]["measured"].startswith("mean residual norm over")
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
