"""What gating reports: every number with its family-bootstrap interval (gating.json), the tables
(gating.md) and the figure (gating.png).

Every abstention share and its paired change from the base come from analysis.effects (through
analysis.dose_grid.GridEstimator, `abstention_grid`), the estimator of steering_dose_response's and
void-transfer's effects: the percentile interval hulled with the cluster t and Clopper-Pearson ones,
a sparse change widened to the MOVER interval. The percentile interval of the paired draws alone
covered a true change 71.3-91.3% at 8 families (benchmarks/generated_readout_verdicts.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from evprobe.core.decimals import fixed
from evprobe.core.estimate_text import count_text, estimate_text, missing_text
from evprobe.analysis.dose_grid import GridEstimator, Readout
from evprobe.analysis.effects import INTERVAL_METHOD
from evprobe.core.bootstrap import Estimate, FamilyBootstrap
from evprobe.experiments.steering_conventions import alpha_key
from evprobe.experiments.gating.config import (ALPHA_AXIS, GROUPS, MEASURE, POSITION, RAW_ALPHA_AXIS, REGIMES,
                                              REQUEST_KINDS)
from evprobe.experiments.gating.plan import GateDirection, Plan
from evprobe.core.json_types import JsonObject

RAW_UNITS = "alpha in raw units"  # GatingMeta.units' opening when alpha_units is raw
LETTERS_READOUT = ("the top option letter of the next-token log-probs (direct protocol). Answer requests: abstention = "
                   "the undetermined option; select requests: measure rate = a test (100 - stop rate)")
FREE_READOUT = ("a generated free-form reply (free protocol, greedy, steered at every prompt position and generated "
                "token) read by the rule reader with seed 002's rubric (bench.parse): abstention = it says the evidence "
                "cannot settle the answer; an invalid reply is no abstention and stays in every denominator")

# ---------------------------------------------------------------- the result


@dataclass(frozen=True)
class GateRow:
    """One rate of gating.json's `rows`: a request kind x group cell under one inference regime,
    direction and dose, with its paired change from the base (alpha 0) of that regime."""

    kind: str
    group: str
    inference: str
    direction: str
    alpha: float
    rate: Estimate
    change: Estimate

    def to_json(self) -> JsonObject:
        return {"kind": self.kind, "group": self.group, "inference": self.inference, "direction": self.direction,
                "alpha": self.alpha, "rate": self.rate.to_json(), "change": self.change.to_json()}


@dataclass(frozen=True)
class GateCell:
    """One direction x inference cell of a table: the base and steered rates and their paired change."""

    base: Estimate
    steered: Estimate
    change: Estimate

    def to_json(self) -> JsonObject:
        return {"base": self.base.to_json(), "steered": self.steered.to_json(), "change": self.change.to_json()}


@dataclass(frozen=True)
class GateTable:
    """One Table-4-style 2x2 table (a request kind, a group and a dose); `cells` keyed
    `direction|inference`."""

    kind: str
    group: str
    alpha: float
    cells: dict[str, GateCell]

    def to_json(self) -> JsonObject:
        return {"kind": self.kind, "group": self.group, "alpha": self.alpha,
                "cells": {k: c.to_json() for k, c in self.cells.items()}}


@dataclass(frozen=True)
class GatingMeta:
    """gating.json's `meta`: the model, layer and directions, the split and the conventions."""

    model: str
    model_name: str
    layer: int
    layer_choice: JsonObject | None  # the nested best of the fitting sweep (its JSON), None: a given layer
    position_fitted: str
    steered_positions: str
    requests: tuple[str, ...]
    alphas: tuple[float, ...]
    directions: dict[str, GateDirection]
    cosine_standard_guided: float
    fit_families: tuple[str, ...]
    heldout_families: tuple[str, ...]
    n_items: int
    n_families: int
    n_controls: int
    n_voids: int
    split: str
    sign: str
    units: str
    interval_method: str
    n_boot: int
    seed: int
    n_unit: str
    readout: str = LETTERS_READOUT  # how a reply was read (GatingConfig.readout's sentence)

    def to_json(self) -> JsonObject:
        out: JsonObject = {f.name: getattr(self, f.name) for f in fields(self)}  # the fields' order is the keys'
        out.update(requests=list(self.requests), alphas=list(self.alphas),
                   directions={r: {"name": d.name, "mean_norm": d.mean_norm, "n_fit_items": d.n_items}
                               for r, d in self.directions.items()},
                   fit_families=list(self.fit_families), heldout_families=list(self.heldout_families))
        return out


@dataclass(frozen=True)
class GatingResult:
    """Every number of the reports (gating.json): the meta, the rates per condition and the tables."""

    meta: GatingMeta
    rows: tuple[GateRow, ...]
    tables: tuple[GateTable, ...]

    def to_json(self) -> JsonObject:
        return {"meta": self.meta.to_json(), "rows": [r.to_json() for r in self.rows],
                "tables": [t.to_json() for t in self.tables]}


# ---------------------------------------------------------------- aggregation


