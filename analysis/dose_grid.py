"""The analysis of a dose-response grid, whatever produced its per-item readouts.

`steering_dose_response` (readouts from its own forwards on your prompts) and `evprobe dose-response`
(readouts from its resumable rows, read by the benchmark's readout) both hand their numbers here and
differ only in what they pass:

- a `Readout`: the measures an item's numbers are, and which of them are 0/1 shares (a rate's
  interval is a proportion's, analysis.effects). Yours: the target's log-odds and whether it ranks
  first (`TARGET_READOUT`); the benchmark's: stop rate, missing and useless tests, minimum-cost
  accuracy, stop log-odds (experiments.dose_response.stats).
- a `ChoiceRule`: how a cross-fit half picks a setting (layer x dose): the one moving `measure`
  furthest toward the goal, while the rate `guard` stays at or below `ceiling` (when given); ties to
  the smaller |alpha|, then the lower layer (analysis.specificity.choose_settings). Yours: the
  log-odds, no guard; the benchmark's: the stop rate while at most 10% choose a useless test.

`GridEstimator` gives every condition's estimates and paired changes against alpha = 0 on one family
bootstrap (analysis.effects, over the caller's groups of items: yours, or the benchmark's groups x
systems) and the null directions' effects against the same unsteered cells. `cross_fit` runs the
choice rule for every direction at once, the probe and each null's directions alike
(each chooses on one half of the families and is scored on the other), so a null direction's
cross-fitted effect is what the probe's would be were it one more direction of that null.
`set_means` is the null directions' per-setting means over each group of items (NaN-aware).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from evprobe.analysis.effects import Cells, cell_estimates, cells
from evprobe.analysis.specificity import HALVES, group_means, half_choices, scored_at
from evprobe.core.bootstrap import Estimate, FamilyBootstrap
from evprobe.core.errors import InputError

Setting = tuple[int, float]  # (layer, alpha)


@dataclass(frozen=True)
class Readout:
    """The measures of an item's readout, in column order, and which are 0/1 shares (rates)."""

    measures: tuple[str, ...]
    rates: tuple[str, ...] = ()

    def index(self, measure: str) -> int:
        if measure not in self.measures:
            raise InputError(f"measure {measure!r} is not read here; choose from {', '.join(self.measures)}")
        return self.measures.index(measure)

    @property
    def proportions(self) -> list[bool]:
        """Per measure, whether its interval is a proportion's (analysis.effects.cells)."""
        return [m in self.rates for m in self.measures]


@dataclass(frozen=True)
class ChoiceRule:
    """How a cross-fit half picks a direction's setting (module docstring)."""

    measure: str
    guard: str | None = None
    ceiling: float = 0.10

    def columns(self, readout: Readout) -> tuple[int, int | None]:
        """(the measure's column, the guard's or None) in `readout`; an unknown measure is one line."""
        if self.guard is not None and self.guard not in readout.rates:
            raise InputError(f"the choice rule's guard {self.guard!r} must be a rate of the readout "
                             f"({', '.join(readout.rates) or 'none'})")
        return readout.index(self.measure), None if self.guard is None else readout.index(self.guard)


TARGET_READOUT = Readout(("log_odds", "chose"), rates=("chose",))
TARGET_CHOICE = ChoiceRule("log_odds")


