"""The unweighted mean over tasks (seed 003, Tables 2 and 4), per information-injection level, with a
family-bootstrap interval.

What a task is. Seed 003's tasks are the ten sub-tasks of its Table 5 (Length, Distance, Volume,
Area, Remark, Environment, Temperature, Weight, Electricity, Kinematics): a kind of question with its
own target quantity, 6 to 35 samples each. Its "Average column gives the mean accuracy across all ten
tasks": each task weighs alike, whatever its sample count (the human row of Table 2 is the plain mean
of its ten cells, tests/bench/test_task_means.py). Here a task is, likewise, a target quantity:

- estimates (continuous, ACC_delta at 5/10/20/30%): one task per quantity estimated, the `by` groups
  of `bench.numeric_scoring`: estimate_property of the mass, the friction, the restitution, the
  stiffness; estimate_outcome of the sliding distance, the bounce's kinetic energy, the spring's
  period (7 tasks; the mass task has 4 items per family, the others 4 per family of their system).
- decisions (discrete, ACC): one task per system, whose question asks about d, E or T: each measure
  of `score_index.BY_SYSTEM` (min-cost choice, both-correct pairs, ...) averaged over the systems.
- all: the seed's Average itself, continuous and discrete tasks in one column: the 7 estimate tasks at
  delta and the 3 systems' selections (min-cost choice, a discrete ACC, the same at every delta).

read_ruler and recover_property are controls (their prompts name the ruler or the candidates), not
tasks. A task with no scored unit at a level is left out of that level's mean and named under
`missing`; the mean is over the tasks present (`tasks`).

Interval. On every family resample (the run's one resample matrix, `bench.scoring`) the mean of the
tasks' values on that resample; its percentile interval is hulled with a cluster Clopper-Pearson
interval (`core.proportion`) of the same mean written as one ratio over families: with n_t units in
task t and N in all, weights c_t = N / (T n_t) make sum_f num'_f / sum_f den'_f, num'_f = sum_t c_t
num_t[f], den'_f = sum_t c_t den_t[f], equal the mean, so its design-based variance and its boundary
size (every family one unit, Kish's effective number of weighted families) are the cluster interval's.
So a mean at 0% or 100% has width, never a point. Coverage where the truth is known:
benchmarks/coverage_task_mean.py. Level differences of a task mean are paired on the same resamples
(`bench.level_differences.paired_difference`, MOVER-widened at a saturated mean).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from evprobe.bench.level_differences import paired_difference
from evprobe.bench.score_index import BY_SYSTEM
from evprobe.bench.tally import Key
from evprobe.bench.threshold import DELTAS, delta_key
from evprobe.core.bootstrap import Estimate, FamilyBootstrap, Resampled, families_of
from evprobe.core.json_types import JsonObject

ACC_KEYS: tuple[str, ...] = tuple(delta_key(d) for d in DELTAS)
ESTIMATE_REQUESTS: tuple[str, ...] = ("estimate_property", "estimate_outcome")
SELECTION_TASK = "min_cost_choice"  # the selection's ACC, a discrete task of the seed's Average
BLOCKS: tuple[str, ...] = ("decisions", "estimates", "all")
TASKS = ("seed 003's task is a kind of question with its own target quantity (Table 5), and its Average weighs "
         "every task alike; here: estimates, one task per quantity estimated (estimate_property: mass, friction, "
         "restitution, stiffness; estimate_outcome: sliding d, bouncing E, spring T); decisions, one task per "
         "system; all, the seed's Average: the estimate tasks at delta and each system's selection (min-cost choice)")
METHOD = ("unweighted mean over tasks on each family resample; 95% percentile interval hulled with a cluster "
          "Clopper-Pearson interval of the mean written as one ratio over families (task weights N / (T n_t))")


@dataclass(frozen=True)
class TaskMean:
    """One block's means over its tasks: `values` per measure (a BY_SYSTEM name or acc_5 ... acc_30);
    `missing`, per measure, the block's tasks left out for want of scored units (measures with none
    left out are not listed)."""

    tasks: tuple[str, ...]
    missing: Mapping[str, tuple[str, ...]]
    values: Mapping[str, Estimate]

    def to_json(self) -> JsonObject:
        return {"tasks": list(self.tasks), "missing": {m: list(t) for m, t in self.missing.items()},
                **{name: e.to_json() for name, e in self.values.items()}}


def task_mean(parts: Sequence[Resampled]) -> Resampled:
    """The unweighted mean of T proportions of one bootstrap, as a proportion (module docstring):
    value and draws the mean of the parts', shares the task-weighted per-family sums."""
    if not parts:
        raise ValueError("a mean over tasks needs at least one task")
    if any(p.shares is None for p in parts):
        raise ValueError("a mean over tasks averages proportions (rates with per-family shares)")
    n_t = np.array([p.shares[1].sum() for p in parts])  # type: ignore[index]
    if np.any(n_t <= 0) or any(np.isnan(p.value) for p in parts):
        raise ValueError("every task of a mean needs units (leave a task without any out of the mean)")
    weights = n_t.sum() / (len(parts) * n_t)
    num = sum(w * p.shares[0] for w, p in zip(weights, parts, strict=True))  # type: ignore[index]
    den = sum(w * p.shares[1] for w, p in zip(weights, parts, strict=True))  # type: ignore[index]
    held = None if any(p.held is None for p in parts) else np.logical_or.reduce([p.held for p in parts])
    value = float(np.mean([p.value for p in parts]))
    draws = np.mean(np.stack([p.draws for p in parts]), axis=0)  # NaN where a task has no unit on a resample
    return Resampled(value, draws, int(n_t.sum()), shares=(num, den), held=held)


