"""Dose-response reports: dose_response.json, the markdown tables (dose_response.md) and the PNG curves."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from evprobe.core.decimals import fixed
from evprobe.core.files import atomic_write_bytes
from evprobe.experiments.steering_conventions import alpha_key
from evprobe.core.estimate_text import missing_text
from evprobe.analysis.specificity import NULL_SETS, SPECIFIC_P, band_name
from evprobe.experiments.dose_response.formatting import RATE_MEASURES, fmt_estimate, num
from evprobe.core.bootstrap import Estimate
from evprobe.analysis.effects import INTERVAL_METHOD
from evprobe.experiments.dose_response.meta import N_UNIT, NULL_BAND_RULE
from evprobe.experiments.dose_response.plan import Plan
from evprobe.experiments.dose_response.results import ControlRow, CurveRow, DoseResult, NullBandRow, NullPlace
from evprobe.experiments.dose_response.stats import GROUPS, MEASURES

JSON_FILE = "dose_response.json"
MD_FILE = "dose_response.md"
MEASURE_TITLES = {
    "stop_rate": ("stop rate", "stop rate (share of items)"),
    "missing_test_rate": ("missing-property test rate", "missing-property test chosen (share of items)"),
    "useless_test_rate": ("useless test rate", "test that reveals nothing unknown: repeat or free fall (share of items)"),
    "min_cost_accuracy": ("minimum-cost accuracy", "minimum-cost choice (share of items)"),
    "log_odds": ("log-odds stop vs best other letter", "log p(stop) - max log p(other) (nats)"),
    "invalid_rate": ("invalid replies", "invalid replies (share of items)"),
}
ALPHA_AXIS = "alpha (multiples of mean residual norm; + = toward measuring)"
RAW_ALPHA_AXIS = "alpha (raw: norm of the vector added; + = toward measuring)"


def fmt_band(b: NullBandRow | None, measure: str) -> str:
    """`mean 50.0 [band 45.8, 54.2]; probe pct 99, z +6.1 (k=50, n=24)`: the random null at one cell
    (band = 2.5-97.5 percentiles of the k random directions' estimates, their spread when k < 40
    (analysis.specificity.band_name); the probe's place in it)."""
    if b is None or b.mean is None:
        return missing_text("n=0")
    scale, digits = (100.0, 1) if measure in RATE_MEASURES else (1.0, 2)
    sign = measure == "log_odds"
    place = ""
    if b.percentile is not None:
        z = "z NA" if b.z is None else f"z {fixed(b.z, 1, sign=True)}"
        place = f"; probe pct {b.percentile:.0f}, {z}"
    return (f"mean {num(b.mean * scale, digits, sign)} [band {num(b.band_lo * scale, digits, sign)}, "  # type: ignore[operator]
            f"{num(b.band_hi * scale, digits, sign)}]{place} (k={b.n_directions}, n={b.n})")  # type: ignore[operator]


def _place(null: NullPlace | NullBandRow | ControlRow | None) -> str:
    """The probe's (or a control's) place in a null: a headline's targeted group by its one-sided test."""
    place = None if null is None else null.place
    if place is None or place.percentile is None:
        return missing_text("no random null")
    goal = null.goal if isinstance(null, NullPlace) else None
    if goal is not None and goal.p_goal is not None:  # a headline's targeted group: the one-sided specificity test
        verdict = " **specific**" if goal.specific else ""
        return f"beyond {goal.beaten} of {place.n_directions}, p {goal.p_goal:.3f}{verdict}"
    z = missing_text("random effects do not vary") if place.z is None else fixed(place.z, 1, sign=True)
    k = f" (k={place.n_directions})" if place.n_directions is not None else ""
    return f"pct {place.percentile:.0f}, z {z}, p {place.p_null:.3f}{k}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|",
            *("| " + " | ".join(r) + " |" for r in rows)]


def _index(result: DoseResult) -> tuple[dict[tuple, CurveRow], dict[tuple, NullBandRow]]:
    rows = {(r.readout, r.layer, r.kind, r.alpha, r.group, r.system, r.measure): r for r in result.rows}
    return rows, _bands(result.null_band)


def _bands(bands: Sequence[NullBandRow]) -> dict[tuple, NullBandRow]:
    return {(b.readout, b.layer, b.alpha, b.group, b.system, b.measure): b for b in bands}


def _estimate(row: CurveRow | None) -> Estimate | None:
    return None if row is None else row.estimate


