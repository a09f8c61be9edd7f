"""Markdown and PNG reports of sweeps and transfer matrices (matplotlib, Agg backend).

Every number is printed as `value [lo, hi]` with its n, as the benchmark's score tables do.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from evprobe.core.bootstrap import Estimate
from evprobe.probes.sweep import SweepResult
from evprobe.probes.transfer import TransferResult

XOR_NOTE = (
    "Sufficiency is, within a family, the exclusive-or of the initial history and the threshold level "
    "(each history is answerable at exactly one of the family's two thresholds), and which XOR it is "
    "depends on the family's physics. Pooled over families, history alone and threshold level alone carry "
    "no information about it, nor does their pair: a probe that beats these baselines reads a conjunction "
    "of the measurement, the threshold and the family's values that the model computed."
)


def fmt(e: Estimate | None, digits: int = 3) -> str:
    if e is None or e.value is None:
        return "n/a" + (f" ({e.reason})" if e is not None and e.reason else "")
    lo, hi = e.ci
    ci = "" if lo is None else f" [{lo:.{digits}f}, {hi:.{digits}f}]"
    return f"{e.value:.{digits}f}{ci}"


def sweep_markdown(result: SweepResult) -> str:
    cfg = result.config
    lines = [f"# Probe sweep: {result.label}={result.positive}, {result.probe} probe", ""]
    for w in result.warnings:
        lines += [f"> **WARNING: {w}**", ""]
    dropped = ", ".join(f"{k}: {v}" for k, v in result.n_dropped.items()) or "none"
    lines += [
        f"- model: {result.model}; regimes: {', '.join(result.regimes)}",
        f"- rows: {result.n} labelled rows of {result.n_families} families (left out: {dropped})",
        f"- restriction: {result.restriction or 'none (all labelled rows)'}",
        f"- cross-validation: {cfg.n_splits} folds of whole families (seed {cfg.seed}); out-of-fold decision values "
        "pooled; accuracy = sign of the decision",
        f"- intervals: family bootstrap, B = {cfg.n_boot}, pointwise 95% percentile; AUROC per resample by the "
        "weighted Mann-Whitney formula",
        f"- control: labels shuffled {result.control_kind}, same probe, folds and scoring (selectivity = AUROC - "
        "control)",
        f"- probe: {result.probe}" + (f", C = {cfg.C} after StandardScaler" if result.probe == "logistic" else ""),
        "",
        "## Input-only baselines (logistic on one-hot prompt variables, same folds)",
        "",
        "| baseline | AUROC [95% CI] | n |",
        "|---|---|---:|",
    ]
    names = {"history": "initial history alone", "threshold": "threshold level alone",
             "history_threshold": "history and threshold level (joint one-hot)"}
    for key, est in result.baselines.items():
        lines.append(f"| {names.get(key, key)} | {fmt(est)} | {est.n} |")
    if result.label == "resolved":
        lines += ["", XOR_NOTE]
    lines += ["", "## Best layer, chosen on validation folds only (nested)", ""]
    if result.best is None:
        lines.append("No layer/position could be scored." if result.degenerate or not result.rows else "Not computed.")
    else:
        b = result.best
        choices = ", ".join(f"fold {c.fold}: L{c.layer}/{c.position}" for c in b.choices)
        lines += [
            f"**L{b.layer} / {b.position}**: test AUROC {fmt(b.auroc)} (n={b.auroc.n}), accuracy {fmt(b.accuracy)}",
            "",
            f"Per-fold choices: {choices}.",
            "",
            f"Method: {b.method}.",
        ]
        if result.naive_best:
            nb = result.naive_best
            lines += ["", f"For comparison, the maximum over layers of the test-fold AUROC (TRAPS-style, optimistic): "
                          f"L{nb['layer']}/{nb['position']} {nb['auroc']:.3f}."]
    lines += [
        "",
        "## Per layer and position",
        "",
        "| layer | position | AUROC [95% CI] | accuracy [95% CI] | shuffled control [95% CI] | selectivity "
        "| within-family variance | n |",
        "|---:|---|---|---|---|---:|---:|---:|",
    ]
    for r in result.rows:
        if r.degenerate:
            lines.append(f"| {r.layer} | {r.position} | **DEGENERATE**: identical within families, 0.5 by "
                         f"construction | | | | {r.within_family_variance:.2e} | {result.n} |")
            continue
        sel = "" if r.auroc.value is None or r.control.value is None else f"{r.auroc.value - r.control.value:+.3f}"
        lines.append(f"| {r.layer} | {r.position} | {fmt(r.auroc)} | {fmt(r.accuracy)} | {fmt(r.control)} | {sel} "
                     f"| {r.within_family_variance:.3f} | {r.auroc.n} |")
    return "\n".join(lines) + "\n"


def sweep_png(result: SweepResult, path: str | Path) -> Path:
    """AUROC by layer with 95% bands, the shuffled control, the input-only baselines, chance and
    the nested best layer; one panel per position."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    positions = list(dict.fromkeys(r.position for r in result.rows))
    fig, axes = plt.subplots(1, len(positions), figsize=(5.2 * len(positions), 4.2), sharey=True, squeeze=False)
    for ax, pos in zip(axes[0], positions, strict=True):
        rows = [r for r in result.rows if r.position == pos]
        x = np.array([r.layer for r in rows], dtype=float)
        for attr, label, style, colour in (("auroc", f"{result.probe} probe", "-", "C0"),
                                           ("control", "shuffled labels (control)", "--", "C7")):
            est = [getattr(r, attr) for r in rows]
            v = np.array([np.nan if e.value is None else e.value for e in est])
            lo = np.array([np.nan if e.ci[0] is None else e.ci[0] for e in est])
            hi = np.array([np.nan if e.ci[1] is None else e.ci[1] for e in est])
            ax.plot(x, v, style, color=colour, marker="o", ms=3, label=label)
            ax.fill_between(x, lo, hi, color=colour, alpha=0.2, linewidth=0)
        for key, colour, name in (("history", "C2", "history alone"), ("threshold", "C3", "threshold level alone")):
            e = result.baselines.get(key)
            if e is not None and e.value is not None:
                ax.axhline(e.value, color=colour, ls=":", lw=1.2, label=f"baseline: {name} ({e.value:.2f})")
        ax.axhline(0.5, color="k", lw=0.6, alpha=0.6)
        bad = [r.layer for r in rows if r.degenerate]
        if bad:
            ax.plot(bad, [0.5] * len(bad), "x", color="red", ms=7, label="degenerate (identical within families)")
        if result.best is not None and result.best.position == pos:
            best = result.best.auroc.value  # None when no held-out fold could be scored
            score = "n/a" if best is None else f"{best:.2f}"
            ax.axvline(result.best.layer, color="C1", lw=1, alpha=0.7, label=f"nested best L{result.best.layer}: {score}")
        ax.set_xlabel("layer (model layer number)")
        ax.set_title(f"position: {pos}", fontsize=10)
        ax.set_ylim(0.0, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"AUROC, grouped {result.config.n_splits}-fold CV (out-of-fold)")
    axes[0][-1].legend(fontsize=7, loc="lower right")
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
                cells.append(c.reason or "n/a")
            else:
                cells.append(f"{fmt(c.best.auroc)} L{c.best.layer}/{c.best.position} (n={c.best.auroc.n}, {c.scheme})")
        lines.append(f"| **{a}** | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def transfer_png(result: TransferResult, path: str | Path) -> Path:
    from evprobe.probes.geometry import heatmap_png

    names, matrix = result.matrix()
    return heatmap_png(path, [f"{n}" for n in names], matrix,
                       f"Transfer by {result.kind}: {result.label}={result.positive}, {result.probe} "
                       "(rows: train, columns: test; nested-best AUROC)",
                       vmin=0.0, vmax=1.0, cmap="viridis", colorbar="AUROC", fmt="{:.2f}")
