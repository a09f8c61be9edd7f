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

from evprobe.bench.score_cells import (
    at,
    cost,
    headline_cell,
    label,
    pct,
    plain,
    section_text,
    table_text,
)
from evprobe.bench import budget_scoring
from evprobe.bench.score_index import CATEGORIES, HEADLINE, REPORT_PRICES, RULES
from evprobe.bench._score_sections import (
    injection_section,
    numeric_section,
    pecs_datasets_section,
    reasoning_section,
    resources_section,
    sub_scenario_section,
    variants_section,
)
from evprobe.core.estimate_text import missing_text
from evprobe.core.json_types import JsonObject


def scores_markdown(scores: JsonObject, title: str, *, reading: str | None = None) -> str:
    """Every section of a scored run as Markdown tables (the order of seed 000's appendix); `reading`, a
    line under the title saying which rubric read the replies (free runs only: the letter protocols'
    scores.md is unchanged)."""
    s = scores
    parts = [f"# {title}\n"]
    if reading is not None:
        parts.append(f"{reading}\n")
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

    def rows(names: Sequence[str], source: JsonObject, fmt=pct) -> list[list[str]]:
        return [[label(n), fmt(source.get(n))] for n in names]

    parts.append(
        section_text(
            "Choice (Table 11)",
            "Minimum cost choice over all decisions; stop if enough over resolved decisions, "
            "test if needed over unresolved ones. Mean cost of the model's own selections.",
            table_text(
                ["measure", "value"],
                rows(["min_cost_choice", "stop_if_enough", "test_if_needed"], s)
                + [[label("mean_cost"), cost(s.get("mean_cost"))]],
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
                    [label("repeat_known_unresolved"), pct(repeats.get("repeat_known_unresolved"))]
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
                        label(r),
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
        parts.append(numeric_section(s["numeric"]))
    if s.get("injection"):
        parts.append(injection_section(s["injection"]))
    parts.append(variants_section(s.get("variants", {})))
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
                        [label(n), *[pct(by_system[sys].get(n)) for sys in by_system]]
                        for n in names
                    ],
                ),
            )
        )
    if s.get("by_sub_scenario"):
        parts.append(sub_scenario_section(s["by_sub_scenario"]))
    if s.get("reasoning"):
        parts.append(reasoning_section(s["reasoning"]))
    if s.get(budget_scoring.SECTION):
        parts.append(budget_scoring.budget_section(s[budget_scoring.SECTION]))
    parts.append(
        section_text(
            "PECS (seed 002, section 3.4)",
            "Over answer_initial and answer_after_test replies: controls are resolved items, voids "
            "unresolved ones. PECS = Acc x max(0, AbsRec - FalseAbs), per resample.",
            table_text(
                ["measure", "value"],
                [[label("pecs"), plain(s.get("pecs"))]]
                + rows(["pecs_acc", "pecs_abs_rec", "pecs_false_abs"], s),
            ),
        )
    )
    if s.get("pecs_datasets"):
        parts.append(pecs_datasets_section(s["pecs_datasets"], s))
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
        parts.append(resources_section(s["resources"], s.get("run", {}).get("model", "")))
    return "\n".join(parts)


def compare_markdown(named_scores: Sequence[tuple[str, JsonObject]]) -> str:
    """Several runs side by side: one row per headline measure, one column per run."""
    header = ["measure", *[name for name, _ in named_scores]]
    rows = [
        [label(metric), *[headline_cell(metric, scores.get(metric)) for _, scores in named_scores]]
        for metric in HEADLINE
    ]
    table = table_text(header, rows) + "\n"
    sections = [scores.get("pecs_datasets") or {} for _, scores in named_scores]
    if any("datasets" in section for section in sections):
        table += "\n" + _compare_pecs(header, sections)
    return table


def _compare_pecs(header: list[str], sections: list[JsonObject]) -> str:
    """PECS per dataset of each run (seed 002's Table 9: datasets as rows, settings as columns), their
    equal-weight mean and the zero-boundary count; a run scored without them shows NA with why."""
    names = list(dict.fromkeys(n for section in sections for n in section.get("datasets", {})))

    def cell(section: JsonObject, *path: str) -> str:
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
