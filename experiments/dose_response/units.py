"""The dose unit of dose-response: the mean residual norm *where the vector is added*.

alpha is a multiple of one number per layer, `unit_norm`: the mean per-token L2 norm of that
layer's output, unsteered, over exactly the prompt positions the edit touches (`positions: all`
= every real prompt token, padding excluded; `last` = each row's last token;
hooks.steer_rows.residual_norms_at), on `norm_items` select prompts of the items the directions were
fitted on (the target items when none of those are in the benchmark; Plan.norm_source says
which). The raw vector added is alpha * unit_norm * unit direction, for the probe, every random
direction and every control alike.

Why not directions.json's `mean_norm`: that is the norm at the direction's capture position
(usually the last token) while the edit goes to every position; on the organism the
all-position mean differs from the last-token one (the report prints both), so "alpha = 1" would
not be one typical residual norm of what is edited. The other cure, editing only the position
the norm was read at (`positions: last`), is available and measured the same way (then the
unit is the last-token norm of the select prompts); hooks.steering.Steering.from_dose
refuses a norm measured at other positions than the edit.

Raw units (`alpha_units: raw`, seed 002's convention, alpha in {0, 2, 5, 10}): alpha = 1 adds the unit
direction itself, a vector of norm 1, at every layer; nothing is measured, and the entry says so
(`items: "raw"`, unit_norm 1) beside directions.json's mean norm, for scale.

Measured once per run folder, with the model loaded (DoseResponseJob.open), rounded to 6
significant digits and written to meta.json (`alpha_units`); a resumed run reads it back instead
of measuring again, so every row of a folder uses the same raw doses even across machines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evprobe.bench.manifest import load_item_images
from evprobe.bench.protocols import build_prompt
from evprobe.core.errors import InputError, shown
from evprobe.core.json_types import JsonObject, JsonValue
from evprobe.experiments.dose_response.plan import Plan
from evprobe.hooks.dose import DoseUnit


def _round6(x: float) -> float:
    return float(f"{x:.6g}")


@dataclass(frozen=True)
class MeasuredUnit:
    """One layer's unit of alpha as a run measured it (module docstring): meta.json's `alpha_units`
    entry for the layer. items: which prompts (Plan.norm_source); directions_*: directions.json's
    mean norm and the position it was read at, printed beside it."""

    layer: int
    unit_norm: float
    positions: str
    n_items: int | None
    n_tokens: int | None
    items: str | None
    directions_mean_norm: float | None
    directions_position: str | None

    def to_json(self) -> JsonObject:
        return {"unit_norm": self.unit_norm, "positions": self.positions, "n_items": self.n_items,
                "n_tokens": self.n_tokens, "items": self.items, "directions_mean_norm": self.directions_mean_norm,
                "directions_position": self.directions_position}

    @classmethod
    def from_json(cls, layer: int, record: JsonValue) -> MeasuredUnit:
        """A recorded entry (an older folder's may lack the counts); a damaged one is one line."""
        norm = record.get("unit_norm") if isinstance(record, dict) else None
        if isinstance(norm, bool) or not isinstance(norm, int | float) or not norm > 0:
            raise InputError(f"meta.json: alpha_units[{str(layer)!r}] needs a unit_norm > 0, got "
                             f"{shown(record, 60)}; move the folder aside")
        assert isinstance(record, dict)
        return cls(layer, float(norm), str(record.get("positions")), record.get("n_items"),  # type: ignore[arg-type]
                   record.get("n_tokens"), record.get("items"), record.get("directions_mean_norm"),  # type: ignore[arg-type]
                   record.get("directions_position"))  # type: ignore[arg-type]

    @property
    def raw(self) -> bool:
        """alpha in raw units: the unit direction itself, measured nowhere."""
        return self.items == RAW_ITEMS

    def dose_unit(self) -> DoseUnit:
        """As the intervention core's unit of alpha (hooks.dose), which knows its positions."""
        if self.raw:
            return DoseUnit.raw(self.layer)
        return DoseUnit(self.layer, self.unit_norm, self.positions,
                        f"mean residual norm over {self.n_tokens} edited positions of {self.n_items} select prompts, "
                        "unsteered")


AlphaUnits = dict[int, MeasuredUnit]  # per steered layer, in the order they were measured
RAW_ITEMS = "raw"  # MeasuredUnit.items of a raw unit: measured on no prompt


def raw_units(plan: Plan, layers: list[int]) -> AlphaUnits:
    """Raw units of `layers`: 1, beside directions.json's mean norm (module docstring)."""
    return {layer: MeasuredUnit(layer, 1.0, plan.config.positions, None, None, RAW_ITEMS,
                                plan.directions[layer].mean_norm, plan.provenance.get("position"))
            for layer in layers}


def measure_units(forward: Any, plan: Plan, layers: list[int]) -> AlphaUnits:
    """The units of `layers`, measured unsteered on the plan's norm items at its positions, by the run's
    forward (experiments.dose_response.forward: hooks.steer_rows.residual_norms_at, or the engine's)."""
    items = plan.norm_items
    prompts = [build_prompt(it, "direct", plan.config.regime) for it in items]
    images = [load_item_images(plan.bench, it.images) for it in items]
    norms = forward.norms(prompts, images, layers, plan.config.positions, batch_size=plan.batch_size)
    return {layer: MeasuredUnit(layer, _round6(mean), plan.config.positions, len(items), count, plan.norm_source,
                                plan.directions[layer].mean_norm, plan.provenance.get("position"))
            for layer, (mean, count) in norms.items()}


def read_units(record: JsonValue) -> AlphaUnits:
    """meta.json's `alpha_units` ({layer as text: entry}; None or absent: none yet)."""
    if record is None:
        return {}
    if not isinstance(record, Mapping) or not all(isinstance(k, str) and k.isdigit() for k in record):
        raise InputError(f"meta.json: alpha_units must map layers to units, got {shown(record, 60)}; move the "
                         "folder aside")
    return {int(k): MeasuredUnit.from_json(int(k), v) for k, v in record.items()}


def units_json(units: Mapping[int, MeasuredUnit]) -> JsonObject:
    """meta.json's `alpha_units`: {layer as text: entry}, in the order measured."""
    return {str(layer): u.to_json() for layer, u in units.items()}


def unit_of(units: Mapping[int, MeasuredUnit], layer: int) -> DoseUnit:
    """A layer's recorded unit as a DoseUnit."""
    return units[layer].dose_unit()


def units_for(forward: Any, plan: Plan, recorded: AlphaUnits) -> AlphaUnits:
    """The folder's recorded units where they match this run's positions and kind (raw or measured),
    measured (or raw) for the rest."""
    raw = plan.config.alpha_units == "raw"
    known = {layer: u for layer, u in recorded.items() if u.positions == plan.config.positions and u.raw == raw}
    missing = [layer for layer in plan.layers if layer not in known]
    if missing:
        known.update(raw_units(plan, missing) if raw else measure_units(forward, plan, missing))
    return known


__all__ = ["RAW_ITEMS", "AlphaUnits", "MeasuredUnit", "measure_units", "raw_units", "read_units", "unit_of", "units_for", "units_json"]
