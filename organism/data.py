"""Training examples for the organism: selection requests on freshly drawn families.

Families come from `bench.family.make_family` (Table 8 ranges) under the training seed, never
the benchmark's seeds. Per example: a family, a history (which candidate of the initially
measured property the sheet shows), a threshold q and a random menu order; the target is the
letter of the reference action (`bench.reference`, default prices).

Thresholds (the XOR of history and threshold within a family gives no gradient to either half
when only the two constructed thresholds are used, see ../shared/notes/organism-prototype.md):
- `constructed_share` of examples use the family's own q_low / q_high (eq. 2), the kind the
  benchmark asks;
- the rest draw q continuously: with probability `near_share` within +-`near_width` (log10) of
  one of the two outcomes the history leaves possible (where the answer flips), otherwise
  log-uniformly on [0.5 x the smallest, 2 x the largest] of the family's four outcomes.
The sheet value is the true candidate value times 10^u, u ~ U(-jitter, jitter), standing in
for the eye's reading error (measured on the benchmark: see organism.reader); in `spread_share`
of the sheets u ~ U(-spread, spread) instead, and the sheet counts as showing the candidate
nearest to its reading in log10 (`nearest`: the label follows). The benchmark's sheets never read
so far off; these teach the rule "a reading shows its nearest candidate" everywhere near the
candidates, so that a reading made of one sheet's block token and another's offset token (a
partial patch of the image span, `organism.causal`) has a defined answer.

Voids (`bench.voids`; seed 002's visual and textual voids): in `void_share` of examples the
evidence or the question cannot settle the answer, drawn like the rest but with one thing taken
away, and labelled from what is left (`void_example`):
- `occluded`: the initially measured property's sheet is shown but cannot be read (the reader writes
  `unread`, as for an occluded sheet whose marker the eye cannot find); a selection is labelled with
  the cheapest action that settles the answer in all four worlds (at a threshold outside every
  outcome that is `stop`: the answer is fixed without evidence), an answer request with the
  answer that holds in every world left (undetermined unless the threshold is outside them all);
- `unstated`: the question's threshold is never given (no q token; the prompt's symbol `q`): an
  answer request, labelled undetermined whatever the sheets show.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evprobe.bench.family import Family, make_family
from evprobe.bench.reference import ACTIONS, ANSWERS, Prices, reference_action, reference_answer
from evprobe.bench.systems import SYSTEM_NAMES, get_system
from evprobe.bench.worlds import compatible, history_of
from evprobe.organism.facts import ACTION_WORDS, Facts
from evprobe.organism.vocab import LETTERS


@dataclass(frozen=True)
class DataConfig:
    constructed_share: float = 0.4
    near_share: float = 0.5
    near_width: float = 0.12
    jitter: float = 0.004
    answer_share: float = 0.3  # share of answer requests (the curriculum: see answer_example)
    both_known_share: float = 0.5  # of answer requests, those with both properties known
    spread_share: float = 0.3  # share of sheets read far from their candidate (see the docstring)
    spread: float = 0.35  # decades: half-width of those readings' offset
    void_share: float = 0.1  # share of void examples (the module docstring), half of each type


def nearest(family: Family, prop: str, value: float) -> int:
    """Index of `prop`'s candidate nearest to `value` in log10 ("mass" or "other")."""
    return int(np.argmin([abs(np.log10(value / family.value(prop, i))) for i in range(2)]))


def property_word(family: Family, coordinate: str) -> str:
    """How the facts name a world coordinate ("mass" or "other"): "mass" or the other property's name."""
    return "mass" if coordinate == "mass" else family.other


def _reading(rng: np.random.Generator, family: Family, prop: str, index: int, config: DataConfig) -> float:
    width = config.spread if rng.random() < config.spread_share else config.jitter
    return float(family.value(prop, index) * 10 ** rng.uniform(-width, width))


def draw_family(rng: np.random.Generator, index: int) -> Family:
    system = SYSTEM_NAMES[int(rng.integers(len(SYSTEM_NAMES)))]
    initial = "mass" if rng.random() < 0.5 else get_system(system).other
    return make_family(f"train-{index}", system, initial, rng)


def _facts(family: Family, q: float, seen: tuple, options: tuple, task: str) -> Facts:
    """What the prompt of any request of `family` states, plus the given evidence and menu."""
    return Facts(
        system=family.system,
        mass=tuple(family.candidates["mass"]),  # type: ignore[arg-type]
        other=tuple(family.candidates[family.other]),  # type: ignore[arg-type]
        g=family.constants["g"],
        constant=family.constants.get("J", family.constants.get("h")),
        q=q,
        seen=seen,
        options=options,
        task=task,
    )


def select_example(
    family: Family, history: int, q: float, order: list[str], value: float, prices: Prices = Prices()
) -> tuple[Facts, str]:
    """The facts of a selection request and the letter of its reference action."""
    options = tuple((LETTERS[i], ACTION_WORDS[a], prices.of(a)) for i, a in enumerate(order))
    facts = _facts(family, q, ((property_word(family, family.initial), value),), options, "select")
    hist = history_of(family.initial, history)
    action = reference_action(hist, q, family.outcomes(), prices)
    return facts, LETTERS[order.index(action)]


