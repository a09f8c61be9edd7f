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

Measured once per run folder, with the model loaded (DoseResponseJob.open), rounded to 6
significant digits and written to meta.json (`alpha_units`); a resumed run reads it back instead
of measuring again, so every row of a folder uses the same raw doses even across machines.
"""

from __future__ import annotations

from typing import Any

from evprobe.bench.manifest import load_item_images
from evprobe.bench.protocols import build_prompt
from evprobe.experiments.dose_response.plan import Plan
from evprobe.hooks.dose import DoseUnit


def _round6(x: float) -> float:
    return float(f"{x:.6g}")


def measure_units(handle: Any, plan: Plan, layers: list[int]) -> dict[str, dict[str, Any]]:
    """{layer: {unit_norm, positions, n_items, n_tokens, items, directions_mean_norm}} for `layers`."""
    from evprobe.hooks.steer_rows import residual_norms_at

    items = plan.norm_items
    prompts = [build_prompt(it, "direct", plan.config.regime) for it in items]
    images = [load_item_images(plan.bench, it.images) for it in items]
    norms = residual_norms_at(handle, prompts, images, layers, plan.config.positions, batch_size=plan.batch_size)
    return {str(layer): {"unit_norm": _round6(mean), "positions": plan.config.positions, "n_items": len(items),
                         "n_tokens": count, "items": plan.norm_source,
                         "directions_mean_norm": plan.directions[layer].mean_norm,
                         "directions_position": plan.provenance.get("position")}
            for layer, (mean, count) in norms.items()}


def unit_of(units: dict[str, dict[str, Any]], layer: int) -> DoseUnit:
    """A layer's recorded unit (meta.json's `alpha_units` entry, keyed by the layer as text) as a DoseUnit."""
    record = units[str(layer)]
    return DoseUnit(int(layer), float(record["unit_norm"]), record["positions"],
                    f"mean residual norm over {record.get('n_tokens')} edited positions of {record.get('n_items')} "
                    "select prompts, unsteered")


def units_for(handle: Any, plan: Plan, recorded: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The folder's recorded units where they match this run's positions, measured for the rest."""
    known = {k: v for k, v in (recorded or {}).items() if v.get("positions") == plan.config.positions}
    missing = [layer for layer in plan.layers if str(layer) not in known]
    if missing:
        known.update(measure_units(handle, plan, missing))
    return known


__all__ = ["measure_units", "unit_of", "units_for"]
