"""An independent oracle for `evprobe check`: the benchmark's labels rebuilt from raw parameters.

Written from seed 000 (sections 3.1-3.3, appendix A) and the README's "The benchmark", without
the generator's code: this module imports nothing from `evprobe` (a test reads its imports), so a
mistake in `bench.systems`, `bench.worlds`, `bench.reference`, `bench.calibration` or
`bench.family` cannot hide by being repeated here. It reads only what a family row stores as raw
input: the system, the initial test, the two candidate values of each property, the constants
(g and J or h), the stored calibration constants (for the readings a sheet must show, never for
labels) and the option menus (to turn an answer into a letter); and the action prices, which a
family row does not hold: they live in `bench.json` (`"prices"`), so the caller reads them there.

What it computes, per family:

- the four worlds w_ij (i: mass index, j: other-property index) and every outcome of eq. (1):
  d = J^2 / (2 mu g m^2), E = m g e^2 h, T = 2 pi sqrt(m / k);
- the thresholds of eq. (2), at the midpoints of (a, min(b, c)) and (max(b, c), d) for the
  outcome ranges [a, b], [c, d] of the two histories of the initial test (unrounded);
- for every (history, threshold), sufficiency R(H, q) of eq. (3), the answer, and the reference
  action of eq. (4) by brute force: every action, every world still possible, price minimised;
- the expected value of every labelled field of every item of the README's inventory;
- the calibration of appendix A.2 from the lower and higher candidate values, and the readings
  every sheet must show (from the stored calibration: what the prompt tells the model);
- the inverse physics: a property value from a sheet's four readings (for outcomes recovered
  from the rendered images);
- the opt-in blocks a bench.json declares (README "Numeric estimates" and "Injection levels"):
  the numeric estimates (per family, the four property sheets' values and the four worlds'
  outcomes) and the injection-level copies of the selections and answers (same labels, ids with
  ".L<level>").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

G = 9.81  # m/s^2, seed 000 Table 8

# The property beside mass, per system (section 3.1), and which constant its outcome needs.
OTHER = {"sliding": "friction", "bouncing": "restitution", "spring": "stiffness"}
CONSTANT = {"sliding": "J", "bouncing": "h", "spring": None}

# Actions and what each reveals: positions of the world coordinates (0 = mass, 1 = other) it
# measures (section 3.3: free fall reveals neither unknown, the combined report both).
ACTIONS = ("stop", "test_mass", "test_other", "free_fall", "combined_report")
REVEALS: dict[str, tuple[int, ...]] = {
    "stop": (),
    "test_mass": (0,),
    "test_other": (1,),
    "free_fall": (),
    "combined_report": (0, 1),
}
DEFAULT_PRICES = {"stop": 0.0, "test_mass": 1.0, "test_other": 1.0, "free_fall": 1.0, "combined_report": 2.0}
TESTS = ACTIONS[1:]
LEVELS = ("low", "high")
VARIANTS = (
    "text_readings",
    "changed_rendering",
    "reworded",
    "given_equations",
    "check_possibilities",
    "no_initial_test",
)
WORLDS: tuple[tuple[int, int], ...] = ((0, 0), (0, 1), (1, 0), (1, 1))
INJECTED = ("select", "answer_initial", "answer_after_test")  # requests with injection levels
# Void items (seed 002; the generator's bench.voids, restated): the requests each void type is
# built for, from the main set's resolved decisions.
VOIDED = {"occluded": ("select", "answer_initial"), "unstated": ("answer_initial",), "false_premise": ("answer_initial",),
          "unobservable": ("answer_initial",)}
NUMERIC_REQUESTS = ("estimate_property", "estimate_outcome")

# Appendix A.2 calibration targets (and the README's choices where the seed is silent).
MASS_TIMES = (0.2, 0.4, 0.6, 0.8)
MASS_TRACK, MASS_TARGET = 1.0, 0.8
COAST_TRACK, COAST_STOP = 2.0, 1.7
REBOUND_RULER, REBOUND_PEAK, REBOUND_FRACTIONS = 1.0, 0.8, (0.2, 0.4, 0.6, 0.8)
SPRING_RULER, SPRING_MAX_EXTENSION = 0.5, 0.4
FALL_RULER, FALL_START, FALL_END = 1.5, 1.2, 0.2

# Stored numbers carry six significant digits (README "Rounding"): one rounding moves a value by
# at most 5e-6 of itself, a rounded input feeding a rounded output by about twice that. Two
# stored-or-recomputed numbers "agree" when they differ by at most REL_TOL of their size.
REL_TOL = 2e-5

# Sheets: track and spring displacements run along a horizontal ruler, heights along a vertical one.
SHEET_KIND = {"sliding": "coasting", "bouncing": "rebound", "spring": "extension"}
ORIENTATION = {
    "mass": "horizontal",
    "coasting": "horizontal",
    "extension": "horizontal",
    "rebound": "vertical",
    "free_fall": "vertical",
}


def agree(a: float | None, b: float | None, rel: float = REL_TOL) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


def fmt6(x: float) -> str:
    """A number as the prompts print it: six significant digits, plain decimals, no trailing 0."""
    r = float(f"{x:.5e}")
    text = f"{r:.6g}"
    if "e" in text:
        text = f"{r:.12f}".rstrip("0").rstrip(".")
    return text


def outcome(system: str, mass: float, other: float, constants: Mapping[str, float]) -> float:
    """Eq. (1) in one world."""
    g = constants["g"]
    if system == "sliding":
        return constants["J"] ** 2 / (2.0 * other * g * mass * mass)
    if system == "bouncing":
        return mass * g * other * other * constants["h"]
    if system == "spring":
        return 2.0 * math.pi * math.sqrt(mass / other)
    raise ValueError(f"unknown system {system!r}")


def world_name(w: tuple[int, int]) -> str:
    return f"w{w[0]}{w[1]}"


def remaining(known: Mapping[int, int]) -> list[tuple[int, int]]:
    """Worlds that agree with every known coordinate (position -> index)."""
    return [w for w in WORLDS if all(w[pos] == idx for pos, idx in known.items())]


def after(known: Mapping[int, int], action: str, hidden: tuple[int, int]) -> dict[int, int]:
    """What is known after `action` when the hidden world is `hidden`."""
    out = dict(known)
    for pos in REVEALS[action]:
        out[pos] = hidden[pos]
    return out


@dataclass(frozen=True)
class Decision:
    resolved: bool  # R(H, q)
    answer: str  # yes | no | undetermined
    actions: frozenset[str]  # every minimum-cost action that settles the answer
    cost: float

    @property
    def action(self) -> str | None:
        """The reference action when it is unique (ties only arise under repricing)."""
        return next(iter(self.actions)) if len(self.actions) == 1 else None


def answer_of(outcomes: Mapping[tuple[int, int], float], known: Mapping[int, int], q: float) -> str:
    answers = {outcomes[w] > q for w in remaining(known)}
    if not answers:
        raise ValueError(f"no world is compatible with {dict(known)}")
    if len(answers) > 1:
        return "undetermined"
    return "yes" if answers.pop() else "no"


def decide(
    outcomes: Mapping[tuple[int, int], float],
    known: Mapping[int, int],
    q: float,
    prices: Mapping[str, float] = DEFAULT_PRICES,
) -> Decision:
    """R(H, q), the answer and eq. (4) by enumeration of every action and every remaining world."""
    answer = answer_of(outcomes, known, q)
    settling = []
    for action in ACTIONS:
        if all(answer_of(outcomes, after(known, action, w), q) != "undetermined" for w in remaining(known)):
            settling.append(action)
    cost = min(prices[a] for a in settling)  # the combined report always settles
    return Decision(answer != "undetermined", answer, frozenset(a for a in settling if prices[a] == cost), cost)


def midpoints(outcomes: Mapping[tuple[int, int], float], initial_pos: int) -> tuple[float, float]:
    """(q_low, q_high) of eq. (2); an error when the ranges are not ordered as eq. (2) needs."""
    ranges = []
    for index in (0, 1):
        ys = [outcomes[w] for w in remaining({initial_pos: index})]
        ranges.append((min(ys), max(ys)))
    (a, b), (c, d) = sorted(ranges)
    if not (a < c and b < d):
        raise ValueError(f"outcome ranges {ranges} are not ordered as eq. (2) requires")
    return (a + min(b, c)) / 2.0, (max(b, c) + d) / 2.0


# --- calibration, readings and their inverse (appendix A.2) -------------------------------------


def calibration(system: str, masses: list[float], others: list[float]) -> dict[str, dict[str, Any]]:
    """The test constants of appendix A.2, from the candidate values alone (unrounded)."""
    cal: dict[str, dict[str, Any]] = {
        "test_mass": {
            "force": 2.0 * masses[0] * MASS_TARGET / MASS_TIMES[-1] ** 2,
            "times": list(MASS_TIMES),
            "ruler": MASS_TRACK,
        }
    }
    lo, hi = others
    if system == "sliding":
        v0 = math.sqrt(2.0 * lo * G * COAST_STOP)
        stop = v0 / (lo * G)
        cal["test_other"] = {"launch_speed": v0, "times": [stop * k / 4 for k in (1, 2, 3, 4)], "ruler": COAST_TRACK}
    elif system == "bouncing":
        drop = REBOUND_PEAK / hi**2
        rise = hi * math.sqrt(2.0 * G * drop) / G
        cal["test_other"] = {"drop_height": drop, "times": [rise * f for f in REBOUND_FRACTIONS], "ruler": REBOUND_RULER}
    elif system == "spring":
        top = SPRING_MAX_EXTENSION * lo
        cal["test_other"] = {"loads": [top * k / 4 for k in (1, 2, 3, 4)], "ruler": SPRING_RULER}
    else:
        raise ValueError(f"unknown system {system!r}")
    fall = math.sqrt(2.0 * (FALL_START - FALL_END) / G)
    cal["free_fall"] = {"release_height": FALL_START, "times": [fall * k / 4 for k in (1, 2, 3, 4)], "ruler": FALL_RULER}
    return cal


def calibration_differences(expected: Mapping[str, Any], stored: Mapping[str, Any], where: str = "") -> list[str]:
    """Dotted names of the calibration numbers that do not agree (missing keys included)."""
    out: list[str] = []
    for key in sorted(set(expected) | set(stored)):
        name = f"{where}.{key}" if where else key
        if key not in expected or key not in stored:
            out.append(name)
        elif isinstance(expected[key], Mapping):
            out += calibration_differences(expected[key], stored[key], name) if isinstance(stored[key], Mapping) else [name]
        elif isinstance(expected[key], list):
            ok = isinstance(stored[key], list) and len(stored[key]) == len(expected[key])
            if not ok or not all(agree(float(a), float(b)) for a, b in zip(expected[key], stored[key])):
                out.append(name)
        elif not isinstance(stored[key], (int, float)) or not agree(float(expected[key]), float(stored[key])):
            out.append(name)
    return out


def sheet_kind(system: str, sheet: str) -> str:
    if sheet == "free_fall":
        return "free_fall"
    return "mass" if sheet.startswith("mass") else SHEET_KIND[system]


def readings(system: str, cal: Mapping[str, Any], sheet: str, value: float | None) -> list[float]:
    """The four marked positions (m) of a sheet when the measured property has `value`."""
    kind = sheet_kind(system, sheet)
    test = "free_fall" if kind == "free_fall" else "test_mass" if kind == "mass" else "test_other"
    panels = cal[test]["loads"] if kind == "extension" else cal[test]["times"]
    return [position(system, cal, sheet, value, x) for x in panels]


def position(system: str, cal: Mapping[str, Any], sheet: str, value: float | None, x: float) -> float:
    """The marked position (m) at time `x` (s), or under load `x` (N) for the stiffness test."""
    kind = sheet_kind(system, sheet)
    if kind == "free_fall":
        return cal["free_fall"]["release_height"] - 0.5 * G * x * x
    assert value is not None
    if kind == "mass":
        return cal["test_mass"]["force"] * x * x / (2.0 * value)
    c = cal["test_other"]
    if kind == "coasting":
        v0, decel = c["launch_speed"], value * G
        s = min(x, v0 / decel)  # at rest after v0 / (mu g)
        return v0 * s - 0.5 * decel * s * s
    if kind == "rebound":
        up = value * math.sqrt(2.0 * G * c["drop_height"])
        return max(0.0, up * x - 0.5 * G * x * x)
    return x / value


def clip_instants(system: str, cal: Mapping[str, Any], sheet: str, frames: int) -> list[float]:
    """The time (or load) of each frame 1..`frames` of a sheet's clip (README, "Clips"): frame
    k * frames / 4 is the sheet's panel k, and the frames before it step evenly from the panel before
    (from 0 before the first)."""
    kind = sheet_kind(system, sheet)
    test = "free_fall" if kind == "free_fall" else "test_mass" if kind == "mass" else "test_other"
    panels = [0.0] + list(cal[test]["loads"] if kind == "extension" else cal[test]["times"])
    per = frames // 4
    out = []
    for k in range(1, frames + 1):
        segment, step = divmod(k - 1, per)
        lo, hi = panels[segment], panels[segment + 1]
        out.append(hi if step == per - 1 else lo + (hi - lo) * (step + 1) / per)
    return out


def ruler_length(system: str, cal: Mapping[str, Any], sheet: str) -> float:
    kind = sheet_kind(system, sheet)
    key = "free_fall" if kind == "free_fall" else "test_mass" if kind == "mass" else "test_other"
    return float(cal[key]["ruler"])


def property_from_readings(system: str, cal: Mapping[str, Any], sheet: str, marks: Iterable[float]) -> float:
    """The measured property that best explains a sheet's four readings (least squares).

    mass: x = F t^2 / (2 m); coasting: the block has stopped by the last panel (it is the lower
    friction's stopping time), at v0^2 / (2 mu g); rebound: h = v t - g t^2 / 2 with
    v = e sqrt(2 g drop); extension: x = load / k.
    """
    x = [float(v) for v in marks]
    kind = sheet_kind(system, sheet)
    if kind == "mass":
        c = cal["test_mass"]
        slope = sum(t * t * xi for t, xi in zip(c["times"], x)) / sum(t**4 for t in c["times"])
        return c["force"] / (2.0 * slope)
    c = cal["test_other"]
    if kind == "coasting":
        return c["launch_speed"] ** 2 / (2.0 * G * x[-1])
    if kind == "rebound":
        ts = c["times"]
        up = sum(t * (xi + 0.5 * G * t * t) for t, xi in zip(ts, x)) / sum(t * t for t in ts)
        return up / math.sqrt(2.0 * G * c["drop_height"])
    if kind == "extension":
        loads = c["loads"]
        return sum(load * load for load in loads) / sum(load * xi for load, xi in zip(loads, x))
    raise ValueError(f"sheet {sheet!r} measures no property")


# --- families and items -------------------------------------------------------------------------


@dataclass(frozen=True)
class OracleFamily:
    """One family row seen by the oracle: its raw parameters and everything derived from them."""

    row: dict[str, Any]
    family_id: str
    system: str
    initial_pos: int  # 0: the initial test measures mass, 1: the other property
    masses: list[float]
    others: list[float]
    constants: dict[str, float]
    outcomes: dict[tuple[int, int], float]
    thresholds: dict[str, float]  # unrounded midpoints of eq. (2)

    @property
    def initial(self) -> str:
        return "mass" if self.initial_pos == 0 else "other"

    def value(self, pos: int, index: int) -> float:
        return (self.masses if pos == 0 else self.others)[index]


def oracle_family(row: Mapping[str, Any]) -> OracleFamily:
    """The oracle's view of one families.jsonl row (raises ValueError on an unusable row)."""
    system = row["system"]
    if system not in OTHER:
        raise ValueError(f"unknown system {system!r}")
    other = OTHER[system]
    if row["initial_property"] not in ("mass", other):
        raise ValueError(f"initial property {row['initial_property']!r} is neither mass nor {other}")
    masses = [float(v) for v in row["candidates"]["mass"]]
    others = [float(v) for v in row["candidates"][other]]
    constants = {k: float(v) for k, v in row["constants"].items()}
    needed = ["g"] + ([CONSTANT[system]] if CONSTANT[system] else [])
    missing = [k for k in needed if k not in constants]
    if missing or len(masses) != 2 or len(others) != 2:
        raise ValueError(f"needs two candidates per property and constants {needed}")
    outcomes = {w: outcome(system, masses[w[0]], others[w[1]], constants) for w in WORLDS}
    pos = 0 if row["initial_property"] == "mass" else 1
    q_low, q_high = midpoints(outcomes, pos)
    return OracleFamily(
        row=dict(row),
        family_id=row["family_id"],
        system=system,
        initial_pos=pos,
        masses=masses,
        others=others,
        constants=constants,
        outcomes=outcomes,
        thresholds={"low": q_low, "high": q_high},
    )


def image_path(fid: str, sheet: str, style: str = "a", clip: bool = False) -> str:
    """images/<family>/<sheet>[.<style>][.clip].png, as a benchmark names its images."""
    return f"images/{fid}/{sheet}{'' if style == 'a' else '.' + style}{'.clip' if clip else ''}.png"


def sheet_value(fam: OracleFamily, rel: str) -> tuple[str, float | None]:
    """(sheet, measured value) of an image path images/<family>/<sheet>[.b].png."""
    sheet = rel.rsplit("/", 1)[-1].split(".", 1)[0]
    if sheet == "free_fall":
        return sheet, None
    prop, _, idx = sheet.partition("_")
    return sheet, fam.value(0 if prop == "mass" else 1, int(idx))


def sheets(fam: OracleFamily) -> list[tuple[str, str, float | None]]:
    """(sheet, style, measured value) of every image a family has: five style-a sheets, and the
    two initial sheets in style b for a subset family."""
    out: list[tuple[str, str, float | None]] = []
    for prop, pos in (("mass", 0), ("other", 1)):
        for idx in (0, 1):
            out.append((f"{prop}_{idx}", "a", fam.value(pos, idx)))
    out.append(("free_fall", "a", None))
    if fam.row.get("in_subset"):
        out += [(f"{fam.initial}_{h}", "b", fam.value(fam.initial_pos, h)) for h in (0, 1)]
    return out


def image_of(fam: OracleFamily, sheet: str, style: str, clip: bool = False) -> str:
    return image_path(fam.family_id, sheet, style, clip)


def tells_apart(action: str, w1: tuple[int, int], w2: tuple[int, int]) -> bool:
    """Whether `action` shows different results in the two worlds."""
    return any(w1[pos] != w2[pos] for pos in REVEALS[action])
