"""Candidate worlds, histories, and the thresholds of eq. (2) (seed 000, sections 3.1-3.2).

A family has four equally likely worlds w_ij: mass index i and other-property index j (0 = lower
value, 1 = higher). A history is the set of observations made so far; an observation reveals the
index of one property. The initial test reveals one property, leaving two compatible worlds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

World = tuple[int, int]  # (mass index, other-property index)
Observation = tuple[str, int]  # ("mass" | "other", revealed index)
History = frozenset[Observation]

WORLDS: tuple[World, ...] = ((0, 0), (0, 1), (1, 0), (1, 1))
PROPERTIES = ("mass", "other")
_POSITION = {"mass": 0, "other": 1}


def world_name(w: World) -> str:
    """The seed's name for a world: w01 has the lower mass and the higher other property."""
    return f"w{w[0]}{w[1]}"


def parse_world(name: str) -> World:
    if len(name) != 3 or name[0] != "w" or name[1] not in "01" or name[2] not in "01":
        raise ValueError(f"bad world name {name!r}; expected w00, w01, w10 or w11")
    return (int(name[1]), int(name[2]))


def observed(prop: str, w: World) -> Observation:
    """What measuring `prop` ("mass" | "other") shows in world `w`."""
    return (prop, w[_POSITION[prop]])


def history_of(initial: str, index: int) -> History:
    """The history after the initial test of `initial` ("mass" | "other") read value `index`."""
    return frozenset({(initial, index)})


def compatible(history: Iterable[Observation]) -> list[World]:
    """Worlds W(H) that agree with every observation in the history."""
    obs = list(history)
    return [w for w in WORLDS if all(w[_POSITION[p]] == i for p, i in obs)]


def threshold_pair(outcomes: Mapping[World, float], initial: str) -> tuple[float, float]:
    """(q_low, q_high) of eq. (2): the arithmetic midpoints of the two open intervals.

    The two histories of the initial test leave outcome ranges [a, b] and [c, d] ordered so that
    a < c and b < d (outcomes are monotone in each property). q_low lies in (a, min(b, c)) and
    q_high in (max(b, c), d). Returned unrounded; the caller rounds.
    """
    ranges = []
    for index in (0, 1):
        ys = [outcomes[w] for w in compatible(history_of(initial, index))]
        ranges.append((min(ys), max(ys)))
    (a, b), (c, d) = sorted(ranges)
    if not (a < c and b < d):
        raise ValueError(f"outcome ranges {ranges} are not ordered as eq. (2) requires")
    return (a + min(b, c)) / 2.0, (max(b, c) + d) / 2.0
