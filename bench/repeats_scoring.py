"""Scores of repeated runs (`evprobe score OUT` on a folder of runs) and the paired comparison of two
settings (`evprobe compare A B --paired`), for the headline measures (`bench.scoring.HEADLINE`).

Three numbers per measure, for three questions.

- Each run's own family-bootstrap interval (RUN/scores.json, `bench.scoring.score`, unchanged): what
  one run says, as a single run would report it.
- Mean and standard deviation across the R runs (sample sd, ddof 1; none for one run), with R: the
  spread of decoding alone. Every run answers the same items, so the sd says how much a rerun moves
  the score and nothing about the benchmark's families; it is no interval.
- Pooled over runs: one family bootstrap of all runs together. Each resample draws the families
  once (`core.bootstrap.FamilyBootstrap`, the score's seed and n_boot) and takes every run's units
  of the drawn families; a measure's value is the ratio estimator over families of the runs' summed
  numerators and denominators. Why this is an interval of the setting: the runs are nested in the
  families (run r and run s answer the same items, so their replies to one family are correlated),
  and resampling families with all their runs keeps both the families' spread and the decoding
  spread inside each family, as a cluster bootstrap of family totals does. With the same items in
  every run the denominators agree and the pooled value is the mean of the runs' values; runs that
  hold different items (one stopped early) weigh by their units. Rates keep the score's rule
  (binary=True: the percentile interval hulled with the cluster Clopper-Pearson interval of the
  pooled family sums, so never a point at 0% or 100%); the mean cost is tallied as the share of its
  bounds, 0 (an invalid reply) to the dearest price, as `bench.scoring.Tally.bounded_mean` does, and
  mapped back; PECS is Acc x max(0, AbsRec - FalseAbs) of the pooled parts on every resample (the
  percentile interval, as the score's). So pooled PECS is the PECS of the setting's pooled rates, not
  the mean of the runs' PECS (which the max(0, .) of each run biases upward; the mean column shows
  that one). Its n counts units over all runs. The pooled interval of a single run is that run's own
  interval exactly (same families, seed and resamples; tested).

Paired comparison, B - A: both settings pooled on one set of family resamples (each draw applied to
every run of both settings: families resampled within runs, the runs of a setting pooled); the
difference is B's pooled value minus A's on every resample, so its percentile interval carries the
pairing (the same items and families on both sides). Rates take `bench.level_differences.
paired_difference` (widened to the MOVER interval of the two cluster intervals where a side sits at 0%
or 100% or the interval is a point); the mean cost the same on its share scale, times the price span;
PECS the plain percentile interval of the difference of its products. The point estimate is the
difference of the pooled values, which is the difference of the runs' means (the same items in every
run of both sides is required; for PECS, the difference of the pooled PECS). Its n is the units of one
run (every run holds the same items); A's and B's pooled n count their units over their runs. A side
is a folder of runs or a single run folder (one run, as the greedy side of "greedy against sampled"
is); the two may hold different numbers of runs. Refused in one line: sides on different benchmarks
or with different items (any run's recorded item ids differ from another's). Coverage where the
truth is known (two settings of policy:random, 3 runs each, true difference 0;
benchmarks/paired_runs_coverage.py): 0.887 [0.876, 0.896] over the headline measures at 6 families,
0.938 [0.929, 0.947] at 24 (per measure 0.83-0.97 and 0.90-0.995): the small-sample shortfall of a
percentile bootstrap over few families, which the single-run and level-difference intervals share.

How the per-family sums are found. `bench.scoring.score` returns estimates, not its resamples; the
headline measures are ratios over units that each belong to one family (a pair, a decision and its
answers, an item), so scoring one family's items and records alone gives that family's numerator
(value x n) and denominator (n). `run_shares` does that per family (n_boot 1: a few ms a family), and
the sums over families reproduce the run's own values (checked on every scoring of a folder of runs,
`check_shares_match`).

Printed as everywhere else: an estimate by `bench.score_cells.headline_cell` (rates in percent, costs
in units, PECS plain), a paired difference of rates by `points` (percentage points with a sign); the
difference of a cost or of PECS by `headline_cell`, on its own scale. The mean and sd are numbers on
the estimate's scale, `58.5` and `1.2` in their own columns.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from evprobe.bench import pecs
from evprobe.bench.items import NUMERIC_REQUESTS, Item
from evprobe.bench.json_schema import RunMeta, read_run_meta
from evprobe.bench.level_differences import paired_difference
from evprobe.bench.manifest import read_items, read_meta
from evprobe.bench.records import RECORDS_FILE, RUN_META_FILE, Record, load_records
from evprobe.bench.reference import Prices
from evprobe.bench.repeats import is_runs_folder, read_runs
from evprobe.bench._repeats_report import repeats_markdown
from evprobe.bench.score_cells import difference_cell, headline_cell, label, table_text
from evprobe.bench.scoring import HEADLINE, Bench, score
from evprobe.core.bootstrap import (DEFAULT_N_BOOT, DEFAULT_SEED, INTERVAL_METHOD, Estimate, FamilyBootstrap, Resampled,
                                    families_of)
from evprobe.core.errors import InputError
from evprobe.core.json_types import JsonObject
from evprobe.core.files import atomic_write_bytes, atomic_write_json
from evprobe.core.lock import folder_lock

PECS_PARTS: tuple[str, ...] = ("pecs_acc", "pecs_abs_rec", "pecs_false_abs")
DERIVED: tuple[str, ...] = ("pecs",)  # headline measures computed from others on every resample
MEASURES: tuple[str, ...] = tuple(m for m in HEADLINE if m not in DERIVED)  # per-family ratios
COST = "mean_cost"  # the bounded mean among MEASURES (tallied on its share scale)
SCORES_JSON = "scores.json"
SCORES_MD = "scores.md"
POOLED_METHOD = (
    "pooled over runs: one family bootstrap of every run's units (each resample draws the families once "
    "and takes all runs' units of them); ratio of the runs' summed per-family numerators and denominators; "
    "rates and the cost share as the score's proportions (percentile interval hulled with the cluster "
    "Clopper-Pearson interval), PECS from the pooled parts per resample"
)
PAIRED_METHOD = (
    "B minus A on one set of family resamples applied to every run of both settings (families resampled "
    "within runs, each setting's runs pooled); 95% percentile interval of the differences, for rates and the "
    "cost share widened to the MOVER interval of the two cluster intervals where a side is at 0% or 100% or "
    "the paired interval is a point (bench.level_differences)"
)


def cost_bounds(prices: Prices) -> tuple[float, float]:
    """(lower, span) of one decision's cost: 0 (an invalid reply buys nothing) to the dearest price,
    the bounds `bench.scoring` scores the mean cost within."""
    values = prices.as_dict().values()
    lower, upper = min(0.0, *values), max(0.0, *values)
    return lower, upper - lower


@dataclass(frozen=True)
class Design:
    """A benchmark's items grouped by family, in the order `bench.scoring` resamples its families."""

    families: tuple[str, ...]
    items_by_family: dict[str, list[Item]]
    prices: Prices

    @classmethod
    def build(cls, items: Sequence[Item], prices: Prices) -> Design:
        base = [it for it in items if it.injection == 0 and it.void is None and it.request not in NUMERIC_REQUESTS]
        families = Bench.build(base).families  # `score`'s bootstrap families, in its order
        by_family: dict[str, list[Item]] = defaultdict(list)
        for it in items:
            by_family[it.family_id].append(it)
        return cls(tuple(families), dict(by_family), prices)

    def bootstrap(self, n_boot: int, seed: int) -> FamilyBootstrap:
        """The resamples `bench.scoring.score` draws for a run of this benchmark with `n_boot`, `seed`."""
        return FamilyBootstrap(self.families, n_boot, seed)


