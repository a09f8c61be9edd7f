"""Parameter families: sampling (seed 000, Table 8), calibration, thresholds and menus.

A family fixes the system, which property the initial test measures, the two candidate values of
each property, the constants, the test calibration, the two thresholds and the option orders.
Every random draw of family k of a system comes from its own stream (seed, system, k), so a family
does not change when the number of families or the set of systems changes; only the order of
initial tests within a system depends on the family count.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from evprobe.bench.calibration import calibrate
from evprobe.bench.numbers import round_sig
from evprobe.bench.reference import ACTIONS, ANSWERS
from evprobe.bench.systems import MASS_MULTIPLIER, MASS_RANGE, SYSTEM_NAMES, G, get_system
from evprobe.bench.worlds import WORLDS, World, threshold_pair
from evprobe.core.json_types import JsonObject

LETTERS = "ABCDE"


@dataclass(frozen=True)
class Family:
    family_id: str
    system: str  # sliding | bouncing | spring
    initial_property: str  # "mass" or the other property's name
    candidates: dict[str, list[float]]  # {"mass": [lo, hi], other: [lo, hi]}
    constants: dict[str, float]  # {"g": 9.81, "J": ...} | {"g": 9.81, "h": ...} | {"g": 9.81}
    calibration: dict[str, dict[str, Any]]  # per test action, see bench.calibration
    thresholds: dict[str, float]  # {"low": q, "high": q}
    options: dict[str, str]  # letter -> action, shared by all four decisions
    answer_options: dict[str, str]  # letter -> yes | no | undetermined
    reworded_options: dict[str, str]  # letter -> action, the "reworded" variant's new order
    recover_options: dict[str, int]  # letter -> candidate index, for the recover-property probe
    in_subset: bool  # member of the 72-family diagnostic subset that carries the variants

    @property
    def other(self) -> str:
        return get_system(self.system).other

    @property
    def initial(self) -> str:
        """The initial test as a world coordinate: "mass" or "other"."""
        return "mass" if self.initial_property == "mass" else "other"

    def value(self, prop: str, index: int) -> float:
        """Candidate value of `prop` ("mass" | "other") at `index`."""
        return self.candidates["mass" if prop == "mass" else self.other][index]

    def outcomes(self) -> dict[World, float]:
        """Target outcome of every world, eq. (1)."""
        return outcome_table(self.system, self.candidates, self.constants)

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, row: JsonObject) -> Family:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})


def outcome_table(
    system: str, candidates: dict[str, list[float]], constants: dict[str, float]
) -> dict[World, float]:
    """Target outcome of eq. (1) in each of the four worlds."""
    sysdef = get_system(system)
    masses, others = candidates["mass"], candidates[sysdef.other]
    return {w: sysdef.outcome(masses[w[0]], others[w[1]], constants) for w in WORLDS}


def _menu(rng: np.random.Generator, values: tuple[str, ...]) -> dict[str, str]:
    order = rng.permutation(len(values))
    return {LETTERS[pos]: values[int(i)] for pos, i in enumerate(order)}


def make_family(
    family_id: str,
    system: str,
    initial_property: str,
    rng: np.random.Generator,
) -> Family:
    """Draw one family's lower values (Table 8) and its menus from `rng`."""
    sysdef = get_system(system)
    m_lo = rng.uniform(*MASS_RANGE)
    p_lo = rng.uniform(*sysdef.other_range)
    constant = rng.uniform(*sysdef.constant_range) if sysdef.constant_range else None
    return build_family(family_id, system, initial_property, m_lo, p_lo, constant, rng)


def build_family(
    family_id: str,
    system: str,
    initial_property: str,
    mass_lo: float,
    other_lo: float,
    constant: float | None,
    rng: np.random.Generator,
) -> Family:
    """A family from its lower values (rounded here to six significant digits); `rng` draws
    the option orders. Upper values, calibration and thresholds follow deterministically."""
    sysdef = get_system(system)
    if initial_property not in ("mass", sysdef.other):
        raise ValueError(f"initial property of a {system} family is mass or {sysdef.other}")
    m_lo, p_lo = round_sig(mass_lo), round_sig(other_lo)
    candidates = {
        "mass": [m_lo, round_sig(m_lo * MASS_MULTIPLIER)],
        sysdef.other: [p_lo, round_sig(p_lo * sysdef.other_multiplier)],
    }
    constants: dict[str, float] = {"g": G}
    if sysdef.constant is not None:
        assert constant is not None, f"a {system} family needs its constant {sysdef.constant}"
        constants[sysdef.constant] = round_sig(constant)
    options = _menu(rng, ACTIONS)
    answer_options = _menu(rng, ANSWERS)
    while True:  # the reworded variant must present a new option order
        reworded = _menu(rng, ACTIONS)
        if reworded != options:
            break
    recover = {LETTERS[pos]: int(i) for pos, i in enumerate(rng.permutation(2))}
    initial = "mass" if initial_property == "mass" else "other"
    q_low, q_high = threshold_pair(outcome_table(system, candidates, constants), initial)
    return Family(
        family_id=family_id,
        system=system,
        initial_property=initial_property,
        candidates=candidates,
        constants=constants,
        calibration=calibrate(system, candidates),
        thresholds={"low": round_sig(q_low), "high": round_sig(q_high)},
        options=options,
        answer_options=answer_options,
        reworded_options=reworded,
        recover_options=recover,
        in_subset=False,
    )


def sample_families(
    seed: int,
    families_per_system: int,
    systems: tuple[str, ...] = SYSTEM_NAMES,
    id_prefix: str = "",
) -> list[Family]:
    """`families_per_system` families of each system; half start with a mass test.

    Within a system the initial tests are randomly ordered (floor(n/2) mass tests, the rest of the
    other property), drawn from the stream (seed, system index).
    """
    if families_per_system <= 0:
        raise ValueError(f"--families-per-system must be positive, got {families_per_system}")
    families = []
    for name in systems:
        sysdef = get_system(name)
        s_idx = SYSTEM_NAMES.index(name)
        n_mass = families_per_system // 2
        initial = ["mass"] * n_mass + [sysdef.other] * (families_per_system - n_mass)
        order = np.random.default_rng([seed, s_idx]).permutation(len(initial))
        for k in range(families_per_system):
            rng = np.random.default_rng([seed, s_idx, k])
            fid = f"{id_prefix}{name}-{k:03d}"
            families.append(make_family(fid, name, initial[int(order[k])], rng))
    return families


def select_subset(
    families: list[Family], subset_seed: int, per_cell: int
) -> list[Family]:
    """Mark `per_cell` families of each (system, initial test) cell as the diagnostic subset."""
    if per_cell < 0:
        raise ValueError(f"--subset-per-cell cannot be negative, got {per_cell}")
    rng = np.random.default_rng(subset_seed)
    chosen: set[str] = set()
    cells: dict[tuple[str, str], list[Family]] = {}
    for f in families:
        cells.setdefault((f.system, f.initial), []).append(f)
    for system in SYSTEM_NAMES:
        for initial in ("mass", "other"):
            cell = cells.get((system, initial), [])
            if not cell:
                continue
            if per_cell > len(cell):
                raise ValueError(
                    f"--subset-per-cell {per_cell} exceeds the {len(cell)} {system} families "
                    f"whose initial test is {initial}; lower it or raise --families-per-system"
                )
            picks = rng.choice(len(cell), size=per_cell, replace=False)
            chosen.update(cell[int(i)].family_id for i in picks)
    return [replace(f, in_subset=f.family_id in chosen) for f in families]