def answer_example(
    family: Family, seen: list[tuple[str, int]], q: float, order: list[str], values: list[float]
) -> tuple[Facts, str]:
    """The facts of an answer request (yes / no / undetermined) after the observations `seen`
    ((property, index) in the order shown, their values given) and the letter of its answer.

    With both properties known the answer is one comparison of an outcome with q (no exclusive
    or), which gives the gradient a direction that the selection alone does not (prototype
    note); with one known it is the selection's question in another answer format.
    """
    facts = _facts(family, q, tuple((property_word(family, p), v) for (p, _), v in zip(seen, values)),
                   tuple((LETTERS[i], a, None) for i, a in enumerate(order)), "answer")
    answer = reference_answer(frozenset(seen), q, family.outcomes())
    return facts, LETTERS[order.index(answer)]


def _draw_q(rng: np.random.Generator, family: Family, left: list[float], config: DataConfig) -> float:
    outcomes = family.outcomes()
    if rng.random() < config.near_share:
        return float(left[int(rng.integers(len(left)))] * 10 ** rng.uniform(-config.near_width, config.near_width))
    lo, hi = 0.5 * min(outcomes.values()), 2.0 * max(outcomes.values())
    return float(10 ** rng.uniform(np.log10(lo), np.log10(hi)))


# The void types the organism is trained on (the draw below indexes them, so the tuple is fixed: bench.voids'
# question-side types, added later, would change every training draw and so the organism's weights).
VOID_KINDS = ("occluded", "unstated")


def void_example(family: Family, void: str, task: str, q: float, order: list[str],
                 readings: list[tuple[str, float | None]], prices: Prices = Prices()) -> tuple[Facts, str]:
    """The facts and the answer letter of a void request (module docstring).

    task: "select" (occluded only: `order` lists ACTIONS) or "answer" (`order` lists ANSWERS);
    readings: (property word, value) per attached sheet in order, the first the initial test's;
    for `occluded` its value must be None (the sheet shows nothing), a second is another
    property's known reading (answer requests only)."""
    if void not in VOID_KINDS:
        raise ValueError(f"void must be one of {', '.join(VOID_KINDS)}, got {void!r}")
    if void == "occluded" and readings[0][1] is not None:
        raise ValueError("an occluded sheet has no reading: its value must be None")
    if void == "unstated" and task != "answer":
        raise ValueError("an unstated threshold has no settling action: only answer requests are voids of it")
    words = {"mass": "mass", family.other: "other"}
    known = frozenset((words[p], nearest(family, words[p], v)) for p, v in readings if v is not None)
    outcomes = family.outcomes()
    if task == "select":
        options = tuple((LETTERS[i], ACTION_WORDS[a], prices.of(a)) for i, a in enumerate(order))
        value = reference_action(known, q, outcomes, prices)
    else:
        options = tuple((LETTERS[i], a, None) for i, a in enumerate(order))
        value = "undetermined" if void == "unstated" else reference_answer(known, q, outcomes)
    facts = _facts(family, None if void == "unstated" else q, tuple(readings), options, task)
    return facts, LETTERS[order.index(value)]


def _sample_void(rng: np.random.Generator, family: Family, config: DataConfig) -> tuple[Facts, str]:
    void = VOID_KINDS[int(rng.integers(len(VOID_KINDS)))]
    task = "select" if void == "occluded" and rng.random() < 0.5 else "answer"
    initial = family.initial
    first = None if void == "occluded" else _reading(rng, family, initial, int(rng.integers(2)), config)
    readings = [(property_word(family, initial), first)]
    if task == "answer" and rng.random() < config.both_known_share:
        second = "other" if initial == "mass" else "mass"
        readings.append((property_word(family, second), _reading(rng, family, second, int(rng.integers(2)), config)))
    outcomes = family.outcomes()
    if rng.random() < config.constructed_share:
        q = family.thresholds["low" if rng.random() < 0.5 else "high"]
    else:
        q = _draw_q(rng, family, list(outcomes.values()), config)
    pool = ACTIONS if task == "select" else ANSWERS
    order = [pool[int(i)] for i in rng.permutation(len(pool))]
    return void_example(family, void, task, q, order, readings)


def sample_example(rng: np.random.Generator, family: Family, config: DataConfig) -> tuple[Facts, str]:
    if rng.random() < config.void_share:
        return _sample_void(rng, family, config)
    if rng.random() < config.answer_share:
        return _sample_answer(rng, family, config)
    history = int(rng.integers(2))
    outcomes = family.outcomes()
    u = rng.random()
    if u < config.constructed_share:
        q = family.thresholds["low" if rng.random() < 0.5 else "high"]
    else:
        q = _draw_q(rng, family, [outcomes[w] for w in compatible(history_of(family.initial, history))], config)
    order = [ACTIONS[int(i)] for i in rng.permutation(len(ACTIONS))]
    value = _reading(rng, family, family.initial, history, config)
    return select_example(family, nearest(family, family.initial, value), q, order, value)


def _sample_answer(rng: np.random.Generator, family: Family, config: DataConfig) -> tuple[Facts, str]:
    first = (family.initial, int(rng.integers(2)))
    seen = [first]
    if rng.random() < config.both_known_share:
        seen.append(("mass" if family.initial == "other" else "other", int(rng.integers(2))))
    values = [_reading(rng, family, p, i, config) for p, i in seen]
    seen = [(p, nearest(family, p, v)) for (p, _), v in zip(seen, values)]  # what each reading shows
    outcomes = family.outcomes()
    left = [outcomes[w] for w in compatible(frozenset(seen))]
    q = _draw_q(rng, family, left, config)
    order = [ANSWERS[int(i)] for i in rng.permutation(len(ANSWERS))]
    return answer_example(family, seen, q, order, values)
