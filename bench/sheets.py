"""What one measurement sheet shows: the numbers a renderer draws and a detector reads back.

A sheet is four panels (2 x 2, row-major: top-left, top-right, bottom-left, bottom-right).
Each panel has a ruler, the object at the measured position, a marker dot at that position with a
line to the ruler, and the panel's timestamp or load. Readings are in metres along the ruler,
measured from the ruler's zero mark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SheetKind = Literal["mass", "coasting", "rebound", "extension", "free_fall"]
Orientation = Literal["horizontal", "vertical"]

# Which way each kind of measurement runs: track and spring displacements are horizontal,
# heights above the floor are vertical.
ORIENTATION: dict[str, Orientation] = {
    "mass": "horizontal",
    "coasting": "horizontal",
    "extension": "horizontal",
    "rebound": "vertical",
    "free_fall": "vertical",
}


@dataclass(frozen=True)
class SheetSpec:
    """Everything needed to draw one sheet; a pure function of disclosed values and one world."""

    kind: SheetKind
    system: str  # sliding | bouncing | spring (chooses the drawn object)
    title: str  # short heading drawn on every panel, e.g. "Mass test"
    ruler_length: float  # metres spanned by the ruler, zero mark to the end
    readings: tuple[float, float, float, float]  # marked position per panel, metres
    panel_labels: tuple[str, str, str, str]  # e.g. "t = 0.200 s" or "load = 3.00 N"

    @property
    def orientation(self) -> Orientation:
        return ORIENTATION[self.kind]

    def __post_init__(self) -> None:
        if len(self.readings) != 4 or len(self.panel_labels) != 4:
            raise ValueError("a sheet has exactly four panels")
        for r in self.readings:
            if not 0.0 <= r <= self.ruler_length:
                raise ValueError(f"reading {r} m lies outside the {self.ruler_length} m ruler")
