"""Page one of `evprobe report`: what was run, one headline figure, one table of the headline
numbers (each with its interval and n) and sentences saying what they show.

Sources, each the first found under the report's folders (a part that is absent is left out and
the page says so): behaviour from `scores.json`, the probe from the `sweep.json` of label
`resolved` (else the first sweep), steering from `dose_response.json`, the known-answer checks
from `known_answer.json`. Nothing is computed here that the parts do not hold: the page reads
their numbers, never re-derives them.

The headline figure (`summary.png`):
- left: the probe's AUROC by layer at the position the nested estimate chose, with each layer's
  95% interval as a band, the control tasks' mean AUROC at each layer (Hewitt and Liang: what a
  probe reaches on a random function of the cell; a probe worth reading sits above it), chance,
  and the nested estimate (layer and position chosen without test labels) as a point with its
  interval;
- right: the dose-response at the layer the cross-fitted headline chose: the paired change of the
  stop log-odds (nats) against alpha, for resolved and unresolved items with their intervals,
  beside the random directions' 2.5-97.5% band at the same doses.
Units: AUROC as a number in [0, 1]; rates in percent and changes of rates in points; log-odds in
nats (the same as every table of the report).
"""

from __future__ import annotations

from evprobe.core.estimate_text import estimate_text
from evprobe.core.json_files import parse_json
from dataclasses import dataclass
from pathlib import Path
from evprobe.core.json_types import JsonObject


@dataclass(frozen=True)
class Sources:
    """The JSON files the summary reads (None where the folders hold none)."""

    scores: Path | None
    sweep: Path | None
    dose: Path | None
    known_answer: Path | None


LADDER_MD = "ladder.md"


def inside_ladder(path: Path) -> bool:
    """A file of an `evprobe ladder` folder's per-level sweep (LADDER/L<level>/sweep.*): the ladder
    reports it, so neither the headline probe nor the report's probe-sweep part takes it."""
    return path.parent.name[:1] == "L" and (path.parent.parent / LADDER_MD).is_file()


def _found(roots: list[Path], name: str, skip: Path | None) -> list[Path]:
    """Every `name` under the roots, in order, except under `skip` (the report's own folder)."""
    return [p for root in roots for p in sorted(root.rglob(name)) if skip is None or skip not in p.resolve().parents]


def find_sources(roots: list[Path], out: Path | None = None) -> Sources:
    skip = out.resolve() if out is not None else None

    def first(name: str) -> Path | None:
        return next(iter(_found(roots, name, skip)), None)

    sweeps = [p for p in _found(roots, "sweep.json", skip) if not inside_ladder(p)]
    preferred = [p for p in sweeps if p.parent.name == "resolved"]
    sweep = (preferred or sweeps or [None])[0]
    return Sources(first("scores.json"), sweep, first("dose_response.json"), first("known_answer.json"))


def _load(path: Path | None) -> JsonObject | None:
    if path is None:
        return None
    try:
        data = parse_json(path.read_text(encoding="utf-8"), path, "")  # bounded: deep nesting is no traceback
    except (OSError, ValueError):  # not UTF-8, not JSON, nested too deep
        return None  # the part's own page shows what it holds; the summary leaves it out
    return data if isinstance(data, dict) else None  # not an object: left out the same way


