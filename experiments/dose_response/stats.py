"""Dose-response aggregation: per condition, group, system and measure a family-bootstrap estimate and
its paired change against alpha = 0; the random null and controls (experiments.dose_response.null), the
ablation, the cross-fitted headline (experiments.dose_response.crossfit) and the text (JSON-able)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from evprobe.core.bootstrap import FamilyBootstrap
from evprobe.experiments.steering_conventions import alpha_key
from evprobe.experiments.dose_response.controls import controls_record
from evprobe.experiments.dose_response.crossfit import crossfit
from evprobe.experiments.dose_response.null import control_rows, null_band, set_size
from evprobe.experiments.dose_response.plan import Plan
from evprobe.experiments.dose_response.relabel import relabel_record
from evprobe.analysis.specificity import SPECIFIC_P
from evprobe.experiments.dose_response.text import ablation_sentence, paragraphs
from evprobe.analysis.effects import (
    INTERVAL_METHOD,
    Cells,
    cell_estimates,
    cells,
    change_families,
    estimate_of,
    spans_of,
)

GROUPS = ("resolved", "unresolved", "all")
MEASURES: dict[str, tuple[str, ...]] = {
    "logprobs": ("stop_rate", "missing_test_rate", "useless_test_rate", "min_cost_accuracy", "log_odds"),
    "generate": ("stop_rate", "missing_test_rate", "useless_test_rate", "min_cost_accuracy", "invalid_rate"),
}
NOT_PROPORTIONS = {"log_odds"}  # every other measure is a share of 0/1 items: core.proportion's interval too


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
    for layer in plan.layers:  # the random and control sets are summarised by experiments.dose_response.null
        for alpha in sorted(plan.config.alphas):
            key = "base" if alpha == 0 else f"L{layer}.probe.{alpha_key(alpha)}"
            out.append((layer, "probe", float(alpha), key))
        if plan.config.ablation:
            out.append((layer, "ablation", None, f"L{layer}.ablate"))
    return out


def _est(value: float, lo: float, hi: float, n: int, n_families: int) -> dict[str, Any]:
    """A cell's numbers as JSON (analysis.effects.estimate_of), for null, controls and crossfit,
    with the families its interval was computed on."""
    return estimate_of(value, lo, hi, n, n_families=int(n_families)).to_json()


Stats = dict[tuple[str, str, str, str], tuple[dict[str, Any], dict[str, Any]]]  # (key, group, system, measure)


def _cells(readout: str, rows: list[dict[str, Any]], masks: dict[tuple[str, str], np.ndarray],
           boot: FamilyBootstrap, fam: np.ndarray) -> Cells:
    """One condition's cells, ordered (group, system) x measure (analysis.effects.cells,
    the estimator steering_dose_response uses too)."""
    return cells(_values(readout, rows), masks, boot, fam, [m not in NOT_PROPORTIONS for m in MEASURES[readout]])


def _ratios(readout: str, rows: list[dict[str, Any]], masks: dict[tuple[str, str], np.ndarray],
            boot: FamilyBootstrap, fam: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(observed (C,), draws (B, C), n (C,)) of one condition's cells (see Cells)."""
    c = _cells(readout, rows, masks, boot, fam)
    return c.observed, c.draws, c.n


def intervals(readout: str, rows: list[dict[str, Any]], base_rows: list[dict[str, Any]],
              masks: dict[tuple[str, str], np.ndarray], boot: FamilyBootstrap, fam: np.ndarray
              ) -> tuple[np.ndarray, ...]:
    """spans_of for rows given as records (what the null's controls and the crossfit pass), with the
    families each cell's interval and each change's interval were computed on: (lo, hi, dlo, dhi,
    families, change families), each (C,)."""
    cur, base = _cells(readout, rows, masks, boot, fam), _cells(readout, base_rows, masks, boot, fam)
    return (*spans_of(cur, base), cur.n_families, change_families(cur, base))


