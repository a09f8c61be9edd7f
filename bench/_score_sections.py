"""The sections of scores.md beyond seed 000's tables (bench.score_report calls them): resources,
variants, the numeric block, injection levels, sub-scenarios, reasoning (bench.doubt) and PECS by
dataset."""

from __future__ import annotations

from typing import Any

from evprobe.bench.ladder_report import ladder_text
from evprobe.bench.score_cells import headline_cell, label, pct, plain, points, rates_section, section_text, table_text
from evprobe.core.estimate_text import missing_text
from evprobe.core.json_types import JsonObject


# run.json's resources (bench.backends.base.Resources.to_json), in the table's order and words
RESOURCE_COLUMNS = {"backend": "backend", "sessions": "sessions", "calls": "calls", "prompt_tokens": "prompt tokens",
                    "generated_tokens": "generated tokens", "seconds": "seconds in calls",
                    "generated_tokens_per_s": "generated tokens/s", "peak_memory_bytes": "peak memory"}


def resources_section(resources: JsonObject | None, model: str) -> str:
    """What the run's backend spent (run.json's `resources`): one row, the backend's own counts
    (retries, cache hits, cost) as further columns; said, not tabled, when the run has none."""
    title = "Resources"
    if not resources:
        why = ("a scripted policy makes no model calls" if model.startswith("policy:") else
               "run.json records none (written before runs recorded them, or no session called the model)")
        return section_text(title, f"No resources: {why}.", "")
    names = list(RESOURCE_COLUMNS) + [k for k in resources if k not in RESOURCE_COLUMNS]
    names = [k for k in names if k in resources]
    sessions = resources.get("sessions")
    note = (f"Model calls, tokens and seconds inside calls summed over the run's {sessions} sessions that called "
            "the model" if sessions else
            "The last session that called the model (an earlier session of a resumed run is not in it)")
    note += ("; peak memory: the accelerator's, the largest of any session, where the backend can measure it "
             "(not on a CPU, nor behind a server).")
    return section_text(title, note, table_text([RESOURCE_COLUMNS.get(k, k.replace("_", " ")) for k in names],
                                        [[_resource_cell(k, resources[k]) for k in names]]))


def _resource_cell(name: str, value: Any) -> str:
    if value is None:
        return missing_text()
    if name == "peak_memory_bytes":
        return f"{value / 2**30:.2f} GiB" if value >= 2**30 else f"{value / 2**20:.1f} MiB"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def variants_section(variants: JsonObject) -> str:
    if not variants.get("families"):
        return section_text("Variants (Tables 37-49)", variants.get("reason", "No variant subset."), "")
    rows = []
    for name, block in variants.items():
        if not isinstance(block, dict):
            continue
        rows.append(
            [
                label(name),
                pct(block.get("min_cost_choice")),
                points(block.get("difference")) if "difference" in block else "",
                pct(block.get("repeat")),
            ]
        )
    return section_text(
        "Variants (Tables 37-49)",
        f"Minimum cost choice on the {variants['families']}-family subset; change in percentage "
        "points against the base subset with paired intervals (the same resampled families); "
        "repeat among single property purchases (no initial test: the matched base's test).",
        table_text(["condition", "min cost choice", "change (pp)", "repeat"], rows),
    )


ACC_KEYS = ("acc_5", "acc_10", "acc_20", "acc_30")


def numeric_section(numeric: JsonObject) -> str:
    """Threshold accuracy (seed 003, eq. 6) at 5/10/20/30% and the mean log relative error."""
    counts = numeric.get("counts", {})
    rows = []
    for request, block in numeric.items():
        if request == "counts" or not isinstance(block, dict):
            continue
        excluded = counts.get(request, {}).get("log_error_excluded", {})
        left = ", ".join(f"{k} {v}" for k, v in excluded.items() if v) or "none"
        rows.append([label(request), *[pct(block.get(k)) for k in ACC_KEYS],
                     plain(block.get("mean_log_error"), "replies") + f" (left out: {left})", pct(block.get("validity"))])
        for group, sub in block.get("by", {}).items():
            rows.append([f"  {group}", *[pct(sub.get(k)) for k in ACC_KEYS], "", ""])
    return section_text(
        "Numeric estimates: threshold accuracy (seed 003, eq. 6)",
        "Share of items whose reply is valid and within 5/10/20/30% of the reference value "
        "(invalid replies count as misses); mean |ln(estimate / reference)| over valid positive "
        "estimates, with the replies it leaves out. Read the ruler at 5% is Table 34's criterion.",
        table_text(["request", "5%", "10%", "20%", "30%", "mean log error", "valid"], rows),
    )