def markdown(result: DoseResult) -> str:
    meta = result.meta
    rows, band = _index(result)
    prov = meta.direction_provenance
    lines = [
        f"# Dose-response: {meta.direction} on {meta.model_name} ({meta.model})",
        "",
        f"- Sign: {meta.sign_convention}.",
        f"- Units: {meta.units}; layers and norms: "
        + "; ".join(f"L{v.layer} {v.name} (mean norm {v.mean_norm:.4g}, fitted on n={v.n_fit_items} items)"
                    for v in meta.layers) + ".",
        (f"- Direction: label {prov.get('label')}={prov.get('positive')}, probe {prov.get('probe')}, position "
         f"{prov.get('position')}, condition {prov.get('condition')}, regimes {prov.get('regimes')}."),
        f"- Target items: n={meta.n_items} {'/'.join(meta.requests)} items"
        + (f" of information-injection level {meta.injection}" if meta.injection else "")
        + f" ({meta.n_resolved} resolved, "
        f"{meta.n_unresolved} unresolved) from {meta.n_families} families, systems "
        f"{', '.join(meta.systems)}; "
        + (f"held out: the {len(meta.fit_families)} families the directions were fitted on are excluded "
           f"({len(meta.excluded_families)} of them are in this benchmark)."
           if meta.heldout else "IN-SAMPLE (heldout: false): fitted families are included."),
        (f"- Steering: every {'prompt position' if meta.positions == 'all' else 'last position'} and "
         f"every generated token of the steered layer; regime {meta.regime}, direct protocol; readouts "
         f"{', '.join(meta.readouts)}."),
        (f"- Null band: {NULL_BAND_RULE} (k={meta.n_random} random, {meta.n_relabel} label-free, "
         f"seed {meta.random_seed}); each band drawn here is the "
         + " and the ".join(band_name(k, what) for k, what in ((meta.n_random, "random directions"),
                                                                (meta.n_relabel, "label-free directions")) if k)
         + ". Ablation: the direction projected out of the layer's output (no dose)."),
        (f"- Intervals: {INTERVAL_METHOD}; B={meta.n_boot}, seed {meta.seed}. {N_UNIT}; "
         "rates in percent, log-odds in nats, changes paired against alpha = 0 on the same resamples."),
        "",
        "## Headline",
        "",
    ]
    text = result.text
    lines += [t for p in text if p.startswith(("**Headline", "**logprobs", "**generate")) for t in (p, "")]
    head_rows = []
    for h in result.headline:
        for block in (h.target, h.other):
            head_rows.append([h.readout, h.goal, block.group + (" (targeted)" if block is h.target else ""),
                              ", ".join(f"{c.chosen_on}: L{c.layer} {alpha_key(c.alpha)}" for c in h.choices),
                              fmt_estimate(block.stop_rate_at_0, "stop_rate"), fmt_estimate(block.stop_rate, "stop_rate"),
                              fmt_estimate(block.change, "stop_rate", sign=True),
                              fmt_estimate(block.log_odds_change, "log_odds"),
                              *(_place(block.null(kind, m)) for kind in NULL_SETS for m in ("log_odds", "stop_rate"))])
    if head_rows:
        lines += _table(["readout", "goal", "items", "chosen on half: setting", "stop rate at 0", "stop rate steered",
                         "change (points)", "log-odds change (nats)", "log-odds vs random", "stop rate vs random",
                         "log-odds vs label-free", "stop rate vs label-free"], head_rows)
        lines += ["", "Against each null, every one of its directions was given the probe's own cross-fitted choice "
                  "(its best setting on each half, scored on the other); on the targeted group, p = (1 + #null "
                  f"directions at least as far toward the goal) / (K + 1), beyond that null at p <= {SPECIFIC_P:g} / the "
                  "number of goals (the goals' claims share the 5%), with the margin over the nearest null direction; "
                  "**specific** to this direction only beyond both nulls (analysis.specificity); on the other group "
                  "the two-sided place."]
        split = meta.split
        lines += ["", f"Halves ({split and split.rule}, seed {split and split.seed}): "
                  + "; ".join(f"{h}: {len(f)} families" for h, f in (split and split.families) or ()) + "."]
    lines += ["", "## Per layer at the grid's extreme doses (no choice made on data)", ""]
    by_rows = []
    for h in result.by_layer:
        lo = h.log_odds
        by_rows.append([h.readout, f"L{h.layer}", h.goal, alpha_key(h.alpha),
                        fmt_estimate(h.change, "stop_rate", sign=True), _place(h.null),
                        fmt_estimate(lo and lo.change, "log_odds"), _place(lo and lo.null),
                        f"{h.other_group}: " + fmt_estimate(h.other_change, "stop_rate", sign=True),
                        _place((lo and lo.other_null) or h.other_null)])
    if by_rows:
        lines += _table(["readout", "layer", "goal (targeted group)", "alpha", "stop change", "vs random",
                         "log-odds change", "vs random", "other group: stop change", "vs random"], by_rows)
    else:
        lines.append("No dose of the needed sign in the grid (give both signs to read both goals).")
    if result.controls:
        lines += ["", "## Specificity controls (same raw doses; system all)", ""]
        lines += [p for p in text if p.startswith("**Controls")]
        ctl = []
        for c in result.controls:
            if c.measure not in ("stop_rate", "log_odds"):
                continue
            ctl.append([c.readout, f"L{c.layer}", alpha_key(c.alpha), c.control,
                        fixed(c.cosine_with_probe, 2, sign=True), c.group, c.measure,
                        fmt_estimate(c.change, c.measure, sign=True),
                        fmt_estimate(c.probe_change, c.measure, sign=True), _place(c)])
        lines += [""] + _table(["readout", "layer", "alpha", "control", "cos with probe", "items", "measure",
                                "control change", "probe change", "control vs random"], ctl)
        lines += ["", "Sources: " + "; ".join(f"L{k}: " + ", ".join(f"{c['name']} ({c['source']})" for c in v)
                                         for k, v in meta.controls.items())]
    if result.ablation:
        lines += ["", "## Ablation (necessity)", ""]
        lines += [f"- {a.readout}: {a.sentence}" for a in result.ablation]
    units = [p for p in text if p.startswith(("**Units", "**Null"))]
    if units:
        lines += ["", "## Units and null", "", *units]
    for readout in meta.readouts:
        for measure in MEASURES[readout]:
            title, unit = MEASURE_TITLES[measure]
            lines += ["", f"## {readout}: {title}", "", f"Unit: {unit}{' in percent' if measure in RATE_MEASURES else ''}."]
            for layer in [n.layer for n in meta.layers]:
                for system in meta.scopes:
                    counts = meta.scope_count(system)
                    scope = "all systems" if system == "all" else system
                    heading = f"### L{layer}, {scope} (n={counts.n_items} items, {counts.n_families} families)"
                    lines += ["", heading, ""]
                    body = []
                    for alpha in meta.alphas:
                        cells = [rows.get((readout, layer, "probe", alpha, g, system, measure)) for g in GROUPS]
                        nulls = [band.get((readout, layer, alpha, g, system, measure)) for g in GROUPS]
                        body.append([alpha_key(alpha), *(fmt_estimate(_estimate(c), measure) for c in cells),
                                     *(fmt_band(b, measure) if meta.n_random else "not run" for b in nulls)])
                    if meta.ablation:
                        cells = [rows.get((readout, layer, "ablation", None, g, system, measure)) for g in GROUPS]
                        body.append(["ablation", *(fmt_estimate(_estimate(c), measure) for c in cells), "", "", ""])
                    lines += _table(["alpha", *(f"probe: {g}" for g in GROUPS), *(f"random null: {g}" for g in GROUPS)],
                                    body)
    return "\n".join(lines) + "\n"