ABSTAIN = Readout(("abstain",), rates=("abstain",))  # one 0/1 measure per item: did it abstain


def abstention_grid(base: np.ndarray, masks: Sequence[np.ndarray], boot: FamilyBootstrap,
                    family_index: np.ndarray) -> GridEstimator:
    """The estimator of abstention shares over `masks` (each (items,) bool) and their paired changes
    against `base` (items,), the unsteered 0/1 readouts; `.estimates(x[:, None])` gives a condition's
    (rates, changes) in mask order (module docstring)."""
    return GridEstimator.of(ABSTAIN, np.asarray(base, dtype=float)[:, None], masks, boot, family_index)


def aggregate(plan: Plan, done: dict[tuple[str, str], JsonObject], layer: int, best: JsonObject | None,
              directions: dict[str, GateDirection], cos: float) -> GatingResult:
    """Every number of the reports over `plan.targets`; `cos` = cosine(standard, guided direction)."""
    config = plan.config
    families = sorted({it.family_id for it in plan.targets})
    boot = FamilyBootstrap(families, config.n_boot, config.seed)
    fam = boot.family_index([it.family_id for it in plan.targets])
    kinds = [k for k in ("answer", "select") if any(REQUEST_KINDS[it.request] == k for it in plan.targets)]
    resolved = np.array([bool(it.resolved) for it in plan.targets])
    masks = {(k, g): np.array([REQUEST_KINDS[it.request] == k for it in plan.targets]) & (resolved == want)
             for k in kinds for g, want in GROUPS.items()}
    cells = list(masks)

    def abstained(key: str) -> np.ndarray:
        return np.array([float(done[(it.item_id, key)]["abstain"]) for it in plan.targets])  # (items,) 0/1

    grids = {inf: abstention_grid(abstained(f"{inf}.base"), [masks[c] for c in cells], boot, fam)
             for inf in dict.fromkeys(c[1] for c in plan.conditions)}
    numbers: dict[str, dict[tuple[str, str], tuple[Estimate, Estimate]]] = {}
    for key, inference, _, _ in plan.conditions:
        rates, changes = grids[inference].estimates(abstained(key)[:, None])
        if key == f"{inference}.base":  # the base against itself: 0 in every resample
            changes = [r if r.value is None else Estimate(0.0, (0.0, 0.0), r.n).in_families(r.n_families)
                       for r in rates]
        numbers[key] = dict(zip(cells, zip(rates, changes, strict=True), strict=True))
    rows = []
    for key, inference, direction, alpha in plan.conditions:
        for (kind, group), (rate, change) in numbers[key].items():
            for d in ([direction] if direction else list(REGIMES)):  # the base belongs to both direction rows
                rows.append(GateRow(kind, group, inference, d, alpha, rate, change))
    tables = []
    for kind in kinds:
        for a in sorted({abs(x) for x in config.doses}):
            for group, alpha in (("controls", a), ("voids", -a)):
                if alpha not in config.doses:
                    continue
                table = {}
                for d in REGIMES:
                    for inf in REGIMES:
                        rate, change = numbers[f"{inf}.dir_{d}.{alpha_key(alpha)}"][(kind, group)]
                        table[f"{d}|{inf}"] = GateCell(numbers[f"{inf}.base"][(kind, group)][0], rate, change)
                tables.append(GateTable(kind, group, alpha, table))
    meta = GatingMeta(
        model=plan.model.model, model_name=plan.model.name, layer=layer, layer_choice=best,
        position_fitted=POSITION, steered_positions="all prompt positions",
        requests=tuple(config.requests), alphas=tuple(sorted(float(a) for a in config.alphas)),
        directions=dict(directions), cosine_standard_guided=cos,
        fit_families=tuple(plan.fit_families), heldout_families=tuple(plan.heldout_families),
        n_items=len(plan.targets), n_families=len(families),
        n_controls=int(resolved.sum()), n_voids=int((~resolved).sum()),
        split=f"per system, first floor(n/2) of default_rng([{config.split_seed}, k]).permutation fit",
        sign="+ alpha = toward abstaining / measuring (resolved=True directions negated)",
        units=(f"{RAW_UNITS}: alpha = 1 adds the unit direction itself, a vector of norm 1"
               if config.alpha_units == "raw" else
               "alpha in multiples of the layer's mean residual norm (each direction's own regime)"),
        interval_method=INTERVAL_METHOD, n_boot=config.n_boot, seed=config.seed,
        n_unit="n = items in the denominator",
        readout=FREE_READOUT if config.readout == "free" else LETTERS_READOUT,
    )
    return GatingResult(meta, tuple(rows), tuple(tables))


# ---------------------------------------------------------------- reports


def pct(e: Estimate, sign: bool = False) -> str:
    """`54.0 [40.0, 68.0] (n=50)` in percent; `NA (n=0)` when the denominator is empty (core.estimate_text)."""
    return estimate_text(e, 1, scale=100.0, sign=sign)


