"""Threshold accuracy of a numeric estimate (seed 003, section 4.2, eq. 6) and its log error.

    ACC_delta = I( |y - y_hat| / y <= delta ),   delta in {5%, 10%, 20%, 30%}

Choices where the seed is silent, each tested in tests/bench/test_threshold.py:

- Boundaries count as within: the seed writes `<=`, so an error of exactly delta is correct. The
  comparison is made in exact decimal arithmetic on the shortest decimal text of each float
  (`repr`): 1.05 against 1 at delta 5% is within, although `abs(1.05 - 1.0) / 1.0` is
  0.05000000000000004 in binary floating point. Estimates reach us as decimal text (a reply, or a
  stored record value that round-trips through `repr`), so the decimal reading is the number the
  model wrote.
- y = 0: the metric "degenerates to standard ACC, requiring an exact match" (seed 003): correct
  only when y_hat == 0, at every delta. No item of this benchmark has y = 0 (every reference value
  is a positive length, mass, coefficient, stiffness, distance, energy or period); the rule is
  here because the metric is the seed's.
- y < 0 (never in this benchmark): the denominator is |y|, so the relative error stays >= 0.
- An invalid reply (no reading, or a misread the parser refused) has no y_hat: it is not correct
  at any delta and stays in the denominator (`bench.numeric_scoring`).

The mean log relative error beside it is the mean of |ln(y_hat / y)| (0 for an exact estimate;
ln 2 = 0.693 for a factor of two either way, so over- and under-estimates weigh alike). It is
defined only for y_hat > 0 and y > 0; `log_error` returns None otherwise and the scorer reports
how many estimates it left out and why, never a number for them.
"""

from __future__ import annotations

import math
from decimal import Decimal

DELTAS: tuple[str, ...] = ("0.05", "0.10", "0.20", "0.30")  # seed 003: 5%, 10%, 20%, 30%


def delta_key(delta: str) -> str:
    """The name of a threshold in scores: "acc_5", "acc_10", ..."""
    return f"acc_{round(float(delta) * 100)}"


def _dec(x: float | str | Decimal) -> Decimal:
    if isinstance(x, Decimal):
        return x
    if isinstance(x, str):
        return Decimal(x)
    if not math.isfinite(x):
        raise ValueError(f"threshold accuracy needs finite numbers, got {x!r}")
    return Decimal(repr(float(x)))


def within(y: float | str | Decimal, y_hat: float | str | Decimal | None, delta: float | str | Decimal) -> bool:
    """ACC_delta of one estimate (eq. 6); None (no estimate) is never within."""
    if y_hat is None:
        return False
    y_d, hat_d, delta_d = _dec(y), _dec(y_hat), _dec(delta)
    if delta_d < 0:
        raise ValueError(f"delta must be >= 0, got {delta}")
    if y_d == 0:
        return hat_d == 0
    return abs(y_d - hat_d) <= delta_d * abs(y_d)


def relative_error(y: float, y_hat: float) -> float:
    """|y - y_hat| / |y| (inf when y = 0 and y_hat != 0; 0 when both are 0)."""
    if y == 0:
        return 0.0 if y_hat == 0 else math.inf
    return abs(y - y_hat) / abs(y)


def log_error(y: float, y_hat: float | None) -> float | None:
    """|ln(y_hat / y)|, or None when it is undefined (no estimate, y_hat <= 0 or y <= 0)."""
    if y_hat is None or y_hat <= 0 or y <= 0:
        return None
    return abs(math.log(y_hat / y))
