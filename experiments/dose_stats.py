"""Dose-response aggregation: per condition, group, system and measure a family-bootstrap estimate and
its paired change against alpha = 0, the random-direction null band and the headline (JSON-able)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from evprobe.core.bootstrap import INTERVAL_METHOD, FamilyBootstrap, percentile_interval
from evprobe.experiments.dose_config import alpha_key
from evprobe.experiments.dose_plan import Plan

GROUPS = ("resolved", "unresolved", "all")
MEASURES: dict[str, tuple[str, ...]] = {
    "logprobs": ("stop_rate", "missing_test_rate", "useless_test_rate", "min_cost_accuracy", "log_odds"),
    "generate": ("stop_rate", "missing_test_rate", "useless_test_rate", "min_cost_accuracy", "invalid_rate"),
}


def _values(readout: str, rows: list[dict[str, Any]]) -> np.ndarray:
    """(items, measures) float array of one condition's rows; NaN where a measure is undefined."""
    out = np.full((len(rows), len(MEASURES[readout])), np.nan)
    for i, row in enumerate(rows):
        r = row["lp"] if readout == "logprobs" else row["gen"]
        for j, m in enumerate(MEASURES[readout]):
            if m == "stop_rate":
                out[i, j] = float(r["stop"])
            elif m == "missing_test_rate":
                out[i, j] = np.nan if r["missing"] is None else float(r["missing"])
            elif m == "useless_test_rate":  # rows written before this measure existed have no value
                out[i, j] = np.nan if r.get("useless") is None else float(r["useless"])
            elif m == "min_cost_accuracy":
                out[i, j] = float(r["min_cost"])
            elif m == "log_odds":
                out[i, j] = r["log_odds"]
            elif m == "invalid_rate":
                out[i, j] = float(not r["valid"])
    return out


def _curve_conditions(plan: Plan) -> list[tuple[int | None, str, float | None, str]]:
    """(layer, kind label, alpha, row key) of every point reported; alpha 0 points read the baseline."""
    out: list[tuple[int | None, str, float | None, str]] = [(None, "baseline", 0.0, "base")]
    labels = ["probe"] + [f"random{k}" for k in range(1, plan.config.n_random + 1)]
    for layer in plan.layers:
        for alpha in sorted(plan.config.alphas):
            for label in labels:
                key = "base" if alpha == 0 else f"L{layer}.{label}.{alpha_key(alpha)}"
                out.append((layer, label, float(alpha), key))
        if plan.config.ablation:
            out.append((layer, "ablation", None, f"L{layer}.ablate"))
    return out


def _est(value: float, lo: float, hi: float, n: int) -> dict[str, Any]:
    if math.isnan(value):
        return {"value": None, "ci": [None, None], "n": 0}
    none = (lambda x: None if math.isnan(x) else float(x))
    return {"value": float(value), "ci": [none(lo), none(hi)], "n": int(n)}


Stats = dict[tuple[str, str, str, str], tuple[dict[str, Any], dict[str, Any]]]  # (key, group, system, measure)


def _ratios(readout: str, rows: list[dict[str, Any]], masks: dict[tuple[str, str], np.ndarray],
            boot: FamilyBootstrap, fam: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One condition's cells, ordered (group, system) x measure: observed ratios (C,), resampled
    ratios (B, C) (NaN where a resample's denominator is 0) and n (C,). Same ratio estimator as
    FamilyBootstrap.resample_many, on the bootstrap's one resample matrix."""
    V = _values(readout, rows)  # (items, measures)
    nums, dens = [], []
    for m in masks.values():
        for j in range(V.shape[1]):
            defined = m & ~np.isnan(V[:, j])
            nums.append(boot.per_family(fam, np.where(defined, V[:, j], 0.0)))
            dens.append(boot.per_family(fam, defined.astype(float)))
    NUM, DEN = np.stack(nums, axis=1), np.stack(dens, axis=1)  # (F, C) per-family sums
    top, bottom = NUM.sum(0), DEN.sum(0)
    draws_num, draws_den = boot.counts @ NUM, boot.counts @ DEN  # (B, C)
    with np.errstate(invalid="ignore", divide="ignore"):
        observed = np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0), np.nan)
        draws = np.where(draws_den > 0, draws_num / np.where(draws_den > 0, draws_den, 1.0), np.nan)
    return observed, draws, bottom.round().astype(int)


