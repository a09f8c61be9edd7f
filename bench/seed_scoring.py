"""A run scored as a seed scored it (`evprobe score RUN --as seed000`), beside evprobe's own score.

What "as the seed" means, per seed (docs/reference/scoring.md, "Reproducing a seed's tables"):

- seed000: the run's raw replies are read again with the seed's parser (appendix B.2,
  `bench.seed_readers.read_seed000`) and the same measures are computed with the seed's interval
  rule (B.4: 2,000 resamples of whole families, pointwise percentile intervals, with no hull: a rate
  at 0% or 100% gets the degenerate `[0.0, 0.0]` the seed printed, marked as such). The seed's
  control requirements (B.3) are checked on both scores. Only the letter protocols of seed 000 can be
  read this way (direct and brief, standard or guided prompts): the free protocol shows no letters
  and the json regime has a `final_answer` field, neither of which B.2 has a rule for.
- seed002 and seed003: refused in one line, each saying where evprobe already does what the seed
  does (`NO_DIFFERENCE`): seed 002's reading of free replies is evprobe's default rubric for the
  free protocol (`bench.parse.FREE_RUBRIC`), its LLM panel is `evprobe judge`, and its mean +- sd
  over runs is `evprobe score` on a folder of runs; seed 003 defines threshold accuracy (eq. 6) and
  its unweighted mean over tasks, which are evprobe's own (`bench.threshold`, `bench.task_means`),
  and neither a reader nor an interval.

The seed-mode numbers come from `bench.scoring.score` itself, given the re-read records and a
bootstrap whose estimates are the plain percentile interval (`PercentileBootstrap`), on the same
seed and resamples as evprobe's score: the two columns differ only by the reader and the interval.
A percentile interval under-covers with few families and near 0% or 100%: measured where the truth is
known (benchmarks/coverage_seed_percentile.py, families of 4, 1,000 data sets, B = 2,000), at 8 families
it covers 0.91 at p = 0.5, 0.73-0.83 at p = 0.9 and 0.35-0.46 at p = 0.98 (a point in 53-65% of data
sets), where evprobe's hull covers 0.97-1.00; at 144 families 0.90-0.96. That is the seed's rule,
reproduced and marked, not corrected.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from evprobe.bench.items import Item
from evprobe.bench.protocols import is_json_regime
from evprobe.bench.records import Record
from evprobe.bench.reference import Prices
from evprobe.bench.scoring import score
from evprobe.bench.seed_readers import SEED000_REQUESTS, read_seed000
from evprobe.core.bootstrap import Estimate, FamilyBootstrap, Resampled
from evprobe.core.errors import InputError
from evprobe.core.json_types import JsonObject, JsonValue

SEEDS: tuple[str, ...] = ("seed000",)  # the seeds with a reproduction mode
NO_DIFFERENCE: dict[str, str] = {
    "seed002": (
        "seed 002 has no reproduction mode: its rubric (D.2) already reads free runs (evprobe's default, "
        "rubric seed002), its judge panel is `evprobe judge RUN --judge ...`, and its mean +- sd over runs "
        "is `evprobe score` on a folder of runs (evprobe run --runs 3)"
    ),
    "seed003": (
        "seed 003 has no reproduction mode: it defines threshold accuracy (eq. 6) and its unweighted mean over "
        "tasks, which evprobe scores as written (scores.json 'numeric': acc_5 ... acc_30; bench.task_means), and "
        "no reader or interval of its own"
    ),
}
PERCENTILE_METHOD = (
    "seed 000 B.4: family bootstrap, pointwise 95% percentile intervals (2.5th and 97.5th percentiles), "
    "no hull with a cluster interval; a rate at 0% or 100% has a degenerate interval, as the seed printed"
)
# B.3's three control requirements: (measure key, threshold, what the plan asked)
REQUIREMENTS: tuple[tuple[tuple[str, ...], float, str], ...] = (
    (("controls", "both_given"), 0.75, "answer accuracy with both parameters given >= 75% (planned for Qwen 7B)"),
    (("controls", "read_ruler"), 0.80,
     "measurement (ruler) reading accuracy >= 80% (planned for Qwen 7B and SmolVLM2)"),
)
VALIDITY_REQUIREMENT = 0.95  # "The output validity requirement was 95% on applicable requests"
# the measures printed side by side: (key in scores.json, printed name, the replies it reads)
MEASURES: tuple[tuple[tuple[str, ...], str, tuple[str, ...]], ...] = (
    (("min_cost_choice",), "Minimum cost choice", ("select",)),
    (("stop_if_enough",), "Stop if enough", ("select",)),
    (("test_if_needed",), "Test if needed", ("select",)),
    (("both_correct_image_pairs",), "Both correct, changed image", ("select",)),
    (("both_correct_threshold_pairs",), "Both correct, changed threshold", ("select",)),
    (("same_choice_image_pairs",), "Same choice, changed image", ("select",)),
    (("same_choice_threshold_pairs",), "Same choice, changed threshold", ("select",)),
    (("enough_evidence",), "Enough evidence", ("select",)),
    (("useful_test_supplied",), "Useful test supplied", ("answer_after_test",)),
    (("resolved_and_correct",), "Resolved and correct", ("select", "answer_initial", "answer_after_test")),
    (("mean_cost",), "Mean cost", ("select",)),
    (("controls", "read_ruler"), "Read the ruler", ("read_ruler",)),
    (("controls", "recover_property"), "Recover the property", ("recover_property",)),
    (("controls", "both_given"), "Both properties given", ("both_given",)),
    *((("validity", f"validity_{r}"), f"Validity: {r}", (r,)) for r in SEED000_REQUESTS),
)
COST_MEASURES = frozenset({("mean_cost",)})


def check_seed(name: str) -> None:
    """A seed with a reproduction mode, or a one-line InputError saying why not (before any work)."""
    if name in SEEDS:
        return
    if name in NO_DIFFERENCE:
        raise InputError(f"--as {name}: {NO_DIFFERENCE[name]}")
    raise InputError(f"--as {name!r} is not a seed with a reproduction mode; choose {', '.join(SEEDS)}")


def check_run(name: str, protocol: str, regime: str, run_json: str) -> None:
    """A run the seed's reader can read, or a one-line InputError naming the run.json field."""
    if protocol not in ("direct", "brief"):
        raise InputError(f"{run_json}: protocol {protocol!r}: --as {name} reads seed 000's letter protocols "
                         "(direct, brief) only; B.2 has no rule for replies without option letters: score a direct or brief run")
    if is_json_regime(regime):
        raise InputError(f"{run_json}: regime {regime!r}: --as {name} has no reading of a json final_answer "
                         "(seed 000 had no json regime); score a standard or guided run")


