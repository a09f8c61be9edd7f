"""evprobe.hooks.dose: a dose is one value (alpha, its unit, its raw size) and steers as from_norm_units does."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evprobe.hooks.dose import RAW, Dose, DoseUnit
from evprobe.hooks.steering import Steering


def test_a_dose_is_alpha_times_its_unit() -> None:
    unit = DoseUnit(3, 12.5, "all", "mean residual norm over 640 edited positions")
    dose = unit.dose(-0.5)
    assert dose == Dose(-0.5, unit) and dose.layer == 3 and dose.raw == -6.25
    assert DoseUnit.raw(2).dose(0.75).raw == 0.75 and DoseUnit.raw(2).how == RAW


def test_steering_from_a_dose_is_steering_from_norm_units() -> None:
    v = np.random.default_rng(0).standard_normal(8)
    unit = DoseUnit(1, 4.0, "last", "measured")
    a = Steering.from_dose(v, unit.dose(0.5), positions="last")
    b = Steering.from_norm_units(v, 1, 0.5, 4.0, positions="last", measured_at="last")
    assert (a.layer, a.alpha, a.alpha_norm, a.mean_norm, a.positions) == (b.layer, b.alpha, b.alpha_norm, b.mean_norm,
                                                                            b.positions)
    np.testing.assert_array_equal(a.direction, b.direction)
    with pytest.raises(ValueError, match="mean_norm was measured at positions 'last' but the vector is added at 'all'"):
        Steering.from_dose(v, unit.dose(0.5), positions="all")  # a unit read elsewhere than the edit
    assert Steering.from_dose(v, DoseUnit(1, 4.0).dose(1.0), positions="all").alpha == 4.0  # given: not compared


@pytest.mark.parametrize("make, message", [
    (lambda: DoseUnit(1, 0.0), "norm must be a finite number > 0, got 0.0"),
    (lambda: DoseUnit(1, math.nan), "norm must be a finite number > 0"),
    (lambda: DoseUnit(-1, 1.0), "layer must be a decoder layer index >= 0, got -1"),
    (lambda: DoseUnit(True, 1.0), "layer must be a decoder layer index >= 0, got True"),
    (lambda: DoseUnit(1, 1.0).dose(math.inf), "alpha must be a finite number, got inf"),
    (lambda: Dose(True, DoseUnit(1, 1.0)), "alpha must be a finite number, got True"),
])
def test_bad_doses_are_refused(make, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()
