"""The benchmark's choice rule for the specificity verdict of dose-response: the stop rate moving
furthest toward the goal while at most USELESS_CEILING of the targeted group choose a useless test
(the known-answer rule for "the model breaks"; ties to the smaller |alpha|, then the lower layer).

The headline (experiments.dose_response.crossfit) steers each half of the target families at the
layer x dose the *other* half found best for the probe, and gives every null direction the same
procedure (analysis.specificity: the cross-fitted scores, the rank test, the joint verdict over the
random and the label-free null, and the sentences). Here: the rule's measures (stop rate and useless
tests of the benchmark's readouts) and the effects per group.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from evprobe.analysis.specificity import crossfit_scores, group_means

USELESS_CEILING = 0.10  # above this share of useless tests a setting counts as broken (as experiments.known_answer.checks)


def crossfit_choices(cands: list[tuple[int, float]], base: np.ndarray, stack: np.ndarray, half: np.ndarray,
                     halves: Sequence[str], fit_group: np.ndarray, sign: int, measures: tuple[str, ...]
                     ) -> dict[str, np.ndarray]:
    """Per half, each direction's chosen candidate (K,) on that half's targeted items.

    base: (items, M) unsteered values; stack: (C, items, K, M) the set's values at each candidate
    (layer, alpha); half: (items,) each item's half; fit_group: (items,) the targeted group's mask;
    sign: +1 when the goal lowers stopping (induce measuring), -1 when it raises it."""
    _, choices, _ = crossfit_scores(cands, stack, base, half, halves, fit_group, measures.index("stop_rate"), -sign,
                                    guard=measures.index("useless_test_rate"), ceiling=USELESS_CEILING)
    return choices


def crossfit_effects(cands: list[tuple[int, float]], base: np.ndarray, sets: dict[tuple[int, float], np.ndarray],
                     half: np.ndarray, halves: Sequence[str], fit_group: np.ndarray, groups: dict[str, np.ndarray],
                     sign: int, measures: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Each null direction's cross-fitted effect, per group: {group: (K, M)} paired changes against
    alpha = 0, every item scored at the setting its direction chose on the other half.
    sets: per candidate (layer, alpha) the set's values (items, K, M); the rest as crossfit_choices."""
    stack = np.stack([sets[c] for c in cands])  # (C, items, K, M)
    scored, _, _ = crossfit_scores(cands, stack, base, half, halves, fit_group, measures.index("stop_rate"), -sign,
                                   guard=measures.index("useless_test_rate"), ceiling=USELESS_CEILING)
    return {g: group_means(scored, mask) - group_means(base[:, None, :], mask) for g, mask in groups.items()}


__all__ = ["USELESS_CEILING", "crossfit_choices", "crossfit_effects"]