def plot_axis(measure: str) -> tuple[float, str]:
    """(factor applied to the stored values, y-axis label) of a measure's plots: rates in percent,
    as in every table of the report, log-odds in nats."""
    title, _ = MEASURE_TITLES[measure]
    return (100.0, f"{title}, % of items") if measure in RATE_MEASURES else (1.0, f"{title} (nats)")


def plot_curves(result: DoseResult, out: Path) -> list[str]:
    """One PNG per readout x measure x scope: rows = layers, columns = resolved / unresolved / all.
    A readout the random directions were not read with (--no-generate-sets) gets no null band and
    its all-systems figures only (per-system curves are in the tables; 0.85 s a figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    meta = result.meta
    rows, _ = _index(result)
    bands = {"null_band": _bands(result.null_band), "relabel_band": _bands(result.relabel_band)}
    alphas = list(meta.alphas)
    layers = [n.layer for n in meta.layers]
    written = []
    for readout in meta.readouts:
        with_sets = readout in meta.set_readouts
        for measure in MEASURES[readout]:
            title, unit = MEASURE_TITLES[measure]
            scale, axis_label = plot_axis(measure)
            for system in (meta.scopes if with_sets else ["all"]):
                fig, axes = plt.subplots(len(layers), len(GROUPS), figsize=(4.2 * len(GROUPS), 3.2 * len(layers)),
                                         squeeze=False, sharey=measure in RATE_MEASURES)
                for li, layer in enumerate(layers):
                    for gi, group in enumerate(GROUPS):
                        ax = axes[li][gi]
                        pts = [rows[(readout, layer, "probe", a, group, system, measure)].estimate for a in alphas]
                        y = scale * np.array([np.nan if p.value is None else p.value for p in pts], dtype=float)
                        lo = scale * np.array([np.nan if p.ci[0] is None else p.ci[0] for p in pts], dtype=float)
                        hi = scale * np.array([np.nan if p.ci[1] is None else p.ci[1] for p in pts], dtype=float)
                        n = max(p.n for p in pts)
                        ax.fill_between(alphas, lo, hi, color="C0", alpha=0.25, label="probe 95% interval")
                        ax.plot(alphas, y, "o-", color="C0", label="probe direction")
                        for key, what, k, style in (
                                ("null_band", "random null", meta.n_random, {"color": "0.5", "alpha": 0.3}),
                                ("relabel_band", "label-free null", meta.n_relabel,
                                 {"facecolor": "none", "edgecolor": "C2", "hatch": "///"})):
                            if not k or not with_sets:
                                continue
                            bs = [bands[key].get((readout, layer, a, group, system, measure)) for a in alphas]
                            bmin, bmax, bmean = (scale * _along(bs, f) for f in ("band_lo", "band_hi", "mean"))
                            ax.fill_between(alphas, bmin, bmax, label=band_name(k, f"{what} directions"), **style)
                            ax.plot(alphas, bmean, "--", color=style.get("edgecolor", "0.35"), label=f"{what} mean")
                        if meta.ablation:
                            ab = rows[(readout, layer, "ablation", None, group, system, measure)].estimate
                            if ab.value is not None:
                                ax.axhline(scale * ab.value, color="C3", ls=":", label="ablation (no dose)")
                                if ab.ci[0] is not None:
                                    ax.axhspan(scale * ab.ci[0], scale * ab.ci[1], color="C3", alpha=0.08)
                        if measure in RATE_MEASURES:
                            ax.set_ylim(-3, 103)
                        ax.axvline(0.0, color="0.8", lw=0.8)
                        ax.set_title(f"L{layer}, {group} (n={n} items)", fontsize=9)
                        ax.set_xlabel(RAW_ALPHA_AXIS if any(u.raw for u in meta.alpha_units.values()) else ALPHA_AXIS,
                                      fontsize=8)
                        ax.xaxis.set_major_locator(MaxNLocator(5))  # the dose grid's ticks ran together
                        if gi == 0:  # one label per row: long labels on every panel ran into their neighbours
                            ax.set_ylabel(axis_label, fontsize=8)
                axes[0][0].legend(fontsize=7, loc="best")
                scope = "all systems" if system == "all" else system
                counts = meta.scope_count(system)
                fig.suptitle(f"{title} ({readout}) vs dose: {meta.model_name}, {scope}, n={counts.n_items} "
                             f"items from {counts.n_families} families", fontsize=10)
                fig.tight_layout(rect=(0, 0, 1, 0.95))  # room for the suptitle
                name = ("" if readout == "logprobs" else "generate.") + measure + ("" if system == "all" else f".{system}")
                fig.savefig(out / f"{name}.png", dpi=90)
                plt.close(fig)
                written.append(f"{name}.png")
    return written


def _along(bands: Sequence[NullBandRow | None], field: str) -> np.ndarray:
    """One field of band rows along the doses; NaN where there is no row or no value."""
    got = [None if b is None else getattr(b, field) for b in bands]
    return np.array([np.nan if v is None else v for v in got], dtype=float)


def write_reports(plan: Plan, result: DoseResult) -> list[str]:
    plan.out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(plan.out / JSON_FILE, (json.dumps(result.to_json(), indent=1) + "\n").encode("utf-8"))
    atomic_write_bytes(plan.out / MD_FILE, markdown(result).encode("utf-8"))
    return [JSON_FILE, MD_FILE, *plot_curves(result, plan.out)]


__all__ = [
    "ALPHA_AXIS",
    "RAW_ALPHA_AXIS",
    "JSON_FILE",
    "MD_FILE",
    "MEASURE_TITLES",
    "RATE_MEASURES",
    "fmt_band",
    "fmt_estimate",
    "markdown",
    "plot_axis",
    "plot_curves",
    "write_reports",
]