class PercentileBootstrap(FamilyBootstrap):
    """Seed 000's interval rule (B.4): every estimate is the plain percentile interval, proportions too
    (the resamples are `FamilyBootstrap`'s; only the hull with the cluster interval is left out)."""

    @staticmethod
    def estimates(parts: Sequence[Resampled]) -> list[Estimate]:
        return FamilyBootstrap.estimates([replace(p, shares=None) for p in parts])

    def subset(self, families: Sequence[str]) -> FamilyBootstrap:
        sub = super().subset(families)
        return PercentileBootstrap(sub.families, sub.n_boot, sub.seed)


@dataclass(frozen=True)
class Row:
    """One measure: evprobe's estimate, the seed's, and how many of the replies it reads the two
    readers read differently."""

    key: tuple[str, ...]
    name: str
    evprobe: Estimate
    seed: Estimate
    read_differently: int
    cost: bool = False


@dataclass(frozen=True)
class Requirement:
    """One B.3 control requirement, checked on evprobe's score and on the seed-mode score."""

    key: tuple[str, ...]
    threshold: float
    plan: str
    evprobe: Estimate
    seed: Estimate

    @staticmethod
    def verdict(e: Estimate, threshold: float) -> str:
        """'pass' (point estimate at or above the threshold, as the seed judged), 'fail', or 'not
        checked' (no records); 'interval straddles' is added where the interval holds the threshold."""
        if e.value is None:
            return "not checked"
        word = "pass" if e.value >= threshold else "fail"
        lo, hi = e.ci
        straddles = lo is not None and hi is not None and lo < threshold <= hi
        return f"{word} (interval straddles {100 * threshold:g}%)" if straddles else word


@dataclass(frozen=True)
class Reproduction:
    """A run scored as `seed` scored it, beside evprobe's score."""

    seed: str
    rows: tuple[Row, ...]
    requirements: tuple[Requirement, ...]
    read_differently: dict[str, int]  # per request (variants as variant_NAME): replies read differently
    n_read: int  # replies the seed's reader read (records of seed 000's requests)
    n_boot: int
    boot_seed: int

    def to_json(self) -> JsonObject:
        def est(e: Estimate) -> JsonObject:
            out = e.to_json()
            if degenerate(e):
                out["degenerate"] = True
            return out

        return {
            "seed": self.seed,
            "interval": {"evprobe": "see scores.json meta.interval", "seed": PERCENTILE_METHOD},
            "n_boot": self.n_boot,
            "bootstrap_seed": self.boot_seed,
            "n_read": self.n_read,
            "read_differently": dict(self.read_differently),
            "measures": [{"measure": ".".join(r.key), "name": r.name, "evprobe": est(r.evprobe), "seed": est(r.seed),
                          "read_differently": r.read_differently} for r in self.rows],
            "requirements": [{"measure": ".".join(q.key), "requirement": q.plan, "threshold": q.threshold,
                              "evprobe": est(q.evprobe), "evprobe_verdict": Requirement.verdict(q.evprobe, q.threshold),
                              "seed": est(q.seed), "seed_verdict": Requirement.verdict(q.seed, q.threshold)}
                             for q in self.requirements],
        }


