"""scores.md's V-IRD tables (seed 003) under the injection levels' section: the target-exclusive
differences, the means over tasks, the prerequisite filter and the failure stages
(`bench.ladder_scoring`, `bench.task_means`, `bench.prerequisites`, `bench.failure_stages`); each
only where scores.json's injection block has it."""

from __future__ import annotations

from evprobe.bench.score_cells import label, pct, points, table_text
from evprobe.core.json_types import JsonObject

TE = "-1"
DIFFERENCES = ("min_cost_choice", "stop_if_enough", "test_if_needed", "both_correct_image_pairs", "enough_evidence",
               "validity_select")
MEANS = (("decisions", "min_cost_choice", "decisions: min cost choice"),
         ("decisions", "resolved_and_correct", "decisions: resolved and correct"),
         ("estimates", "acc_10", "estimates: within 10%"), ("all", "acc_5", "all tasks: 5%"),
         ("all", "acc_10", "all tasks: 10%"), ("all", "acc_20", "all tasks: 20%"), ("all", "acc_30", "all tasks: 30%"))
STAGE_ROWS = (("accuracy", "accuracy"), ("stage_I", "I: discovery"), ("stage_II", "II: association"),
              ("stage_III", "III: logic"), ("untraced", "untraced"))


def _te_differences(injection: JsonObject) -> str:
    diffs = injection.get("differences_target_exclusive")
    if not diffs:
        return ""
    return ("\n\nLevel minus level -1 (target-exclusive, seed 003's level 0), in percentage points, paired on the "
            "same family resamples:\n\n" + table_text(["measure", *[f"level {L} - level -1" for L in diffs]],
                                                    [[label(n), *[points(diffs[L].get(n)) for L in diffs]]
                                                     for n in DIFFERENCES]))


def _task_means(injection: JsonObject) -> str:
    block = injection.get("task_means", {})
    levels = block.get("levels", {})
    rows = [[name, *[pct(levels[L].get(group, {}).get(key)) for L in levels]] for group, key, name in MEANS
            if any(key in levels[L].get(group, {}) for L in levels)]
    if not rows:
        return ""
    return ("\n\nMean over tasks (seed 003, Tables 2 and 4: every task weighs alike; estimates: one task per "
            "quantity, decisions: one per system, all: both, as the seed's Average):\n\n"
            + table_text(["mean over tasks", *[f"level {L}" for L in levels]], rows))


def _prerequisites(injection: JsonObject) -> str:
    block = injection.get("prerequisites")
    if not block:
        return ""
    if "families" not in block:
        return f"\n\nPrerequisite filter (seed 003, section 4.3): {block.get('reason')}."
    fam = block["families"]
    text = (f"\n\nPrerequisite filter (seed 003, section 4.3): {fam['verified']} of {fam['of']} families verified "
            f"(read the ruler within 5% and answer with both properties given, every reply; failed recognition "
            f"{fam['failed_recognition']}, failed knowledge {fam['failed_knowledge']}, unchecked {fam['unchecked']})")
    if "filtered" not in block:
        return text + f"; {block.get('reason')}."
    levels = block["filtered"]["levels"]
    return text + ". On the verified families alone:\n\n" + table_text(
        ["measure (verified families)", *[f"level {L}" for L in levels]],
        [[label(n), *[pct(levels[L].get(n)) for L in levels]] for n in ("min_cost_choice", "resolved_and_correct")])


def _stages(injection: JsonObject) -> str:
    block = injection.get("failure_stages")
    if not block:
        return ""
    if "levels" not in block:
        return f"\n\nFailure stages (seed 003, section 4.5): {block.get('reason')}."
    cols = [(L, g) for L, groups in block["levels"].items() for g in groups]
    return ("\n\nFailure stages (seed 003, section 4.5, Table 3), read from the reasoning traces by rule: accuracy "
            "over every reply, each stage's share over the failures (untraced failures included):\n\n"
            + table_text(["share", *[f"level {L} {g}" for L, g in cols]],
                         [[name, *[pct(block["levels"][L][g].get(key)) for L, g in cols]] for key, name in STAGE_ROWS]))


def ladder_text(injection: JsonObject) -> str:
    """The V-IRD tables as Markdown, to follow the injection section's own tables ("" when none apply)."""
    return _te_differences(injection) + _task_means(injection) + _prerequisites(injection) + _stages(injection)


__all__ = ["ladder_text"]
