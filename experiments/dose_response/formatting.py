"""How dose-response numbers are printed: rates in percent, log-odds in nats, each with its
interval and n. Its own module so the report (experiments.dose_response.report) and the generated sentences
(experiments.dose_response.text, which the report's statistics use) share one formatter without a cycle."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evprobe.core.json_types import JsonObject
from evprobe.core.bootstrap import Estimate
from evprobe.core.decimals import fixed
from evprobe.core.estimate_text import estimate_text

RATE_MEASURES = ("stop_rate", "missing_test_rate", "useless_test_rate", "min_cost_accuracy", "invalid_rate")


def num(x: float, digits: int, sign: bool = False) -> str:
    """`x` with `digits` decimals (a sign with sign=True), never -0.0 (core.decimals.fixed)."""
    return fixed(x, digits, sign)


def fmt_estimate(e: Estimate | Mapping[str, Any] | None, measure: str, sign: bool = False) -> str:
    """`58.3 [41.7, 75.0] (n=24)` for rates (percent), `+1.23 [0.40, 2.10] (n=24)` for log-odds (nats);
    a value fixed by design `+0.00 (fixed by design, n=24)` (core.estimate_text, the one formatter)."""
    scale, digits = (100.0, 1) if measure in RATE_MEASURES else (1.0, 2)
    return estimate_text(e, digits, scale=scale, sign=sign or measure == "log_odds")


def crossfit_setting(headline: JsonObject) -> str:
    """Where a cross-fitted headline row steered: `L3 alpha +0.875, L3 alpha +1` (each half's choice,
    once each)."""
    return ", ".join(sorted({f"L{c['layer']} alpha {c['alpha']:+g}" for c in headline["choices"]}))


__all__ = ["RATE_MEASURES", "crossfit_setting", "fmt_estimate", "num"]