def degenerate(e: Estimate) -> bool:
    """A percentile interval of zero width (every resample agrees): the seed's `0 [0, 0]` (B.4)."""
    lo, hi = e.ci
    return e.value is not None and not e.fixed and lo is not None and lo == hi


def _reads(item: Item, rec: Record) -> bool:
    """Whether the seed's reader reads this record: a main item (no void, injection level 0) of one of
    seed 000's requests, with a reply from the model (a backend error has none)."""
    return item.request in SEED000_REQUESTS and item.void is None and not item.injection and rec.error is None


def reread(items: dict[str, Item], records: Iterable[Record]) -> tuple[list[Record], Counter[str]]:
    """The records with seed 000's reading of their replies (main items of seed 000's requests; every
    other record, and a record whose backend returned no reply, as read), and per request the number
    read differently (validity, option, action, answer or value)."""
    out: list[Record] = []
    differ: Counter[str] = Counter()
    for rec in records:
        item = items[rec.item_id]
        if not _reads(item, rec):
            out.append(rec)
            continue
        p = read_seed000(item, rec.reply)
        new = replace(rec, valid=p.valid, route=p.route, choice=p.choice, action=p.action, answer=p.answer,
                      value=p.value)
        if (new.valid, new.choice, new.action, new.answer, new.value) != (
                rec.valid, rec.choice, rec.action, rec.answer, rec.value):
            differ[item.request if item.variant is None else f"variant_{item.variant}"] += 1
        out.append(new)
    return out, differ


def _at(scores: JsonValue, key: tuple[str, ...]) -> Estimate:
    node = scores
    for part in key:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return Estimate.empty("not scored")
    ci = node.get("ci") or [None, None]
    return Estimate(node.get("value"), (ci[0], ci[1]), int(node.get("n") or 0),  # type: ignore[arg-type]
                    reason=node.get("reason"), fixed=bool(node.get("fixed_by_design")),  # type: ignore[arg-type]
                    identical=bool(node.get("identical_units")), n_families=node.get("n_families"))  # type: ignore[arg-type]


def reproduce_seed000(items: Sequence[Item], records: Sequence[Record], *, n_boot: int, seed: int,
                      prices: Prices) -> tuple[JsonObject, Reproduction]:
    """evprobe's score of the run (as `evprobe score` computes it) and the run scored as seed 000
    scored it, side by side."""
    index = {it.item_id: it for it in items}
    own = score(items, records, n_boot=n_boot, seed=seed, prices=prices)
    seed_records, differ = reread(index, records)
    theirs = score(items, seed_records, n_boot=n_boot, seed=seed, prices=prices, bootstrap=PercentileBootstrap)
    rows = tuple(Row(key, name, _at(own, key), _at(theirs, key), sum(differ[r] for r in reads), key in COST_MEASURES)
                 for key, name, reads in MEASURES)
    validity = [(("validity", f"validity_{r}"), VALIDITY_REQUIREMENT, f"output validity on {r} >= 95%")
                for r in SEED000_REQUESTS]
    variants = sorted({it.variant for it in items if it.variant is not None})
    validity += [(("validity", f"validity_variant_{v}"), VALIDITY_REQUIREMENT, f"output validity on variant {v} >= 95%")
                 for v in variants]
    requirements = tuple(
        Requirement(key, threshold, plan, _at(own, key), _at(theirs, key))
        for key, threshold, plan in (*REQUIREMENTS, *validity)
        if key[0] != "validity" or _at(own, key).value is not None  # applicable: requests the run has
    )
    n_read = sum(1 for rec in records if _reads(index[rec.item_id], rec))
    return own, Reproduction("seed000", rows, requirements, dict(sorted(differ.items())), n_read, n_boot, seed)


__all__ = ["NO_DIFFERENCE", "PercentileBootstrap", "Reproduction", "Requirement", "Row", "SEEDS", "check_run",
           "check_seed", "degenerate", "reproduce_seed000", "reread"]
