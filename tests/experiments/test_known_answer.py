"""Known-answer checks read from synthetic result files: break detection, monotonicity, null."""

from __future__ import annotations

from evprobe.experiments.known_answer import patching_checks, probe_checks, steering_layer


def _dose(stop: dict[str, dict[float, float]], missing: dict[str, dict[float, float]], null: dict[str, dict[float, float]]):
    """Dose-response rows; whatever is neither stop nor the missing test is a useless test here."""
    rows, band = [], []
    for group in ("resolved", "unresolved"):
        for alpha, s in stop[group].items():
            m = missing[group][alpha]
            for measure, v in (("stop_rate", s), ("missing_test_rate", m), ("useless_test_rate", 1.0 - s - m)):
                rows.append({"readout": "logprobs", "layer": 2, "kind": "probe", "alpha": alpha, "group": group,
                             "system": "all", "measure": measure, "value": v, "ci": [v - 0.05, v + 0.05], "n": 100})
        for alpha, s in null[group].items():
            band.append({"readout": "logprobs", "layer": 2, "alpha": alpha, "group": group, "system": "all",
                         "measure": "stop_rate", "mean": s, "min": s, "max": s, "n_directions": 3, "n": 100})
    return {"rows": rows, "null_band": band}


def test_steering_passes_before_the_break_and_reports_it() -> None:
    stop = {"resolved": {0.0: 0.95, 0.25: 0.6, 0.5: 0.3, 1.0: 0.0},
            "unresolved": {0.0: 0.05, -0.25: 0.5, -0.5: 0.8, -1.0: 0.2}}
    # At +1 resolved items choose neither stop nor the missing test: broken. Same at -1.
    missing = {"resolved": {0.0: 0.05, 0.25: 0.4, 0.5: 0.7, 1.0: 0.3},
               "unresolved": {0.0: 0.95, -0.25: 0.5, -0.5: 0.2, -1.0: 0.1}}
    null = {"resolved": {0.25: 0.94, 0.5: 0.9, 1.0: 0.9}, "unresolved": {-0.25: 0.06, -0.5: 0.1, -1.0: 0.1}}
    out = steering_layer(_dose(stop, missing, null), 2)
    assert out["passed"]
    assert out["resolved"]["breaks_at"] == 1.0 and out["resolved"]["best_dose"] == 0.5
    assert abs(out["resolved"]["best_shift"] - 0.65) < 1e-9
    # The first dose that reaches 0.40 with the null far behind is reported, not the largest shift.
    assert out["unresolved"]["breaks_at"] == -1.0 and out["unresolved"]["best_dose"] == -0.25
    assert abs(out["unresolved"]["best_shift"] - 0.45) < 1e-9 and out["unresolved"]["shifts"][-1] > 0.7


def test_steering_fails_when_random_directions_move_it_as_much_or_it_is_not_monotone() -> None:
    stop = {"resolved": {0.0: 0.95, 0.25: 0.6, 0.5: 0.3}, "unresolved": {0.0: 0.05, -0.25: 0.5, -0.5: 0.8}}
    missing = {"resolved": {0.0: 0.05, 0.25: 0.4, 0.5: 0.7}, "unresolved": {0.0: 0.95, -0.25: 0.5, -0.5: 0.2}}
    generic = {"resolved": {0.25: 0.7, 0.5: 0.4}, "unresolved": {-0.25: 0.4, -0.5: 0.7}}
    assert not steering_layer(_dose(stop, missing, generic), 2)["passed"]
    # A dip before the target is reached: not monotone (the dip is within its interval, so no break).
    wobbly = {"resolved": {0.0: 0.95, 0.25: 0.8, 0.5: 0.83, 0.75: 0.45}, "unresolved": stop["unresolved"]}
    sensible = {"resolved": {0.0: 0.05, 0.25: 0.2, 0.5: 0.17, 0.75: 0.55}, "unresolved": missing["unresolved"]}
    calm = {"resolved": {0.25: 0.95, 0.5: 0.95, 0.75: 0.95}, "unresolved": {-0.25: 0.05, -0.5: 0.05}}
    out = steering_layer(_dose(wobbly, sensible, calm), 2)
    assert not out["resolved"]["monotone"] and not out["passed"] and out["resolved"]["breaks_at"] is None
    # Falling back beyond its interval after the target is reached is where the model breaks.
    back = {"resolved": {0.0: 0.95, 0.25: 0.5, 0.5: 0.3, 0.75: 0.6}, "unresolved": stop["unresolved"]}
    sensible = {"resolved": {0.0: 0.05, 0.25: 0.5, 0.5: 0.7, 0.75: 0.4}, "unresolved": missing["unresolved"]}
    out = steering_layer(_dose(back, sensible, calm), 2)
    assert out["resolved"]["breaks_at"] == 0.75 and "falls back" in out["resolved"]["breaks_because"]
    assert out["resolved"]["best_dose"] == 0.25 and out["passed"]


def test_probe_checks_flag_degenerate_rows_and_baselines_off_chance() -> None:
    row = {"layer": 3, "position": "last", "auroc": 0.97, "ci": [0.95, 0.99], "n": 800,
           "within_family_variance": 0.3, "degenerate": False}
    sweep = {"rows": [row, {**row, "layer": 0, "auroc": None, "degenerate": True, "within_family_variance": 0.0}],
             "baselines": {"history": {"value": 0.5, "ci": [0.45, 0.55], "n": 800}},
             "best": {"layer": 3, "position": "last", "auroc": 0.96, "ci": [0.94, 0.98], "n": 800}}
    checks = {c["check"]: c for c in probe_checks(sweep)}
    assert checks["sufficiency decodable"]["passed"] and "L3/last 0.970" in checks["sufficiency decodable"]["measured"]
    assert checks["input baselines at chance"]["passed"]
    assert not checks["states vary within families"]["passed"] and "L0/last" in checks["states vary within families"]["measured"]
    sweep["baselines"]["both"] = {"value": 0.36, "ci": [0.28, 0.46], "n": 800}  # below chance: no information
    assert {c["check"]: c for c in probe_checks(sweep)}["input baselines at chance"]["passed"]
    sweep["baselines"]["threshold"] = {"value": 0.62, "ci": [0.58, 0.66], "n": 800}
    assert not {c["check"]: c for c in probe_checks(sweep)}["input baselines at chance"]["passed"]


def test_patching_check_finds_where_the_last_position_takes_over() -> None:
    def est(v: float) -> dict:
        return {"value": v, "ci": [v - 0.1, v + 0.1], "n": 50}

    summary = {"layers": [0, 1, 2, 3], "positions": ["last", "text", "image"], "n_rows": 50,
               "share_of_gap": [[est(0.0), est(0.5), est(0.5)], [est(0.05), est(1.0), est(0.01)],
                                [est(0.9), est(1.0), est(0.0)], [est(1.0), est(1.0), est(0.0)]]}
    (check,) = patching_checks(summary)
    assert check["passed"] and "carries it from L2" in check["measured"]
    summary["share_of_gap"][0][2] = est(0.1)  # the value token itself barely matters: not where it is read
    assert not patching_checks(summary)[0]["passed"]
