"""The run's description in dose_response.json (`meta`): model, direction, units, items, nulls, split and
rules, typed for the report and the text; `to_json()` writes the file's spelling, key order included."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evprobe.core.json_types import JsonObject
from evprobe.analysis.effects import INTERVAL_METHOD
from evprobe.analysis.specificity import SPECIFIC_P
from evprobe.experiments.dose_response.controls import controls_record
from evprobe.experiments.dose_response.null import set_size
from evprobe.experiments.dose_response.plan import Plan
from evprobe.experiments.dose_response.relabel import relabel_record
from evprobe.experiments.dose_response.results import Split
from evprobe.experiments.dose_response.units import MeasuredUnit, units_json

NULL_BAND_RULE = ("n_random seeded random unit directions at the same layer and raw dose; the probe's "
                  "paired effect vs alpha 0 placed among theirs (percentile, z, p_null); band = 2.5-97.5 "
                  "percentiles of their point estimates (experiments.dose_response.null); relabel_band the same for "
                  "the n_relabel label-free directions (experiments.dose_response.relabel)")
SPECIFICITY_RULE = ("headline: every random and label-free direction gets the probe's cross-fitted choice; "
                    "p_goal = (1 + #{null effects at least as far toward the goal}) / (K + 1); beyond a null = "
                    f"p_goal <= {SPECIFIC_P} / the number of goals; specific = beyond both nulls "
                    "(analysis.specificity)")
N_UNIT = "n = items in the denominator, in F families = the families its interval was computed on"


@dataclass(frozen=True)
class LayerNorm:
    """A steered layer's direction and its norms (mean_norm: directions.json's, unit_norm: the alpha unit)."""

    layer: int
    name: str
    mean_norm: float
    n_fit_items: int
    unit_norm: float | None

    def to_json(self) -> JsonObject:
        return {"name": self.name, "mean_norm": self.mean_norm, "n_fit_items": self.n_fit_items,
                "unit_norm": self.unit_norm}


@dataclass(frozen=True)
class ScopeCount:
    """Items and families in one scope (all systems, or one)."""

    scope: str
    n_items: int
    n_families: int


@dataclass(frozen=True)
class ReportMeta:
    """dose_response.json's `meta`. The records read from other files or modules stay their JSON:
    the direction's provenance (directions.json), alpha_units (experiments.dose_response.units), the
    controls and the label-free directions (their modules' `*_record`)."""

    model: str
    model_name: str
    direction: str
    direction_provenance: Mapping[str, Any]
    flipped: bool
    sign_convention: str
    units: str
    alpha_units: Mapping[int, MeasuredUnit]
    layers: tuple[LayerNorm, ...]
    controls: Mapping[str, Any]
    split: Split | None
    alphas: tuple[float, ...]  # sorted
    n_random: int
    random_seed: int
    ablation: bool
    readouts: tuple[str, ...]
    set_readouts: tuple[str, ...]  # readouts the random and control sets were read with
    positions: str
    regime: str
    n_items: int
    n_resolved: int
    n_unresolved: int
    n_families: int
    systems: tuple[str, ...]
    scopes: tuple[str, ...]
    scope_counts: tuple[ScopeCount, ...]
    heldout: bool
    fit_families: tuple[str, ...]
    excluded_families: tuple[str, ...]
    requests: tuple[str, ...]
    injection: int
    n_relabel: int
    relabel_directions: Mapping[str, Any]
    n_boot: int
    seed: int

    def scope_count(self, scope: str) -> ScopeCount:
        return next(c for c in self.scope_counts if c.scope == scope)

    def to_json(self) -> JsonObject:
        return {
            "model": self.model, "model_name": self.model_name, "direction": self.direction,
            "direction_provenance": self.direction_provenance, "flipped": self.flipped,
            "sign_convention": self.sign_convention, "units": self.units, "alpha_units": units_json(self.alpha_units),
            "layers": {str(n.layer): n.to_json() for n in self.layers}, "controls": self.controls,
            "split": {} if self.split is None else self.split.to_json(), "alphas": list(self.alphas),
            "n_random": self.n_random, "random_seed": self.random_seed, "ablation": self.ablation,
            "readouts": list(self.readouts), "set_readouts": list(self.set_readouts), "positions": self.positions,
            "regime": self.regime, "n_items": self.n_items, "n_resolved": self.n_resolved,
            "n_unresolved": self.n_unresolved, "n_families": self.n_families, "systems": list(self.systems),
            "scopes": list(self.scopes),
            "scope_counts": {c.scope: {"n_items": c.n_items, "n_families": c.n_families} for c in self.scope_counts},
            "heldout": self.heldout, "fit_families": list(self.fit_families),
            "excluded_families": list(self.excluded_families), "requests": list(self.requests),
            "injection": self.injection, "n_relabel": self.n_relabel, "relabel_directions": self.relabel_directions,
            "null_band_rule": NULL_BAND_RULE, "specificity_rule": SPECIFICITY_RULE, "interval_method": INTERVAL_METHOD,
            "n_boot": self.n_boot, "seed": self.seed, "n_unit": N_UNIT,
        }


def report_meta(plan: Plan, families: list[str], systems: list[str], scopes: list[str],
                units: Mapping[int, MeasuredUnit], split: Split | None) -> ReportMeta:
    """The run's meta from its plan (the selected items), the alpha units and the cross-fit's split."""
    config = plan.config
    n_res = sum(bool(it.resolved) for it in plan.items)
    return ReportMeta(
        model=plan.model.model, model_name=plan.model.name, direction=plan.name,
        direction_provenance=plan.provenance, flipped=plan.flipped,
        sign_convention=("positive alpha = toward measuring (unresolved); the stored direction points toward "
                         f"{plan.provenance.get('label')}={plan.provenance.get('positive')} and was "
                         f"{'negated' if plan.flipped else 'used as stored'}"),
        units=("alpha in raw units: alpha = 1 adds the unit direction itself, a vector of norm 1 "
               "(experiments.dose_response.units)" if config.alpha_units == "raw" else
               f"alpha in multiples of the layer's mean residual norm over the steered positions "
               f"({config.positions}), unsteered, on {len(plan.norm_items)} {plan.norm_source} "
               "(experiments.dose_response.units)"),
        alpha_units=units,
        layers=tuple(LayerNorm(layer, d.name, d.mean_norm, d.n_items, units[layer].unit_norm if layer in units else None)
                     for layer, d in plan.directions.items()),
        controls=controls_record(plan.controls), split=split, alphas=tuple(sorted(config.alphas)),
        n_random=config.n_random, random_seed=config.random_seed, ablation=config.ablation,
        readouts=tuple(config.readouts), set_readouts=tuple(r for r in config.readouts if config.reads_sets(r)),
        positions=config.positions, regime=config.regime, n_items=len(plan.items), n_resolved=n_res,
        n_unresolved=len(plan.items) - n_res, n_families=len(families), systems=tuple(systems), scopes=tuple(scopes),
        scope_counts=tuple(ScopeCount(scope, sum(scope in ("all", it.system) for it in plan.items),
                                      len({it.family_id for it in plan.items if scope in ("all", it.system)}))
                           for scope in scopes),
        heldout=config.heldout, fit_families=tuple(plan.fit_families), excluded_families=tuple(plan.excluded),
        requests=tuple(config.requests), injection=config.injection, n_relabel=set_size(plan, "relabel"),
        relabel_directions=relabel_record(plan.relabel), n_boot=config.n_boot, seed=config.seed)


__all__ = ["NULL_BAND_RULE", "N_UNIT", "SPECIFICITY_RULE", "LayerNorm", "ReportMeta", "ScopeCount", "report_meta"]
