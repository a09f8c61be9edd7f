"""`fixed` (evprobe.core.decimals): a zero is never printed with a minus sign; everything else rounds as Python does."""

from __future__ import annotations

import re

import pytest

from evprobe.core.decimals import fixed
from tests.intervals import NEGATIVE_ZERO


@pytest.mark.parametrize(("x", "digits", "sign", "text"), [
    (-0.0, 2, False, "0.00"), (-0.0004, 3, False, "0.000"), (-0.0004, 3, True, "+0.000"), (0.0, 1, True, "+0.0"),
    (-0.0006, 3, False, "-0.001"), (-1.25, 1, True, "-1.2"), (2.0, 0, True, "+2"), (-0.4, 0, False, "0"),
])
def test_fixed(x: float, digits: int, sign: bool, text: str) -> None:
    assert fixed(x, digits, sign) == text


def test_python_formatting_prints_the_negative_zeros_the_check_catches() -> None:
    """The check in tests/test_readme.py (NEGATIVE_ZERO over every page of the main job) can fail:
    Python's own format spec gives exactly the strings it looks for, fixed() none of them."""
    for x in (-0.0, -1e-9, -0.004):
        for spec in (".2f", "+.2f", ".1f", "+.0f"):
            assert re.search(NEGATIVE_ZERO, f"z {x:{spec}}, p"), spec
            assert re.search(NEGATIVE_ZERO, f"z {fixed(x, int(spec[-2]), spec.startswith('+'))}, p") is None
    assert re.search(NEGATIVE_ZERO, "-0.001 [-0.05, -10.0]") is None  # real negatives are not zeros
