"""Markdown and PNG reports of sweeps and transfer matrices (matplotlib, Agg backend).

Every number is printed as `value [lo, hi]` with its n, as the benchmark's score tables do. A
sweep's report leads with the probe AUROC beside the control tasks' mean and range and the
selectivity (probes.control_tasks), shows the leakage check and the one-hot cell baseline with
what they can and cannot say, and keeps the single-factor baselines (at chance by design) in a
details section.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from evprobe.core.bootstrap import Estimate
from evprobe.core.capture_schema import BENCHMARK_CELL_FIELDS
from evprobe.core.estimate_text import estimate_text, missing_text
from evprobe.probes.chance import ChanceTest
from evprobe.probes.control_tasks import ControlSummary, fmt_selectivity
from evprobe.probes.factors import FactorComparison, fmt_factors
from evprobe.probes.summary import sweep_paragraph
from evprobe.probes.sweep import SweepResult
from evprobe.probes.transfer import TransferResult

if TYPE_CHECKING:
    from matplotlib.artist import Artist

XOR_NOTE = (
    "At chance by design: sufficiency is, within a family, the exclusive-or of the initial history and the "
    "threshold level (each history is answerable at exactly one of the family's two thresholds), and which XOR it "
    "is depends on the family's physics. Pooled over a balanced benchmark, history alone and threshold level alone "
    "carry no information about it, nor does their pair, so these baselines sit at 0.5 whatever the model does; "
    "they catch an unbalanced selection (a warning above), nothing more."
)
CELL_NOTE = (
    "The cell (system x initial property x history x threshold level) fixes the label here (sufficiency in the "
    "benchmark), so a logistic model on the one-hot cell decodes it (~1.0) by construction: the label is computable "
    "from the prompt's type. The question the sweep answers is where, and how selectively, the model computes it: a "
    "representation that carries the cell decodes every function of the cell, sufficiency included; the control "
    "tasks measure that, and selectivity is what sufficiency has beyond it."
)
CONTROLS_NOTE = (
    "Control tasks (Hewitt and Liang 2019): {k} random balanced functions of the cell ({cells} cells; half the "
    "cells labelled 1, seeded; redrawn when equal to the target, its negation or another control), fitted and "
    "scored with the same probe and family folds. `control mean [min, max]` is the mean and range of their AUROCs. "
    "Selectivity = AUROC - control mean; its interval is [AUROC - max control, AUROC - min control]: random cell "
    "functions differ in how well they decode, so the target is compared with the controls' own spread, and the "
    "interval covers {level:.1%} of the time when the target decodes like one more cell function (shifted or not). "
    "**Selective** = decoded better than every control, which a label that is just another cell function does "
    "{false:.1%} of the time (benchmarks/coverage_selectivity.py measures both). High AUROC with high control "
    "AUROC means the representation carries the cell, not that it computes the label."
)
CELL_NOTE_OWN = (
    "The cell ({cell}) nearly fixes '{label}' here, so a logistic model on the one-hot cell decodes it: the label is "
    "computable from the prompt's type. A representation that carries the cell decodes every function of the cell; "
    "the control tasks measure that, and selectivity is what '{label}' has beyond it."
)
CHANCE_NOTE = (
    "Decodable (the `chance p` column): {P} relabellings of the label under chance, {how}, drawn once and the same "
    "at every row; the row's whole pipeline (same probe, folds and scoring) refitted on each; p = (1 + #{{relabelled AUROC >= "
    "observed}}) / (1 + P), then adjusted over the {G} tested layer/positions by Westfall and Young's step-down maxT "
    "(family-wise error 5%). **Decodable** = adjusted p <= 0.05, the only way a row is called decodable. The AUROC "
    "interval is for the procedure's expected held-out AUROC (what the same pipeline would score on new families): "
    "it says how large the AUROC is, not whether the label is readable at all, and a narrow interval above 0.5 is no "
    "test (benchmarks/coverage_chance.py measures both rules' false calls)."
)
NO_CHANCE_NOTE = (
    "No row was tested against chance (--chance-permutations 0), so no row is called decodable: the AUROC interval "
    "is for the procedure's expected held-out AUROC, not a test."
)
FACTORS_NOTE = (
    "The design's factors (the `vs factors` column): each cell field ({fields}) decoded on the same rows with the "
    "same probe, folds and scoring as the label (a field with more than two values one value against the rest, "
    "the factor's AUROC the best value's). The column gives the label minus the closest factor with its interval "
    "(the paired family bootstrap widened to hold the MOVER interval of the two AUROCs, every half-width times the "
    "label's refit-over-fixed interval width: the training spread fixed fold models miss) and whether the label is "
    "decoded better than every factor (**singled out**). The control tasks ask whether the label is decoded better "
    "than random functions of the cell; this asks whether it is decoded better than the design's own factors: a "
    "label at the ceiling beats every random cell function, and so does any factor at the ceiling "
    "(benchmarks/coverage_factors.py measures the verdict's false calls and power)."
)
LEAK_NOTE = (
    "Leakage check: {shuffles} independent shuffles of the labels {kind} (seeded), same probe and folds; the row "
    "shows their mean AUROC. Grouped folds make it 0.5 by construction, so it measures no selectivity: it fires "
    "(**LEAK**) where |AUROC - 0.5| > {limit:.2f} standard errors (the spread between shuffles pooled over the "
    "{rows} scored rows, Student t with {df} df, Bonferroni: <= 5% false alarms per sweep), i.e. where folds split "
    "families or the features carry family-specific label information. Interval: mean +- t_0.975 se."
)


def fmt(e: Estimate | None, digits: int = 3) -> str:
    """`0.812 [0.744, 0.871]` where the table or line states n itself (core.estimate_text)."""
    return estimate_text(e, digits, n=False)


def fmt_controls(c: ControlSummary | None) -> str:
    return missing_text("no control tasks") if c is None else f"{c.mean:.3f} [{c.min:.3f}, {c.max:.3f}]"


def fmt_chance(c: ChanceTest | None) -> str:
    """`0.01 (0.01) **decodable**` or `0.24 (0.49)`: the row's p and adjusted p."""
    if c is None or c.p_adjusted is None:
        return missing_text("not tested")
    return f"{c.p_value:.2g} ({c.p_adjusted:.2g})" + (" **decodable**" if c.decodable else "")


