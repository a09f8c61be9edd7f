"""Dose-response aggregation: per condition, group, system and measure a family-bootstrap estimate and
its paired change against alpha = 0; the random null and controls (experiments.dose_response.null), the
ablation, the cross-fitted headline (experiments.dose_response.crossfit) and the text, as typed values
(experiments.dose_response.results; their to_json() is dose_response.json)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from evprobe.core.json_types import JsonObject
from evprobe.analysis.dose_grid import GridEstimator, Readout
from evprobe.core.bootstrap import Estimate, FamilyBootstrap
from evprobe.experiments.steering_conventions import alpha_key
from evprobe.experiments.dose_response.crossfit import crossfit
from evprobe.experiments.dose_response.meta import report_meta
from evprobe.experiments.dose_response.null import Stats, control_rows, null_band
from evprobe.experiments.dose_response.plan import Plan
from evprobe.experiments.dose_response.units import AlphaUnits
from evprobe.experiments.dose_response.results import (
    Ablation,
    ByLayer,
    ControlRow,
    CurveRow,
    DoseResult,
    Headline,
    LogOddsAtExtreme,
    NullBandRow,
    Split,
)
from evprobe.experiments.dose_response.text import ablation_sentence, paragraphs
from evprobe.analysis.effects import estimate_of

GROUPS = ("resolved", "unresolved", "all")
# The benchmark's readouts (analysis.dose_grid.Readout): every measure but the log-odds is a share of
# 0/1 items, with core.proportion's interval too.
READOUTS = {
    "logprobs": Readout(("stop_rate", "missing_test_rate", "useless_test_rate", "min_cost_accuracy", "log_odds"),
                        rates=("stop_rate", "missing_test_rate", "useless_test_rate", "min_cost_accuracy")),
    "generate": Readout(("stop_rate", "missing_test_rate", "useless_test_rate", "min_cost_accuracy", "invalid_rate"),
                        rates=("stop_rate", "missing_test_rate", "useless_test_rate", "min_cost_accuracy",
                               "invalid_rate")),
}
MEASURES: dict[str, tuple[str, ...]] = {readout: spec.measures for readout, spec in READOUTS.items()}


def _values(readout: str, rows: list[JsonObject]) -> np.ndarray:
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


def _est(value: float, lo: float, hi: float, n: int, n_families: int) -> Estimate:
    """A cell's numbers (analysis.effects.estimate_of), for null, controls and crossfit, with the
    families its interval was computed on."""
    return estimate_of(value, lo, hi, n, n_families=int(n_families))


def _stats(plan: Plan, readout: str, done: dict[tuple[str, str], JsonObject], row_keys: list[str],
           masks: dict[tuple[str, str], np.ndarray], grid: GridEstimator) -> Stats:
    """(estimate, paired change against alpha = 0) of every cell of every condition.

    One condition at a time keeps memory at O(B x cells) however large the grid; the baseline's
    cells are computed once and pair each change with alpha = 0 on the same resamples."""
    cell_names = [(g, s, m) for (g, s) in masks for m in MEASURES[readout]]

    def rows(key: str) -> list[JsonObject]:
        return [done[(it.item_id, key)] for it in plan.items]

    stats: Stats = {}
    for key in row_keys:
        values, changes = grid.estimates(_values(readout, rows(key)))
        for c, (group, system, measure) in enumerate(cell_names):
            value = values[c]
            # alpha = 0 against itself is 0 by definition, whatever the sample: fixed by design
            # (core.bootstrap), printed without an interval rather than as [0, 0] or a MOVER width
            fixed_zero = key == "base" and value.value is not None
            stats[(key, group, system, measure)] = (value, Estimate.by_design(0.0, int(value.n)) if fixed_zero
                                                    else changes[c])
    return stats


def aggregate(plan: Plan, done: dict[tuple[str, str], JsonObject],
              units: AlphaUnits | None = None) -> DoseResult:
    """All aggregates of the selected items (DoseResult, to_json: dose_response.json): curves (`rows`), the random null
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
    rows: list[CurveRow] = []
    bands: list[NullBandRow] = []
    relabel_bands: list[NullBandRow] = []
    controls: list[ControlRow] = []
    headlines: list[Headline] = []
    by_layer: list[ByLayer] = []
    ablation: list[Ablation] = []

    split: Split | None = None
    for readout in config.readouts:
        if not config.reads_sets(readout):
            # --no-generate-sets: the sets hold no generated replies; this readout is summarised as a
            # run without random or control directions (no null band or controls)
            plan_r = replace(plan, config=replace(config, n_random=0, n_relabel=0, controls=()))
        else:
            plan_r = plan
        # one estimator per readout (analysis.dose_grid, steering_dose_response's too): every cell, change and
        # null effect over (group, system) on the run's one bootstrap, paired with alpha = 0
        grid = GridEstimator.of(READOUTS[readout], _values(readout, [done[(it.item_id, "base")] for it in plan.items]),
                                masks, boot, fam)
        stats = _stats(plan, readout, done, row_keys, masks, grid)
        for layer, label, alpha, key in points:
            for (group, system) in masks:
                for measure in MEASURES[readout]:
                    value, change = stats[(key, group, system, measure)]
                    rows.append(CurveRow(readout, layer, label, alpha, group, system, measure, value, change))
        band, random_effects = null_band(plan_r, readout, done, stats, masks, grid, _values)
        bands += band
        relabel_band, relabel_effects = null_band(plan_r, readout, done, stats, masks, grid, _values, kind="relabel")
        relabel_bands += relabel_band
        controls += control_rows(plan_r, readout, done, masks, grid, _values, _est, random_effects, stats,
                                 relabel_effects)
        by_layer += _by_layer(plan_r, readout, stats, band)
        ablation += _ablation(plan_r, readout, stats)
        headline, split = crossfit(plan_r, readout, done, grid, _values, _est)
        headlines += headline
    meta = report_meta(plan, families, systems, scopes, units or {}, split)
    text = paragraphs(meta, headlines, controls, ablation)
    return DoseResult(tuple(rows), tuple(bands), tuple(relabel_bands), tuple(controls), tuple(headlines),
                      tuple(by_layer), tuple(ablation), meta, tuple(text))


