"""The three physical systems: their second property, sampling ranges and outcome formula.

Seed 000, eq. (1) and Table 8. Each family varies mass and one other property; the target
outcome is sliding distance d (m), energy just after a bounce E (J), or oscillation period T (s):

    d = J^2 / (2 mu g m^2)        E = m g e^2 h        T = 2 pi sqrt(m / k)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

G = 9.81  # m/s^2, Table 8

# Lower mass ~ U[0.75, 1.50] kg, upper = 2 x lower (Table 8).
MASS_RANGE = (0.75, 1.50)
MASS_MULTIPLIER = 2.0


@dataclass(frozen=True)
class System:
    name: str  # sliding | bouncing | spring
    other: str  # the second property: friction | restitution | stiffness
    symbol: str  # mu | e | k
    other_range: tuple[float, float]  # distribution of the lower value (uniform)
    other_multiplier: float  # upper value = multiplier x lower value
    other_unit: str  # "" for dimensionless
    constant: str | None  # the family constant besides g: "J" (impulse), "h" (drop height) or None
    constant_range: tuple[float, float] | None
    outcome_name: str  # what the question compares with the threshold
    outcome_unit: str
    object_name: str  # what the prompts call the object

    def outcome(self, mass: float, other: float, constants: dict[str, float]) -> float:
        """Target outcome of eq. (1) in the world (mass, other)."""
        g = constants["g"]
        if self.name == "sliding":
            return constants["J"] ** 2 / (2.0 * other * g * mass**2)
        if self.name == "bouncing":
            return mass * g * other**2 * constants["h"]
        return 2.0 * math.pi * math.sqrt(mass / other)


SYSTEMS: dict[str, System] = {
    s.name: s
    for s in (
        System(
            name="sliding",
            other="friction",
            symbol="mu",
            other_range=(0.08, 0.12),
            other_multiplier=3.0,
            other_unit="",
            constant="J",
            constant_range=(1.5, 2.5),
            outcome_name="sliding distance",
            outcome_unit="m",
            object_name="block",
        ),
        System(
            name="bouncing",
            other="restitution",
            symbol="e",
            other_range=(0.30, 0.45),
            other_multiplier=2.0,
            other_unit="",
            constant="h",
            constant_range=(0.6, 1.4),
            outcome_name="kinetic energy just after the bounce",
            outcome_unit="J",
            object_name="ball",
        ),
        System(
            name="spring",
            other="stiffness",
            symbol="k",
            other_range=(20.0, 40.0),
            other_multiplier=4.0,
            other_unit="N/m",
            constant=None,
            constant_range=None,
            outcome_name="oscillation period",
            outcome_unit="s",
            object_name="cart",
        ),
    )
}

SYSTEM_NAMES: tuple[str, ...] = tuple(SYSTEMS)


def get_system(name: str) -> System:
    """The system called `name`, with an error that lists the valid names."""
    try:
        return SYSTEMS[name]
    except KeyError:
        raise ValueError(
            f"unknown system {name!r}; choose from {', '.join(SYSTEM_NAMES)}"
        ) from None
