"""The one analysis of a dose-response grid (analysis.dose_grid): the readout and the choice rule as
parameters, every direction through one cross-fit; each check shown catching a bad input."""

from __future__ import annotations

import numpy as np
import pytest

from evprobe.analysis.dose_grid import TARGET_CHOICE, TARGET_READOUT, ChoiceRule, Readout, cross_fit, set_means
from evprobe.core.errors import InputError
from evprobe.experiments.dose_response.crossfit import BENCHMARK_CHOICE
from evprobe.experiments.dose_response.stats import READOUTS

RULE_READOUT = Readout(("stop_rate", "useless_test_rate"), rates=("stop_rate", "useless_test_rate"))


def test_set_means_skip_undefined_items() -> None:
    V = np.array([[[1.0], [0.0]], [[np.nan], [1.0]], [[0.0], [1.0]]])  # (items 3, K 2, measures 1)
    masks = [np.array([True, True, True]), np.array([False, True, False])]
    got = set_means(V, masks)  # (K, groups, M)
    assert got[:, 0, 0] == pytest.approx([0.5, 2 / 3]) and np.isnan(got[0, 1, 0]) and got[1, 1, 0] == 1.0


def test_the_benchmarks_rule_moves_toward_the_goal_and_refuses_broken_settings() -> None:
    half = np.array(["A", "A", "B", "B"])
    fit = np.ones(4, bool)
    base = np.array([[1.0, 0.0]] * 4)
    probe = np.array([[[0.0, 0.5]] * 4,   # (1, +1) moves all the way but breaks (50% useless)
                      [[0.5, 0.0]] * 4,   # (2, +1) moves half, sane
                      [[0.5, 0.0]] * 4])  # (2, +0.5) the same at a smaller dose: the tie goes here
    cands = [(1, 1.0), (2, 1.0), (2, 0.5)]
    got = cross_fit(cands, probe, {}, base, half, fit, RULE_READOUT, BENCHMARK_CHOICE, toward=-1)
    assert got.chosen("A") == got.chosen("B") == (2, 0.5) and not got.broken["A"][0]
    assert got.shift["A"][2] == pytest.approx(0.5) and got.guard["A"][0] == pytest.approx(0.5)
    only_broken = cross_fit(cands[:1], probe[:1], {}, base, half, fit, RULE_READOUT, BENCHMARK_CHOICE, toward=-1)
    assert only_broken.broken["B"][0] and only_broken.chosen("B") == (1, 1.0)
    # without the guard the breaking setting wins: the rule is a parameter, not a constant
    free = cross_fit(cands, probe, {}, base, half, fit, RULE_READOUT, ChoiceRule("stop_rate"), toward=-1)
    assert free.chosen("A") == (1, 1.0) and np.isnan(free.guard["A"]).all()


def test_every_null_direction_is_scored_at_its_own_choice_on_the_other_half() -> None:
    half = np.array(["A", "A", "B", "B"])
    target = np.ones(4, bool)
    base = np.array([[1.0, 0.0]] * 4)
    # two null directions, two doses; direction 0 moves at +1 only on half A, at +0.5 only on half B, so
    # each half chooses for the other the dose that moves *its own* items: scored, it moves nothing
    d1 = np.zeros((4, 2, 2))
    d1[:, :, 0] = [[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [1.0, 0.0]]  # (items, K): stop rate at +1
    d05 = np.zeros((4, 2, 2))
    d05[:, :, 0] = [[1.0, 1.0], [1.0, 1.0], [0.0, 1.0], [0.0, 1.0]]  # at +0.5
    probe = np.stack([d1[:, 1], d05[:, 1]])  # the probe as null direction 1
    cf = cross_fit([(1, 1.0), (1, 0.5)], probe, {"random": np.stack([d1, d05])}, base, half, target, RULE_READOUT,
                   BENCHMARK_CHOICE, toward=-1)
    assert cf.kinds == ("random",) and cf.sizes == (2,) and cf.scored.shape == (4, 3, 2)
    assert cf.null_effects("random", base, target)[:, 0] == pytest.approx([0.0, -1.0])
    assert cf.probe()[:, 0] == pytest.approx(cf.scored[:, 2, 0])  # the probe = the direction it copies


def test_a_rule_on_a_measure_the_readout_lacks_is_one_line() -> None:
    with pytest.raises(InputError, match="measure 'stop_rate' is not read here; choose from log_odds, chose"):
        ChoiceRule("stop_rate").columns(TARGET_READOUT)
    with pytest.raises(InputError, match="guard 'log_odds' must be a rate of the readout"):
        ChoiceRule("chose", guard="log_odds").columns(TARGET_READOUT)
    assert TARGET_CHOICE.columns(TARGET_READOUT) == (0, None)
    assert BENCHMARK_CHOICE.columns(READOUTS["logprobs"]) == (0, 2)
    assert READOUTS["logprobs"].proportions == [True, True, True, True, False]