def _stats(plan: Plan, readout: str, done: dict[tuple[str, str], dict[str, Any]], row_keys: list[str],
           masks: dict[tuple[str, str], np.ndarray], boot: FamilyBootstrap, fam: np.ndarray) -> Stats:
    """(estimate, paired change against alpha = 0) of every cell of every condition.

    One condition at a time keeps memory at O(B x cells) however large the grid; the baseline's
    cells are computed once and pair each change with alpha = 0 on the same resamples."""
    cell_names = [(g, s, m) for (g, s) in masks for m in MEASURES[readout]]

    def rows(key: str) -> list[dict[str, Any]]:
        return [done[(it.item_id, key)] for it in plan.items]

    base = _cells(readout, rows("base"), masks, boot, fam)
    stats: Stats = {}
    for key in row_keys:
        values, changes = cell_estimates(_cells(readout, rows(key), masks, boot, fam), base)
        for c, (group, system, measure) in enumerate(cell_names):
            value = values[c].to_json()
            # alpha = 0 against itself is 0 by definition, whatever the sample: fixed by design
            # (core.bootstrap), printed without an interval rather than as [0, 0] or a MOVER width
            change = _fixed_zero(values[c].n) if key == "base" and value["value"] is not None else changes[c].to_json()
            stats[(key, group, system, measure)] = (value, change)
    return stats


def _fixed_zero(n: int) -> dict[str, Any]:
    """The change of the unsteered model against itself (JSON of core.bootstrap's Estimate.by_design)."""
    from evprobe.core.bootstrap import Estimate

    return Estimate.by_design(0.0, int(n)).to_json()


