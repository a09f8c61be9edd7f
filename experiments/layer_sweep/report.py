"""Step 4 of the layer sweep: best_layers.json / .md (per label the nested best layer and position
beside its controls and baselines) and layer_sweep.png (held-out AUROC by layer)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

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


@dataclass(frozen=True)
class BestLayer:
    """A label's nested best layer and position as its sweep.json records them: the held-out AUROC
    with its interval, n and families (None: an older sweep.json), and the accuracy with its interval."""

    layer: int
    position: str
    auroc: float | None
    ci: tuple[float | None, float | None]
    n: int
    accuracy: float | None
    accuracy_ci: tuple[float | None, float | None]
    n_families: int | None

    @classmethod
    def from_json(cls, best: JsonObject) -> BestLayer:
        """sweep.json's `best` (checked by experiments.report.summary_files.SweepBest)."""
        return cls(layer=best["layer"], position=best["position"], auroc=best["auroc"], ci=tuple(best["ci"]),
                   n=best["n"], accuracy=best["accuracy"], accuracy_ci=tuple(best["accuracy_ci"]),
                   n_families=best.get("n_families"))

    def to_json(self) -> JsonObject:
        return {"layer": self.layer, "position": self.position, "auroc": self.auroc, "ci": list(self.ci), "n": self.n,
                "accuracy": self.accuracy, "accuracy_ci": list(self.accuracy_ci), "n_families": self.n_families}


@dataclass(frozen=True)
class LabelBest:
    """One label's line of best_layers.json: its nested best, and at that layer/position what its
    sweep.json says (control tasks with n, selectivity, the test against chance, the design factors;
    None where the sweep has none or predates them), the input-only baselines, the optimistic maximum,
    the sweep's path and warnings."""

    label: str
    title: str
    n: int
    n_families: int
    degenerate: bool
    best: BestLayer | None
    control_tasks: JsonObject | None
    selectivity: JsonObject | None
    chance_test: JsonObject | None
    factors: JsonObject | None
    cell_baseline: JsonObject | None
    baselines: JsonObject
    naive_best: JsonObject | None
    sweep: str
    warnings: tuple[str, ...]

    def to_json(self) -> JsonObject:
        out: JsonObject = {f.name: getattr(self, f.name) for f in fields(self)}  # the fields' order is the keys'
        out.update(best=None if self.best is None else self.best.to_json(), warnings=list(self.warnings))
        return out


@dataclass(frozen=True)
class BestLayers:
    """best_layers.json: the capture and probe settings, and per label its nested best (LabelBest)."""

    model: str | None
    model_name: str
    regime: str | None
    requests: tuple[str, ...]
    layers: list[int] | None  # as the capture's meta.json lists them
    positions: list[str] | None
    n_items: int | None
    probe: str
    folds: int
    n_boot: int
    seed: int
    interval_method: str
    labels: tuple[LabelBest, ...]
    config: JsonObject

    def to_json(self) -> JsonObject:
        out: JsonObject = {f.name: getattr(self, f.name) for f in fields(self)}  # the fields' order is the keys'
        out.update(requests=list(self.requests), labels=[r.to_json() for r in self.labels])
        return out


def best_layers(plan: Plan) -> BestLayers:
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
        out.append(LabelBest(
            label=label,
            title=f"{sweep['label']}={sweep['positive']}",
            n=sweep["n"],
            n_families=sweep["n_families"],
            degenerate=sweep["degenerate"],
            best=None if best is None else BestLayer.from_json(best),
            control_tasks=None if row is None or not row.get("control_tasks") else {**row["control_tasks"],
                                                                                    "n": row["n"]},
            selectivity=row.get("selectivity") if row is not None and isinstance(row.get("selectivity"), dict)
            else None,  # a sweep.json written before control tasks has a bare number (another meaning) or none
            # the row's test against chance and the label against the design's factors (None: an older sweep.json)
            chance_test=None if row is None else row.get("chance_test"),
            factors=None if row is None else row.get("factors"),
            cell_baseline=sweep.get("cell_baseline"),
            baselines=sweep["baselines"],
            naive_best=sweep.get("naive_best"),
            sweep=str(folder / "sweep.json"),
            warnings=tuple(sweep.get("warnings", [])),
        ))
    meta = capture_meta(plan)
    c = plan.config
    return BestLayers(model=meta.get("model"), model_name=plan.model.name, regime=meta.get("regime"),
                      requests=tuple(c.requests), layers=meta.get("layers"), positions=meta.get("positions"),
                      n_items=meta.get("n_items"), probe=c.probe, folds=c.folds, n_boot=c.n_boot, seed=c.seed,
                      interval_method=INTERVAL_METHOD, labels=tuple(out), config=as_dict(c))


