"""Pure parts of dose-response's null, cross-fitting and text: each check shown catching a bad input."""

from __future__ import annotations

import re

import numpy as np
import pytest

from evprobe.analysis.specificity import split_halves
from evprobe.core.bootstrap import Estimate
from evprobe.analysis.specificity import null_stats
from evprobe.experiments.dose_response.text import ablation_sentence


def test_null_stats_place_the_probe_among_random_effects() -> None:
    rng = np.random.default_rng(0)
    random = rng.normal(0.0, 1.0, 50)
    far = null_stats(10.0, random)
    assert far["percentile"] == 100.0 and far["z"] > 5 and far["p_null"] == pytest.approx(1 / 51)
    inside = null_stats(float(np.median(random)), random)  # a probe no different from random directions
    assert 40 <= inside["percentile"] <= 60 and abs(inside["z"]) < 0.5 and inside["p_null"] > 0.5
    assert inside["lo"] == pytest.approx(np.percentile(random, 2.5))
    flat = null_stats(1.0, np.zeros(50))  # random effects that do not vary: no z, never a zero p
    assert flat["z"] is None and flat["p_null"] == pytest.approx(1 / 51)
    assert null_stats(None, random)["percentile"] is None


def test_split_halves_whole_families_stratified_and_seeded() -> None:
    fams = {"spring": [f"spring-{i:03d}" for i in range(7)], "sliding": [f"sliding-{i:03d}" for i in range(6)]}
    a = split_halves(fams, 0)
    assert a == split_halves(fams, 0) and a != split_halves(fams, 1)
    assert set(a) == {f for v in fams.values() for f in v}
    for system, fs in fams.items():
        n_a = sum(a[f] == "A" for f in fs)
        assert abs(n_a - (len(fs) - n_a)) <= 1  # both halves hold every system
    assert abs(sum(v == "A" for v in a.values()) - sum(v == "B" for v in a.values())) <= 1


def test_ablation_sentence_reads_the_intervals() -> None:
    def e(v, lo, hi):
        return Estimate(v, (lo, hi), 144)

    null = ablation_sentence(2, "unresolved", e(-0.012, -0.03, 0.005), e(0.05, -0.1, 0.2))
    assert "-1.2 points [-3.0, +0.5] (n=144)" in null and "not necessary at this layer" in null
    used = ablation_sentence(2, "unresolved", e(0.2, 0.1, 0.3), e(1.0, 0.5, 1.5))
    assert "used at this layer: removing it changes choices" in used
    pref = ablation_sentence(2, "resolved", e(0.0, -0.01, 0.01), e(-0.4, -0.6, -0.2))
    assert "moves the model's preference, though not its choices" in pref
    stop_only = ablation_sentence(2, "resolved", e(0.2, 0.1, 0.3), None)  # generate: no log-odds read
    assert "stop log-odds" not in stop_only and "removing it changes choices" in stop_only


def test_dose_plots_show_rates_in_percent_and_log_odds_in_nats() -> None:
    """One unit per measure across plots and tables: the tables print rates in percent, so the
    plots do too (they drew fractions)."""
    from evprobe.experiments.dose_response.report import RATE_MEASURES, plot_axis

    for measure in RATE_MEASURES:
        scale, label = plot_axis(measure)
        assert scale == 100.0 and label.endswith("% of items")
    assert plot_axis("log_odds") == (1.0, "log-odds stop vs best other letter (nats)")


# -- the specificity verdict: every null direction through the probe's own cross-fitted choice ----


def test_choose_settings_vectorised_matches_the_probes_rule() -> None:
    from evprobe.analysis.specificity import choose_settings

    cands = [(1, 1.0), (2, 1.0), (2, 0.5)]
    shift = np.array([[1.0, 0.2, np.nan], [0.5, 0.2, 0.1], [0.5, 0.3, 0.1]])  # (C, K)
    useless = np.array([[0.5, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.5]])
    chosen, broken = choose_settings(cands, shift, useless)
    # direction 0: (1, 1) breaks, the tie between the others goes to the smaller dose; 1: the largest shift;
    # 2: a NaN shift never wins, the broken (2, .5) is refused
    assert list(chosen) == [2, 2, 1] and not broken.any()
    chosen, broken = choose_settings(cands, shift, np.ones_like(useless))  # every setting breaks: furthest, flagged
    assert list(chosen) == [0, 2, 2] and broken.all()  # direction 2: the tie goes to the smaller dose


