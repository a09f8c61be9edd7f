"""Calibration of the measurement tests and the readings each sheet shows (seed 000, A.2).

Calibration depends only on the disclosed candidate values, never on the hidden world:

- mass test (every system): frictionless 1 m track, timestamps 0.2, 0.4, 0.6, 0.8 s, force chosen
  so the lower mass reaches 0.8 m in the last panel; x = F t^2 / (2 m).
- friction (sliding): coasting on a 2 m track of the same surface; the launch speed makes the
  lower friction stop at 1.7 m; timestamps quarter that stopping time.
- restitution (bouncing): the drop height makes the higher restitution rebound to 0.8 m on a 1 m
  ruler. The seed does not say when the four panels are taken. We choose heights above the floor
  at 0.2, 0.4, 0.6, 0.8 of the higher restitution's rise time after the bounce, so that no panel
  catches either object at the floor (a zero reading has no relative error).
- stiffness (spring): four equal load steps, the largest extending the softer spring 0.4 m on a
  0.5 m ruler; extension = load / k.
- free fall (every system): released at 1.2 m, panels quarter the time to 0.2 m above the floor,
  on a 1.5 m vertical ruler. Identical in every world, so it reveals neither unknown.
"""

from __future__ import annotations

import math
from typing import Any

from evprobe.bench.numbers import fmt, round_sig
from evprobe.bench.sheets import SheetSpec
from evprobe.bench.systems import G, get_system

MASS_TRACK = 1.0  # m
MASS_TIMES = (0.2, 0.4, 0.6, 0.8)  # s
MASS_TARGET = 0.8  # m reached by the lower mass at the last timestamp
COAST_TRACK = 2.0  # m
COAST_STOP = 1.7  # m, stopping distance of the lower friction
REBOUND_RULER = 1.0  # m
REBOUND_PEAK = 0.8  # m, rebound height of the higher restitution
REBOUND_FRACTIONS = (0.2, 0.4, 0.6, 0.8)  # of the higher restitution's rise time
SPRING_RULER = 0.5  # m
SPRING_MAX_EXTENSION = 0.4  # m, softer spring under the largest load
FALL_RULER = 1.5  # m
FALL_START = 1.2  # m
FALL_END = 0.2  # m

SHEETS: tuple[str, ...] = ("mass_0", "mass_1", "other_0", "other_1", "free_fall")