def _estimate(part: Resampled) -> Estimate:
    return FamilyBootstrap.estimate(part).in_families(families_of(part))


def _task_keys(resampled: Mapping[Key, Resampled]) -> dict[str, dict[str, Key]]:
    """Per measure, task name -> tally key, for the three blocks' measures (module docstring)."""
    systems = list(dict.fromkeys(k[1] for k in resampled if len(k) == 3 and k[0] == "by_system"))
    out: dict[str, dict[str, Key]] = {m: {s: ("by_system", s, m) for s in systems} for m in BY_SYSTEM}
    for acc in ACC_KEYS:
        out[acc] = {f"{k[1]}:{k[3]}": k for k in resampled
                    if len(k) == 5 and k[0] == "numeric" and k[1] in ESTIMATE_REQUESTS and k[2] == "by" and k[4] == acc}
        out["all:" + acc] = {**out[acc], **{f"select:{s}": ("by_system", s, SELECTION_TASK) for s in systems}}
    return out


def _block_measures(block: str) -> dict[str, str]:
    """The block's measures: printed name -> `_task_keys` name."""
    if block == "decisions":
        return {m: m for m in BY_SYSTEM}
    return {acc: acc if block == "estimates" else "all:" + acc for acc in ACC_KEYS}


def _has_tasks(block: str, tasks: Mapping[str, Key]) -> bool:
    """Whether a block's measure has its tasks: "all" needs both an estimate and a selection task."""
    selections = any(t.startswith("select:") for t in tasks)
    others = any(not t.startswith("select:") for t in tasks)
    return (selections and others) if block == "all" else bool(tasks)


def _parts(resampled: Mapping[Key, Resampled], keys: Mapping[str, Key]) -> tuple[list[str], list[str], list[Resampled]]:
    present, missing, parts = [], [], []
    for task, key in keys.items():
        part = resampled.get(key)
        if part is None or np.isnan(part.value) or part.shares is None or part.shares[1].sum() <= 0:
            missing.append(task)
        else:
            present.append(task)
            parts.append(part)
    return present, missing, parts


def level_task_means(resampled: Mapping[Key, Resampled]) -> tuple[dict[str, TaskMean], dict[str, dict[str, Resampled]]]:
    """One level's task means and their resamples (for the paired differences). A block is there when
    its tasks are: decisions with the systems' measures, estimates with the estimates' groups, all
    with both."""
    keys = _task_keys(resampled)
    blocks: dict[str, TaskMean] = {}
    means: dict[str, dict[str, Resampled]] = {}
    for block in BLOCKS:
        measures = _block_measures(block)
        if not all(_has_tasks(block, keys[m]) for m in measures.values()):
            continue  # no task of this block in the run (no estimates, or no selections, at this level)
        values, parts_of, missing = {}, {}, {}
        for name, measure in measures.items():
            present, absent, parts = _parts(resampled, keys[measure])
            if absent:
                missing[name] = tuple(absent)
            if parts:
                parts_of[name] = task_mean(parts)
                values[name] = _estimate(parts_of[name])
            else:
                values[name] = Estimate.empty("no task with scored units")
        tasks = tuple(dict.fromkeys(t for m in measures.values() for t in keys[m]))
        blocks[block], means[block] = TaskMean(tasks, missing, values), parts_of
    return blocks, means


def task_mean_differences(level: Mapping[str, Mapping[str, Resampled]], base: Mapping[str, Mapping[str, Resampled]],
                          same_families: bool) -> dict[str, dict[str, Estimate]]:
    """Each task mean of one level minus the base level's, paired on the same family resamples."""
    out: dict[str, dict[str, Estimate]] = {}
    for block, measures in level.items():
        out[block] = {}
        for name, part in measures.items():
            other = base.get(block, {}).get(name)
            if not same_families:
                out[block][name] = Estimate.empty("this level's families are not the base level's: no paired difference")
            elif other is None:
                out[block][name] = Estimate.empty("not scored at both levels")
            else:
                out[block][name] = paired_difference(part, other)
    return out


__all__ = ["METHOD", "TASKS", "TaskMean", "level_task_means", "task_mean", "task_mean_differences"]
