"""Markdown tables of a scored run (`bench.scoring.score`), one section per table group of seed 000.

Rates print as percentages with their 95% interval and n, `58.5 [55.6, 61.5] (n=576)`; costs as
plain numbers, `0.99 [0.96, 1.02] (n=576)`; paired differences in percentage points with a sign,
`+14.2 [+8.7, +20.5] (n=288)`. A measure without a value prints `NA (n=0)` or, when the inputs were
missing, the reason: `NA (no answer_initial records)` (core.estimate_text, the one formatter). A value fixed by design (core.bootstrap: the
same on every family resample, such as the random test's cost) prints without an interval:
`1.25 (fixed by design, n=576)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evprobe.bench.score_cells import cost, fmt_estimate, pct, plain, points, section_text, table_text
from evprobe.bench.score_index import CATEGORIES, HEADLINE, REPORT_PRICES, RULES
from evprobe.core.estimate_text import missing_text

LABELS: dict[str, str] = {
    "min_cost_choice": "Minimum cost choice",
    "stop_if_enough": "Stop if enough",
    "test_if_needed": "Test if needed",
    "both_correct_image_pairs": "Both correct, changed image",
    "both_correct_threshold_pairs": "Both correct, changed threshold",
    "same_choice_image_pairs": "Same choice, changed image",
    "same_choice_threshold_pairs": "Same choice, changed threshold",
    "enough_evidence": "Enough evidence",
    "useful_test_supplied": "Useful test supplied",
    "resolved_and_correct": "Resolved and correct",
    "mean_cost": "Mean cost",
    "validity_select": "Valid selections",
    "pecs": "PECS",
    "pecs_acc": "PECS: Acc (controls correct)",
    "pecs_abs_rec": "PECS: AbsRec (voids abstained)",
    "pecs_false_abs": "PECS: FalseAbs (controls abstained)",
    "known_answer": "Known answer",
    "unknown_answer": "Unknown answer",
    "action_agreement": "Action agreement",
    "unneeded_test": "Unneeded test",
    "useless_test": "Useless test",
    "early_stop": "Early stop",
    "repeat_known_all": "Repeat known test (all decisions)",
    "repeat_known_unresolved": "Repeat known test (unresolved decisions)",
    "definite_correct": "Definite answers correct",
    "identical_response_rate": "Identical responses in the pair",
    "always_stop": "Always stop",
    "repeat_known": "Repeat known test",
    "free_fall": "Free fall",
    "test_missing": "Test unknown parameter",
    "complete_report": "Complete report",
    "random_test": "Random test",
    "min_cost": "Minimum cost selector",
    "model": "Model selector",
    "model_exact_reader": "Model + exact reader",
    "read_ruler": "Read the ruler",
    "recover_property": "Infer parameter",
    "estimate_property": "Estimate the property",
    "estimate_outcome": "Estimate the outcome",
    "both_given": "Given parameters",
    "variant_base": "Base subset",
    "text_readings": "Text readings",
    "changed_rendering": "Changed rendering",
    "reworded": "Reworded question",
    "given_equations": "Given equations",
    "check_possibilities": "Check possible worlds",
    "no_initial_test": "No initial test",
}
COSTS = {"mean_cost"}  # headline measures in cost units, not rates
PLAIN = {"pecs"}  # a score in [0, 1] printed as a plain number, as seed 002 does


def headline_cell(name: str, est: dict[str, Any] | None) -> str:
    if name in COSTS:
        return cost(est)
    if name in PLAIN:
        return plain(est)
    return pct(est)


def difference_cell(name: str, est: dict[str, Any] | None) -> str:
    """A paired difference of a headline measure: rates in percentage points, costs and PECS signed."""
    if name in COSTS:
        return fmt_estimate(est, 1.0, 2, sign=True)
    if name in PLAIN:
        return fmt_estimate(est, 1.0, 3, sign=True)
    return points(est)


def _label(name: str) -> str:
    return LABELS.get(name, name.replace("_", " "))


def scores_markdown(scores: dict[str, Any], title: str) -> str:
    """Every section of a scored run as Markdown tables (the order of seed 000's appendix)."""
    s = scores
    parts = [f"# {title}\n"]
    meta = s.get("meta", {})
    if meta:
        parts.append(
            f"Intervals: {meta.get('n_boot')} family bootstrap resamples, seed {meta.get('seed')}, "
            f"{meta.get('n_families')} families; pointwise 95% percentile intervals, for rates "
            "the hull with a cluster Clopper-Pearson interval at the effective sample size (never "
            "zero width at 0% or 100%); `n=576 in 144 families` counts a number's units and the "
            "families its interval rests on (the effective n). "
            f"{meta.get('n_records')} records on {meta.get('n_items')} items.\n"
        )

    def rows(names: Sequence[str], source: dict[str, Any], fmt=pct) -> list[list[str]]:
        return [[_label(n), fmt(source.get(n))] for n in names]

    parts.append(
        section_text(
            "Choice (Table 11)",
            "Minimum cost choice over all decisions; stop if enough over resolved decisions, "
            "test if needed over unresolved ones. Mean cost of the model's own selections.",
            table_text(
                ["measure", "value"],
                rows(["min_cost_choice", "stop_if_enough", "test_if_needed"], s)
                + [[_label("mean_cost"), cost(s.get("mean_cost"))]],
            ),
        )
    )
    parts.append(
        section_text(
            "Pairs (Tables 12-13)",
            "Both choices of a pair correct, and the same decoded choice (two invalid replies "
            "count as the same). The reference's same-choice rate is 0.",
            table_text(
                ["measure", "changed image", "changed threshold"],
                [
                    [
                        "Both correct",
                        pct(s.get("both_correct_image_pairs")),
                        pct(s.get("both_correct_threshold_pairs")),
                    ],
                    [
                        "Same choice",
                        pct(s.get("same_choice_image_pairs")),
                        pct(s.get("same_choice_threshold_pairs")),
                    ],
                ],
            ),
        )
    )
    repeats = s.get("repeats", {})
    parts.append(
        section_text(
            "Evidence and answers (Tables 3, 17)",
            "Enough evidence and final success over decisions (final success averages the two "
            "hidden worlds); useful test supplied over the answers after the missing-property test "
            "or the combined report on unresolved decisions; repeat over unresolved property "
            "purchases.",
            table_text(
                ["measure", "value"],
                rows(["enough_evidence", "useful_test_supplied", "resolved_and_correct"], s)
                + [
                    [_label("repeat_known_unresolved"), pct(repeats.get("repeat_known_unresolved"))]
                ],
            ),
        )
    )
    answers = s.get("answers", {})
    hidden = s.get("hidden_alternatives", {})
    parts.append(
        section_text(
            "Initial answers (Table 18) and hidden alternatives (appendix D)",
            "Known answer over resolved decisions, unknown answer (says undetermined) over "
            "unresolved ones, agreement of 'undetermined' with buying a test over all decisions. "
            f"Hidden alternatives: {hidden.get('pairs', missing_text())} after-test pairs with identical "
            "inputs and opposite true answers; a deterministic answer rule scores exactly 50.0 on "
            "definite answers.",
            table_text(
                ["measure", "value"],
                rows(["known_answer", "unknown_answer", "action_agreement"], answers)
                + rows(["definite_correct", "identical_response_rate"], hidden),
            ),
        )
    )
    choices = s.get("choices", {})
    count_rows, rate_rows = [], []
    for group in ("resolved", "unresolved"):
        counts = choices.get(f"{group}_counts", {})
        count_rows.append(
            [group, str(counts.get("n", missing_text()))] + [str(counts.get(c, missing_text())) for c in CATEGORIES]
        )
        rate_rows.append([group] + [pct(choices.get(group, {}).get(c)) for c in CATEGORIES])
    parts.append(
        section_text(
            "Choices by category (Tables 19-20)",
            "Repeat measures the already observed property, missing the other one, both buys the "
            "combined report; free fall reveals neither.",
            table_text(["decisions", "n", *CATEGORIES], count_rows)
            + "\n\n"
            + table_text(["decisions", *CATEGORIES], rate_rows),
        )
    )
    errors = s.get("errors", {})
    parts.append(
        section_text(
            "Errors (Table 21)",
            "Unneeded test over resolved decisions (any valid test); useless test (repeat or free "
            "fall) and early stop over unresolved decisions.",
            table_text(
                ["measure", "value"], rows(["unneeded_test", "useless_test", "early_stop"], errors)
            ),
        )
    )
    parts.append(
        section_text(
            "Repeats (Tables 22-23)",
            "Share of single property purchases that measure the known property again; "
            "n = purchases.",
            table_text(
                ["measure", "value"], rows(["repeat_known_all", "repeat_known_unresolved"], repeats)
            ),
        )
    )
    policies = s.get("policies", {})
    parts.append(
        section_text(
            "Policy comparison (Tables 7, 24-29)",
            "Stored answer records recombined per rule, averaged over the two hidden worlds; an "
            "invalid model selection costs 0 and never succeeds. The exact reader scores enough "
            "evidence. A rule that reads no replies costs the same in every family by design: "
            "its cost has no interval (fixed by design).",
            table_text(
                ["rule", "resolved and correct", "mean cost"],
                [
                    [
                        _label(r),
                        pct(policies.get(r, {}).get("correct")),
                        cost(policies.get(r, {}).get("mean_cost")),
                    ]
                    for r in RULES
                    if r in policies
                ],
            ),
        )
    )
    repricing = s.get("repricing", {})
    keys = [f"{p:g}" for p in REPORT_PRICES if f"{p:g}" in repricing] or list(repricing)
    parts.append(
        section_text(
            "Repricing the combined report (Tables 30-33)",
            "The same selections scored with the combined report at each price; at price 1 the "
            "missing test and the report tie on unresolved decisions and both count as correct.",
            table_text(
                ["measure", *[f"price {k}" for k in keys]],
                [
                    ["Choice accuracy", *[pct(repricing[k].get("choice_accuracy")) for k in keys]],
                    ["Mean cost", *[cost(repricing[k].get("mean_cost")) for k in keys]],
                ],
            ),
        )
    )
    parts.append(
        section_text(
            "Perception and calculation (Table 34)",
            "Ruler reading within 5% of the true reading; recovered candidate value; answers with "
            "both properties given.",
            table_text(
                ["control", "value"],
                rows(["read_ruler", "recover_property", "both_given"], s.get("controls", {})),
            ),
        )
    )
    validity = s.get("validity", {})
    parts.append(
        section_text(
            "Validity (Tables 35-36)",
            "Fraction of replies the parser accepted.",
            table_text(
                ["requests", "valid"],
                [
                    [name.removeprefix("validity_").replace("_", " "), pct(est)]
                    for name, est in validity.items()
                ],
            ),
        )
    )
    if s.get("numeric"):
        parts.append(_numeric_section(s["numeric"]))
    if s.get("injection"):
        parts.append(_injection_section(s["injection"]))
    parts.append(_variants_section(s.get("variants", {})))
    by_system = s.get("by_system", {})
    if by_system:
        names = list(next(iter(by_system.values())))
        parts.append(
            section_text(
                "Per system (Tables 14-16)",
                "",
                table_text(
                    ["measure", *by_system],
                    [
                        [_label(n), *[pct(by_system[sys].get(n)) for sys in by_system]]
                        for n in names
                    ],
                ),
            )
        )
    if s.get("by_sub_scenario"):
        parts.append(_sub_scenario_section(s["by_sub_scenario"]))
    if s.get("reasoning"):
        parts.append(_reasoning_section(s["reasoning"]))
    parts.append(
        section_text(
            "PECS (seed 002, section 3.4)",
            "Over answer_initial and answer_after_test replies: controls are resolved items, voids "
            "unresolved ones. PECS = Acc x max(0, AbsRec - FalseAbs), per resample.",
            table_text(
                ["measure", "value"],
                [[_label("pecs"), plain(s.get("pecs"))]]
                + rows(["pecs_acc", "pecs_abs_rec", "pecs_false_abs"], s),
            ),
        )
    )
    if s.get("pecs_datasets"):
        parts.append(_pecs_datasets_section(s["pecs_datasets"], s))
    if s.get("voids"):
        from evprobe.bench.void_report import voids_section

        parts.append(voids_section(s["voids"]))
    coverage = s.get("coverage", {})
    if coverage:
        parts.append(
            section_text(
                "Coverage",
                "Records per request type; measures use the items that have records.",
                table_text(
                    ["requests", "records", "items", "share"],
                    [
                        [
                            name.replace("_", " "),
                            str(c["records"]),
                            str(c["items"]),
                            f"{100 * c['fraction']:.1f}%",
                        ]
                        for name, c in coverage.items()
                    ],
                ),
            )
        )
    if "resources" in s:  # a run scored from its folder (experiments.scoring_io): run.json's spend
        parts.append(_resources_section(s["resources"], s.get("run", {}).get("model", "")))
    return "\n".join(parts)


# run.json's resources (bench.backends.base.Resources.to_json), in the table's order and words
RESOURCE_COLUMNS = {"backend": "backend", "sessions": "sessions", "calls": "calls", "prompt_tokens": "prompt tokens",
                    "generated_tokens": "generated tokens", "seconds": "seconds in calls",
                    "generated_tokens_per_s": "generated tokens/s", "peak_memory_bytes": "peak memory"}


def _resources_section(resources: dict[str, Any] | None, model: str) -> str:
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


def _variants_section(variants: dict[str, Any]) -> str:
    if not variants.get("families"):
        return section_text("Variants (Tables 37-49)", variants.get("reason", "No variant subset."), "")
    rows = []
    for name, block in variants.items():
        if not isinstance(block, dict):
            continue
        rows.append(
            [
                _label(name),
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


def compare_markdown(named_scores: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """Several runs side by side: one row per headline measure, one column per run."""
    header = ["measure", *[name for name, _ in named_scores]]
    rows = [
        [_label(metric), *[headline_cell(metric, scores.get(metric)) for _, scores in named_scores]]
        for metric in HEADLINE
    ]
    table = table_text(header, rows) + "\n"
    sections = [scores.get("pecs_datasets") or {} for _, scores in named_scores]
    if any("datasets" in section for section in sections):
        table += "\n" + _compare_pecs(header, sections)
    return table


def at(tree: Any, *path: str) -> Any:
    """tree[path[0]][path[1]]..., or None where a key or a level is missing (scores written before a
    section existed)."""
    for key in path:
        tree = tree.get(key) if isinstance(tree, dict) else None
    return tree


def _compare_pecs(header: list[str], sections: list[dict[str, Any]]) -> str:
    """PECS per dataset of each run (seed 002's Table 9: datasets as rows, settings as columns), their
    equal-weight mean and the zero-boundary count; a run scored without them shows NA with why."""
    names = list(dict.fromkeys(n for section in sections for n in section.get("datasets", {})))

    def cell(section: dict[str, Any], *path: str) -> str:
        node = at(section, *path)
        if node is None:
            return missing_text(section.get("reason") or "not in this run's scores: rescore it")
        return plain(node)

    rows = [[f"PECS: {name}", *[cell(s, "datasets", name, "pecs") for s in sections]] for name in names]
    rows.append(["PECS: equal-weight mean", *[cell(s, "equal_weight_mean", "pecs") for s in sections]])
    rows.append(["Acc x AbsRec: equal-weight mean", *[cell(s, "equal_weight_mean", "naive") for s in sections]])
    rows.append(["zero boundary (datasets with J <= 0)",
                 *[f"{s['zero_boundary']['count']} of {s['zero_boundary']['of']}" if "zero_boundary" in s
                   else missing_text(s.get("reason") or "not in this run's scores: rescore it") for s in sections]])
    return "PECS per dataset (seed 002, Table 9; bench/pecs.py)\n\n" + table_text(header, rows) + "\n"


ACC_KEYS = ("acc_5", "acc_10", "acc_20", "acc_30")


def _numeric_section(numeric: dict[str, Any]) -> str:
    """Threshold accuracy (seed 003, eq. 6) at 5/10/20/30% and the mean log relative error."""
    counts = numeric.get("counts", {})
    rows = []
    for request, block in numeric.items():
        if request == "counts" or not isinstance(block, dict):
            continue
        excluded = counts.get(request, {}).get("log_error_excluded", {})
        left = ", ".join(f"{k} {v}" for k, v in excluded.items() if v) or "none"
        rows.append([_label(request), *[pct(block.get(k)) for k in ACC_KEYS],
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


def _injection_section(injection: dict[str, Any]) -> str:
    names = ("min_cost_choice", "both_correct_image_pairs", "enough_evidence", "resolved_and_correct",
             "validity_select")
    levels = injection.get("levels", {})
    rows = [[_label(n), *[headline_cell(n, levels[L].get(n)) for L in levels]] for n in names]
    rows += [[_label(n), *[pct(levels[L].get("answers", {}).get(n)) for L in levels]]
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
                       [[_label(n), *[points(diffs[L].get(n)) for L in diffs]] for n in shown])
    return section_text(
        "Information-injection levels (seed 003, section 4.6)",
        "Each level's selections and answers scored as a benchmark of their own (level 0 is the "
        "main measures above; same families and bootstrap seed, so resample b draws the same "
        "families at every level and a level's difference from level 0 is paired; the two levels' "
        "own intervals overlapping is not a test).",
        text,
    )


def _sub_scenario_section(cells: dict[str, Any]) -> str:
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
}


def _reasoning_section(block: dict[str, Any]) -> str:
    """Doubt in the reasoning traces and what became of it (bench.doubt)."""
    return section_text(
        "Doubt in reasoning (seed 002, section 5.3)",
        "A trace is the reasoning before the final answer (a <think> block, or the working above the ANSWER "
        "line); it doubts when it says the evidence is uncertain or insufficient. Invalid final answers stay in "
        "the denominators.",
        table_text(["measure", "rate (%)"], [[label, pct(block.get(name))] for name, label in REASONING_LABELS.items()]))


def _pecs_datasets_section(section: dict[str, Any], s: dict[str, Any]) -> str:
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