def headline_rows(scores: dict | None, sweep: dict | None, dose: dict | None,
                  known: dict | None) -> list[tuple[str, str, str]]:
    """(measure, estimate with interval and n, what it is) rows of the headline table."""
    from evprobe.bench.score_cells import pct, plain, points
    from evprobe.experiments.dose_response.formatting import crossfit_setting, fmt_estimate
    from evprobe.probes.chance import chance_reading
    from evprobe.probes.control_tasks import fmt_selectivity
    from evprobe.probes.factors import FACTORS_MEANS
    from evprobe.probes.sweep_row import auroc_json

    rows = []
    if scores:
        rows.append(("minimum-cost choice (%)", pct(scores.get("min_cost_choice")),
                     "selections where the model bought exactly what the decision needs"))
        rows.append(("stop if enough (%)", pct(scores.get("stop_if_enough")), "resolved decisions answered at once"))
        rows.append(("test if needed (%)", pct(scores.get("test_if_needed")),
                     "unresolved decisions that bought the missing measurement"))
    best = (sweep or {}).get("best") or {}
    if best.get("layer") is not None:
        rows.append((f"probe AUROC, {sweep.get('label', 'label')} (nested)", plain(auroc_json(best)),
                     f"layer {best['layer']}, position {best['position']}, chosen without test labels; "
                     + chance_reading(best, _row_at(sweep, best["layer"], best["position"]))))
        row = _row_at(sweep, best["layer"], best["position"])
        sel = row.get("selectivity")
        if sel:
            rows.append(("selectivity (AUROC minus control tasks)", fmt_selectivity(sel),
                         SELECTIVITY_MEANS.format(times=f"1 time in {sel['k'] + 1}" if sel.get("k") else "rarely")))
        versus = row.get("factors") or {}
        if versus.get("factors"):
            closest = min(versus["factors"], key=lambda r: r["difference"])
            rows.append((f"AUROC minus the closest design factor ({closest['field']})",
                         estimate_text({"value": closest["difference"], "ci": closest["ci"], "n": best.get("n"),
                                        "n_families": row.get("n_families")}, 3,
                                       sign=True),
                         FACTORS_MEANS.format(verdict="singled out" if versus.get("singled_out") else "not singled out")))
    for h in (dose or {}).get("headline") or []:
        if h.get("readout", "logprobs") != "logprobs":
            continue
        t = h["target"]
        rows.append((f"steering: {h['goal']}, stop log-odds change (nats)",
                     fmt_estimate(t.get("log_odds_change"), "log_odds"),
                     f"{h['group']} items, cross-fitted at {crossfit_setting(h)}"))
        rows.append((f"steering: {h['goal']}, stop-rate change (points)", points(t.get("change")),
                     f"{h['group']} items, same setting"))
    if known:
        checks = known.get("checks") or []
        passed = sum(1 for c in checks if c.get("passed") is True)
        rows.append(("known-answer checks passed", f"{passed} of {len(checks)}", "the organism's planted answers"))
    return rows


def _row_at(sweep: dict, layer: int, position: str) -> JsonObject:
    return next((r for r in sweep.get("rows", []) if r["layer"] == layer and r["position"] == position), {})


def sentences(scores: dict | None, sweep: dict | None, dose: dict | None) -> list[str]:
    """What the headline numbers show, and what they do not, in a few generated sentences."""
    from evprobe.bench.score_cells import pct
    from evprobe.probes.chance import chance_reading
    from evprobe.probes.control_tasks import fmt_selectivity
    from evprobe.probes.factors import fmt_factors
    from evprobe.probes.sweep_row import auroc_json

    out = []
    if scores and (m := scores.get("min_cost_choice")) and m.get("value") is not None:
        out.append(f"Behaviour: the model chose the minimum-cost action on {pct(m)} of its selections; the "
                   "detail page splits this by resolved and unresolved decisions and by system.")
    best = (sweep or {}).get("best") or {}
    if best.get("layer") is not None:
        row = _row_at(sweep, best["layer"], best["position"])
        sel = (row.get("selectivity") or {})
        label = sweep.get("label", "the label")
        text = (f"Probe: {label} is decoded at AUROC {estimate_text(auroc_json(best), 3)} at "
                f"layer {best['layer']} / {best['position']} (nested estimate: chosen on training folds only); "
                f"{chance_reading(best, row)}.")
        if sel.get("value") is not None:
            text += " Against control tasks its selectivity is " + fmt_selectivity(sel) + "; " + _selectivity_reading(sel)
        factors = fmt_factors(row.get("factors"))
        if factors:
            text += (f" Beside the design's own factors, decoded there on the same rows with the same probe and folds, "
                     f"it is {factors}.")
            if not (row.get("factors") or {}).get("singled_out"):
                text += (f" So the probe shows {label} is readable there, not that the representation is about it "
                         "rather than about the design's factors.")
        out.append(text + " Decodability alone does not show the model uses it (the steering below tests that).")
    for h in (dose or {}).get("headline") or []:
        if h.get("readout", "logprobs") != "logprobs":
            continue
        e = h["target"].get("log_odds_change") or {}
        if e.get("value") is None:
            continue
        out.append(f"Steering ({h['goal']}): the probe direction moved the {h['group']} items' stop log-odds by "
                   f"{estimate_text(e, 2, sign=True, unit='nats')}; "
                   + _against_nulls(h["target"]))
    return out


