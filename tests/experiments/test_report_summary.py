"""Page one's sentences read the steering effect against both nulls honestly: the relabelled
directions (the claim about the label) and the isotropic random band, each a named statement, each
a rank test against null directions that went through the same cross-fitted choice."""

from __future__ import annotations

import numpy as np

from evprobe.experiments.dose_response.specificity import specificity_stats
from evprobe.experiments.report.summary import headline_rows, sentences

RNG = np.random.default_rng(0)
RANDOM = RNG.normal(-3.0, 1.0, 50)  # isotropic directions: a small push
RELABEL = RNG.normal(-7.0, 1.5, 50)  # directions fitted on meaningless labels: along the data's axes


def dose(value: float, lo: float, hi: float) -> dict:
    est = {"value": value, "ci": [lo, hi], "n": 144}
    null = {"random": {"log_odds": specificity_stats(value, RANDOM, sign=+1)},
            "relabel": {"log_odds": specificity_stats(value, RELABEL, sign=+1)}}
    return {"headline": [{"readout": "logprobs", "goal": "induce measuring", "group": "resolved",
                          "choices": [{"layer": 3, "alpha": 0.875}],
                          "target": {"log_odds_change": est, "change": {"value": -0.4, "ci": [-0.5, -0.3], "n": 144},
                                     "null": null}}]}


def test_the_steering_sentence_names_both_nulls_and_their_verdicts() -> None:
    (beyond,) = sentences(None, None, dose(-14.0, -15.0, -13.0))
    assert "-14.00 nats [-15.00, -13.00] (n=144)" in beyond
    assert "beyond 50 of 50 directions fitted the same way on relabelled rows" in beyond
    assert "specific to this direction" in beyond and "larger than a push of this size in a random direction" in beyond
    (between,) = sentences(None, None, dose(-7.5, -8.5, -6.5))  # beyond the random band, inside the relabelled one
    assert "not more than directions fitted on meaningless labels do" in between
    assert "larger than a push of this size in a random direction" in between
    assert between.index("relabelled rows") < between.index("random directions")  # the claim about the label first
    (inside,) = sentences(None, None, dose(-3.0, -4.0, -2.0))
    assert "not more than a random direction of the same size does" in inside
    rows = headline_rows(None, None, dose(-5.0, -6.0, -4.0), None)
    assert rows[0] == ("steering: induce measuring, stop log-odds change (nats)", "-5.00 [-6.00, -4.00] (n=144)",
                       "resolved items, cross-fitted at L3 alpha +0.875")


def test_without_null_directions_nothing_is_called_specific() -> None:
    d = dose(-14.0, -15.0, -13.0)
    d["headline"][0]["target"]["null"] = {}
    (text,) = sentences(None, None, d)
    assert "no null directions were run, so nothing says the direction is special" in text


def test_page_one_selectivity_says_what_was_shown() -> None:
    from evprobe.probes.control_tasks import selectivity

    many = np.linspace(0.85, 0.99, 39)
    for target, selective in ((1.0, True), (0.97, False)):
        _, sel = selectivity(target, many, n=1152)
        sweep = {"label": "resolved", "best": {"layer": 3, "position": "last", "auroc": target, "ci": [0.97, 1.0],
                                               "n": 1152},
                 "rows": [{"layer": 3, "position": "last", "selectivity": sel.to_json()}]}
        (row,) = [r for r in headline_rows(None, sweep, None, None) if r[0].startswith("selectivity")]
        assert row[1].endswith(f"(beats {sel.beaten} of 39 control tasks)")
        assert "own spread" in row[2] and "1 time in 40" in row[2]
        (text,) = sentences(None, sweep, None)
        if selective:
            assert "decoded better than every one of the 39 random functions of the cell" in text
            assert "1 time in 40" in text
        else:
            assert "it is not selective: some random function of the cell is decoded as well" in text