def _stats(plan: Plan, readout: str, done: dict[tuple[str, str], dict[str, Any]], row_keys: list[str],
           masks: dict[tuple[str, str], np.ndarray], boot: FamilyBootstrap, fam: np.ndarray) -> Stats:
    """(estimate, paired change against alpha = 0) of every cell of every condition.

    One condition at a time keeps memory at O(B x cells) however large the grid; the baseline's
    draws are kept to pair each change with alpha = 0 on the same resamples."""
    cells = [(g, s, m) for (g, s) in masks for m in MEASURES[readout]]

    def rows(key: str) -> list[dict[str, Any]]:
        return [done[(it.item_id, key)] for it in plan.items]

    base_obs, base_draws, _ = _ratios(readout, rows("base"), masks, boot, fam)
    stats: Stats = {}
    for key in row_keys:
        observed, draws, n = _ratios(readout, rows(key), masks, boot, fam)
        lo, hi = percentile_interval(draws)
        dlo, dhi = percentile_interval(draws - base_draws)
        for c, (group, system, measure) in enumerate(cells):
            stats[(key, group, system, measure)] = (
                _est(observed[c], lo[c], hi[c], n[c]),
                _est(observed[c] - base_obs[c], dlo[c], dhi[c], n[c]),
            )
    return stats


def _null_band(plan: Plan, readout: str, stats: Stats, masks: dict[tuple[str, str], np.ndarray]) -> list[dict]:
    """Mean and min-max envelope of the random directions' point estimates per layer x dose x cell."""
    config, out = plan.config, []
    if not config.n_random:
        return out
    for layer in plan.layers:
        for alpha in sorted(config.alphas):
            keys = ["base"] if alpha == 0 else [f"L{layer}.random{k}.{alpha_key(alpha)}"
                                                for k in range(1, config.n_random + 1)]
            for (group, system) in masks:
                for measure in MEASURES[readout]:
                    vals = [stats[(k, group, system, measure)][0] for k in keys]
                    xs = [v["value"] for v in vals if v["value"] is not None]
                    out.append({
                        "readout": readout, "layer": layer, "alpha": float(alpha), "group": group,
                        "system": system, "measure": measure,
                        "mean": float(np.mean(xs)) if xs else None, "min": min(xs) if xs else None,
                        "max": max(xs) if xs else None, "n_directions": config.n_random,
                        "n": max((v["n"] for v in vals), default=0),
                    })
    return out


