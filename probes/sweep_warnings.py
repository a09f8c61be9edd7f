"""The warnings of a sweep (`SweepResult.warnings`): each problem said once, in one line, with
the setting that addresses it (printed by `evprobe sweep` on stderr and at the top of sweep.md;
the other parts of the report refer to them rather than repeating them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from evprobe.probes.control_tasks import DEFAULT_CONTROL_TASKS, MIN_VERDICT_TASKS, missing_cells_warning
from evprobe.probes.controls import EXTREME_SDS
from evprobe.probes.user_words import is_own

if TYPE_CHECKING:
    from evprobe.core.bootstrap import Estimate
    from evprobe.probes.captures import CaptureSet
    from evprobe.probes.label_sets import LabelSet
    from evprobe.probes.controls import LeakageCheck
    from evprobe.probes.sweep import ControlTasksInfo, SweepRow

PAIR_FIELDS = ("image_pair_id", "threshold_pair_id")
BENCHMARK_VARIES = " (in the benchmark: the measurement and the threshold)"  # not said of your own capture


def sweep_warnings(rows: Sequence[SweepRow], baselines: dict[str, Estimate], labelset: LabelSet,
              tasks: ControlTasksInfo, check: LeakageCheck | None, captures: CaptureSet | None = None) -> list[str]:
    out = []
    for cap in captures.captures if captures is not None else ():
        if cap.nonfinite is not None:  # rows left out at read (nonfinite="drop"): said in sweep.md too
            out.append(f"ROWS LEFT OUT FOR NaN OR inf: {cap.nonfinite.text(cap.path)}")
    far = [r for r in rows if r.extreme_rows]
    if far:
        top = max(far, key=lambda r: r.extreme_rows)
        out.append(f"EXTREME ROWS at {len(far)} of {len(rows)} layer/positions: up to {top.extreme_rows} rows more than "
                   f"{EXTREME_SDS:g} robust SDs from the median (e.g. item {top.extreme_example!r} at L{top.layer}/"
                   f"{top.position}). The degeneracy verdict uses robust scales, so they do not decide it, but they "
                   "can dominate the probes' standardisation and class means there: check those rows of the capture.")
    bad = [r for r in rows if r.degenerate]
    if bad and len(bad) == len(rows):
        out.append(
            f"DEGENERATE CAPTURE: at every probed layer and position the representation is identical within "
            f"families while '{labelset.name}' varies within families; every grouped probe scores 0.5 by "
            "construction. No sweep is reported: the model's state at these positions ignores what varies within "
            f"families{'' if captures is not None and is_own(captures) else BENCHMARK_VARIES}, or the "
            "positions precede it."
        )
    elif bad:
        where = ", ".join(f"L{r.layer}/{r.position}" for r in bad[:8]) + (" ..." if len(bad) > 8 else "")
        out.append(f"DEGENERATE at {len(bad)} of {len(rows)} layer/positions ({where}): the representation is "
                   "identical within families there, so no probe can separate the label; those rows are not scored.")
    for f in PAIR_FIELDS:
        full = [r for r in rows if f in r.identical and r.identical[f][1] and r.identical[f][0] == r.identical[f][1]]
        if full and not all(r.degenerate for r in full):
            kind = f.removesuffix("_pair_id")
            out.append(f"{kind} pairs are bit-identical at {len(full)} layer/positions (e.g. L{full[0].layer}/"
                       f"{full[0].position}): there the two members of every {kind} pair cannot be told apart.")
    for name, est in baselines.items():
        above = est.value is not None and est.ci[0] is not None and est.ci[0] > 0.5
        if above and name != "history_threshold" and labelset.name == "resolved":
            out.append(f"input-only baseline '{name}' is above chance ({est.value:.3f}, CI {est.ci}); the "
                       "selection is not balanced within families, so a probe can partly read the prompt's "
                       "surface variables")
    if tasks.missing_fields or (tasks.missing_fields is not None and not tasks.cell_fields):  # none named
        out.append(missing_cells_warning(labelset.name, tasks.cell_fields, tasks.missing_fields or (),
                                         tasks.suggested_fields or ()))
    elif tasks.skipped and tasks.skipped != "controls off":
        fix = ("" if tasks.requested <= 0 else
               " (set SweepConfig.cell_fields / --cell-fields to index fields the capture has)")
        out.append(f"CONTROL TASKS SKIPPED: {tasks.skipped}. Without them the sweep cannot say whether "
                   f"'{labelset.name}' is decoded selectively or merely as one of the many functions of the prompt's "
                   f"cell that the representation carries; no selectivity is reported{fix}.")
    elif 0 < tasks.k < tasks.requested:
        out.append(f"only {tasks.k} of {tasks.requested} control tasks could be drawn ({tasks.n_cells} "
                   "cells); the control mean and range rest on fewer tasks")
    k = tasks.k
    if 0 < k < MIN_VERDICT_TASKS:
        out.append(f"NO SELECTIVITY VERDICT: {k} control tasks; a label that is just another cell function beats all "
                   f"of them with probability 1/{k + 1} > 5%, so no row is called selective or not (use >= "
                   f"{MIN_VERDICT_TASKS}; {DEFAULT_CONTROL_TASKS} give a 95% interval)")
    elif MIN_VERDICT_TASKS <= k < DEFAULT_CONTROL_TASKS:
        out.append(f"{k} control tasks: the selectivity interval (the target against the controls' range) is a "
                   f"{(k - 1) / (k + 1):.1%} interval, not 95% ({DEFAULT_CONTROL_TASKS} give 95%)")
    fired = [r for r in rows if r.leakage_fires]
    if fired:
        where = ", ".join(f"L{r.layer}/{r.position} {r.leakage.value:.3f}" for r in fired[:6])
        out.append(f"LEAKAGE CHECK FIRED at {len(fired)} of {sum(r.leakage.value is not None for r in rows)} "
                   f"layer/positions ({where}{' ...' if len(fired) > 6 else ''}): labels shuffled within families "
                   f"decode away from 0.5 (|z| > {check.limit:.2f}), which grouped folds make impossible for features "
                   "computed from the input alone: folds split families, or the features carry family-specific "
                   "label information, and the AUROCs there are suspect. (A sound sweep raises this false alarm "
                   "somewhere in at most 5% of runs: one row just past the limit is weak evidence.)")
    return out