@dataclass(frozen=True)
class RunShares:
    """One run's headline ratio measures (MEASURES, the mean cost as a share of its bounds) as
    per-family numerators and denominators, (F, M) each, over `Design.families`; `reasons` says why
    a measure has no unit at all."""

    num: np.ndarray
    den: np.ndarray
    reasons: dict[str, str]

    def values(self, cost: tuple[float, float]) -> dict[str, float | None]:
        """The run's own value of every headline measure (None without units): what its score says."""
        top, bottom = self.num.sum(axis=0), self.den.sum(axis=0)
        out: dict[str, float | None] = {}
        for m, name in enumerate(MEASURES):
            value = top[m] / bottom[m] if bottom[m] > 0 else None
            if name == COST and value is not None:
                value = cost[0] + cost[1] * value
            out[name] = value
        acc, rec, false = (out[p] for p in PECS_PARTS)
        out["pecs"] = None if None in (acc, rec, false) else acc * max(0.0, rec - false)  # type: ignore[operator]
        return {name: out[name] for name in HEADLINE}


def run_shares(design: Design, records: Iterable[Record]) -> RunShares:
    """Per-family sums of one run's headline measures: each family scored alone (module docstring)."""
    by_family: dict[str, list[Record]] = defaultdict(list)
    for rec in records:
        by_family[rec.family_id].append(rec)
    unknown = set(by_family) - set(design.items_by_family)
    if unknown:
        raise InputError(f"records of family {sorted(unknown)[0]!r}, which is not in the benchmark")
    lower, span = cost_bounds(design.prices)
    shape = (len(design.families), len(MEASURES))
    num, den = np.zeros(shape), np.zeros(shape)
    reasons: dict[str, str] = {}
    for f, family in enumerate(design.families):
        if not by_family.get(family):
            continue
        scored = score(design.items_by_family[family], by_family[family], n_boot=1, prices=design.prices)
        for m, name in enumerate(MEASURES):
            est = scored[name]
            if est.get("value") is None:
                if est.get("reason"):
                    reasons.setdefault(name, est["reason"])
                continue
            n = float(est["n"])
            value = (est["value"] - lower) / span if name == COST and span > 0 else est["value"]
            num[f, m], den[f, m] = value * n, n
    have = den.sum(axis=0) > 0
    reasons = {name: why for name, why in reasons.items() if not have[MEASURES.index(name)]}
    if not by_family:
        reasons = dict.fromkeys(MEASURES, "no records")
    return RunShares(num, den, reasons)


