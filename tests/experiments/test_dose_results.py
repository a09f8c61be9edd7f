"""dose-response's typed results (experiments.dose_response.results) write dose_response.json's spelling:
the same keys in the same order as the dicts they replaced, optional keys only where they were written."""

from __future__ import annotations

import json

import numpy as np

from evprobe.analysis.specificity import joint_verdict, null_stats, specificity_stats
from evprobe.core.bootstrap import Estimate
from evprobe.experiments.dose_response.results import (
    Ablation,
    Choice,
    GroupBlock,
    HalfChange,
    Headline,
    NullOf,
    NullPlace,
    Split,
)

EFFECTS = np.array([0.1, -0.2, 0.05, 0.3, np.nan])


def _same(got: dict, want: dict) -> None:
    """Equal and in the same key order (json.dumps keeps the order: the file is pinned byte for byte)."""
    assert json.dumps(got) == json.dumps(want)


def test_null_places_write_what_analysis_specificity_returns() -> None:
    target = specificity_stats(-0.5, EFFECTS, +1, 2, near_share=0.25)
    _same(NullPlace.of(target, target["effects"]).to_json(), target)
    other = {**null_stats(0.2, EFFECTS), "effects": [float(x) for x in EFFECTS]}  # the other group: two-sided only
    place = NullPlace.of(null_stats(0.2, EFFECTS), EFFECTS)
    assert place.goal is None
    _same(place.to_json(), other)
    none = specificity_stats(None, EFFECTS, -1)  # no probe effect: no p_goal, still the goal's keys
    _same(NullPlace.of(none, none["effects"]).to_json(), none)


def _e(v: float) -> Estimate:
    return Estimate(v, (v - 0.1, v + 0.1), 8, n_families=4)


def test_a_headline_writes_its_keys_in_the_old_order_and_only_where_measured() -> None:
    target = specificity_stats(-0.5, EFFECTS, +1)
    place = NullPlace.of(target, target["effects"])
    v = joint_verdict({"random": target, "relabel": None})
    block = GroupBlock("resolved", _e(0.5), _e(0.1), _e(-0.4), _e(0.0),
                       (HalfChange("A", _e(-0.3), _e(-1.0)), HalfChange("B", _e(-0.5), _e(-1.2))),
                       (NullOf("random", place, None),),
                       (("stop_rate", v),), _e(-1.1))
    got = block.to_json()
    assert list(got) == ["group", "stop_rate_at_0", "stop_rate", "change", "useless_rate", "by_half", "null",
                         "specific", "log_odds_change"]
    assert list(got["by_half"]["A"]) == ["change", "log_odds_change"]
    assert got["null"] == {"random": {"stop_rate": target, "log_odds": None}}
    assert got["specific"] == {"stop_rate": v.to_json()}
    assert block.null("random", "stop_rate") is place and block.null("relabel", "stop_rate") is None
    # the other group, read without log-odds (generate): no `specific`, no log-odds keys at all
    other = GroupBlock("unresolved", _e(0.5), _e(0.5), _e(0.0), _e(0.0), (HalfChange("A", _e(0.0), None),), (),
                       None, None)
    assert list(other.to_json()) == ["group", "stop_rate_at_0", "stop_rate", "change", "useless_rate", "by_half", "null"]
    assert other.to_json()["by_half"] == {"A": {"change": _e(0.0).to_json()}}
    h = Headline("logprobs", "induce stopping", "unresolved", -1, (Choice("B", 2, -1.0, 0.2, 0.0, True, 6),),
                 block, other).to_json()
    assert h["sign"] == "-" and list(h) == ["readout", "goal", "group", "sign", "choices", "target", "other"]
    assert h["choices"] == [{"chosen_on": "B", "scored_on": "A", "layer": 2, "alpha": -1.0,
                             "fit_shift_toward_goal": 0.2, "fit_useless_rate": 0.0, "broken": True, "fit_n_items": 6}]


def test_split_and_ablation_write_optional_keys_only_when_present() -> None:
    assert Split(0, "r", None, skipped="one target family").to_json() == {"seed": 0, "rule": "r",
                                                                          "skipped": "one target family"}
    _same(Split(3, "r", (("A", ("f1",)), ("B", ("f2", "f3")))).to_json(),
          {"seed": 3, "rule": "r", "families": {"A": ["f1"], "B": ["f2", "f3"]}})
    a = Ablation("generate", 1, "all", _e(0.5), _e(0.4), _e(-0.1), None, "s.")
    assert list(a.to_json()) == ["readout", "layer", "group", "stop_rate_at_0", "stop_rate", "change", "sentence"]
    b = Ablation("logprobs", 1, "all", _e(0.5), _e(0.4), _e(-0.1), _e(0.3), "s.")
    assert list(b.to_json())[-2:] == ["log_odds_change", "sentence"]
