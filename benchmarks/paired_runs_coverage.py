"""Benchmark: coverage of the paired comparison of two settings of repeated runs (`evprobe compare A B
--paired`, bench.repeats_scoring) where the truth is known.

Each replicate runs two settings with one distribution: `policy:random` with R runs each (default 3,
seed 002's count), setting A seeded 1000 i + r and B 1000 i + 500 + r (run r, replicate i), so no run
is shared and the two settings are exchangeable: the true B - A of every measure is 0. The records
come from the runner's own job (`RunJob.open` / `compute`: the policy, the parser, the record) on a
generated benchmark, without the files; then the same functions `evprobe compare --paired` calls pool
each setting's runs on one set of family resamples and difference them. The check: does 0 lie in the
printed interval of B - A. Also the pooled interval of setting A against the random policy's known
expectation for two measures (one letter of five is the minimum-cost action: 1/5; the mean cost of a
uniform choice of stop, two tests and the report at prices 0, 1, 1, 1, 2: 1.0).

    python benchmarks/paired_runs_coverage.py [--reps 300] [--runs 3] [--families-per-system 2]
                                              [--n-boot 500]

Measured (seed scheme above, R = 3, B = 500; coverage of 0 with its 95% Clopper-Pearson interval):

    families  reps  all measures (not independent)   per measure      widened (yardstick)
           6   300  0.887 [0.876, 0.896]              0.830 - 0.973    0.923 - 0.977 (x1.44)
          24   200  0.938 [0.929, 0.947]              0.895 - 0.995    0.910 - 0.995 (x1.08)

The paired interval under-covers at few families, as every percentile family bootstrap does (the
plug-in variance and normal quantiles; the widened column recovers about 0.95): at 6 families by
about 6 points, at 24 by about 1. The pooled interval of A covers the known expectations
(min_cost_choice 1/5, mean_cost 1.0) in 0.997 and 1.000 of replicates at 6 families, 0.975 and 1.000
at 24 (conservative: the proportion hull).

About 0.2 s a replicate at 6 families (2 a system, tests/conftest.py's small_bench), 0.7 s at 24, on one
core: the defaults take about 1 minute; `--families-per-system 8 --reps 200` about 2.5 more.

Prints per benchmark size and measure: coverage with its 95% Clopper-Pearson interval, the mean
width of the paired interval, the sd of the observed differences across replicates, and the coverage
the interval would have widened about its point by the small-sample factor of F families
(`small_sample_factor`; evprobe does not print that one: a yardstick for the gap at few families).
Measures whose difference is 0 in every replicate (the random policy's replies are always valid) are left out
of the table (their interval is the MOVER widening of two 100% rates and always covers).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SHOWN = ("min_cost_choice", "stop_if_enough", "test_if_needed", "both_correct_image_pairs",
         "same_choice_image_pairs", "enough_evidence", "useful_test_supplied", "resolved_and_correct",
         "mean_cost", "pecs", "pecs_acc", "pecs_abs_rec", "pecs_false_abs")
KNOWN = {"min_cost_choice": 0.2, "mean_cost": 1.0}  # the random policy's expectation


class Runs:
    """Runs of policy:random on every item of a benchmark, as the runner writes their records (its own
    job: `RunJob.open` makes the seeded policy, `compute` parses a reply and makes the record), without
    the files. A record depends on the item and the reply only, so it is made once per (item, reply)."""

    def __init__(self, bench: Path) -> None:
        from evprobe.bench.items import item_units
        from evprobe.bench.runner import RunConfig, RunJob

        self.job = RunJob(RunConfig(model="policy:random", bench=str(bench), out=str(bench.parent / "unused")))
        self.units = item_units(self.job.items)
        self.made: dict[tuple[str, str], object] = {}

    def records(self, seed: int) -> list:
        from dataclasses import replace

        from evprobe.bench.records import Record

        job = self.job
        job.config = replace(job.config, seed=seed)
        job.open()
        out = []
        for unit, reply in zip(self.units, job.reply_batch([u.value for u in self.units], None)):
            key = (unit.key, reply.text)
            if key not in self.made:
                self.made[key] = Record.from_json(job.compute([unit], "")[0])
                assert self.made[key].reply == reply.text  # the seeded policy replies alike
            out.append(self.made[key])
        return out


def cell(bench: Path, reps: int, runs: int, n_boot: int) -> dict[str, dict[str, list]]:
    from evprobe.bench.manifest import read_items, read_meta
    from evprobe.bench.reference import Prices
    from evprobe.bench.repeats_scoring import (Design, cost_bounds, paired_differences, pooled_estimates,
                                               pooled_parts, run_shares)

    design = Design.build(read_items(bench, validate_images=False), Prices(**read_meta(bench)["prices"]))
    cost = cost_bounds(design.prices)
    out: dict[str, dict[str, list]] = {"diff": {}, "known": {}}
    runner = Runs(bench)
    for i in range(reps):
        boot = design.bootstrap(n_boot, 20260905 + i)
        sides = [[run_shares(design, runner.records(1000 * i + offset + r)) for r in range(runs)]
                 for offset in (0, 500)]
        parts = [pooled_parts(boot, s) for s in sides]
        diff = paired_differences(parts[0], parts[1], cost, runs)
        for name, est in diff.items():
            if est.value is not None:
                out["diff"].setdefault(name, []).append((est.value, *est.ci))
        pooled = pooled_estimates(parts[0], cost)
        for name in KNOWN:
            out["known"].setdefault(name, []).append((pooled[name].value, *pooled[name].ci))
    return out


def small_sample_factor(n_families: int) -> float:
    """What the last column widens the paired interval by, about its point (not what evprobe prints):
    t_{F-1} / z at 97.5% times sqrt(F / (F - 1)), the two small-sample biases of a percentile bootstrap
    over F clusters (its variance is the plug-in one, (F - 1) / F of the unbiased; normal, not t,
    quantiles). Shown to size the gap at few families."""
    from scipy import stats

    f = n_families
    return float(stats.t.ppf(0.975, f - 1) / stats.norm.ppf(0.975) * np.sqrt(f / (f - 1)))


def binomial(k: int, n: int) -> tuple[float, float]:
    from evprobe.core.proportion import clopper_pearson

    return clopper_pearson(k, n)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=300)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--families-per-system", default="2", help="benchmark sizes, comma-separated (3 systems each)")
    p.add_argument("--n-boot", type=int, default=500)
    args = p.parse_args(argv)
    from evprobe.bench.generate import GenerateConfig, generate

    print(f"paired B - A of two settings of policy:random ({args.runs} runs each, one distribution: truth 0); "
          f"{args.reps} replicates, {args.n_boot} family resamples")
    with tempfile.TemporaryDirectory() as tmp:
        for size in (int(x) for x in args.families_per_system.split(",")):
            bench = Path(tmp) / f"bench-{size}"
            generate(bench, GenerateConfig(families_per_system=size, subset_per_cell=0), progress=False)
            t = time.perf_counter()
            res = cell(bench, args.reps, args.runs, args.n_boot)
            seconds = time.perf_counter() - t
            print(f"\n{3 * size} families ({seconds:.0f} s)")
            factor = small_sample_factor(3 * size)
            print(f"{'measure':30s} {'coverage':>8s} {'95% CI':>15s} {'width':>7s} {'sd(diff)':>8s} "
                  f"{'widened x' + format(factor, '.2f'):>12s}")
            total_k = total_n = 0
            for name in SHOWN:
                rows = np.array(res["diff"].get(name, []), dtype=float)
                if not len(rows) or np.all(rows[:, 0] == 0):
                    continue
                ok = (rows[:, 1] <= 0) & (0 <= rows[:, 2])
                k, n = int(ok.sum()), len(rows)
                total_k, total_n = total_k + k, total_n + n
                lo, hi = binomial(k, n)
                point = rows[:, 0]
                wide = (point - factor * (point - rows[:, 1]) <= 0) & (0 <= point + factor * (rows[:, 2] - point))
                print(f"{name:30s} {k / n:8.3f} [{lo:.3f}, {hi:.3f}] {np.mean(rows[:, 2] - rows[:, 1]):7.3f} "
                      f"{np.std(rows[:, 0]):8.3f} {wide.mean():12.3f}")
            lo, hi = binomial(total_k, total_n)
            print(f"{'all shown (not independent)':30s} {total_k / total_n:8.3f} [{lo:.3f}, {hi:.3f}]")
            for name, truth in KNOWN.items():
                rows = np.array(res["known"][name], dtype=float)
                k = int(((rows[:, 1] <= truth) & (truth <= rows[:, 2])).sum())
                lo, hi = binomial(k, len(rows))
                print(f"pooled A covers {name} = {truth:g}: {k / len(rows):.3f} [{lo:.3f}, {hi:.3f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