def aggregate(plan: Plan, done: dict[tuple[str, str], dict[str, Any]],
              units: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """All aggregates of the selected items (JSON-able): curves (`rows`), the random null
    (`null_band`, experiments.dose_response.null), the controls, the ablation, the cross-fitted `headline`
    (experiments.dose_response.crossfit), the per-layer extremes (`by_layer`) and the generated text."""
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
    result: dict[str, Any] = {"rows": [], "null_band": [], "relabel_band": [], "controls": [], "headline": [],
                              "by_layer": [], "ablation": []}

    def ratios(readout: str, rows: list[dict[str, Any]], cell_masks: dict[tuple[str, str], np.ndarray]):
        return _ratios(readout, rows, cell_masks, boot, fam)

    def spans(readout: str, rows: list[dict[str, Any]], base_rows: list[dict[str, Any]],
              cell_masks: dict[tuple[str, str], np.ndarray]) -> tuple[np.ndarray, ...]:
        return intervals(readout, rows, base_rows, cell_masks, boot, fam)

    split: dict[str, Any] = {}
    for readout in config.readouts:
        if not config.reads_sets(readout):
            # --no-generate-sets: the sets hold no generated replies; this readout is summarised as a
            # run without random or control directions (no null band or controls)
            plan_r = replace(plan, config=replace(config, n_random=0, n_relabel=0, controls=()))
        else:
            plan_r = plan
        stats = _stats(plan, readout, done, row_keys, masks, boot, fam)
        for layer, label, alpha, key in points:
            for (group, system) in masks:
                for measure in MEASURES[readout]:
                    value, change = stats[(key, group, system, measure)]
                    result["rows"].append({
                        "readout": readout, "layer": layer, "kind": label, "alpha": alpha, "group": group,
                        "system": system, "measure": measure, **value, "delta_vs_0": change,
                    })
        band, random_effects = null_band(plan_r, readout, done, stats, masks, MEASURES[readout], _values)
        result["null_band"] += band
        relabel_band, relabel_effects = null_band(plan_r, readout, done, stats, masks, MEASURES[readout], _values,
                                                  kind="relabel")
        result["relabel_band"] += relabel_band
        base_obs, base_draws, _ = _ratios(readout, [done[(it.item_id, "base")] for it in plan.items], masks, boot, fam)
        result["controls"] += control_rows(plan_r, readout, done, masks, MEASURES[readout], ratios, _est,
                                           (base_obs, base_draws), spans, random_effects, stats, relabel_effects)
        result["by_layer"] += _by_layer(plan_r, readout, stats, band)
        result["ablation"] += _ablation(plan_r, readout, stats)
        headline, split = crossfit(plan_r, readout, done, MEASURES[readout], _values, ratios, _est, spans)
        result["headline"] += headline
    result["meta"] = _report_meta(plan, families, systems, scopes, units or {}, split)
    result["text"] = paragraphs(result)
    return result


def _ablation(plan: Plan, readout: str, stats: Stats) -> list[dict[str, Any]]:
    """Per layer and group (system all): the ablation's paired change of the stop rate and of the
    stop log-odds (logprobs) vs the unsteered model, with intervals; interpreted in dose_text."""
    out = []
    if not plan.config.ablation:
        return out
    for layer in plan.layers:
        for group in GROUPS:
            key = f"L{layer}.ablate"
            entry = {"readout": readout, "layer": layer, "group": group,
                     "stop_rate_at_0": stats[("base", group, "all", "stop_rate")][0],
                     "stop_rate": stats[(key, group, "all", "stop_rate")][0],
                     "change": stats[(key, group, "all", "stop_rate")][1]}
            if (key, group, "all", "log_odds") in stats:
                entry["log_odds_change"] = stats[(key, group, "all", "log_odds")][1]
            out.append({**entry, "sentence": ablation_sentence(entry)})
    return out


def _by_layer(plan: Plan, readout: str, stats: Stats, band: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per layer: stop rate of resolved items at the largest + dose (inducing measuring) and of
    unresolved items at the most negative dose (inducing stopping), against alpha = 0, with the
    probe's place in the random null on the targeted group and on the other one (stop rate and
    stop log-odds). Fixed grid extremes, chosen on no data; the headline is cross-fitted."""
    out = []
    alphas = sorted(plan.config.alphas)
    for layer in plan.layers:
        for goal, group, alpha in (("induce measuring", "resolved", alphas[-1]),
                                   ("induce stopping", "unresolved", alphas[0])):
            if (goal == "induce measuring" and alpha <= 0) or (goal == "induce stopping" and alpha >= 0):
                continue
            key = f"L{layer}.probe.{alpha_key(alpha)}"
            other = "unresolved" if group == "resolved" else "resolved"

            def null(g: str, m: str) -> dict[str, Any] | None:
                return next((b for b in band if (b["layer"], b["alpha"], b["group"], b["system"], b["measure"])
                             == (layer, alpha, g, "all", m)), None)

            value, change = stats[(key, group, "all", "stop_rate")]
            entry = {
                "readout": readout, "layer": layer, "goal": goal, "group": group, "alpha": alpha,
                "stop_rate_at_0": stats[("base", group, "all", "stop_rate")][0],
                "stop_rate": value, "change": change, "null_band": null(group, "stop_rate"),
                "other_group": other, "other_change": stats[(key, other, "all", "stop_rate")][1],
                "other_null": null(other, "stop_rate"),
            }
            if "log_odds" in MEASURES[readout]:
                entry.update(log_odds_change=stats[(key, group, "all", "log_odds")][1],
                             log_odds_null=null(group, "log_odds"),
                             other_log_odds_change=stats[(key, other, "all", "log_odds")][1],
                             other_log_odds_null=null(other, "log_odds"))
            out.append(entry)
    return out


def _report_meta(plan: Plan, families: list[str], systems: list[str], scopes: list[str],
                 units: dict[str, dict[str, Any]], split: dict[str, Any]) -> dict[str, Any]:
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
        "units": (f"alpha in multiples of the layer's mean residual norm over the steered positions "
                  f"({plan.config.positions}), unsteered, on {len(plan.norm_items)} {plan.norm_source} "
                  "(experiments.dose_response.units)"),
        "alpha_units": units,
        "layers": {str(layer): {"name": d.name, "mean_norm": d.mean_norm, "n_fit_items": d.n_items,
                                "unit_norm": (units.get(str(layer)) or {}).get("unit_norm")}
                   for layer, d in plan.directions.items()},
        "controls": controls_record(plan.controls),
        "split": split,
        "alphas": sorted(plan.config.alphas),
        "n_random": plan.config.n_random,
        "random_seed": plan.config.random_seed,
        "ablation": plan.config.ablation,
        "readouts": list(plan.config.readouts),
        # readouts the random and control sets were read with (the others have no null band or controls)
        "set_readouts": [r for r in plan.config.readouts if plan.config.reads_sets(r)],
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
        "injection": plan.config.injection,
        "n_relabel": set_size(plan, "relabel"),
        "relabel_directions": relabel_record(plan.relabel),
        "null_band_rule": ("n_random seeded random unit directions at the same layer and raw dose; the probe's "
                           "paired effect vs alpha 0 placed among theirs (percentile, z, p_null); band = 2.5-97.5 "
                           "percentiles of their point estimates (experiments.dose_response.null); relabel_band the same for "
                           "the n_relabel label-free directions (experiments.dose_response.relabel)"),
        "specificity_rule": ("headline: every random and label-free direction gets the probe's cross-fitted choice; "
                             "p_goal = (1 + #{null effects at least as far toward the goal}) / (K + 1); beyond a null = "
                             f"p_goal <= {SPECIFIC_P} / the number of goals; specific = beyond both nulls "
                             "(analysis.specificity)"),
        "interval_method": INTERVAL_METHOD,
        "n_boot": plan.config.n_boot,
        "seed": plan.config.seed,
        "n_unit": "n = items in the denominator, in F families = the families its interval was computed on",
    }


__all__ = [
    "GROUPS",
    "MEASURES",
    "Stats",
    "aggregate",
]
