"""Step 4 of the layer sweep: best_layers.json / .md (per label the nested best layer and position
beside its controls and baselines) and layer_sweep.png (held-out AUROC by layer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evprobe.core.bootstrap import INTERVAL_METHOD
from evprobe.core.estimate_text import estimate_text, missing_text
from evprobe.core.json_files import read_json_object
from evprobe.experiments.config import as_dict
from evprobe.experiments.layer_sweep.config import PNG_FILE, SWEEPS_DIR, Plan, label_dir
from evprobe.experiments.layer_sweep.steps import capture_meta
from evprobe.probes.control_tasks import fmt_selectivity
from evprobe.core.json_types import JsonObject


def _row_at(sweep: JsonObject, layer: int, position: str) -> JsonObject | None:
    return next((r for r in sweep["rows"] if r["layer"] == layer and r["position"] == position), None)


def best_layers(plan: Plan) -> dict[str, Any]:
    """Per label: nested best layer/position with held-out AUROC, interval and n; the control tasks
    (mean, range, k) and the selectivity at that layer/position; the one-hot cell and input-only
    baselines; the optimistic (test-fold) maximum."""
    from evprobe.experiments.report.summary_files import SweepSummary, read_summary

    out = []
    for label in plan.config.labels:
        folder = plan.out / SWEEPS_DIR / label_dir(label)
        sweep = read_summary(folder / "sweep.json", SweepSummary, f"delete {folder} to redo that sweep")
        best = sweep.get("best")
        row = _row_at(sweep, best["layer"], best["position"]) if best else None
        out.append({
            "label": label,
            "title": f"{sweep['label']}={sweep['positive']}",
            "n": sweep["n"],
            "n_families": sweep["n_families"],
            "degenerate": sweep["degenerate"],
            "best": None if best is None else {**{k: best[k] for k in ("layer", "position", "auroc", "ci", "n",
                                                                        "accuracy", "accuracy_ci")},
                                               "n_families": best.get("n_families")},  # None: an older sweep.json
            "control_tasks": None if row is None or not row.get("control_tasks") else {**row["control_tasks"],
                                                                                       "n": row["n"]},
            "selectivity": row.get("selectivity") if row is not None and isinstance(row.get("selectivity"), dict)
            else None,  # a sweep.json written before control tasks has a bare number (another meaning) or none
            # the row's test against chance and the label against the design's factors (None: an older sweep.json)
            "chance_test": None if row is None else row.get("chance_test"),
            "factors": None if row is None else row.get("factors"),
            "cell_baseline": sweep.get("cell_baseline"),
            "baselines": sweep["baselines"],
            "naive_best": sweep.get("naive_best"),
            "sweep": str(folder / "sweep.json"),
            "warnings": sweep.get("warnings", []),
        })
    meta = capture_meta(plan)
    return {
        "model": meta.get("model"),
        "model_name": plan.model.name,
        "regime": meta.get("regime"),
        "requests": list(plan.config.requests),
        "layers": meta.get("layers"),
        "positions": meta.get("positions"),
        "n_items": meta.get("n_items"),
        "probe": plan.config.probe,
        "folds": plan.config.folds,
        "n_boot": plan.config.n_boot,
        "seed": plan.config.seed,
        "interval_method": INTERVAL_METHOD,
        "labels": out,
        "config": as_dict(plan.config),
    }


def auc_text(record: dict[str, Any]) -> str:
    """A sweep.json row's or best's AUROC through the one formatter (core.estimate_text)."""
    from evprobe.probes.sweep_row import auroc_json

    return estimate_text(auroc_json(record), 3)


def _chance_cell(test: dict[str, Any] | None) -> str:
    """`yes (0.01)` / `no (0.49)`: the row's verdict against chance with its adjusted p."""
    if not test or test.get("p_adjusted") is None:
        return missing_text("not tested")
    return f"{'yes' if test.get('decodable') else 'no'} ({test['p_adjusted']:.2g})"


