"""Sufficiency R(H, q) and the minimum-cost reference action (seed 000, eqs. 3-4).

Five actions: stop (answer now), the mass test, the other-property test, free fall (reveals
neither unknown), and the combined report (both properties). The reference action is the cheapest
action after which the answer is known in every world still compatible with the history.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from evprobe.bench.worlds import History, Observation, World, compatible, observed

ACTIONS: tuple[str, ...] = ("stop", "test_mass", "test_other", "free_fall", "combined_report")
TESTS: tuple[str, ...] = ACTIONS[1:]
ANSWERS: tuple[str, ...] = ("yes", "no", "undetermined")


@dataclass(frozen=True)
class Prices:
    """Assigned cost units of each action (section 3.3); appendix F.1 reprices the report."""

    stop: float = 0.0
    test_mass: float = 1.0
    test_other: float = 1.0
    free_fall: float = 1.0
    combined_report: float = 2.0

    def of(self, action: str) -> float:
        return getattr(self, action)

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def parse(cls, assignments: list[str] | None) -> Prices:
        """Prices from `ACTION=COST` strings, e.g. ["combined_report=3"]; others keep defaults."""
        prices = cls()
        for text in assignments or []:
            name, sep, value = text.partition("=")
            if not sep or name not in ACTIONS:
                raise ValueError(
                    f"bad price {text!r}; write ACTION=COST with ACTION one of {', '.join(ACTIONS)}"
                )
            try:
                cost = float(value)
            except ValueError:
                raise ValueError(f"bad price {text!r}: {value!r} is not a number") from None
            if cost < 0:
                raise ValueError(f"bad price {text!r}: costs cannot be negative")
            prices = replace(prices, **{name: cost})
        return prices


def observation(action: str, w: World) -> frozenset[Observation]:
    """o_a(w): what action `a` reveals when the hidden world is `w`."""
    if action in ("stop", "free_fall"):
        return frozenset()
    if action == "test_mass":
        return frozenset({observed("mass", w)})
    if action == "test_other":
        return frozenset({observed("other", w)})
    if action == "combined_report":
        return frozenset({observed("mass", w), observed("other", w)})
    raise ValueError(f"unknown action {action!r}; choose from {', '.join(ACTIONS)}")


def answer_set(history: History, q: float, outcomes: Mapping[World, float]) -> set[bool]:
    """{y_q(w) : w in W(H)}, with y_q(w) = outcome(w) > q."""
    worlds = compatible(history)
    if not worlds:
        raise ValueError(f"history {sorted(history)} is compatible with no world")
    return {outcomes[w] > q for w in worlds}


def resolved(history: History, q: float, outcomes: Mapping[World, float]) -> bool:
    """R(H, q) of eq. (3): every remaining world gives the same binary answer."""
    return len(answer_set(history, q, outcomes)) == 1


def reference_answer(history: History, q: float, outcomes: Mapping[World, float]) -> str:
    """yes / no when the history settles the question, undetermined otherwise."""
    answers = answer_set(history, q, outcomes)
    if len(answers) > 1:
        return "undetermined"
    return "yes" if answers.pop() else "no"


def resolves(action: str, history: History, q: float, outcomes: Mapping[World, float]) -> bool:
    """Whether `action` leaves the answer known whatever the hidden world turns out to be."""
    return all(
        resolved(history | observation(action, w), q, outcomes) for w in compatible(history)
    )


def reference_actions(
    history: History, q: float, outcomes: Mapping[World, float], prices: Prices = Prices()
) -> frozenset[str]:
    """All minimum-cost resolving actions of eq. (4); ties are possible under repricing."""
    useful = [a for a in ACTIONS if resolves(a, history, q, outcomes)]
    cheapest = min(prices.of(a) for a in useful)
    return frozenset(a for a in useful if prices.of(a) == cheapest)


def reference_action(
    history: History, q: float, outcomes: Mapping[World, float], prices: Prices = Prices()
) -> str:
    """The unique minimum-cost resolving action; an error when prices make it a tie."""
    best = reference_actions(history, q, outcomes, prices)
    if len(best) != 1:
        raise ValueError(f"no unique reference action: {sorted(best)} tie at these prices")
    return next(iter(best))