def test_specificity_is_a_rank_test_with_its_promised_false_verdict_rate() -> None:
    """Each of K exchangeable null effects in turn playing the probe against the others: at most
    floor(0.05 K) / K are called specific, and a probe beyond every null direction is."""
    from evprobe.analysis.specificity import specificity_stats, verdict_text

    rng = np.random.default_rng(3)
    effects = rng.standard_normal(51)
    one = [specificity_stats(effects[j], np.delete(effects, j), sign=+1, goals=1)["specific"] for j in range(51)]
    assert sum(one) == 2  # p_goal = (1 + #others at least as far toward the goal) / 51 <= 0.05: the top two
    # sign +1 = induce measuring: toward the goal is a *fall* of stopping, so the most negative effects win
    assert all(one[j] == (j in np.argsort(effects)[:2]) for j in range(51))
    # two goals share the 5%: p <= 0.025, so only a direction beyond every other one is called specific
    two = [specificity_stats(effects[j], np.delete(effects, j), sign=+1)["specific"] for j in range(51)]
    assert sum(two) == 1 and two[int(np.argmin(effects))]
    assert specificity_stats(-10.0, effects[:30], sign=+1)["specific"] is False  # 1/31 > 0.025: out of reach
    far = specificity_stats(-10.0, effects[:50], sign=+1)  # beyond every null direction toward the goal
    assert far["specific"] and far["p_goal"] == pytest.approx(1 / 51) and far["beaten"] == 50
    wrong_way = specificity_stats(+10.0, effects[:50], sign=+1)
    assert wrong_way["specific"] is False and wrong_way["p_goal"] == pytest.approx(1.0)
    assert "beyond 50 of 50 label-free directions" in verdict_text(far, "relabel", "nats")
    assert "beyond what these data give once the label carries nothing" in verdict_text(far, "relabel", "nats")
    assert far["margin"] == pytest.approx(10.0 + effects[:50].min())  # toward = -effect: beyond the nearest by this
    few = specificity_stats(-10.0, effects[:3], sign=+1)
    assert "too few (3) for p <= 0.025, so no verdict" in verdict_text(few, "random", "nats")


def test_a_control_along_the_probe_is_named_and_left_out_of_the_controls_verdict() -> None:
    """A shuffled label keeps the label's direction when the label dominates the rows (the organism's
    shuffled control lay at cosine +0.94): such a "control" is nearly the probe, so it says nothing."""
    from evprobe.experiments.dose_response.results import Choice, ControlRow, Headline, Place
    from evprobe.experiments.dose_response.text import _controls_paragraph

    def control(name: str, cosine: float, change: float) -> ControlRow:
        return ControlRow("logprobs", 3, 0.75, name, cosine, "resolved", "all", "log_odds", Estimate.empty(),
                          Estimate(change, (change - 0.5, change + 0.5), 144), Estimate(-9.4, (-9.9, -8.8), 144),
                          Place(None, None, None), None, None)

    def text(controls: list[ControlRow]) -> str:
        choice = Choice("A", 3, 0.75, 0.5, 0.0, False, 8)
        headline = Headline("logprobs", "induce measuring", "resolved", +1, (choice,), None, None)  # type: ignore[arg-type]
        (paragraph,) = _controls_paragraph(controls, [headline])
        return paragraph

    near = text([control("history", -0.09, -1.45), control("shuffled", 0.94, -8.28)])
    assert "no control moves it half as far as the probe" in near
    assert "(shuffled within |cos| 0.9 of the probe: nearly the probe itself, so not a control)" in near
    far = text([control("history", -0.09, -6.0), control("shuffled", 0.5, -8.28)])
    assert "history, shuffled move it at least half as far as the probe" in far
    only = text([control("shuffled", -0.95, -8.28)])
    assert "no control left to compare" in only


def test_alpha_units_are_typed_and_read_back_as_written() -> None:
    """meta.json's alpha_units as MeasuredUnits: written key for key as read, a damaged entry one line."""
    from evprobe.core.errors import InputError
    from evprobe.experiments.dose_response.units import read_units, unit_of, units_json

    record = {"3": {"unit_norm": 2.5, "positions": "all", "n_items": 8, "n_tokens": 96, "items": "fit items",
                    "directions_mean_norm": 3.1, "directions_position": "last"},
              "1": {"unit_norm": 1.25, "positions": "all", "n_items": 8, "n_tokens": 96, "items": "fit items",
                    "directions_mean_norm": 1.0, "directions_position": "last"}}
    units = read_units(record)
    assert list(units) == [3, 1] and units_json(units) == record  # the order measured, every key
    dose = unit_of(units, 3).dose(-0.5)
    assert dose.raw == -1.25 and dose.unit.positions == "all"
    assert read_units(None) == {}
    for bad, where in (({"3": {"unit_norm": 0}}, "alpha_units['3'] needs a unit_norm > 0"),
                       ({"3": {"unit_norm": True}}, "alpha_units['3'] needs a unit_norm > 0"),
                       ({"L3": record["3"]}, "alpha_units must map layers to units"),
                       ([1.0], "alpha_units must map layers to units")):
        with pytest.raises(InputError, match=re.escape(where)) as err:
            read_units(bad)
        assert "move the folder aside" in str(err.value) and "\n" not in str(err.value)
