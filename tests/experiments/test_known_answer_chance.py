"""The planted-profile check reads "decodable" as the sweep does (probes.chance): where the sweep ran its
test against chance, the planted row must pass it, whatever its AUROC and interval."""

from __future__ import annotations

from evprobe.experiments.known_answer.checks import profile_check
from tests.experiments.test_known_answer import PLANT, ROWS, _groups, _sweep


def _with_test(decodable: bool | None) -> dict:
    sweep = _sweep()
    planted = next(r for r in sweep["rows"] if r["layer"] == PLANT["aux_layer"] and r["position"] == "last")
    planted["chance_test"] = None if decodable is None else {"p_value": 0.01 if decodable else 0.3,
                                                             "p_adjusted": 0.01 if decodable else 0.6,
                                                             "decodable": decodable}
    return sweep


def test_the_planted_row_must_pass_the_sweep_s_test_where_it_ran() -> None:
    assert profile_check(_with_test(True), PLANT, ROWS, _groups()).passed
    assert profile_check(_with_test(None), PLANT, ROWS, _groups()).passed  # an older sweep.json: no test to read
    # high AUROC, interval above the floor, but the permutation test does not reject (a mutation that drops the
    # requirement passes this)
    check = profile_check(_with_test(False), PLANT, ROWS, _groups())
    assert not check.passed and "not decodable by the sweep's permutation test" in check.measured