def _ablation(plan: Plan, readout: str, stats: Stats) -> list[Ablation]:
    """Per layer and group (system all): the ablation's paired change of the stop rate and of the
    stop log-odds (logprobs) vs the unsteered model, with intervals; interpreted in dose_text."""
    out = []
    if not plan.config.ablation:
        return out
    for layer in plan.layers:
        for group in GROUPS:
            key = f"L{layer}.ablate"
            change = stats[(key, group, "all", "stop_rate")][1]
            lo = stats.get((key, group, "all", "log_odds"))
            log_odds_change = None if lo is None else lo[1]
            out.append(Ablation(readout, layer, group, stats[("base", group, "all", "stop_rate")][0],
                                stats[(key, group, "all", "stop_rate")][0], change, log_odds_change,
                                ablation_sentence(layer, group, change, log_odds_change)))
    return out


def _by_layer(plan: Plan, readout: str, stats: Stats, band: list[NullBandRow]) -> list[ByLayer]:
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

            def null(g: str, m: str) -> NullBandRow | None:
                return next((b for b in band if (b.layer, b.alpha, b.group, b.system, b.measure)
                             == (layer, alpha, g, "all", m)), None)

            value, change = stats[(key, group, "all", "stop_rate")]
            log_odds = (LogOddsAtExtreme(stats[(key, group, "all", "log_odds")][1], null(group, "log_odds"),
                                         stats[(key, other, "all", "log_odds")][1], null(other, "log_odds"))
                        if "log_odds" in MEASURES[readout] else None)
            out.append(ByLayer(readout, layer, goal, group, alpha, stats[("base", group, "all", "stop_rate")][0],
                               value, change, null(group, "stop_rate"), other,
                               stats[(key, other, "all", "stop_rate")][1], null(other, "stop_rate"), log_odds))
    return out


__all__ = [
    "GROUPS",
    "MEASURES",
    "Stats",
    "aggregate",
]
