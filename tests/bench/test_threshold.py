"""Threshold accuracy (seed 003, eq. 6) on hand-computed cases, and its scoring with intervals."""

from __future__ import annotations

import math

import pytest

from evprobe.bench.generate import GenerateConfig, build
from evprobe.bench.records import Record
from evprobe.bench.scoring import score
from evprobe.bench.threshold import DELTAS, delta_key, log_error, relative_error, within


@pytest.mark.parametrize(
    ("y", "y_hat", "delta", "expected"),
    [
        (1.0, 1.0, "0.05", True),
        (1.0, 1.05, "0.05", True),  # |err| = delta exactly: within (the seed writes <=)
        (1.0, 0.95, "0.05", True),  # the other side of the boundary
        (1.0, 1.0500001, "0.05", False),
        (1.0, 0.9499999, "0.05", False),
        (2.0, 2.2, "0.10", True),  # 10% of 2 is 0.2
        (2.0, 1.8, "0.10", True),
        (2.0, 2.2000001, "0.10", False),
        (0.4, 0.48, "0.20", True),  # 20% of 0.4 is 0.08
        (0.4, 0.32, "0.20", True),
        (0.4, 0.4800001, "0.20", False),
        (10.0, 13.0, "0.30", True),
        (10.0, 7.0, "0.30", True),
        (10.0, 13.0001, "0.30", False),
        (10.0, 13.0, "0.20", False),
        (0.0, 0.0, "0.05", True),  # y = 0: exact match only, at every delta
        (0.0, 0.0, "0.30", True),
        (0.0, 1e-12, "0.30", False),
        (0.0, -1e-12, "0.05", False),
        (-2.0, -2.1, "0.05", True),  # |y| in the denominator
        (-2.0, 2.0, "0.30", False),
        (1.0, None, "0.30", False),  # no estimate: never within
    ],
)
def test_within_on_hand_computed_cases(y: float, y_hat: float | None, delta: str, expected: bool) -> None:
    assert within(y, y_hat, delta) is expected


def test_boundaries_are_decided_in_decimal_not_binary() -> None:
    assert abs(1.05 - 1.0) / 1.0 > 0.05  # binary floating point puts the boundary case outside
    assert within(1.0, 1.05, 0.05) and within(1.0, 1.05, "0.05")
    assert abs(0.3 - 0.33) > 0.1 * 0.3  # likewise at 10%
    assert within(0.3, 0.33, "0.10")


def test_deltas_and_names_are_the_seeds() -> None:
    assert [float(d) for d in DELTAS] == [0.05, 0.10, 0.20, 0.30]
    assert [delta_key(d) for d in DELTAS] == ["acc_5", "acc_10", "acc_20", "acc_30"]
    with pytest.raises(ValueError, match="finite"):
        within(1.0, math.inf, "0.05")
    with pytest.raises(ValueError, match=">= 0"):
        within(1.0, 1.0, "-0.05")


def test_log_and_relative_errors() -> None:
    assert log_error(2.0, 4.0) == pytest.approx(math.log(2))
    assert log_error(2.0, 1.0) == pytest.approx(math.log(2))  # under and over weigh alike
    assert log_error(2.0, 2.0) == 0.0
    assert log_error(2.0, None) is None and log_error(2.0, 0.0) is None and log_error(2.0, -1.0) is None
    assert log_error(0.0, 1.0) is None
    assert relative_error(2.0, 2.5) == pytest.approx(0.25)
    assert relative_error(0.0, 0.0) == 0.0 and relative_error(0.0, 0.1) == math.inf


def _record(item, reply: str, valid: bool, value: float | None) -> Record:
    return Record(
        item_id=item.item_id, model="hand", protocol="direct", regime="standard", request=item.request,
        variant=None, family_id=item.family_id, reply=reply, valid=valid,
        route="number" if valid else "invalid:no_number", choice=None, action=None, answer=None,
        value=value, n_prompt_tokens=None, n_new_tokens=None, seconds=0.0,
    )


def test_scoring_counts_invalid_replies_as_misses_and_reports_left_out_log_errors() -> None:
    """Six estimate_property items of three families with hand-chosen replies: the shares at each
    delta are counted by hand; the invalid reply and the zero estimate stay in every denominator
    and are the two log errors left out, each under its reason."""
    _, items = build(GenerateConfig(families_per_system=1, subset_per_cell=0, numeric=True))
    estimates = [it for it in items if it.request == "estimate_property"][:6]
    factors = [1.0, 1.04, 1.08, 1.25, None, 0.0]  # within 5/5/10/30 %, invalid, zero
    records = []
    for it, k in zip(estimates, factors):
        if k is None:
            records.append(_record(it, "the marker", False, None))
        else:
            records.append(_record(it, "x", True, float(f"{it.reference_value * k:.12g}")))
    scores = score(items, records, n_boot=200)
    block = scores["numeric"]["estimate_property"]
    assert block["acc_5"]["value"] == pytest.approx(2 / 6) and block["acc_5"]["n"] == 6
    assert block["acc_10"]["value"] == pytest.approx(3 / 6)
    assert block["acc_20"]["value"] == pytest.approx(3 / 6)
    assert block["acc_30"]["value"] == pytest.approx(4 / 6)
    assert block["validity"]["value"] == pytest.approx(5 / 6)
    logs = [abs(math.log(k)) for k in (1.0, 1.04, 1.08, 1.25)]
    assert block["mean_log_error"]["value"] == pytest.approx(sum(logs) / 4, rel=1e-6)
    assert block["mean_log_error"]["n"] == 4
    counts = scores["numeric"]["counts"]["estimate_property"]
    assert counts["log_error_excluded"] == {"invalid": 1, "non_positive": 1} and counts["records"] == 6
    for d in DELTAS:  # a rate's interval is never zero width
        lo, hi = block[delta_key(d)]["ci"]
        assert lo < hi
    assert scores["numeric"]["estimate_outcome"]["acc_5"]["reason"] == "no estimate_outcome records"