def check_shares_match(shares: RunShares, scores: Mapping[str, Any], design: Design, where: str) -> None:
    """The per-family sums reproduce the run's own scores (RUN/scores.json): a RuntimeError names the
    measure otherwise (a headline measure that is not a sum over families would be pooled wrongly)."""
    for name, value in shares.values(cost_bounds(design.prices)).items():
        want = (scores.get(name) or {}).get("value")
        if (want is None) != (value is None) or (want is not None and abs(want - value) > 1e-9 * max(1.0, abs(want))):
            raise RuntimeError(f"{where}: {name} summed over families is {value!r}, the run's score says {want!r}")


# -- pooling and pairing ---------------------------------------------------------------------------


def pooled_parts(boot: FamilyBootstrap, runs: Sequence[RunShares]) -> dict[str, Resampled]:
    """MEASURES pooled over `runs` on `boot`'s resamples (module docstring); the cost on its share scale."""
    num = np.sum([r.num for r in runs], axis=0)
    den = np.sum([r.den for r in runs], axis=0)
    return dict(zip(MEASURES, boot.resample_many(num, den, binary=True), strict=True))


def _pecs_value(acc: Any, rec: Any, false: Any) -> Any:
    return acc * np.maximum(0.0, rec - false)


def pooled_estimates(parts: Mapping[str, Resampled], cost: tuple[float, float],
                     reasons: Mapping[str, str] | None = None) -> dict[str, Estimate]:
    """Every headline measure's pooled estimate, in HEADLINE's order."""
    reasons = reasons or {}
    est = {m: e.in_families(families_of(parts[m]))  # the families the interval rests on (issue 52)
           for m, e in zip(MEASURES, FamilyBootstrap.estimates([parts[m] for m in MEASURES]), strict=True)}
    lower, span = cost
    e = est[COST]
    if e.value is not None:
        lo, hi = e.ci
        est[COST] = replace(e, value=lower + span * e.value, ci=(None if lo is None else lower + span * lo,
                                                                 None if hi is None else lower + span * hi))
    acc, rec, false = (parts[p] for p in PECS_PARTS)
    est["pecs"] = pecs.pecs_estimate([acc, rec, false], acc.n + rec.n)  # never a zero-width interval
    out = {}
    for name in HEADLINE:
        why = reasons.get(name) or (reasons.get("pecs_acc") if name == "pecs" else None)
        out[name] = Estimate.empty(why) if est[name].value is None and why else est[name]
    return out