def calibrate(system: str, candidates: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    """Constants of the three tests, keyed by action, from the candidate values alone."""
    sysdef = get_system(system)
    m_lo = candidates["mass"][0]
    p_lo, p_hi = candidates[sysdef.other]
    force = round_sig(2.0 * m_lo * MASS_TARGET / MASS_TIMES[-1] ** 2)
    cal: dict[str, dict[str, Any]] = {
        "test_mass": {"force": force, "times": list(MASS_TIMES), "ruler": MASS_TRACK}
    }
    if system == "sliding":
        v0 = round_sig(math.sqrt(2.0 * p_lo * G * COAST_STOP))
        t_stop = v0 / (p_lo * G)
        times = [round_sig(t_stop * k / 4.0) for k in (1, 2, 3, 4)]
        cal["test_other"] = {"launch_speed": v0, "times": times, "ruler": COAST_TRACK}
    elif system == "bouncing":
        drop = round_sig(REBOUND_PEAK / p_hi**2)
        rise = p_hi * math.sqrt(2.0 * G * drop) / G
        times = [round_sig(rise * f) for f in REBOUND_FRACTIONS]
        cal["test_other"] = {"drop_height": drop, "times": times, "ruler": REBOUND_RULER}
    else:
        top = round_sig(SPRING_MAX_EXTENSION * p_lo)
        loads = [round_sig(top * k / 4.0) for k in (1, 2, 3, 4)]
        cal["test_other"] = {"loads": loads, "ruler": SPRING_RULER}
    t_fall = math.sqrt(2.0 * (FALL_START - FALL_END) / G)
    cal["free_fall"] = {
        "release_height": FALL_START,
        "times": [round_sig(t_fall * k / 4.0) for k in (1, 2, 3, 4)],
        "ruler": FALL_RULER,
    }
    return cal


def sheet_instants(system: str, calibration: dict[str, dict[str, Any]], sheet: str) -> tuple[float, ...]:
    """The four instants a sheet's panels show: times (s), or the stiffness test's loads (N)."""
    if sheet == "free_fall":
        return tuple(calibration["free_fall"]["times"])
    if sheet.startswith("mass"):
        return tuple(calibration["test_mass"]["times"])
    c = calibration["test_other"]
    return tuple(c["loads"] if system == "spring" else c["times"])


def reading_at(
    system: str, calibration: dict[str, dict[str, Any]], sheet: str, value: float | None, instant: float
) -> float:
    """The marked position (m, unrounded) at one instant (a time in s, or a load in N for the
    stiffness test) when the measured property has `value`; a sheet's panels are four instants."""
    if sheet == "free_fall":
        c = calibration["free_fall"]
        return c["release_height"] - 0.5 * G * instant * instant
    assert value is not None
    if sheet.startswith("mass"):
        c = calibration["test_mass"]
        return c["force"] * instant * instant / (2.0 * value)
    c = calibration["test_other"]
    if system == "sliding":
        v0, decel = c["launch_speed"], value * G
        s = min(instant, v0 / decel)  # the block rests at v0^2 / (2 mu g) after v0 / decel
        return v0 * s - 0.5 * decel * s * s
    if system == "bouncing":
        v_up = value * math.sqrt(2.0 * G * c["drop_height"])
        return max(0.0, v_up * instant - 0.5 * G * instant * instant)
    return instant / value


def readings(
    system: str, calibration: dict[str, dict[str, Any]], sheet: str, value: float | None
) -> tuple[float, float, float, float]:
    """Marked positions (m) on `sheet` when the measured property has `value`."""
    return _four(reading_at(system, calibration, sheet, value, t) for t in sheet_instants(system, calibration, sheet))


def _four(values: Any) -> tuple[float, float, float, float]:
    out = tuple(round_sig(v) for v in values)
    assert len(out) == 4
    return out  # type: ignore[return-value]


def sheet_value(sheet: str, other: str, candidates: dict[str, list[float]]) -> float | None:
    """The candidate value a sheet measures: mass_1 -> higher mass; free_fall -> None."""
    if sheet == "free_fall":
        return None
    prop, _, index = sheet.partition("_")
    return candidates["mass" if prop == "mass" else other][int(index)]


def sheet_spec(
    system: str,
    candidates: dict[str, list[float]],
    calibration: dict[str, dict[str, Any]],
    sheet: str,
) -> SheetSpec:
    """The drawable description of one of a family's five sheets."""
    sysdef = get_system(system)
    value = sheet_value(sheet, sysdef.other, candidates)
    marks = readings(system, calibration, sheet, value)
    if sheet == "free_fall":
        c = calibration["free_fall"]
        return SheetSpec("free_fall", system, "Free-fall test", c["ruler"], marks, _times(c))
    if sheet.startswith("mass"):
        c = calibration["test_mass"]
        return SheetSpec("mass", system, "Mass test", c["ruler"], marks, _times(c))
    c = calibration["test_other"]
    if system == "sliding":
        return SheetSpec("coasting", system, "Friction test", c["ruler"], marks, _times(c))
    if system == "bouncing":
        return SheetSpec("rebound", system, "Restitution test", c["ruler"], marks, _times(c))
    labels = tuple(f"load = {fmt(x, 4)} N" for x in c["loads"])
    return SheetSpec("extension", system, "Stiffness test", c["ruler"], marks, labels)  # type: ignore[arg-type]


def _times(c: dict[str, Any]) -> tuple[str, str, str, str]:
    return tuple(f"t = {fmt(t, 4)} s" for t in c["times"])  # type: ignore[return-value]