def injection_section(injection: JsonObject) -> str:
    names = ("min_cost_choice", "both_correct_image_pairs", "enough_evidence", "resolved_and_correct",
             "validity_select")
    levels = injection.get("levels", {})
    rows = [[label(n), *[headline_cell(n, levels[L].get(n)) for L in levels]] for n in names]
    rows += [[label(n), *[pct(levels[L].get("answers", {}).get(n)) for L in levels]]
             for n in ("known_answer", "unknown_answer")]
    for request in ("estimate_property", "estimate_outcome"):  # --numeric: threshold accuracy per level
        if any(request in levels[L].get("numeric", {}) for L in levels):
            rows.append([f"{request.replace('_', ' ')}: within 10%",
                         *[pct(levels[L].get("numeric", {}).get(request, {}).get("acc_10")) for L in levels]])
    text = table_text(["measure", *[f"level {L}" for L in levels]], rows)
    diffs = injection.get("differences", {})
    if diffs:
        shown = ("min_cost_choice", "stop_if_enough", "test_if_needed", "both_correct_image_pairs",
                 "enough_evidence", "validity_select")
        text += "\n\nLevel minus level 0, in percentage points, paired on the same family resamples:\n\n"
        text += table_text(["measure", *[f"level {L} - level 0" for L in diffs]],
                       [[label(n), *[points(diffs[L].get(n)) for L in diffs]] for n in shown])
    text += ladder_text(injection)  # bench.ladder_report: target-exclusive level, task means, filter, stages
    return section_text(
        "Information-injection levels (seed 003, section 4.6)",
        "Each level's selections and answers scored as a benchmark of their own (level 0 is the "
        "main measures above; same families and bootstrap seed, so resample b draws the same "
        "families at every level and a level's difference from level 0 is paired; the two levels' "
        "own intervals overlapping is not a test).",
        text,
    )


def sub_scenario_section(cells: JsonObject) -> str:
    """Per sub-scenario (bench.sub_scenarios): a system with the property its initial test measured."""
    rows = [[name, str(c["decisions"]), pct(c["min_cost_choice"]), pct(c["acc"]), pct(c["false_abs"]),
             pct(c["abs_rec"]), plain(c["pecs"])] for name, c in cells.items()]
    return section_text(
        "Per sub-scenario (seed 002, appendix K)",
        "A sub-scenario is a system with the property its initial test measured. Acc and FalseAbs over the "
        "answer requests the evidence settles, AbsRec over the others (answer_initial and answer_after_test).",
        table_text(["sub-scenario", "decisions", "min-cost choice (%)", "Acc (%)", "FalseAbs (%)", "AbsRec (%)",
                    "PECS"], rows))


REASONING_LABELS = {
    "traced": "answer replies with a reasoning trace",
    "doubt_on_voids": "traces doubting, on voids (unresolved)",
    "doubt_on_controls": "traces doubting, on controls (resolved)",
    "converted": "doubting void replies that abstain",
    "overridden": "doubting void replies that answer yes or no anyway",
    "doubt_among_void_failures": "traces doubting, among void failures (yes/no on voids; seed 002's Doubt)",
}


def reasoning_section(block: JsonObject) -> str:
    """Doubt in the reasoning traces and what became of it (bench.doubt)."""
    return rates_section(
        "Doubt in reasoning (seed 002, section 5.3)",
        "A trace is the reasoning before the final answer (a <think> block, or the working above the ANSWER "
        "line); it doubts when it says the evidence is uncertain or insufficient. Invalid final answers stay in "
        "the denominators.", REASONING_LABELS, block)


def pecs_datasets_section(section: JsonObject, s: JsonObject) -> str:
    """PECS per dataset, their equal-weight mean and the pooled values (bench.pecs)."""
    title = "PECS per dataset (seed 002, Table 2 and appendix M)"
    if "datasets" not in section:
        return section_text(title, f"Datasets: {section['dataset']}.", missing_text(section.get("reason")))
    mean, datasets = section["equal_weight_mean"], section["datasets"]
    table = [[name, pct(d["acc"]), pct(d["abs_rec"]), pct(d["false_abs"]), plain(d["j"]), plain(d["pecs"]),
             plain(d["naive"])] for name, d in datasets.items()]
    table.append(["equal-weight mean", pct(mean["acc"]), "", "", plain(mean["j"]), plain(mean["pecs"]),
                 plain(mean["naive"])])
    table.append(["pooled", pct(s.get("pecs_acc")), pct(s.get("pecs_abs_rec")), pct(s.get("pecs_false_abs")),
                 plain(section["pooled_j"]), plain(s.get("pecs")), plain(section["pooled_naive"])])
    zero = section["zero_boundary"]
    named = f" ({', '.join(zero['datasets'])})" if zero["datasets"] else ""
    note = (f"Datasets: {section['dataset']}. J = AbsRec - FalseAbs (Youden's J); PECS = Acc x max(0, J); "
            "Acc x AbsRec is the naive product, blind to false abstention (appendix M.2). The equal-weight "
            "mean averages the datasets on every resample, as seed 002 reports; the pooled row counts every "
            "item once. A value every resample reproduces prints without an interval, saying why.\n\n"
            f"zero boundary: {zero['count']} of {zero['of']} datasets{named} with J <= 0, so PECS = 0 "
            "(appendix M.3)")
    return section_text(title, note, table_text(["dataset", "Acc (%)", "AbsRec (%)", "FalseAbs (%)", "J", "PECS",
                                         "Acc x AbsRec"], table))