def paired_differences(a: Mapping[str, Resampled], b: Mapping[str, Resampled], cost: tuple[float, float],
                       b_runs: int = 1) -> dict[str, Estimate]:
    """B - A of every headline measure from two settings' pooled parts on the same resamples; n is
    the units of one run (B's pooled units over its `b_runs` runs: every run holds the same items)."""
    out: dict[str, Estimate] = {}
    span = cost[1]
    for name in MEASURES:
        if np.isnan(a[name].value) or np.isnan(b[name].value):
            out[name] = Estimate.empty("no value in one of the two settings")
            continue
        d = paired_difference(b[name], a[name])
        scale = span if name == COST else 1.0
        if d.value is not None:
            lo, hi = d.ci
            d = replace(d, value=scale * d.value, ci=(None if lo is None else scale * lo,
                                                      None if hi is None else scale * hi), n=d.n // b_runs)
        out[name] = d
    pa, pb = [a[p] for p in PECS_PARTS], [b[p] for p in PECS_PARTS]
    out["pecs"] = pecs.combined_estimate(lambda *x: _pecs_value(*x[:3]) - _pecs_value(*x[3:]), [*pb, *pa],
                                         (pb[0].n + pb[1].n) // b_runs)  # never a zero-width interval
    return {name: out[name] for name in HEADLINE}


# -- folders ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Side:
    """One setting of a comparison: its run folders (one for a single run folder) with their run.json
    and records."""

    folder: Path
    runs: tuple[Path, ...]
    metas: tuple[RunMeta, ...]
    records: tuple[dict[str, Record], ...]
    seeds: tuple[int | None, ...]

    @property
    def title(self) -> str:
        n = len(self.runs)
        return self.metas[0].title + ("" if n == 1 and not is_runs_folder(self.folder) else f", {n} runs")


def read_side(folder: str | Path) -> Side:
    """A folder of runs (runs.json) or a single run folder (run.json), with every run's records."""
    folder = Path(folder)
    if is_runs_folder(folder):
        index = read_runs(folder)
        runs = tuple(folder / e.folder for e in index.runs)
        seeds: tuple[int | None, ...] = tuple(e.seed for e in index.runs)
        missing = [r for r in runs if not (r / RUN_META_FILE).is_file()]
        if missing:
            raise InputError(f"{missing[0]} has not started (no {RUN_META_FILE}); continue the runs with "
                             f"`evprobe run ... --out {folder} --runs {len(runs)}` first")
    else:
        runs, seeds = (folder,), (None,)
    metas = tuple(read_run_meta(r) for r in runs)
    for run, meta in zip(runs, metas):
        if meta.items_sha256 != metas[0].items_sha256:
            raise InputError(f"{run} was run on other benchmark items than {runs[0]}; its runs must share a benchmark")
    if seeds == (None,):  # a single run folder: its run.json's seed
        seeds = (_seed_of(metas[0]),)
    records = tuple(load_records(r / RECORDS_FILE) for r in runs)
    for run, recs in zip(runs, records):
        if not recs:
            raise InputError(f"{run / RECORDS_FILE} has no records; run `evprobe run` first")
    return Side(folder, runs, metas, records, seeds)


def _seed_of(meta: RunMeta) -> int | None:
    seed = (meta.config or {}).get("seed")
    return seed if isinstance(seed, int) else None


def _design(meta: RunMeta, bench: Path | None) -> Design:
    bench = Path(meta.bench) if bench is None else Path(bench)
    bench_meta = read_meta(bench)
    if bench_meta["items_sha256"] != meta.items_sha256:
        raise InputError(f"{bench} is not the benchmark the runs were run on (items hash differs); "
                         "pass the right --bench")
    return Design.build(read_items(bench, validate_images=False), Prices(**bench_meta["prices"]))


def repeats_summary(design: Design, side: Side, run_scores: Sequence[Mapping[str, Any]], *,
                    n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED,
                    settings: Mapping[str, Any] | None = None) -> JsonObject:
    """OUT/scores.json of a folder of runs: per headline measure the runs' estimates (their scores),
    values, mean, sd, n_runs and the pooled estimate (module docstring)."""
    cost = cost_bounds(design.prices)
    shares = [run_shares(design, recs.values()) for recs in side.records]
    for run, s, scores in zip(side.runs, shares, run_scores):
        check_shares_match(s, scores, design, str(run))
    boot = design.bootstrap(n_boot, seed)
    reasons = {k: v for s in shares for k, v in s.reasons.items()}
    pooled = pooled_estimates(pooled_parts(boot, shares), cost, reasons)
    headline: dict[str, JsonObject] = {}
    for name in HEADLINE:
        values = [(scores.get(name) or {}).get("value") for scores in run_scores]
        have = [v for v in values if v is not None]
        headline[name] = {
            "runs": [scores.get(name) for scores in run_scores],
            "values": values,
            "mean": float(np.mean(have)) if have else None,
            "sd": float(np.std(have, ddof=1)) if len(have) >= 2 else None,
            "n_runs": len(have),
            "pooled": pooled[name].to_json(),
        }
    # PECS per dataset (bench.pecs), pooled over the runs from the same per-family sums
    sums = {part: tuple(np.sum([getattr(s, side)[:, MEASURES.index(pecs.POOLED[part])] for s in shares], axis=0)
                        for side in ("num", "den")) for part in pecs.PARTS}
    systems = [design.items_by_family[family][0].system for family in design.families]
    per_dataset = {"runs": [scores.get(pecs.SECTION) for scores in run_scores],
                   "pooled": pecs.section_json(pecs.from_family_sums(boot, systems, sums))}
    return {
        "kind": "repeated_runs",
        "settings": dict(settings or {}),
        "runs": [{"run": i + 1, "folder": run.name, "seed": sd, "records": scores.get("records")}
                 for i, (run, sd, scores) in enumerate(zip(side.runs, side.seeds, run_scores))],
        "headline": headline,
        pecs.SECTION: per_dataset,
        "meta": {"n_boot": n_boot, "seed": seed, "n_families": len(design.families), "n_runs": len(side.runs),
                 "interval": INTERVAL_METHOD, "pooled": POOLED_METHOD,
                 "sd": "sample standard deviation of the runs' values (ddof 1): decoding spread on the same items"},
    }


def score_runs_folder(out: str | Path, score_one: Callable[[Path], Mapping[str, Any]], bench: Path | None = None, *,
                      n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED) -> tuple[JsonObject, str]:
    """Score a folder of runs: every run with `score_one` (which writes RUN/scores.json and returns its
    scores, `experiments.scoring_io.score_run`), then OUT/scores.md and OUT/scores.json (in that order)
    across the runs. OUT's lock is held throughout, so `evprobe run --runs` cannot write OUT meanwhile."""
    out = Path(out)
    index = read_runs(out)
    with folder_lock(out, "evprobe score"):
        side = read_side(out)
        run_scores = [score_one(run) for run in side.runs]
        for run, recs, scores in zip(side.runs, side.records, run_scores):
            scored = (scores.get("records") or {}).get("n_records", len(recs))
            if scored != len(recs):
                raise InputError(f"{run / RECORDS_FILE} changed while it was scored (a run is writing it); "
                                 "score the runs when they end")
        design = _design(side.metas[0], bench)
        extra = index.model_extra or {}
        settings = {"model": side.metas[0].model, "protocol": side.metas[0].protocol, "regime": side.metas[0].regime,
                    "temperature": extra.get("temperature"), "top_p": extra.get("top_p"), "seed": index.seed}
        summary = repeats_summary(design, side, run_scores, n_boot=n_boot, seed=seed, settings=settings)
        seeds = f"seeds {side.seeds[0]} ... {side.seeds[-1]}" if len(side.seeds) > 1 else f"seed {side.seeds[0]}"
        sampled = (f", temperature {settings['temperature']:g}, top-p {settings['top_p']:g}"
                   if settings["temperature"] else "")
        title = f"{side.metas[0].title}{sampled}: {len(side.runs)} runs ({seeds})"
        markdown = repeats_markdown(summary, title)
        atomic_write_bytes(out / SCORES_MD, markdown.encode("utf-8"))
        atomic_write_json(out / SCORES_JSON, summary)
    return summary, markdown


def _check_same_items(a: Side, b: Side) -> None:
    if a.metas[0].items_sha256 != b.metas[0].items_sha256:
        raise InputError(f"{a.folder} and {b.folder} were run on different benchmarks (items "
                         f"{a.metas[0].items_sha256[:12]} and {b.metas[0].items_sha256[:12]}); a paired comparison "
                         "needs the same items")
    first, ids = a.runs[0], set(a.records[0])
    for run, recs in [*zip(a.runs, a.records), *zip(b.runs, b.records)]:
        if set(recs) != ids:
            raise InputError(f"{run} holds {len(recs)} records and {first} {len(ids)}, not the same items; a paired "
                             "comparison needs the same items in every run of both settings (finish the runs, or "
                             "run both on the same selection)")


def paired_comparison(a_folder: str | Path, b_folder: str | Path, bench: Path | None = None, *,
                      n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED) -> tuple[JsonObject, str]:
    """B - A of every headline measure, paired on one set of family resamples (module docstring);
    returns the JSON-ready result and its Markdown."""
    a, b = read_side(a_folder), read_side(b_folder)
    _check_same_items(a, b)
    design = _design(a.metas[0], bench)
    cost = cost_bounds(design.prices)
    boot = design.bootstrap(n_boot, seed)
    shares = {k: [run_shares(design, recs.values()) for recs in side.records] for k, side in (("a", a), ("b", b))}
    parts = {k: pooled_parts(boot, s) for k, s in shares.items()}
    reasons = {k: {r: why for s in shares[k] for r, why in s.reasons.items()} for k in shares}
    est = {k: pooled_estimates(parts[k], cost, reasons[k]) for k in parts}
    diff = paired_differences(parts["a"], parts["b"], cost, len(b.runs))
    means = {k: {name: float(np.mean([v[name] for v in vals])) if all(v[name] is not None for v in vals) else None
                 for name in HEADLINE}
             for k, vals in ((k, [s.values(cost) for s in shares[k]]) for k in shares)}
    result = {
        "kind": "paired_comparison",
        "a": {"folder": str(a.folder), "title": a.title, "runs": [str(r) for r in a.runs], "seeds": list(a.seeds)},
        "b": {"folder": str(b.folder), "title": b.title, "runs": [str(r) for r in b.runs], "seeds": list(b.seeds)},
        "headline": {name: {"a": est["a"][name].to_json(), "b": est["b"][name].to_json(),
                            "a_mean": means["a"][name], "b_mean": means["b"][name],
                            "difference": diff[name].to_json()} for name in HEADLINE},
        "meta": {"n_boot": n_boot, "seed": seed, "n_families": len(design.families), "n_items": len(a.records[0]),
                 "pooled": POOLED_METHOD, "difference": PAIRED_METHOD},
    }
    rows = [[label(name), headline_cell(name, block["a"]), headline_cell(name, block["b"]),
             difference_cell(name, block["difference"])] for name, block in result["headline"].items()]
    note = (f"A: {a.title} ({a.folder}). B: {b.title} ({b.folder}). {len(a.records[0])} items in every run, "
            f"{len(design.families)} families; {n_boot} family resamples, seed {seed}, each applied to every run of "
            "both settings (families resampled within runs). A setting's value pools its runs (with the same "
            "items in every run, the mean of its runs' values; n: units over its runs); B - A on every resample gives "
            "the paired interval (n: the units of one run); rates in percentage points, costs and PECS on their "
            "own scale.")
    markdown = f"# Paired comparison: B - A\n\n{note}\n\n" + table_text(["measure", "A", "B", "B - A"], rows) + "\n"
    return result, markdown


__all__ = ["MEASURES", "Design", "RunShares", "Side", "check_shares_match", "cost_bounds",
           "paired_comparison", "paired_differences", "pooled_estimates", "pooled_parts", "read_side",
           "repeats_summary", "run_shares", "score_runs_folder"]