def pct_value(e: Estimate) -> str:
    """The value alone in percent (`54.0`), where the line gives its interval elsewhere."""
    return missing_text("n=0") if e.value is None else fixed(100 * e.value, 1)


def markdown(result: GatingResult) -> str:
    meta = result.meta
    choice = meta.layer_choice
    how = ("given in the config" if choice is None else
           f"nested best of a resolved sweep on the fitting families (held-out AUROC {choice['auroc']:.3f} "
           f"[{choice['ci'][0]:.3f}, {choice['ci'][1]:.3f}], n={choice['n']})")
    lines = [
        f"# Prompt gating: {meta.model_name} ({meta.model}), layer {meta.layer}",
        "",
        f"- Layer {meta.layer}: {how}.",
        f"- Directions: mass-mean resolved at position {meta.position_fitted}, "
        + "; ".join(f"{r}: {d.name} (mean norm {d.mean_norm:.4g}, fitted on n={d.n_items} items)"
                    for r, d in meta.directions.items())
        + f"; cosine(standard, guided) = {fixed(meta.cosine_standard_guided, 3, sign=True)}.",
        (f"- Split: {meta.split}; fitted on {len(meta.fit_families)} families, steered and scored on "
        f"{meta.n_families} held-out families (n={meta.n_items} items: {meta.n_controls} controls, "
        f"{meta.n_voids} voids)."),
        f"- Sign: {meta.sign}; units: {meta.units}; steering at {meta.steered_positions}.",
        f"- Readout: {meta.readout}.",
        (f"- Cells: `base% -> steered% [95% interval of steered] (n)`; base = alpha 0 under the same inference "
        f"regime. Intervals: {meta.interval_method}; B={meta.n_boot}, seed {meta.seed}. {meta.n_unit}."),
    ]
    for t in result.tables:
        name, what = MEASURE[t.kind]
        who = "controls (answerable)" if t.group == "controls" else "voids (unanswerable)"
        lines += ["", f"## {t.kind} requests: {name} on {who}, alpha = {alpha_key(t.alpha)}", "",
                  f"{what}, percent. Rows: direction regime; columns: inference regime.", "",
                  "| direction \\ inference | standard | guided |", "|---|---|---|"]
        for d in REGIMES:
            cells = [t.cells[f"{d}|{inf}"] for inf in REGIMES]
            lines.append(f"| {d} | " + " | ".join(
                f"{pct_value(c.base)} -> {pct(c.steered)}" for c in cells) + " |")
        lines += ["", "Paired change (steered - base, points):", "", "| direction \\ inference | standard | guided |",
                  "|---|---|---|"]
        for d in REGIMES:
            lines.append(f"| {d} | " + " | ".join(pct(t.cells[f"{d}|{inf}"].change, sign=True)
                                                 for inf in REGIMES) + " |")
    return "\n".join(lines) + "\n"


def plot(result: GatingResult, path: Path) -> Path:
    """Rate vs dose: one panel per request kind x group, a line per direction x inference regime."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r.kind, r.group) for r in result.rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.0), squeeze=False)
    styles = {("standard", "standard"): ("C0", "-"), ("standard", "guided"): ("C0", "--"),
              ("guided", "standard"): ("C1", "-"), ("guided", "guided"): ("C1", "--")}
    for ax, (kind, group) in zip(axes[0], panels):
        n, families = 0, None
        for (d, inf), (color, ls) in styles.items():
            pts = sorted((r for r in result.rows if (r.kind, r.group, r.direction, r.inference)
                          == (kind, group, d, inf)), key=lambda r: r.alpha)
            x = [r.alpha for r in pts]
            y = [np.nan if r.rate.value is None else 100 * r.rate.value for r in pts]
            lo = [np.nan if r.rate.ci[0] is None else 100 * r.rate.ci[0] for r in pts]
            hi = [np.nan if r.rate.ci[1] is None else 100 * r.rate.ci[1] for r in pts]
            n = max([n, *(r.rate.n for r in pts)])
            # the bands rest on the families holding the panel's items (the same at every dose)
            families = max((r.rate.n_families for r in pts if r.rate.n_families is not None),
                           default=families)
            ax.plot(x, y, marker="o", color=color, ls=ls, label=f"direction {d}, inference {inf}")
            ax.fill_between(x, lo, hi, color=color, alpha=0.1)
        ax.axvline(0.0, color="0.8", lw=0.8)
        ax.set_ylim(-3, 103)
        ax.set_xlabel(RAW_ALPHA_AXIS if (result.meta.units or "").startswith(RAW_UNITS) else ALPHA_AXIS, fontsize=8)
        ax.set_ylabel(f"{MEASURE[kind][0]} (% of items)", fontsize=8)
        ax.set_title(f"{kind} requests, {group}\nitems {count_text(n, families)}", fontsize=9)
    axes[0][0].legend(fontsize=7, loc="best")
    meta = result.meta
    fig.suptitle(f"Prompt gating: {meta.model_name}, layer {meta.layer}, {meta.n_families} held-out families; "
                 "bands: 95% family-bootstrap intervals", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
