"""Page one's sentences read the steering effect against the random directions' band honestly: an
interval that reaches into the band is never called outside it (the broken wording did not tell a
point beyond the band from an interval beyond it)."""

from __future__ import annotations

from evprobe.experiments.report_summary import headline_rows, sentences


def dose(value: float, lo: float, hi: float) -> dict:
    est = {"value": value, "ci": [lo, hi], "n": 144}
    null = {"log_odds": {"n_directions": 50, "lo": -9.16, "hi": -1.29}}
    return {"headline": [{"readout": "logprobs", "goal": "induce measuring", "group": "resolved",
                          "choices": [{"layer": 3, "alpha": 0.875}],
                          "target": {"log_odds_change": est, "change": {"value": -0.4, "ci": [-0.5, -0.3], "n": 144},
                                     "null": null}}]}


def test_the_steering_sentence_tells_the_three_places_apart() -> None:
    (outside,) = sentences(None, None, dose(-12.0, -13.0, -11.0))
    assert "whole interval lies outside that band" in outside and "-12.00 nats [-13.00, -11.00] (n=144)" in outside
    (reaching,) = sentences(None, None, dose(-9.93, -10.97, -8.79))
    assert "beyond that band but its interval reaches into it" in reaching and "outside" not in reaching
    (inside,) = sentences(None, None, dose(-5.0, -6.0, -4.0))
    assert "inside that band: a random direction of the same size does as much" in inside
    rows = headline_rows(None, None, dose(-5.0, -6.0, -4.0), None)
    assert rows[0] == ("steering: induce measuring, stop log-odds change (nats)", "-5.00 [-6.00, -4.00] (n=144)",
                       "resolved items, cross-fitted at L3 alpha +0.875")