def fmt_versus(f: FactorComparison | None) -> str:
    """The label minus its closest factor, with the interval, and the verdict: `-0.000 [-0.025, +0.025] vs
    system (ceiling)`, `+0.042 [+0.014, +0.057] vs history: **singled out**`."""
    if f is None or not f.readings:
        return missing_text("no factors")
    closest = min(f.readings, key=lambda r: r.difference)
    text = (estimate_text({"value": closest.difference, "ci": list(closest.ci)}, 3, sign=True, n=False)
            + f" vs {closest.field}" + (" (ceiling)" if closest.at_ceiling else ""))
    return text + (": **singled out**" if f.singled_out else "")


def sweep_markdown(result: SweepResult) -> str:
    cfg = result.config
    tasks = result.control_tasks
    lines = [f"# Probe sweep: {result.label}={result.positive}, {result.probe} probe", ""]
    for w in result.warnings:
        lines += [f"> **WARNING: {w}**", ""]
    dropped = ", ".join(f"{k}: {v}" for k, v in result.n_dropped.items()) or "none"
    lines += [
        f"- model: {result.model}; {result.sources}: {', '.join(result.regimes)}",
        f"- rows: {result.n} labelled rows of {result.n_families} families (left out: {dropped})",
        f"- restriction: {result.restriction or 'none (all labelled rows)'}",
        f"- cross-validation: {cfg.folds} folds of whole families (seed {cfg.seed}); out-of-fold decision values "
        "pooled; accuracy = sign of the decision",
        ("- intervals: AUROC and accuracy (rows and nested): " + result.intervals.method
         + f", B = {result.intervals.n_refits} (coverage: benchmarks/coverage.py); selectivity: against the control "
         f"tasks' range (below); leakage: the spread between shuffles" if result.intervals is not None else
         f"- intervals: family bootstrap of the out-of-fold scores with the fold models held fixed, B = {cfg.n_boot} "
         "(too narrow: see the warning)"),
        (f"- control tasks: {tasks.k} of {tasks.requested} requested, cell = {' x '.join(tasks.cell_fields)}"
         if not tasks.skipped else "- control tasks: none (controls off)" if tasks.skipped == "controls off"
         else "- control tasks: **skipped** (see the warning above)"),
        f"- probe: {result.probe}" + (f", C = {cfg.C} after StandardScaler" if result.probe == "logistic" else ""),
        "",
    ]
    lines += ["## What this shows", "", sweep_paragraph(result), ""]
    tested = [r for r in result.rows if r.chance is not None]
    lines += [CHANCE_NOTE.format(how=result.chance.permuted, P=result.chance.permutations, G=len(tested))
              if tested and result.chance else NO_CHANCE_NOTE, ""]
    if tasks.k:
        k = tasks.k
        lines += [CONTROLS_NOTE.format(k=k, cells=tasks.n_cells, level=(k - 1) / (k + 1), false=1 / (k + 1)), ""]
    if result.factors is not None and result.factors.factors:
        lines += [FACTORS_NOTE.format(fields=", ".join(f.field for f in result.factors.factors)), ""]
    if result.leakage is not None:
        lk = result.leakage
        lines += [LEAK_NOTE.format(shuffles=cfg.leakage_shuffles, kind=result.leakage_kind, limit=lk.limit,
                                   rows=len(lk.auroc), df=lk.df), ""]
    cell = result.cell_baseline.value
    lines += ["## Input baseline: the one-hot cell (logistic, same folds)", "",
              f"AUROC {estimate_text(result.cell_baseline)}.", ""]
    if cell is not None and cell >= 0.9:
        lines += [CELL_NOTE if tuple(tasks.cell_fields) == BENCHMARK_CELL_FIELDS else
                  CELL_NOTE_OWN.format(cell=" x ".join(tasks.cell_fields), label=result.label), ""]
    elif cell is not None:
        lines += [f"Here the cell does not fix '{result.label}' (one-hot cell AUROC {cell:.3f}): the label varies "
                  "within cells, so part of it is not a function of the prompt's type.", ""]
    lines += ["## Best layer, chosen on validation folds only (nested)", ""]
    if result.best is None:
        lines.append("No layer/position could be scored." if result.degenerate or not result.rows else "Not computed.")
    else:
        b = result.best
        choices = ", ".join(f"fold {c.fold}: L{c.layer}/{c.position}" for c in b.choices)
        lines += [
            f"**L{b.layer} / {b.position}**: test AUROC {estimate_text(b.auroc)}, accuracy {fmt(b.accuracy)}",
            "",
            f"Per-fold choices: {choices}.",
            "",
            f"Method: {b.method}.",
        ]
        row = next((r for r in result.rows if r.layer == b.layer and r.position == b.position), None)
        if row is not None and row.controls is not None:
            verdict = (f"selective: '{result.label}' is decoded there better than every random function of the cell"
                       if row.selective else
                       "no verdict: too few control tasks for a 5% false-verdict rate" if row.selective is None else
                       "**not selective**: some random function of the cell decodes as well there, so the "
                       "representation carries the cell rather than computing this label in particular")
            lines += ["", f"At L{b.layer}/{b.position}: control tasks {fmt_controls(row.controls)} (k={row.controls.k}), "
                          f"selectivity {fmt_selectivity(row.selectivity)}: {verdict}."]
        if row is not None and row.factors is not None and row.factors.readings:
            lines += ["", f"Beside the design's own factors decoded there on the same rows: '{result.label}' is "
                          f"{fmt_factors(row.factors)}."]
        if result.naive_best:
            nb = result.naive_best
            how = "TRAPS-style" if result.sources == "regimes" else "the layer chosen on the test folds"
            lines += ["", f"For comparison, the maximum over layers of the test-fold AUROC ({how}, optimistic): "
                          f"L{nb.layer}/{nb.position} {nb.auroc:.3f}."]
    lines += [
        "",
        "## Per layer and position",
        "",
        "| layer | position | AUROC [95% CI] | chance p (adjusted) | accuracy [95% CI] | control tasks mean [min, max] "
        "| selectivity [interval] | vs factors | leakage check [95% CI] | within-family variance | n |",
        "|---:|---|---|---|---|---|---|---|---|---:|---:|",
    ]
    for r in result.rows:
        if r.degenerate:
            lines.append(f"| {r.layer} | {r.position} | **DEGENERATE**: identical within families, 0.5 by "
                         f"construction | | | | | | | {r.within_family_variance:.2e} | {result.n} |")
            continue
        leak = fmt(r.leakage) + (" **LEAK**" if r.leakage_fires else "")
        lines.append(f"| {r.layer} | {r.position} | {fmt(r.auroc)} | {fmt_chance(r.chance)} | {fmt(r.accuracy)} "
                     f"| {fmt_controls(r.controls)} | {fmt_selectivity(r.selectivity)} | {fmt_versus(r.factors)} | {leak} "
                     f"| {r.within_family_variance:.3f} | {r.auroc.n} |")
    if result.baselines:
        names = {"history": "initial history alone", "threshold": "threshold level alone",
                 "history_threshold": "history and threshold level (joint one-hot)"}
        lines += ["", "## Details: single-factor input baselines (logistic on one-hot prompt variables, same folds)",
                  "", "| baseline | AUROC [95% CI] | n |", "|---|---|---:|"]
        for key, est in result.baselines.items():
            lines.append(f"| {names.get(key, key)} | {fmt(est)} | {est.n} |")
        if result.label == "resolved":
            lines += ["", XOR_NOTE]
    return "\n".join(lines) + "\n"