@dataclass(frozen=True)
class CrossFit:
    """Every direction's cross-fitted reading (cross_fit). Direction 0 is the probe, then each null's
    directions in `kinds` order (`sizes` of them each).

    choices, broken: per half, each direction's chosen candidate (D,) and whether every candidate
        broke the guard; shift, guard: per half, the probe's move toward the goal (C,) and its guard
        rate (C,; NaN without a guard) at each candidate, on that half's fitting items;
    scored: (items, D, M) every item read at the setting its direction chose on the other half."""

    cands: tuple[Setting, ...]
    choices: dict[str, np.ndarray]
    broken: dict[str, np.ndarray]
    shift: dict[str, np.ndarray]
    guard: dict[str, np.ndarray]
    scored: np.ndarray
    kinds: tuple[str, ...]
    sizes: tuple[int, ...]

    def chosen(self, half: str) -> Setting:
        """The probe's setting chosen on `half`."""
        return self.cands[int(self.choices[half][0])]

    def probe(self) -> np.ndarray:
        """(items, M) the probe's cross-fitted readouts."""
        return self.scored[:, 0, :]

    def null_effects(self, kind: str, base: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """(K, M) the null `kind`'s directions' cross-fitted effects on `mask`'s items: their mean
        readout minus the unsteered one (base: (items, M)), NaN-aware."""
        j = self.kinds.index(kind)
        start = 1 + sum(self.sizes[:j])
        return (group_means(self.scored[:, start:start + self.sizes[j], :], mask)
                - group_means(base[:, None, :], mask))


def cross_fit(cands: Sequence[Setting], probe: np.ndarray, nulls: Mapping[str, np.ndarray], base: np.ndarray,
              half: np.ndarray, fit: np.ndarray, readout: Readout, rule: ChoiceRule, toward: int) -> CrossFit:
    """Each direction's setting chosen on each half by `rule`, scored on the other (module docstring).

    cands: the candidate settings, C of them; probe: (C, items, M) the probe's readouts at each;
    nulls: per null kind, (C, items, K, M) its directions' readouts; base: (items, M) unsteered;
    half: (items,) each item's half ("A" / "B"); fit: (items,) the items whose means decide;
    toward: +1 when the goal raises the rule's measure, -1 when it lowers it."""
    col, guard_col = rule.columns(readout)
    kinds = tuple(k for k, v in nulls.items() if v.shape[2])
    stack = np.concatenate([probe[:, :, None, :], *(nulls[k] for k in kinds)], axis=2)  # (C, items, D, M)
    choices, broken, shift, guard = {}, {}, {}, {}
    for h in HALVES:  # analysis.specificity's per-half rule (crossfit_scores'), keeping the probe's numbers
        choices[h], broken[h], moved, rates = half_choices(cands, stack, base, fit & (half == h), col, toward,
                                                           guard_col, rule.ceiling)
        shift[h] = moved[:, 0]
        guard[h] = rates[:, 0] if guard_col is not None else np.full(len(cands), np.nan)
    return CrossFit(tuple(cands), choices, broken, shift, guard, scored_at(stack, choices, half, HALVES), kinds,
                    tuple(int(nulls[k].shape[2]) for k in kinds))


@dataclass(frozen=True)
class GridEstimator:
    """One readout's cells over fixed groups of items (`masks`, each (items,) bool) on one family
    bootstrap: cells are ordered mask x measure (analysis.effects.cells); `base` the unsteered one's."""

    readout: Readout
    masks: tuple[np.ndarray, ...]
    boot: FamilyBootstrap
    family_index: np.ndarray  # (items,) each item's family in `boot`
    base: Cells

    @classmethod
    def of(cls, readout: Readout, base: np.ndarray, masks: Mapping[object, np.ndarray] | Sequence[np.ndarray],
           boot: FamilyBootstrap, family_index: np.ndarray) -> GridEstimator:
        """From the unsteered readouts (items, M)."""
        ms = tuple(masks.values()) if isinstance(masks, Mapping) else tuple(masks)
        return cls(readout, ms, boot, family_index, cells(base, ms, boot, family_index, readout.proportions))

    def on(self, masks: Mapping[object, np.ndarray] | Sequence[np.ndarray]) -> GridEstimator:
        """The same readout and bootstrap over other groups of the same items."""
        return GridEstimator.of(self.readout, self.base.values, masks, self.boot, self.family_index)

    def cells(self, values: np.ndarray) -> Cells:
        """One condition's cells from its readouts (items, M)."""
        return cells(values, self.masks, self.boot, self.family_index, self.readout.proportions)

    def estimates(self, values: np.ndarray) -> tuple[list[Estimate], list[Estimate]]:
        """One condition's Estimates and those of its paired changes against alpha = 0, in cell order."""
        return cell_estimates(self.cells(values), self.base)

    def null_effects(self, values: np.ndarray) -> np.ndarray:
        """(K, cells) the effects of K null directions, values (items, K, M): each one's mean readout
        over a cell's items (NaN-aware) minus the unsteered cell's (no bootstrap per direction)."""
        return set_means(values, self.masks).reshape(values.shape[1], len(self.base.observed)) - self.base.observed


def set_means(values: np.ndarray, masks: Sequence[np.ndarray]) -> np.ndarray:
    """(K, groups, M) the K directions' mean readouts over each mask's items, NaN-aware (NaN where a
    group has no defined item). values: (items, K, M)."""
    return np.stack([group_means(values, m) for m in masks], axis=1)


__all__ = ["TARGET_CHOICE", "TARGET_READOUT", "ChoiceRule", "CrossFit", "GridEstimator", "Readout", "Setting",
           "cross_fit", "set_means"]
