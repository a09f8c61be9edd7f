"""Specificity controls for dose-response: directions of *other* features, steered at the probe's norm.

A probe direction that moves stopping could do so because any structured direction of that
layer does (a feature-rich direction is not a random one). So beside the random null, each
steered layer gets a few control directions, steered at the same raw doses (alpha x the same
unit norm) and read the same way:

- `history`, `threshold_level` (or any index field of the capture, e.g. `system=spring`): the
  direction of that label, fitted with the named direction's probe, at the same layer and
  position, on the same capture rows (the items the named direction was fitted on), pointing
  toward the label's default positive class (probes.label_sets.DEFAULT_POSITIVE);
- `shuffled`: the named direction's own label with its values permuted (seeded by
  `random_seed`) over those rows, fitted the same way: a label direction whose label means
  nothing (the "wrong label" control).

Where they come from: first the directions folder (a direction there with that label and the
named one's model, layer, position, probe and d_model is used as stored, so `evprobe directions
ACTS --label history ...` written beside the named direction is picked up); otherwise fitted
here from the captures named in the direction's provenance (read from the directions folder and
checked to be the ones it was fitted on: probes.provenance; numpy only, no model). If those
captures cannot be read the plan fails with one line naming the fix (`controls: []` turns the
controls off). The cosine of each control with the probe direction is reported, since a control
that shares much of the probe's direction is not a control.

Items on which a control's label is nominal are left out of that control's fit and counted: a
`no_initial_test` item carries a `history` field (0/1, the sheet its siblings show) but its
prompt shows no initial test, so its two histories are the same prompt and say nothing about
history. They are excluded from the `history` control (NOMINAL_ON), the rest of the fit items are
used, and the source in meta.json and report.md says "on n capture rows ...; k no_initial_test
rows excluded". Where no rows remain, or the label's two classes have identical mean states on
the rows that do (e.g. `threshold_level` at a position before the threshold is stated), the
control is refused in one line before any model is loaded, naming the control, layer, position,
direction and the fix (drop that control, or fit the direction on items that carry the label).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import warnings

import numpy as np

from evprobe.core.json_types import JsonObject
from evprobe.experiments.config import ConfigError

if TYPE_CHECKING:
    from evprobe.probes.directions import Direction

MATCH_KEYS = ("model", "position", "probe", "d_model")  # what a stored control must share with the named one
# Labels present in the index but nominal on some variants: no_initial_test items keep the sheet
# index of their siblings as `history`, yet their prompt shows no initial test (bench.items.variant_items).
NOMINAL_ON: dict[str, frozenset[str]] = {"history": frozenset({"no_initial_test"})}


@dataclass(frozen=True, eq=False)
class ControlDirection:
    """One control at one layer: a float64 unit vector (d_model,) and where it came from."""

    name: str  # the control's name in the config (history, threshold_level, shuffled)
    layer: int
    vector: np.ndarray = field(repr=False)
    source: str  # "folder: <direction name>" or "fitted: <label>=<positive> on n rows"
    cosine_with_probe: float


def _stored(name: str, named: Direction, every: dict[str, Direction], layer: int) -> Direction | None:
    label = name.split("=", 1)[0]
    for d in sorted(every.values(), key=lambda d: d.name):
        p = d.provenance
        if d.layer == layer and p.get("label") == label and all(
                p.get(k) == named.provenance.get(k) for k in MATCH_KEYS):
            if "=" not in name or str(p.get("positive")) == name.split("=", 1)[1]:
                return d
    return None


def _fit(name: str, d: Direction, seed: int) -> tuple[np.ndarray, str]:
    """Fit control `name` at d's layer and position on d's capture rows (d's fit items)."""
    from evprobe.probes.captures import CaptureError
    from evprobe.probes.label_sets import labels
    from evprobe.probes.directions import fit_directions
    from evprobe.probes.provenance import fit_captures

    prov = d.provenance
    try:
        cs = fit_captures(d)  # from d's folder, checked: its model, width and fit items
        label = prov["label"] if name == "shuffled" else name
        ls = labels(cs, label, positive=prov.get("positive") if name == "shuffled" else None)
    except (CaptureError, OSError, KeyError) as e:
        raise ConfigError(f"control {name!r} at layer {d.layer}: cannot fit it from the captures of {d.name} "
                          f"({e}); write it with `evprobe directions ACTS --label {name} --layer {d.layer}` into the "
                          "directions folder, or set controls: [] (--controls=) to run without controls") from None
    fit_items = set(prov.get("items") or ())
    mask = np.array([cs.index[r]["item_id"] in fit_items for r in ls.rows], dtype=bool)
    base = label.split("=", 1)[0]  # `history=1` names the positive class
    nominal = NOMINAL_ON.get(base, frozenset()) if name != "shuffled" else frozenset()
    excluded = np.array([cs.index[r].get("variant") in nominal for r in ls.rows], dtype=bool) & mask
    mask &= ~excluded
    dropped = (f"; {int(excluded.sum())} {'/'.join(sorted(nominal))} rows excluded (no initial test shown: "
               f"{base} is nominal there)") if excluded.any() else ""
    if excluded.any() and not mask.any():
        raise ConfigError(f"control {name!r} at layer {d.layer}: all {int(excluded.sum())} capture rows {d.name} was "
                          f"fitted on with a {base} are {'/'.join(sorted(nominal))} items, whose prompt shows no "
                          f"initial test ({base} is nominal there); drop {name!r} from controls (e.g. controls: "
                          "[threshold_level, shuffled]) or fit the direction on items with an initial test")
    if name == "shuffled":
        y = ls.y.copy()
        idx = np.flatnonzero(mask)
        y[idx] = y[idx][np.random.default_rng(seed).permutation(len(idx))]
        ls = replace(ls, y=y)
    if mask.sum() < 2 or ls.y[mask].min() == ls.y[mask].max():
        raise ConfigError(f"control {name!r} at layer {d.layer}: its label has one class on the {int(mask.sum())} rows "
                          f"{d.name} was fitted on{dropped}; choose another control or set controls: []")
    from evprobe.probes.registry import ProbeSpec

    # the probe and parameters the direction was fitted with (its provenance), so only the label differs
    spec = ProbeSpec.of(prov.get("probe", "massmean"), prov.get("probe_params") or {})
    with warnings.catch_warnings():  # identical class means: refused below in one line, not warned and skipped
        warnings.simplefilter("ignore", UserWarning)
        found = fit_directions(cs, ls, [d.layer], prov["position"], spec, [(name, mask)])
    if not found:
        raise ConfigError(f"control {name!r} at layer {d.layer}/{prov['position']}: its two classes have identical "
                          f"mean states on the {int(mask.sum())} capture rows {d.name} was fitted on{dropped} (the "
                          f"prompts do not differ in {base} up to that position); drop {name!r} from controls or "
                          "set controls: []")
    what = (f"fitted: {prov['label']} permuted (seed {seed})" if name == "shuffled"
            else f"fitted: {ls.name}={ls.positive}")
    return found[0].vector.astype(np.float64), f"{what} on {int(mask.sum())} capture rows of {d.name}'s items{dropped}"


def control_directions(names: tuple[str, ...], named: Direction, every: dict[str, Direction],
                       chosen: dict[int, Direction], probe_vectors: dict[int, np.ndarray],
                       seed: int) -> dict[int, list[ControlDirection]]:
    """Per steered layer, one unit control per name (config order). chosen: the direction used at
    each layer; probe_vectors: its measuring-pointing unit vector (d_model,)."""
    out: dict[int, list[ControlDirection]] = {}
    for layer, d in chosen.items():
        found = []
        for name in names:
            stored = None if name == "shuffled" else _stored(name, named, every, layer)
            if stored is not None:
                v, source = stored.vector.astype(np.float64), f"folder: {stored.name}"
            else:
                v, source = _fit(name, d, seed)
            norm = float(np.linalg.norm(v))
            if not np.isfinite(norm) or norm == 0:
                raise ConfigError(f"control {name!r} at layer {layer} is a zero vector; choose another control")
            v = v / norm
            found.append(ControlDirection(name, layer, v, source, float(v @ probe_vectors[layer])))
        out[layer] = found
    return out


def controls_record(controls: dict[int, list[ControlDirection]]) -> JsonObject:
    """JSON-able: per layer, each control's name, source and cosine with the probe direction."""
    return {str(layer): [{"name": c.name, "source": c.source, "cosine_with_probe": round(c.cosine_with_probe, 6)}
                         for c in cs] for layer, cs in controls.items()}


__all__ = ["NOMINAL_ON", "ControlDirection", "control_directions", "controls_record"]