def _factors_cell(factors: dict[str, Any] | None) -> str:
    """`+0.000 [-0.025, +0.025] vs system: not singled out`: the label minus the closest design factor."""
    readings = (factors or {}).get("factors") or []
    if not readings:
        return missing_text("no factors")
    c = min(readings, key=lambda r: r["difference"])
    verdict = "singled out" if factors.get("singled_out") else "not singled out"  # type: ignore[union-attr]
    return f"{estimate_text({'value': c['difference'], 'ci': c['ci']}, 3, sign=True, n=False)} vs {c['field']}: {verdict}"


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# Layer sweep: {result['model_name']} ({result['model']})",
        "",
        (f"- Capture: {', '.join(result['requests'])} prompts, regime {result['regime']}, n={result['n_items']} items, "
        f"layers {result['layers'][0]}..{result['layers'][-1]} ({len(result['layers'])}), positions "
        f"{', '.join(result['positions'])}."),
        (f"- Probe: {result['probe']}, {result['folds']} folds of whole families; best layer/position chosen on inner "
        "folds of the training families only (nested) and scored on the held-out families' out-of-fold decisions."),
        ("- Control tasks (Hewitt and Liang): random balanced functions of the prompt's cell (system x initial property "
        "x history x threshold level) fitted like the probe, at the best layer/position: their mean AUROC [min, max] "
        "(k tasks); selectivity = held-out AUROC there - that mean, interval [AUROC - max control, AUROC - min control] "
        "(95% at k = 39 when the label decodes like one more cell function; selective = decoded better than every "
        "random function of the cell). Decodable there: that row's within-family permutation test against chance, "
        "adjusted over the sweep's layer/positions (step-down maxT; the AUROC interval is no test). Design factors: "
        "the cell fields decoded on the same rows with the same probe and folds; the label minus the closest one, "
        "and singled out when the label is decoded better than each. Baselines: "
        "logistic models on the prompt inputs alone, out of fold: the one-hot cell (~1.0 for sufficiency by "
        "construction: it is a function of the cell), and history, threshold level, both (at chance by design)."),
        f"- Intervals: {result['interval_method']}; B={result['n_boot']}, seed {result['seed']}; n = labelled items.",
        "",
        ("| label | n (families) | nested best | held-out AUROC | decodable there (p adjusted) | control tasks mean "
        "[min, max] (k) | selectivity | vs design factors | one-hot cell | history only | threshold only | "
        "history+threshold | max over test folds (optimistic) |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["labels"]:
        b, ctl, base = r["best"], r["control_tasks"], r["baselines"]
        sel = r["selectivity"] or {}
        where = "DEGENERATE" if r["degenerate"] else ("none" if b is None else f"L{b['layer']} / {b['position']}")
        naive = r["naive_best"]
        naive_text = missing_text() if not naive else (f"L{naive.get('layer')} / {naive.get('position')}: "
                                             f"{auc_text(naive)}")
        lines.append("| " + " | ".join([
            r["title"], f"{r['n']} ({r['n_families']})", where,
            missing_text("n=0") if b is None else auc_text(b),
            _chance_cell(r.get("chance_test")),
            missing_text() if ctl is None else f"{ctl['mean']:.3f} [{ctl['min']:.3f}, {ctl['max']:.3f}] (k={ctl['k']}, n={ctl['n']})",
            fmt_selectivity(sel),
            _factors_cell(r.get("factors")),
            estimate_text(r["cell_baseline"], 3),
            *(estimate_text(e, 3) for e in
              (base.get("history"), base.get("threshold"), base.get("history_threshold"))),
            naive_text,
        ]) + " |")
    warnings = [f"- {r['title']}: {w}" for r in result["labels"] for w in r["warnings"]]
    if warnings:
        lines += ["", "## Warnings", "", *warnings]
    lines += ["", ("Per-label detail: `sweeps/<label>/sweep.md` (every layer and position), transfer matrices in "
              "`sweeps/resolved/transfer-<kind>.md/.png`, direction cosines in `directions/geometry.md/.png`.")]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], out: Path) -> Path:
    """Held-out AUROC by layer per label (one panel per position), 95% interval bands; the control
    tasks' mean dashed with their min-max range as a hatched band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    positions = result["positions"]
    fig, axes = plt.subplots(1, len(positions), figsize=(5.0 * len(positions), 4.0), squeeze=False, sharey=True)
    for pi, position in enumerate(positions):
        ax = axes[0][pi]
        for li, r in enumerate(result["labels"]):
            sweep = read_json_object(Path(r["sweep"]), "run the layer sweep again into a new --out")[0]
            rows = [x for x in sweep["rows"] if x["position"] == position]
            rows.sort(key=lambda x: x["layer"])
            if not rows:
                continue
            nan = (lambda v: np.nan if v is None else v)
            layers = [x["layer"] for x in rows]
            color = f"C{li}"
            ax.plot(layers, [nan(x["auroc"]) for x in rows], "o-", color=color, label=f"{r['title']} (n={r['n']})")
            ax.fill_between(layers, [nan(x["ci"][0]) for x in rows], [nan(x["ci"][1]) for x in rows], color=color,
                            alpha=0.2)
            ctl = [x.get("control_tasks") or {} for x in rows]
            if any(ctl):
                ax.plot(layers, [nan(c.get("mean")) for c in ctl], "--", color=color, alpha=0.6)
                ax.fill_between(layers, [nan(c.get("min")) for c in ctl], [nan(c.get("max")) for c in ctl],
                                facecolor="none", edgecolor=color, hatch="///", alpha=0.35, linewidth=0)
        ax.axhline(0.5, color="0.6", lw=0.8)
        ax.set_title(f"position {position}", fontsize=10)
        ax.set_xlabel("decoder layer (index)")
        ax.set_ylabel("held-out AUROC (out of fold; dashed, hatched: control tasks mean, range)")
        ax.set_ylim(0.0, 1.02)
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"Probe sweep ({result['probe']}): {result['model_name']}, regime {result['regime']}, "
                 f"n={result['n_items']} items; bands: 95% family-bootstrap intervals", fontsize=10)
    fig.tight_layout()
    path = out / PNG_FILE
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
