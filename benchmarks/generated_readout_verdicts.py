"""Benchmark: size and power of the steering verdicts read on generated 0/1 readouts (a free-form reply
abstains or not, is valid or not: `steering_dose_response(readout=GeneratedReadout(...))`,
`evprobe void-transfer --readout free`, `evprobe gating --readout free`), and coverage of their paired
changes against alpha = 0, by simulation where the truth is known.

What is measured, through the functions the commands call (nothing re-implemented):

- "specific" (analysis.dose_crossfit.crossfit_rows, what steering_dose_response and void-transfer run
  after the replies are read): each direction's dose chosen on one half of the families and scored on
  the other, the probe's cross-fitted change of the abstention rate ranked among K = 50 random and
  K = 50 label-free directions (analysis.specificity: p = (1 + #{null >= probe}) / (K + 1), ties
  counted against the probe, specific at p <= 0.05), joint = beyond both;
- the paired change's 95% interval at alpha = +1 as steering_dose_response's `effects` print it
  (analysis.dose_grid.GridEstimator.estimates: analysis.effects' hull, over the abstention and
  invalid-reply rates) and as gating's tables print it (experiments.gating.report.abstention_grid:
  the same estimator over the abstention share alone, so the two columns agree unless a bug parts
  them; before, gating took the percentile interval of the paired draws alone, which covered
  71.3-91.3% at 8 families): its coverage of the true change.

World. F families of 1-6 items. Item i of family f: z_i = mu + u_f + e_i (u_f ~ N(0, RHO), e_i ~ N(0,
1 - RHO): latent intra-family correlation RHO = 0.3), mu = Phi^-1(p0), so the unsteered reply abstains
(z_i > 0) at rate p0. Under direction k at dose a (the commands' default grid, -1, -0.5, +0.5, +1):
it abstains when z_i + a b_k + |a| (S_ITEM xi_ik + S_REPLY eta_ika) > 0: b_k the direction's own pull
(N(0, SD_DIR^2), the same law for the random and label-free directions and, with no effect, the probe:
it is then one more null direction), xi_ik a per-item response (family-correlated, RHO) and eta_ika a
per-reply one (greedy replies flip under any push). A reply is invalid (no abstention, kept in every
denominator, as the commands count it) with probability INVALID x max(0.2, |a|): 2% unsteered and 10%
at |a| = 1 by default. The probe with an effect of `strength` points: b = b_0 + goal x Delta, Delta
solved so its abstention rate at |a| = 1 differs from a typical null direction's by `strength` toward
the goal (+1 induce abstention, -1 suppress it), invalid replies included; rows whose strength exceeds
the room left by the floor or ceiling are skipped and say so. Truth of the paired change at alpha = +1
(given the probe's b): (1 - v(1)) Phi((mu + b) / sqrt(1 + S_ITEM^2 + S_REPLY^2)) - (1 - v(0)) p0.

Variants (informative rows): `breaks replies`: no effect on abstaining, but the probe makes 20 points
more invalid replies at |a| = 1 than a null direction (each counted as no abstention); `unequal norm`:
the null directions steered at a quarter of the probe's dose (a deliberately anti-conservative setup
the check must flag; --variant, and the test).

Reported per row: the share of data sets called specific against each null and jointly, with its
Clopper-Pearson 95% Monte Carlo interval, and both coverages. `check` fails when a size row's (strength 0,
as the commands run) interval lies wholly above 5%, when either coverage lies below 90%, or when the joint
verdict's rate falls as the strength rises by more than Monte Carlo error.

    python benchmarks/generated_readout_verdicts.py [--reps 300] [--size-reps 600] [--boot 500] [--workers 2]
    python benchmarks/generated_readout_verdicts.py --quick   # a few rows: size, power, one variant
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
from evprobe.analysis.dose_crossfit import crossfit_rows
from evprobe.analysis.dose_grid import GridEstimator
from evprobe.analysis.generated_readout import GeneratedReadout
from evprobe.analysis.specificity import SPECIFIC_P
from evprobe.core.bootstrap import Estimate, FamilyBootstrap
from evprobe.core.proportion import clopper_pearson
from evprobe.experiments.gating.report import abstention_grid
from evprobe.experiments.void_transfer import FREE_MEASURES
from scipy.stats import norm

RHO, S_ITEM, S_REPLY, SD_DIR = 0.3, 0.5, 0.3, 0.15
STEPS = [-1.0, -0.5, 0.5, 1.0]  # the nonzero doses of the commands' default alphas (-1, -0.5, 0, 0.5, 1)
K = 50  # directions per null (the commands' n_random, n_relabel)
INVALID = 0.10
UNEQUAL = 0.25  # the `unequal norm` nulls' dose, a share of the probe's
BREAKS = 0.20  # the `breaks replies` probe's extra invalid share at |a| = 1
# void-transfer's free readout: abstained, invalid, both rates; the cross-fit moves `abstained` (its first)
READOUT = GeneratedReadout(FREE_MEASURES, read=lambda i, reply: (0.0, 0.0), rates=FREE_MEASURES)
NULLS = ("random", "label-free")
BOUND = int(SPECIFIC_P * (K + 1)) / (K + 1)  # the rank test's exact size with no ties: 2 / 51
COVERAGE_FLOOR = 0.90


@dataclass(frozen=True)
class Row:
    """One simulated setting (module docstring)."""

    families: int
    goal: int  # +1 induce abstention, -1 suppress it
    base: float  # p0, the unsteered reply's latent abstention rate
    strength: float  # points toward the goal at |a| = 1, probe minus a typical null direction
    invalid: float = INVALID
    variant: str = "as run"  # or "breaks replies", "unequal norm"


def v(invalid: float, a: float) -> float:
    """The share of invalid replies at dose a (module docstring)."""
    return invalid * max(0.2, abs(a))


def _typical(row: Row) -> tuple[float, float, float, float]:
    """(mu, the latent scale of a direction drawn from the null's law at |a| = 1, the valid share there,
    that direction's latent abstention rate)."""
    mu, scale = norm.ppf(row.base), np.sqrt(1 + S_ITEM ** 2 + S_REPLY ** 2 + SD_DIR ** 2)
    return mu, scale, 1 - v(row.invalid, 1), norm.cdf(mu / scale)


def delta(row: Row) -> float | None:
    """The probe's extra pull giving `strength` points at |a| = 1 (None: beyond the floor or ceiling)."""
    mu, scale, keep, typical = _typical(row)
    want = typical + row.goal * row.strength / 100 / keep
    if not 0 < want < 1:
        return None
    return row.goal * (norm.ppf(want) * scale - mu)


def room(row: Row) -> float:
    """The most points the probe can move the rate toward the goal at |a| = 1."""
    _, _, keep, typical = _typical(row)
    return 100 * keep * ((1 - typical) if row.goal > 0 else typical)


def data_set(rng: np.random.Generator, row: Row, pull: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(families (n,), base (n, 2), steered (A, 1 + 2K, n, 2): the probe then each null's K directions,
    the true paired change of the probe's abstention rate at alpha = +1)."""
    fam = np.repeat(np.arange(row.families), rng.integers(1, 7, row.families))  # (n,)
    n, d = len(fam), 1 + 2 * K
    mu = norm.ppf(row.base)
    z = mu + np.sqrt(RHO) * rng.standard_normal(row.families)[fam] + np.sqrt(1 - RHO) * rng.standard_normal(n)
    base_invalid = rng.random(n) < v(row.invalid, 0.0)
    base = np.stack([(z > 0) & ~base_invalid, base_invalid], axis=-1).astype(float)
    b = rng.normal(0.0, SD_DIR, d)
    b[0] += pull
    xi = np.sqrt(RHO) * rng.standard_normal((row.families, d))[fam] + np.sqrt(1 - RHO) * rng.standard_normal((n, d))
    scale = np.ones(d)
    if row.variant == "unequal norm":
        scale[1:] = UNEQUAL  # the nulls at a fraction of the probe's dose
    extra = np.zeros(d)
    if row.variant == "breaks replies":
        extra[0] = BREAKS
    out = np.empty((len(STEPS), d, n, 2))
    for j, a in enumerate(STEPS):
        s = a * scale  # (d,) each direction's dose
        lat = z[:, None] + s * b + np.abs(s) * (S_ITEM * xi + S_REPLY * rng.standard_normal((n, d)))  # (n, d)
        bad = rng.random((n, d)) < row.invalid * np.maximum(0.2, np.abs(s)) + extra * abs(a)  # v(s) per direction
        out[j, ..., 0] = ((lat > 0) & ~bad).T
        out[j, ..., 1] = bad.T
    keep1 = 1 - v(row.invalid, 1.0) - extra[0]
    truth = keep1 * norm.cdf((mu + b[0]) / np.sqrt(1 + S_ITEM ** 2 + S_REPLY ** 2)) - (1 - v(row.invalid, 0.0)) * row.base
    return fam, base, out, float(truth)


def one(rng: np.random.Generator, row: Row, pull: float, boot_: FamilyBootstrap, split_seed: int
        ) -> tuple[dict[str, bool], bool, bool]:
    """One data set: ({null or 'joint': called specific}, effects' interval covers, gating's covers).
    boot_: the family bootstrap over the row's families (every data set holds each of them: 1-6 items),
    seeded once as a command's is."""
    fam_idx, base, out, truth = data_set(rng, row, pull)
    fam = np.asarray(boot_.families, dtype=object)[fam_idx]
    every = {"all": np.ones(len(fam), bool)}
    # steering_dose_response's analysis of the read replies, as it calls it (analysis.dose_response)
    grid = GridEstimator.of(READOUT.readout, base, every, boot_, boot_.family_index(list(fam)))
    values = {0: out[:, :1]}  # layer 0: (A, 1, n, 2) the probe
    nulls = {kind: {0: out[:, 1 + j * K: 1 + (j + 1) * K]} for j, kind in enumerate(NULLS)}  # (A, K, n, 2) each
    near = {kind: {0: 0.0} for kind in NULLS}
    rows, verdict = crossfit_rows(values, nulls, base, STEPS, fam, every, row.goal, "all", split_seed, READOUT.choice,
                                  lambda scored: grid.estimates(scored)[1], near, READOUT.readout, READOUT.choice.measure)
    called = {r["null"]: bool(r["specific"]) for r in rows if r["measure"] == "abstained_change"}
    called["joint"] = verdict.specific is True
    top = STEPS.index(1.0)
    change = grid.estimates(out[top, 0])[1][0]  # cells: (all, abstained), (all, invalid)
    effects_cover = covers(change, truth)
    # gating's abstention shares and their paired change (experiments.gating.report.aggregate: abstention_grid)
    gating = abstention_grid(base[:, 0], [every["all"]], boot_, boot_.family_index(list(fam)))
    gating_cover = covers(gating.estimates(out[top, 0, :, :1])[1][0], truth)
    return called, effects_cover, gating_cover


def covers(e: Estimate, truth: float) -> bool:
    """Whether the interval holds the truth (one marked identical, no interval, does not)."""
    lo, hi = e.ci
    return not e.identical and lo is not None and lo <= truth <= hi


@dataclass(frozen=True)
class Result:
    row: Row
    reps: int
    called: dict[str, int]  # per null and 'joint': data sets called specific
    effects_cover: int
    gating_cover: int

    def share(self, key: str) -> tuple[float, float, float]:
        x = self.called[key]
        return (x / self.reps, *clopper_pearson(x, self.reps))


def run_row(row: Row, reps: int, boot: int, seed: int) -> Result | None:
    """`reps` data sets of one row, seeded on the row alone (the same numbers whatever runs beside it)."""
    pull = 0.0 if row.strength == 0 else delta(row)
    if pull is None:
        return None
    rng = np.random.default_rng([seed, row.families, row.goal + 1, int(100 * row.base), int(row.strength),
                                 int(100 * row.invalid), len(row.variant)])
    boot_ = FamilyBootstrap([f"f{i:03d}" for i in range(row.families)], boot, seed)
    called = {k: 0 for k in (*NULLS, "joint")}
    cover = [0, 0]
    for r in range(reps):
        got, e, g = one(rng, row, pull, boot_, r)
        for k in called:
            called[k] += got[k]
        cover[0] += e
        cover[1] += g
    return Result(row, reps, called, *cover)


def rows(families: list[int], quick: bool, variant: str | None) -> list[Row]:
    """The rows run (module docstring): the grid as the commands run, then the informative variants."""
    if quick:
        return [Row(24, +1, 0.5, s) for s in (0, 20, 40)] + ([Row(24, +1, 0.5, 0, variant=variant)] if variant else [])
    grid = [Row(f, g, p, s) for f in families for g in (+1, -1) for p in (0.1, 0.5, 0.9) for s in (0, 5, 10, 20, 40)]
    extra = [Row(24, -1, 0.5, s, invalid=0.0) for s in (0, 20)]
    extra += [Row(f, -1, 0.5, 0, variant="breaks replies") for f in (24, 144)]
    extra += [Row(24, +1, 0.5, 0, variant=variant)] if variant else []
    return grid + extra


def line(res: Result) -> str:
    r = res.row
    cells = "  ".join("{:5.1f}% [{:4.1f}, {:4.1f}]".format(*(100 * x for x in res.share(k))) for k in (*NULLS, "joint"))
    goal = "induce" if r.goal > 0 else "suppress"
    return (f"{r.families:>4} {goal:<8} {r.base:>4.1f} {r.strength:>+4.0f} {100 * r.invalid:>3.0f}% {r.variant:<14} "
            f"{res.reps:>5}  {cells}  {100 * res.effects_cover / res.reps:5.1f}% {100 * res.gating_cover / res.reps:5.1f}%")


def check(results: list[Result]) -> list[str]:
    """What fails the benchmark (module docstring): one line each."""
    bad = []
    for res in results:
        r = res.row
        if r.strength == 0 and r.variant != "breaks replies":
            for k in (*NULLS, "joint"):
                rate, lo, _ = res.share(k)
                if lo > SPECIFIC_P:
                    bad.append(f"size above {SPECIFIC_P:.0%}: {k} {100 * rate:.1f}% (interval from {100 * lo:.1f}%) "
                               f"at {r}")
        for name, got in (("effects'", res.effects_cover), ("gating's", res.gating_cover)):
            if r.variant == "as run" and got / res.reps < COVERAGE_FLOOR:
                bad.append(f"{name} interval covers {100 * got / res.reps:.1f}% at {r}")
    series: dict[tuple, list[Result]] = {}
    for res in results:
        r = res.row
        if r.variant == "as run":
            series.setdefault((r.families, r.goal, r.base, r.invalid), []).append(res)
    for key, got in series.items():
        got.sort(key=lambda x: x.row.strength)
        for a, b in pairwise(got):
            if b.share("joint")[2] < a.share("joint")[1]:  # b's interval wholly below a's
                bad.append(f"power falls from {a.row.strength:+.0f} to {b.row.strength:+.0f} points at {key}")
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=300, help="data sets per row with an effect")
    ap.add_argument("--size-reps", type=int, default=600, help="data sets per row with none (the size rows)")
    ap.add_argument("--boot", type=int, default=500, help="family resamples of the intervals")
    ap.add_argument("--families", default="8,24,48,144")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=55)
    ap.add_argument("--variant", choices=("unequal norm",), default=None, help="add a deliberately anti-conservative row")
    ap.add_argument("--quick", action="store_true", help="three rows (24 families, p0 0.5, +0, +20, +40 points), 150 data sets each, 300 resamples")
    args = ap.parse_args(argv)
    if args.quick:
        args.reps = args.size_reps = 150
        args.boot, args.workers = 300, 1
    started = time.perf_counter()
    todo = rows([int(x) for x in args.families.split(",")], args.quick, args.variant)
    reps = [args.size_reps if r.strength == 0 else args.reps for r in todo]
    print(f"K = {K} random and {K} label-free directions; doses {STEPS}; specific at p <= {SPECIFIC_P} (the rank "
          f"test's exact size without ties {100 * BOUND:.1f}%); {args.boot} family resamples; Monte Carlo 95% "
          "Clopper-Pearson intervals")
    print(f"{'F':>4} {'goal':<8} {'p0':>4} {'pts':>4} {'inv':>4} {'variant':<14} {'reps':>5}  "
          f"{'specific vs random':<21}  {'vs label-free':<21}  {'joint':<21}  cover: effects gating")
    done = []
    with ProcessPoolExecutor(args.workers) if args.workers > 1 else nullcontext() as pool:
        results = (pool.map if pool else map)(run_row, todo, reps, [args.boot] * len(todo), [args.seed] * len(todo))
        for row, res in zip(todo, results, strict=True):  # in row order, each printed as it is done
            if res is None:
                goal = "induce" if row.goal > 0 else "suppress"
                print(f"{row.families:>4} {goal:<8} {row.base:>4.1f} {row.strength:>+4.0f}  unattainable: at most "
                      f"{room(row):.0f} points toward the goal")
                continue
            done.append(res)
            print(line(res), flush=True)
    failures = check(done)
    print("check: " + ("passed" if not failures else f"{len(failures)} failed"))
    for f in failures:
        print("  " + f)
    print(f"done in {time.perf_counter() - started:.0f} s")
    return 0 if not failures else 1


if __name__ == "__main__":
    raise SystemExit(main())