SELECTIVITY_MEANS = ("interval from the control tasks' own spread; above 0 = decoded better than every random "
                     "function of the cell, which a label that is one more such function does {times}; it does not "
                     "compare the label with the design's own factors (next row)")


def _selectivity_reading(sel: JsonObject) -> str:
    """What the selectivity at the nested best row shows (probes.control_tasks: the verdict's rule)."""
    if sel.get("selective") is None:
        return "too few control tasks for a verdict."
    if sel["selective"]:
        return (f"it is decoded better than every one of the {sel.get('k')} random functions of the cell (a label "
                f"that is just another cell function does that 1 time in {sel.get('k', 0) + 1}); that compares it "
                "with random functions of the cell, not with the design's own factors.")
    return "it is not selective: some random function of the cell is decoded as well."


def _against_nulls(target: JsonObject) -> str:
    """Where the cross-fitted effect sits against each null, every null direction given the same
    cross-fitted choice (analysis.specificity: its rule; benchmarks/steering_null_power.py its size and
    power): the label-free directions first, the isotropic band as its own statement, then the claim
    both together allow ("specific to this direction" only beyond both)."""
    from evprobe.analysis.specificity import NULL_SETS, joint_text, verdict_text

    nulls = target.get("null") or {}
    if not any((nulls.get(kind) or {}).get("log_odds") for kind in NULL_SETS):
        return "no null directions were run, so nothing says the direction is special."
    parts = [verdict_text((nulls.get(kind) or {}).get("log_odds"), kind, "nats") for kind in ("relabel", "random")]
    joint = (target.get("specific") or {}).get("log_odds")
    claim = f" So {joint_text(joint)}." if joint else ""
    return f"it lies {parts[0]}; and {parts[1]}.{claim}"


