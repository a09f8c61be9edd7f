"""The family count beside n (issue 52 item 5): an interval computed on families says how many, and
below 8 families it says the interval may be too narrow, beside the number."""

from __future__ import annotations

import pytest

from evprobe.core.bootstrap import Estimate
from evprobe.core.estimate_text import FEW_FAMILIES, count_text, estimate_text

WARN = "the interval may be too narrow"


@pytest.mark.parametrize(("e", "how", "text"), [
    (Estimate(0.585, (0.556, 0.615), 576).in_families(144), {"digits": 1, "scale": 100.0},
     "58.5 [55.6, 61.5] (n=576 in 144 families)"),
    (Estimate(0.585, (0.556, 0.615), 32).in_families(8), {}, "0.585 [0.556, 0.615] (n=32 in 8 families)"),
    (Estimate(0.585, (0.4, 0.7), 28).in_families(7), {}, f"0.585 [0.400, 0.700] (n=28 in only 7 families: {WARN})"),
    (Estimate(0.585, (0.4, 0.7), 3).in_families(1), {}, f"0.585 [0.400, 0.700] (n=3 in only 1 family: {WARN})"),
    # where the line states n once, the family count goes too, but never the warning
    (Estimate(0.585, (0.4, 0.7), 576).in_families(144), {"n": False}, "0.585 [0.400, 0.700]"),
    (Estimate(0.585, (0.4, 0.7), 20).in_families(5), {"n": False}, f"0.585 [0.400, 0.700] (only 5 families: {WARN})"),
    # no interval, no count: fixed by design, identical units, an interval that could not be computed
    (Estimate.identical_units(0.0, 12).in_families(3), {"units": "pairs"}, "0.000 (identical in all 12 pairs)"),
    (Estimate(0.5, (None, None), 3).in_families(2), {}, "0.500 [NA, NA] (n=3)"),
    (Estimate(0.5, (0.4, 0.6), 40), {}, "0.500 [0.400, 0.600] (n=40)"),  # a count not given is not invented
    # the JSON a report reads prints alike
    ({"value": 0.5, "ci": [0.4, 0.6], "n": 40, "n_families": 10}, {}, "0.500 [0.400, 0.600] (n=40 in 10 families)"),
])
def test_family_counts_print_beside_n(e, how, text) -> None:
    assert estimate_text(e, **how) == text


def test_the_warning_starts_below_eight_families() -> None:
    """The edge: 8 families print plainly, 7 warn (a mutation of `<` to `<=`, or of the threshold,
    fails here)."""
    assert FEW_FAMILIES == 8
    plain = estimate_text(Estimate(0.5, (0.4, 0.6), 32).in_families(8))
    warned = estimate_text(Estimate(0.5, (0.4, 0.6), 28).in_families(7))
    assert WARN not in plain and WARN in warned and "only 7 families" in warned


def test_the_count_travels_in_json_and_only_when_known() -> None:
    e = Estimate(0.25, (0.1, 0.4), 8)
    assert "n_families" not in e.to_json()
    assert e.in_families(4).to_json() == {"value": 0.25, "ci": [0.1, 0.4], "n": 8, "n_families": 4}
    assert e.in_families(4).in_families(None).to_json() == e.to_json()


def test_a_count_stated_apart_from_its_intervals_reads_alike() -> None:
    """count_text: a figure title or a line that gives n once, worded as estimate_text words it."""
    assert count_text(576, 144) == "(n=576 in 144 families)"
    assert count_text(12, 1) == f"(n=12 in only 1 family: {WARN})"
    assert count_text(40, None) == "(n=40)"
    e = Estimate(0.5, (0.4, 0.6), 20).in_families(5)
    assert estimate_text(e).endswith(" " + count_text(20, 5))