def _band(ax, x, v, lo, hi, style, colour, label) -> None:
    ax.plot(x, v, style, color=colour, marker="o", ms=3, label=label)
    ax.fill_between(x, lo, hi, color=colour, alpha=0.2, linewidth=0)


def layer_ticks(layers: Sequence[int], most: int = 12) -> list[int]:
    """Whole layer numbers for an x axis: every layer when there are few, else an even subset that
    keeps the first and the last (never the 0.5, 1.5 a default locator puts between layers)."""
    xs = sorted({int(x) for x in layers})
    if len(xs) <= most:
        return xs
    step = -(-len(xs) // most)
    picked = xs[::step]
    return picked if picked[-1] == xs[-1] else picked + [xs[-1]]


def sweep_png(result: SweepResult, path: str | Path) -> Path:
    """AUROC by layer with 95% bands, the control tasks' mean with their min-max band, the
    leakage check, the one-hot cell baseline, chance and the nested best layer; one panel per
    position."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nan = (lambda v: np.nan if v is None else v)
    positions = list(dict.fromkeys(r.position for r in result.rows))
    fig, axes = plt.subplots(1, len(positions), figsize=(5.2 * len(positions), 4.2), sharey=True, squeeze=False)
    for ax, pos in zip(axes[0], positions, strict=True):
        rows = [r for r in result.rows if r.position == pos]
        x = np.array([r.layer for r in rows], dtype=float)
        est = [r.auroc for r in rows]
        _band(ax, x, [nan(e.value) for e in est], [nan(e.ci[0]) for e in est], [nan(e.ci[1]) for e in est], "-",
              "C0", f"{result.probe} probe (95% CI)")
        if any(r.controls is not None for r in rows):
            c = [r.controls for r in rows]
            _band(ax, x, [np.nan if e is None else e.mean for e in c], [np.nan if e is None else e.min for e in c],
                  [np.nan if e is None else e.max for e in c], "--", "C7",
                  f"control tasks: mean, min-max band (k={result.control_tasks.k})")
        if any(r.leakage.value is not None for r in rows):
            ax.plot(x, [nan(r.leakage.value) for r in rows], ":", color="C3", lw=1,
                    label="leakage check (0.5 by construction)")
            fired = [r for r in rows if r.leakage_fires]
            if fired:
                ax.plot([r.layer for r in fired], [r.leakage.value for r in fired], "s", color="C3", ms=6,
                        label="leakage check fired")
        e = result.cell_baseline
        if e.value is not None:
            ax.axhline(e.value, color="C2", ls=":", lw=1.2, label=f"baseline: one-hot cell ({e.value:.2f})")
        ax.axhline(0.5, color="k", lw=0.6, alpha=0.6)
        bad = [r.layer for r in rows if r.degenerate]
        if bad:
            ax.plot(bad, [0.5] * len(bad), "x", color="red", ms=7, label="degenerate (identical within families)")
        if result.best is not None and result.best.position == pos:
            best = result.best.auroc.value  # None when no held-out fold could be scored
            score = missing_text("not scored") if best is None else f"{best:.2f}"
            ax.axvline(result.best.layer, color="C1", lw=1, alpha=0.7,
                       label=f"nested estimate (layer/position chosen without test labels): L{result.best.layer}/{pos}, "
                             f"{score}")
        ax.set_xticks(layer_ticks([r.layer for r in rows]))
        ax.set_xlabel("layer (model layer number)")
        ax.set_title(f"position: {pos}", fontsize=10)
        ax.set_ylim(0.0, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"AUROC, grouped {result.config.folds}-fold CV (out-of-fold)")
    # One legend for every panel's lines (the nested estimate's line is drawn on its own panel only).
    seen: dict[str, Artist] = {}  # legend label -> its handle
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    axes[0][-1].legend(list(seen.values()), list(seen), fontsize=7, loc="lower right")
    title = (f"{result.label}={result.positive}: AUROC by layer, 95% family-bootstrap bands — {result.model} "
             f"(n={result.n}, {result.n_families} families)")
    if result.degenerate:
        title = "DEGENERATE CAPTURE (identical within families) — " + title
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def transfer_markdown(result: TransferResult) -> str:
    names = [c[0] for c in result.conditions]
    lines = [
        f"# Transfer by {result.kind}: {result.label}={result.positive}, {result.probe} probe",
        "",
        f"- model: {result.model}; restriction: {result.restriction or 'none'}",
        "- conditions: " + "; ".join(f"{n} ({k} rows, {f} families)" for n, k, f in result.conditions),
        "- train and test families are always disjoint: conditions that share families go through the family folds "
        "(`folds`), conditions that share none train on all rows of one and test on all rows of the other (`disjoint`)",
        "- each cell: test AUROC [95% family-bootstrap CI] at the layer/position chosen on the training condition only "
        "(nested; never with test labels), and that layer",
        "",
        "| train \\ test | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for a in names:
        cells = []
        for b in names:
            c = result.cell(a, b)
            if c.best is None:
                cells.append(missing_text(c.reason))
            else:
                cells.append(f"{fmt(c.best.auroc)} L{c.best.layer}/{c.best.position} (n={c.best.auroc.n}, {c.scheme})")
        lines.append(f"| **{a}** | " + " | ".join(cells) + " |")
    return "\n".join(lines + _by_category(result)) + "\n"


def _by_category(result: TransferResult) -> list[str]:
    """Seed 002's Table 3 layout (`void_system` only): the off-diagonal cells grouped by kind of transfer."""
    titles = {"cross-modality": "same system, visual <-> textual", "cross-domain": "other system, same void type",
              "cross-both": "other system and other void type"}
    groups = {k: [c for c in result.cells if c.category == k] for k in titles}
    if not any(groups.values()):
        return []
    lines = ["", "Cells by kind of transfer (seed 002, Table 3):", "", "| kind | train -> test | AUROC | layer |",
             "|---|---|---|---|"]
    for kind, cells in groups.items():
        for c in cells:
            shown = (missing_text(c.reason) if c.best is None else fmt(c.best.auroc), "" if c.best is None else
                     f"L{c.best.layer}/{c.best.position}")
            lines.append(f"| {kind} ({titles[kind]}) | {c.train} -> {c.test} | {shown[0]} | {shown[1]} |")
    return lines


def transfer_png(result: TransferResult, path: str | Path) -> Path:
    from evprobe.probes.geometry import heatmap_png

    names, matrix = result.matrix()
    return heatmap_png(path, [f"{n}" for n in names], matrix,
                       f"Transfer by {result.kind}: {result.label}={result.positive}, {result.probe} "
                       "(rows: train, columns: test; nested-best AUROC)",
                       vmin=0.0, vmax=1.0, cmap="viridis", colorbar="AUROC", fmt="{:.2f}")