def summary_png(sweep: dict | None, dose: dict | None, path: Path) -> Path | None:
    """The headline figure (module docstring); None when neither a sweep nor a dose-response exists."""
    best = (sweep or {}).get("best") or {}
    have_probe = best.get("layer") is not None
    layer = _steered_layer(dose)
    if not have_probe and layer is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    panels = int(have_probe) + int(layer is not None)
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4), squeeze=False)
    k = 0
    if have_probe:
        ax = axes[0][k]
        k += 1
        rows = sorted((r for r in sweep["rows"] if r["position"] == best["position"] and r.get("auroc") is not None),
                      key=lambda r: r["layer"])
        xs = np.array([r["layer"] for r in rows])
        ax.plot(xs, [r["auroc"] for r in rows], "o-", color="C0", label=f"probe ({best['position']})")
        ax.fill_between(xs, [r["ci"][0] for r in rows], [r["ci"][1] for r in rows], color="C0", alpha=0.2,
                        label="95% interval")
        ctl = [(r["layer"], r["control_tasks"]["mean"]) for r in rows if (r.get("control_tasks") or {}).get("mean")]
        if ctl:
            ax.plot(*zip(*ctl), "s--", color="C3", label="control tasks (mean)")
        ax.axhline(0.5, ls=":", color="C7", label="chance")
        dropped = dropped_layers(sweep)
        if dropped:  # every layer the panel has no AUROC for is drawn at chance and named, never hidden
            ax.plot([layer for layer, _ in dropped], [0.5] * len(dropped), "x", ms=10, mew=2, color="C7",
                    label="not scored: " + ", ".join(f"L{layer} ({short})" for layer, (short, _) in dropped))
            xs = np.array(sorted({*xs.tolist(), *(layer for layer, _ in dropped)}))
        lo, hi = best["ci"]
        ax.errorbar([best["layer"]], [best["auroc"]], yerr=[[best["auroc"] - lo], [hi - best["auroc"]]], fmt="*",
                    ms=14, color="k", capsize=4, label="nested estimate")
        ax.set(xlabel="layer", ylabel="AUROC", ylim=(0.0, 1.05),
               title=f"probe: {sweep.get('label', '')} by layer")
        ax.set_xticks(xs)
        ax.legend(loc="lower right", fontsize=8)
    if layer is not None:
        ax = axes[0][k]
        _dose_panel(ax, dose, layer)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def dropped_layers(sweep: dict | None) -> list[tuple[int, tuple[str, str]]]:
    """The layers at the nested best position that have no AUROC, each with (a short reason for the
    plot's legend, the sweep's own reason for the text): the headline panel shows them, not hides them."""
    best = (sweep or {}).get("best") or {}
    if best.get("layer") is None:
        return []
    out = []
    for r in sorted((r for r in sweep["rows"] if r["position"] == best["position"] and r.get("auroc") is None),
                    key=lambda r: r["layer"]):
        short = "degenerate" if r.get("degenerate") else "skipped" if r.get("skipped") else "no AUROC"
        out.append((r["layer"], (short, r.get("reason") or r.get("skipped") or "no AUROC recorded")))
    return out


def _steered_layer(dose: dict | None) -> int | None:
    """The layer the cross-fitted headline chose most often (the lower on ties); None without one."""
    layers = [c["layer"] for h in (dose or {}).get("headline") or [] if h.get("readout", "logprobs") == "logprobs"
              for c in h["choices"]]
    if not layers:
        return None
    return min(set(layers), key=lambda x: (-layers.count(x), x))


def _band_size(dose: dict, key: str) -> int:
    """How many directions made the band `key` (meta n_random / n_relabel)."""
    return int((dose.get("meta") or {}).get("n_random" if key == "null_band" else "n_relabel") or 0)


def _dose_panel(ax, dose: dict, layer: int) -> None:
    from evprobe.analysis.specificity import band_name

    rows = [r for r in dose["rows"] if r["readout"] == "logprobs" and r["system"] == "all"
            and r["measure"] == "log_odds" and (r["kind"] == "baseline" or (r["kind"] == "probe" and r["layer"] == layer))]
    for i, group in enumerate(("resolved", "unresolved")):
        pts = sorted((r["alpha"], r["delta_vs_0"]) for r in rows if r["group"] == group)
        if not pts:
            continue
        xs = [a for a, _ in pts]
        vs = [d["value"] for _, d in pts]
        los = [d["value"] - d["ci"][0] for _, d in pts]
        his = [d["ci"][1] - d["value"] for _, d in pts]
        ax.errorbar(xs, vs, yerr=[los, his], fmt="o-", color=f"C{i}", capsize=3, label=f"probe, {group} items")
    # the random band shaded, the label-free band hatched (no fill, an opaque hatch in the group's colour:
    # a hatch inherits the patch's alpha, so alpha 0 drew nothing and left the legend without a swatch)
    for key, what, style in (("null_band", "random directions", {"alpha": 0.15}),
                             ("relabel_band", "label-free directions", {"hatch": "///", "facecolor": "none",
                                                                         "lw": 0.0})):
        for i, group in enumerate(("resolved", "unresolved")):
            band = [(b["alpha"], b["effect_lo"], b["effect_hi"]) for b in dose.get(key, [])
                    if b["readout"] == "logprobs" and b["layer"] == layer and b["system"] == "all"
                    and b["measure"] == "log_odds" and b["group"] == group]
            if band:
                pairs = sorted([(0.0, 0.0, 0.0), *band])  # alpha = 0 is the unsteered model: no spread
                colour = {"edgecolor": f"C{i}"} if "hatch" in style else {"color": f"C{i}"}
                ax.fill_between([a for a, _, _ in pairs], [lo for _, lo, _ in pairs], [hi for _, _, hi in pairs],
                                **colour, **style, label=f"{group}: {band_name(_band_size(dose, key), what)}")
    ax.axhline(0.0, ls=":", color="C7")
    ax.set(xlabel="alpha (mean residual norms; + toward measuring)", ylabel="change in stop log-odds (nats)",
           title=f"steering at layer {layer} (cross-fitted choice)")
    ax.legend(loc="best", fontsize=8)