def aggregate(plan: Plan, done: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    """All aggregates of the selected items: curves, null band, ablation, headline (JSON-able)."""
    config = plan.config
    families = sorted({it.family_id for it in plan.items})
    boot = FamilyBootstrap(families, config.n_boot, config.seed)
    fam = boot.family_index([it.family_id for it in plan.items])  # (items,)
    systems = sorted({it.system for it in plan.items})
    scopes = ["all", *systems] if len(systems) > 1 else ["all"]
    resolved = np.array([bool(it.resolved) for it in plan.items])
    masks = {}  # (group, system) -> (items,) bool
    for group in GROUPS:
        g = resolved if group == "resolved" else ~resolved if group == "unresolved" else np.ones_like(resolved)
        for system in scopes:
            masks[(group, system)] = g & np.array([system in ("all", it.system) for it in plan.items])
    points = _curve_conditions(plan)
    row_keys = sorted({key for *_, key in points}, key=lambda k: (k != "base", k))
    result: dict[str, Any] = {"rows": [], "null_band": [], "headline": []}
    for readout in config.readouts:
        stats = _stats(plan, readout, done, row_keys, masks, boot, fam)
        for layer, label, alpha, key in points:
            for (group, system) in masks:
                for measure in MEASURES[readout]:
                    value, change = stats[(key, group, system, measure)]
                    result["rows"].append({
                        "readout": readout, "layer": layer, "kind": label, "alpha": alpha, "group": group,
                        "system": system, "measure": measure, **value, "delta_vs_0": change,
                    })
        band = _null_band(plan, readout, stats, masks)
        result["null_band"] += band
        result["headline"] += _headline(plan, readout, stats, band)
    result["meta"] = _report_meta(plan, families, systems, scopes)
    return result


def _headline(plan: Plan, readout: str, stats: Stats, band: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per layer: stop rate of resolved items at the largest + dose (inducing measuring) and of
    unresolved items at the most negative dose (inducing stopping), against alpha = 0."""
    out = []
    alphas = sorted(plan.config.alphas)
    for layer in plan.layers:
        for goal, group, alpha in (("induce measuring", "resolved", alphas[-1]),
                                   ("induce stopping", "unresolved", alphas[0])):
            if (goal == "induce measuring" and alpha <= 0) or (goal == "induce stopping" and alpha >= 0):
                continue
            key = f"L{layer}.probe.{alpha_key(alpha)}"
            null = next((b for b in band if (b["layer"], b["alpha"], b["group"], b["system"], b["measure"])
                         == (layer, alpha, group, "all", "stop_rate")), None)
            value, change = stats[(key, group, "all", "stop_rate")]
            out.append({
                "readout": readout, "layer": layer, "goal": goal, "group": group, "alpha": alpha,
                "stop_rate_at_0": stats[("base", group, "all", "stop_rate")][0],
                "stop_rate": value, "change": change, "null_band": null,
            })
    return out


def _report_meta(plan: Plan, families: list[str], systems: list[str], scopes: list[str]) -> dict[str, Any]:
    n_res = sum(bool(it.resolved) for it in plan.items)
    return {
        "model": plan.model.model,
        "model_name": plan.model.name,
        "direction": plan.name,
        "direction_provenance": plan.provenance,
        "flipped": plan.flipped,
        "sign_convention": ("positive alpha = toward measuring (unresolved); the stored direction points toward "
                            f"{plan.provenance.get('label')}={plan.provenance.get('positive')} and was "
                            f"{'negated' if plan.flipped else 'used as stored'}"),
        "units": "alpha in multiples of the layer's mean residual norm (directions.json mean_norm)",
        "layers": {str(layer): {"name": d.name, "mean_norm": d.mean_norm, "n_fit_items": d.n_items}
                   for layer, d in plan.directions.items()},
        "alphas": sorted(plan.config.alphas),
        "n_random": plan.config.n_random,
        "random_seed": plan.config.random_seed,
        "ablation": plan.config.ablation,
        "readouts": list(plan.config.readouts),
        "positions": plan.config.positions,
        "regime": plan.config.regime,
        "n_items": len(plan.items),
        "n_resolved": n_res,
        "n_unresolved": len(plan.items) - n_res,
        "n_families": len(families),
        "systems": systems,
        "scopes": scopes,
        "scope_counts": {scope: {"n_items": sum(scope in ("all", it.system) for it in plan.items),
                                 "n_families": len({it.family_id for it in plan.items if scope in ("all", it.system)})}
                         for scope in scopes},
        "heldout": plan.config.heldout,
        "fit_families": plan.fit_families,
        "excluded_families": plan.excluded,
        "requests": list(plan.config.requests),
        "null_band_rule": ("mean and min-max envelope of the point estimates of n_random seeded random unit "
                           "directions at the same layer and raw dose"),
        "interval_method": INTERVAL_METHOD,
        "n_boot": plan.config.n_boot,
        "seed": plan.config.seed,
        "n_unit": "n = items in the denominator",
    }


__all__ = [
    "GROUPS",
    "MEASURES",
    "Stats",
    "aggregate",
]
