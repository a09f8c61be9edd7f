"""analysis.specificity: the cross-fitted rank test of a steering effect against null directions, the
joint verdict over the random and the label-free null, and the sentences that report them."""

from __future__ import annotations

import numpy as np
import pytest

from evprobe.analysis.specificity import (
    Verdict,
    band_name,
    crossfit_scores,
    joint_text,
    joint_verdict,
    specificity_stats,
    verdict_text,
)


def test_crossfit_scores_each_direction_at_its_own_choice_on_the_other_half() -> None:
    cands = [(1, 1.0), (1, 0.5)]
    half = np.array(["A", "A", "B", "B"])
    base = np.zeros((4, 2))  # (items, M): measure 0 moves, measure 1 is the guard
    stack = np.zeros((2, 4, 2, 2))  # (C, items, K, M)
    stack[0, :, 0, 0] = [0.0, 0.0, 1.0, 1.0]  # direction 0 at +1 moves only half B's items
    stack[1, :, 0, 0] = [1.0, 1.0, 0.0, 0.0]  # at +0.5 only half A's
    stack[:, :, 1, 0] = 1.0  # direction 1 moves everything at both doses
    scored, choices, broken = crossfit_scores(cands, stack, base, half, ("A", "B"), np.ones(4, bool), 0, +1)
    # direction 0: A chose +0.5 (moves A), scored on B at +0.5: nothing; B chose +1, scored on A: nothing
    assert list(choices["A"]) == [1, 1] and list(choices["B"]) == [0, 1]  # ties to the smaller dose
    assert scored[:, 0, 0].tolist() == [0.0] * 4 and scored[:, 1, 0].tolist() == [1.0] * 4
    assert not broken["A"].any()
    # a guard above the ceiling refuses a setting: direction 1's +0.5 breaks, so +1 is chosen
    stack[1, :, 1, 1] = 0.5
    _, guarded, _ = crossfit_scores(cands, stack, base, half, ("A", "B"), np.ones(4, bool), 0, +1, guard=1)
    assert list(guarded["A"]) == [1, 0]
    # toward -1 (the goal lowers the measure): moving up is away from the goal, the smallest dose wins ties
    _, down, _ = crossfit_scores(cands, stack, base, half, ("A", "B"), np.ones(4, bool), 0, -1)
    assert list(down["A"]) == [0, 1]


def test_margin_and_near_share_ride_with_the_rank_test() -> None:
    effects = np.array([-1.0, -2.0, 0.5])
    s = specificity_stats(-3.0, effects, sign=+1, goals=1, near_share=0.25)  # toward = -effect: 3 vs at most 2
    assert s["margin"] == pytest.approx(1.0) and s["near_share"] == 0.25 and s["beaten"] == 3
    behind = specificity_stats(-1.5, effects, sign=+1, goals=1)
    assert behind["margin"] == pytest.approx(-0.5) and behind["beaten"] == 2


def _s(specific, p=0.02):
    return {"p_goal": p, "specific": specific}


def test_specific_to_this_direction_needs_both_nulls() -> None:
    both = joint_verdict({"random": _s(True), "relabel": _s(True)})
    assert both == Verdict(True, ("random", "relabel"), ())
    assert both.to_json() == {"specific": True, "against": ["random", "relabel"], "missing": []}
    assert Verdict.of(both.to_json()) == both and both.text == joint_text(both.to_json())
    assert joint_text(both) == "the effect is specific to this direction: beyond both nulls"
    one = joint_verdict({"random": _s(True), "relabel": _s(False)})
    assert one.specific is False and joint_text(one) == "the effect is not shown to be specific to this direction"
    alone = joint_verdict({"random": _s(True), "relabel": None})  # a null that did not run: no verdict
    assert alone.specific is None and alone.missing == ("relabel",)
    assert joint_text(alone) == "there is no verdict on specificity (no label-free directions were run)"
    none = joint_verdict({"random": None, "relabel": None})
    assert joint_text(none) == ("there is no verdict on specificity (no random directions or label-free directions "
                                "were run)")
    few = joint_verdict({"random": _s(None), "relabel": _s(True)})  # too few directions for the threshold
    assert few.specific is None and joint_text(few) == "there is no verdict on specificity (too few null directions)"
    lost = joint_verdict({"random": _s(False), "relabel": None})  # one null already says no
    assert lost.specific is False


def test_the_sentence_names_the_margin_the_near_share_and_the_null() -> None:
    rng = np.random.default_rng(0)
    effects = rng.normal(size=50)
    s = specificity_stats(-5.0, effects, sign=+1, near_share=0.0)
    text = verdict_text(s, "relabel", "nats")
    assert text.startswith("beyond 50 of 50 label-free directions")
    assert f"margin over the nearest +{5.0 + effects.min():.2f} nats" in text
    assert "0% of them within |cos| 0.9 of the probe" in text
    assert text.endswith("beyond what these data give once the label carries nothing")
    assert "no random directions of the same norm were run" == verdict_text(None, "random", "nats")
    assert band_name(50) == "central 95% of 50 directions" and band_name(2).startswith("spread of 2")