def summary_markdown(roots: list[Path], out: Path, title: str, banner: str | None,
                     details: list[tuple[str, str]]) -> str:
    """Page one (module docstring). `details`: (heading, relative link) of each detail page."""
    src = find_sources(roots, out)
    scores, sweep, dose, known = (_load(p) for p in (src.scores, src.sweep, src.dose, src.known_answer))
    lines = [f"# {title}", ""]
    if banner:
        lines += [f"> **{banner}**", ""]
    model = (dose or {}).get("meta", {}).get("model") or (sweep or {}).get("model")
    if not model and src.scores is not None:
        from evprobe.bench.json_schema import read_run_meta
        from evprobe.core.errors import InputError

        try:  # run.json's one schema; a damaged one leaves the model unnamed here
            model = read_run_meta(src.scores.parent).model
        except InputError:
            model = None
    lines += ["## Summary", "", f"- Model: `{model or 'not recorded'}`.",
              "- Run: " + ", ".join(h for h, _ in details) + "." if details else "- Run: nothing found.", ""]
    png = summary_png(sweep, dose, out / "summary.png")
    if png is not None:
        lines += ["![Headline: probe AUROC by layer with control tasks; dose-response at the chosen layer with "
                  "the random-direction band](summary.png)", "",
                  "*Left: a probe worth reading rises above the control tasks and chance; the star is the honest "
                  "estimate. Right: the probe's dose-response against the shaded band of random directions of the "
                  "same size and the hatched band of label-free directions (fitted like the probe once the label carries "
                  "nothing; one of each per group, in "
                  "its colour); the verdicts below compare the cross-fitted effect with those directions given the "
                  "same cross-fitted choice.*", ""]
        dropped = [f"Not scored in the left panel (drawn as x at chance): L{layer} at {sweep['best']['position']}: "
                   f"{why}." for layer, (_, why) in dropped_layers(sweep)]
        lines += [*dropped, ""] if dropped else []
    rows = headline_rows(scores, sweep, dose, known)
    if rows:
        lines += ["| measure | estimate [95% CI] (n) | what it is |", "|---|---|---|"]
        lines += [f"| {m} | {e} | {w} |" for m, e, w in rows]
        lines.append("")
    text = sentences(scores, sweep, dose)
    if text:
        lines += [*(f"- {t}" for t in text), ""]
    missing = [name for name, p in (("behaviour", src.scores), ("probe sweep", src.sweep),
                                    ("dose-response", src.dose)) if p is None]
    if missing:
        lines += [f"Not in these folders: {', '.join(missing)}.", ""]
    if details:
        lines += ["## Details", "", *(f"- [{h}]({link})" for h, link in details), ""]
    return "\n".join(lines)


__all__ = ["LADDER_MD", "Sources", "dropped_layers", "find_sources", "inside_ladder", "headline_rows", "sentences", "summary_markdown", "summary_png"]
