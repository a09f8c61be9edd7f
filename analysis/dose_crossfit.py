"""The cross-fit of an own-data dose-response (analysis.dose_response): every direction's setting
chosen on one half of the families and scored on the other (analysis.dose_grid.cross_fit), the
probe's cross-fitted effect placed among each null's, and the joint verdict on one measure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from evprobe.analysis.dose_grid import TARGET_READOUT, ChoiceRule, Readout, cross_fit
from evprobe.analysis.effects import estimate_columns
from evprobe.analysis.specificity import HALVES, Verdict, joint_verdict, null_stats, specificity_stats, split_halves
from evprobe.core.bootstrap import Estimate


def crossfit_rows(values: dict[int, np.ndarray], nulls: dict[str, dict[int, np.ndarray]], base: np.ndarray,
                  steps: list[float], fam: np.ndarray, masks: dict[str, np.ndarray], goal: int, goal_group: str,
                  split_seed: int, choice: ChoiceRule, changes_of: Callable[[np.ndarray], list[Estimate]],
                  near: dict[str, dict[int, float]], readout: Readout = TARGET_READOUT,
                  verdict_measure: str = "log_odds") -> tuple[list[dict[str, Any]], Verdict]:
    """The cross-fitted effect of the probe and of each null direction (module docstring;
    analysis.dose_grid.cross_fit, the command's too), rows per group x measure x null, and the joint
    verdict on the goal group's `verdict_measure` (the log-odds for the letter readout; a generated
    readout's choice measure).
    changes_of: per-item readouts (n, M) -> the Estimates of their paired changes, cells group x measure."""
    half_of = split_halves({"all": sorted(set(fam))}, split_seed)
    half = np.array([half_of[f] for f in fam])
    cands = [(layer_, alpha) for layer_ in sorted(values) for alpha in steps]
    probe = np.stack([values[layer_][steps.index(a), 0] for layer_, a in cands])  # (C, n, M)
    # (C, n, K, M) per null that ran: its directions at every candidate setting
    sets = {k: np.stack([by[layer_][steps.index(a)].transpose(1, 0, 2) for layer_, a in cands])
            for k, by in nulls.items() if by and next(iter(by.values())).shape[1]}
    # each direction's best setting on one half (the rule's measure moved furthest toward the goal), scored on the other
    cf = cross_fit(cands, probe, sets, base, half, masks[goal_group], readout, choice, goal)
    chosen = {h: cf.chosen(h) for h in HALVES}
    rows, goal_stats = [], {}
    changes = iter(changes_of(cf.probe()))  # cells in group x measure order
    for g, mask in masks.items():
        effects = {kind: cf.null_effects(kind, base, mask) for kind in cf.kinds}  # (K, M) each
        for m, measure in enumerate(readout.measures):
            e = next(changes)
            for kind in cf.kinds or (None,):
                null_effects = effects[kind][:, m] if kind else np.zeros(0)
                share = max(near[kind][c[0]] for c in chosen.values()) if kind else None
                probe_effect = float(e.value) if e.value is not None else None
                stats = specificity_stats(probe_effect, null_effects, -goal, goals=1, near_share=share) \
                    if g == goal_group and measure == verdict_measure else null_stats(e.value, null_effects)
                if g == goal_group and measure == verdict_measure and kind:
                    goal_stats[kind] = dict(stats)
                stats.pop("effects", None)
                stats.pop("probe_effect", None)
                band = {f"null_{k}": stats.pop(k) for k in ("n_directions", "mean", "sd", "lo", "hi")}
                rows.append({"group": g, "measure": f"{measure}_change", "null": kind, **estimate_columns(e), **band,
                             "chosen_on_A_layer": chosen["A"][0], "chosen_on_A_alpha": float(chosen["A"][1]),
                             "chosen_on_B_layer": chosen["B"][0], "chosen_on_B_alpha": float(chosen["B"][1]), **stats})
    return rows, joint_verdict({"random": goal_stats.get("random"), "relabel": goal_stats.get("label-free")})


__all__ = ["crossfit_rows"]
