"""The injection block's seed-003 keys beside its per-level scores (`bench.scoring` adds them when a
benchmark holds injection levels; the main set's scores have no injection block, so they are unchanged):

- `differences_target_exclusive` (with level -1, `bench.injection.TARGET_EXCLUSIVE`): level L minus
  level -1 of the headline rates for L = 0 to 3, as `differences` gives level L minus level 0 (same
  family resamples, `bench.level_differences`). Seed 003's ladder starts at its target-exclusive
  level 0, so level 1 minus level -1 is its first step; level 0 minus level -1 is what naming the
  ruler and the dot, without pointing at them, is worth.
- `task_means`: per level, the unweighted mean over tasks of seed 003's Tables 2 and 4
  (`bench.task_means`, which says what a task is here), and its paired differences from level 0
  (`differences`) and from level -1 (`differences_target_exclusive`).
"""

from __future__ import annotations

from collections.abc import Mapping

from evprobe.bench.injection import TARGET_EXCLUSIVE
from evprobe.bench.level_differences import level_differences
from evprobe.bench.tally import Key
from evprobe.bench.task_means import METHOD, TASKS, level_task_means, task_mean_differences
from evprobe.core.bootstrap import Estimate, Resampled
from evprobe.core.json_types import JsonObject

# One scored level: its bootstrap's families (in order) and every measure's resamples.
Scored = tuple[tuple[str, ...], Mapping[Key, Resampled]]


def _json(block: Mapping[str, Mapping[str, Estimate]]) -> JsonObject:
    return {name: {k: e.to_json() for k, e in measures.items()} for name, measures in block.items()}


def ladder_keys(scored: Mapping[int, Scored]) -> JsonObject:
    """The new keys of the injection block from every level's scored set (level 0 the main items')."""
    levels = sorted(scored)
    out: JsonObject = {}
    te = scored.get(TARGET_EXCLUSIVE)
    if te is not None:
        out["differences_target_exclusive"] = {
            str(level): {name: e.to_json() for name, e in
                         level_differences(scored[level][1], te[1], scored[level][0] == te[0]).items()}
            for level in levels if level != TARGET_EXCLUSIVE}
    means, parts = {}, {}
    for level in levels:
        means[level], parts[level] = level_task_means(scored[level][1])
    block: JsonObject = {"tasks": TASKS, "method": METHOD,
                         "levels": {str(level): {name: m.to_json() for name, m in means[level].items()}
                                    for level in levels}}
    for key, base in (("differences", 0), ("differences_target_exclusive", TARGET_EXCLUSIVE)):
        if base in scored:
            block[key] = {str(level): _json(task_mean_differences(parts[level], parts[base],
                                                                  scored[level][0] == scored[base][0]))
                          for level in levels if level != base}
    out["task_means"] = block
    return out


__all__ = ["ladder_keys"]