def auc_text(record: JsonObject) -> str:
    """A sweep.json row's or best's AUROC through the one formatter (core.estimate_text)."""
    from evprobe.probes.sweep_row import auroc_json

    return estimate_text(auroc_json(record), 3)


def _chance_cell(test: JsonObject | None) -> str:
    """`yes (0.01)` / `no (0.49)`: the row's verdict against chance with its adjusted p."""
    if not test or test.get("p_adjusted") is None:
        return missing_text("not tested")
    return f"{'yes' if test.get('decodable') else 'no'} ({test['p_adjusted']:.2g})"


def _factors_cell(factors: JsonObject | None) -> str:
    """`+0.000 [-0.025, +0.025] vs system: not singled out`: the label minus the closest design factor."""
    readings = (factors or {}).get("factors") or []
    if not readings:
        return missing_text("no factors")
    c = min(readings, key=lambda r: r["difference"])
    verdict = "singled out" if factors.get("singled_out") else "not singled out"  # type: ignore[union-attr]
    return f"{estimate_text({'value': c['difference'], 'ci': c['ci']}, 3, sign=True, n=False)} vs {c['field']}: {verdict}"


def markdown(result: BestLayers) -> str:
    lines = [
        f"# Layer sweep: {result.model_name} ({result.model})",
        "",
        (f"- Capture: {', '.join(result.requests)} prompts, regime {result.regime}, n={result.n_items} items, "
        f"layers {result.layers[0]}..{result.layers[-1]} ({len(result.layers)}), positions "
        f"{', '.join(result.positions)}."),
        (f"- Probe: {result.probe}, {result.folds} folds of whole families; best layer/position chosen on inner "
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
        f"- Intervals: {result.interval_method}; B={result.n_boot}, seed {result.seed}; n = labelled items.",
        "",
        ("| label | n (families) | nested best | held-out AUROC | decodable there (p adjusted) | control tasks mean "
        "[min, max] (k) | selectivity | vs design factors | one-hot cell | history only | threshold only | "
        "history+threshold | max over test folds (optimistic) |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result.labels:
        b, ctl, base = r.best, r.control_tasks, r.baselines
        sel = r.selectivity or {}
        where = "DEGENERATE" if r.degenerate else ("none" if b is None else f"L{b.layer} / {b.position}")
        naive = r.naive_best
        naive_text = missing_text() if not naive else (f"L{naive.get('layer')} / {naive.get('position')}: "
                                             f"{auc_text(naive)}")
        lines.append("| " + " | ".join([
            r.title, f"{r.n} ({r.n_families})", where,
            missing_text("n=0") if b is None else auc_text(b.to_json()),
            _chance_cell(r.chance_test),
            missing_text() if ctl is None else f"{ctl['mean']:.3f} [{ctl['min']:.3f}, {ctl['max']:.3f}] (k={ctl['k']}, n={ctl['n']})",
            fmt_selectivity(sel),
            _factors_cell(r.factors),
            estimate_text(r.cell_baseline, 3),
            *(estimate_text(e, 3) for e in
              (base.get("history"), base.get("threshold"), base.get("history_threshold"))),
            naive_text,
        ]) + " |")
    warnings = [f"- {r.title}: {w}" for r in result.labels for w in r.warnings]
    if warnings:
        lines += ["", "## Warnings", "", *warnings]
    lines += ["", ("Per-label detail: `sweeps/<label>/sweep.md` (every layer and position), transfer matrices in "
              "`sweeps/resolved/transfer-<kind>.md/.png`, direction cosines in `directions/geometry.md/.png`.")]
    return "\n".join(lines) + "\n"


def plot(result: BestLayers, out: Path) -> Path:
    """Held-out AUROC by layer per label (one panel per position), 95% interval bands; the control
    tasks' mean dashed with their min-max range as a hatched band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    positions = result.positions
    fig, axes = plt.subplots(1, len(positions), figsize=(5.0 * len(positions), 4.0), squeeze=False, sharey=True)
    for pi, position in enumerate(positions):
        ax = axes[0][pi]
        for li, r in enumerate(result.labels):
            sweep = read_json_object(Path(r.sweep), "run the layer sweep again into a new --out")[0]
            rows = [x for x in sweep["rows"] if x["position"] == position]
            rows.sort(key=lambda x: x["layer"])
            if not rows:
                continue
            nan = (lambda v: np.nan if v is None else v)
            layers = [x["layer"] for x in rows]
            color = f"C{li}"
            ax.plot(layers, [nan(x["auroc"]) for x in rows], "o-", color=color, label=f"{r.title} (n={r.n})")
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
    fig.suptitle(f"Probe sweep ({result.probe}): {result.model_name}, regime {result.regime}, "
                 f"n={result.n_items} items; bands: 95% family-bootstrap intervals", fontsize=10)
    fig.tight_layout()
    path = out / PNG_FILE
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
