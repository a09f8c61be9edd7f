"""core.proportion.saturated_change with few events (issue 52): a change of rates marked sparse is
widened to the MOVER interval for correlated estimates; where a rate saturates the pairing is not
credited. Each check names the mutation it catches."""

from __future__ import annotations

import numpy as np
import pytest

from evprobe.core.proportion import saturated_change

P1, P0 = np.array([0.99]), np.array([0.97])
CI1, CI0 = (np.array([0.96]), np.array([0.998])), (np.array([0.94]), np.array([0.99]))
PAIRED = (np.array([0.015]), np.array([0.025]))  # a narrow paired interval that misses high changes


def mover(r: float) -> tuple[float, float]:
    a, b = P1[0] - CI1[0][0], CI0[1][0] - P0[0]
    c, d = CI1[1][0] - P1[0], P0[0] - CI0[0][0]
    diff = P1[0] - P0[0]
    return diff - np.sqrt(a * a + b * b - 2 * r * a * b), diff + np.sqrt(c * c + d * d - 2 * r * c * d)


def test_a_sparse_change_is_widened_with_the_measured_correlation() -> None:
    """Zou-Donner MOVER with r: the ends are d -+ sqrt(a^2 + b^2 - 2 r a b). Dropping the sparse flag
    leaves the paired interval (caught by the first line); dropping r gives the wider r = 0 ends."""
    lo, hi = saturated_change(PAIRED, P1, CI1, P0, CI0, sparse=np.array([True]), r=np.array([0.6]))
    assert (lo[0], hi[0]) == pytest.approx(mover(0.6))
    assert hi[0] - lo[0] < mover(0.0)[1] - mover(0.0)[0]  # the pairing credited: narrower than r = 0
    lo, hi = saturated_change(PAIRED, P1, CI1, P0, CI0, sparse=np.array([False]), r=np.array([0.6]))
    assert (lo[0], hi[0]) == (PAIRED[0][0], PAIRED[1][0])  # not sparse, not saturated: untouched


def test_a_saturated_rate_credits_no_pairing() -> None:
    """At 100% nothing measures the pairing: r is taken as 0 whatever is passed (a mutation that
    uses the passed r there narrows the interval and fails)."""
    p1, ci1 = np.array([1.0]), (np.array([0.95]), np.array([1.0]))
    point = (np.array([0.03]), np.array([0.03]))
    with_r = saturated_change(point, p1, ci1, P0, CI0, sparse=np.array([True]), r=np.array([0.9]))
    without = saturated_change(point, p1, ci1, P0, CI0)
    assert np.allclose(with_r, without)
    assert with_r[0][0] < 0.03 < with_r[1][0]


def test_a_correlation_never_shrinks_the_paired_interval() -> None:
    """The MOVER interval is hulled with the paired one: r = 1 (a reach near 0) keeps the paired ends."""
    wide = (np.array([-0.5]), np.array([0.5]))
    lo, hi = saturated_change(wide, P1, CI1, P0, CI0, sparse=np.array([True]), r=np.array([1.0]))
    assert (lo[0], hi[0]) == (-0.5, 0.5)
