"""A steering dose as one value: alpha in units of a layer's measured residual norm, and its raw size.

    unit = DoseUnit(layer=3, norm=12.5, positions="all", how="mean residual norm over 640 edited positions")
    dose = unit.dose(-0.5)            # Dose(alpha=-0.5, unit=...): dose.raw == -6.25, dose.layer == 3
    with evprobe.steer(handle, Steering.from_dose(direction, dose)): ...

`evprobe.steering_dose_response` and `evprobe dose-response` both read every condition at
`Dose`s: the unit is measured once per layer (hooks.steer_rows.residual_norms_at, over exactly the
positions the edit touches), given, or 1 (raw units), and a dose's raw vector is `dose.raw` times
the unit direction, for the probe and every null and control direction alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

RAW = "raw units"  # DoseUnit.how of a unit of 1: alpha is the raw size


@dataclass(frozen=True)
class DoseUnit:
    """The size of alpha = 1 at `layer`: `norm` raw residual units, read at `positions` (the
    positions the edit touches; None when not measured there: given, or raw units), and `how` it
    was found (one line)."""

    layer: int
    norm: float
    positions: Any = None
    how: str = RAW

    def __post_init__(self) -> None:
        if isinstance(self.layer, bool) or not isinstance(self.layer, int) or self.layer < 0:
            raise ValueError(f"DoseUnit layer must be a decoder layer index >= 0, got {self.layer!r}")
        if not (isinstance(self.norm, int | float) and math.isfinite(self.norm) and self.norm > 0):
            raise ValueError(f"DoseUnit norm must be a finite number > 0, got {self.norm!r}")

    @classmethod
    def raw(cls, layer: int) -> DoseUnit:
        """Alpha in raw residual units (a unit of 1)."""
        return cls(layer, 1.0, None, RAW)

    def dose(self, alpha: float) -> Dose:
        return Dose(float(alpha), self)


@dataclass(frozen=True)
class Dose:
    """alpha x `unit` at the unit's layer; `raw` is the size of the vector added."""

    alpha: float
    unit: DoseUnit

    def __post_init__(self) -> None:
        if isinstance(self.alpha, bool) or not math.isfinite(self.alpha):
            raise ValueError(f"a dose's alpha must be a finite number, got {self.alpha!r}")

    @property
    def layer(self) -> int:
        return self.unit.layer

    @property
    def raw(self) -> float:
        return self.alpha * self.unit.norm


__all__ = ["RAW", "Dose", "DoseUnit"]
