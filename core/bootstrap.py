"""Family bootstrap: percentile intervals from resampling whole parameter families (seed 000, B.4).

Every measure of the benchmark is a ratio over units (decisions, pairs, answers, probes) that
belong to families. Items of one family share worlds, images and thresholds, so they are not
independent; the unit of resampling is the family. One resample draws F families with replacement;
`counts[b, f]` says how often family f was drawn in resample b (rows sum to F).

A measure is given as two per-family vectors: `num[f]`, the sum of the unit values of family f,
and `den[f]`, its number of units. Its value is the ratio estimator over clusters,
sum(num) / sum(den); on resample b it is (counts[b] @ num) / (counts[b] @ den). Many measures go
through one matrix product, `counts @ NUM` and `counts @ DEN` with NUM, DEN of shape (F, M), and
every measure of one `FamilyBootstrap` sees the same resamples, so differences and products of
measures (paired variant differences, PECS) are computed per resample.

Intervals are pointwise 95% percentile intervals: the 2.5th and 97.5th percentiles of the
resampled values with linear interpolation between order statistics (numpy's
`np.percentile(..., method="linear")`, Hyndman-Fan type 7). A resample whose denominator is 0 (it
drew no family with a unit of that measure) has no value and is dropped before the percentiles;
a measure whose observed denominator is 0 has no value and no interval.

Proportions. A rate whose unit values are 0/1 outcomes (or means of a few 0/1 outcomes of one unit)
is flagged by the caller, `rate(num, den, binary=True)` (also `rates`, `resample`, `resample_many`,
where `binary` may be one flag per measure). Its percentile interval is a point at 0% or 100% (every
resample agrees), so its reported interval is the hull of the percentile interval and a cluster
Clopper-Pearson interval at the effective sample size (`core.proportion`, which documents the method
and its measured coverage). Unflagged measures (costs, log-odds, differences, products) keep the plain
percentile interval.

Values fixed by design. Some reported numbers do not depend on the sample at all: the random-test
policy's mean cost is the mean test price for every decision, and a fixed rule's mean cost (always
stop, always the combined report) is the same in every family. Every family resample reproduces such
a value exactly, so it has no sampling interval, and printing one ([1.25, 1.25]) would read as an
estimate of zero width. The rule, stated here once: a value is *fixed by design* when it is computed
from the benchmark's design alone (its items and prices, never the replies) and every family's own
value equals it (then every resample's ratio does, whatever the counts); it is an
`Estimate.by_design(value, n)`, whose `fixed` flag says so, whose JSON says `"fixed_by_design": true`,
and which every printer prints without an interval, `1.25 (fixed by design, n=576)` (`FIXED_TEXT`).
Its "coverage" is that identity: checked where it is made (`bench.scoring.Tally.design_mean` marks a
design value fixed only when every family shares it, and otherwise resamples it as any cost) and
tested on every resample (tests/bench/test_scoring.py).
Nothing observed on the sample is ever marked fixed: a rate whose every resample agrees gets the
proportion interval above, a probe AUROC the rule of probes.metrics.

Family counts. An interval computed on families rests on their number, not on the number of units:
576 decisions in 144 families are 144 independent draws. A producer that knows the families holding
a measure's units (`Resampled.held`, counted by `families_of`) passes the count on,
`Estimate.in_families(count)`, and every printer says it beside n, `(n=576 in 144 families)`, with a
warning below 8 families (core.estimate_text). The count is carried, never guessed: an estimate
whose producer does not give it prints n alone.

Values identical in every unit. An observed mean of unbounded unit values (log-odds changes) whose
every unit has the same value, as a deterministic model's exact zero (patching a position no later
computation reads), has no spread for a resample to show, and without a bound on its units no
interval follows from the sample. It is printed as what was observed, `0.000 (identical in all 128
pairs)`, never as `[0.000, 0.000]`: `Estimate.identical_units` (JSON `"identical_units": true`).
Bounded units never take this route: they get the proportion interval, which has width at any value.
"""

from __future__ import annotations

import operator
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import reduce
from typing import Any

import numpy as np

from evprobe.core import proportion
from evprobe.core.estimate_text import FIXED_TEXT, estimate_text  # FIXED_TEXT: printers import it from here too
from evprobe.core.json_types import JsonObject

DEFAULT_SEED = 20260905
DEFAULT_N_BOOT = 2000
DEFAULT_REFITS = 50  # probe refits (probes.refit); benchmarks/coverage.py measures coverage at 50
LEVEL = 95.0
INTERVAL_METHOD = (
    "family bootstrap: whole families resampled with replacement (multinomial counts), "
    "ratio estimator sum(num)/sum(den) per resample, pointwise 95% percentile interval "
    "(2.5th and 97.5th percentiles, linear interpolation as numpy method='linear'); "
    "resamples with a zero denominator are dropped; " + proportion.METHOD
)




@dataclass(frozen=True)
class Estimate:
    """A point value with its interval and n, the number of units in its denominator.

    `value` is None when the denominator is empty (then `ci` is (None, None) and n is 0); `reason`
    says why when the inputs of the measure are missing altogether (for example no select records).
    `fixed` marks a value fixed by design (module docstring): it has no sampling interval, and its
    `ci` is (value, value) only because every family resample reproduces it.
    """

    value: float | None
    ci: tuple[float | None, float | None]
    n: int
    reason: str | None = None
    fixed: bool = False
    identical: bool = False  # every unit the same observed value (module docstring): no interval
    n_families: int | None = None  # families holding the n units: the interval's effective n (issue 52)

    @classmethod
    def empty(cls, reason: str | None = None) -> Estimate:
        return cls(None, (None, None), 0, reason)

    @classmethod
    def by_design(cls, value: float, n: int) -> Estimate:
        """A value fixed by design (module docstring: computed from the design alone and the same in
        every family, e.g. the random test's assigned cost). Never for a value observed on the sample."""
        return cls(float(value), (float(value), float(value)), n, fixed=True)

    @classmethod
    def identical_units(cls, value: float, n: int) -> Estimate:
        """An observed mean whose n unbounded units all equal `value` (module docstring)."""
        return cls(float(value), (float(value), float(value)), n, identical=True)

    def in_families(self, count: int | None) -> Estimate:
        """This estimate with the number of families its interval was computed on (the clusters:
        `0.812 [0.744, 0.871] (n=576 in 144 families)`); None leaves it unsaid, and a missing value
        (an empty denominator) has no interval to count families for."""
        if self.value is None:
            return self
        return replace(self, n_families=None if count is None else int(count))

    def text(self, digits: int = 3, **how: Any) -> str:
        """`0.812 [0.744, 0.871] (n=144)`, or `NA (why)`: core.estimate_text, the one formatter."""
        return estimate_text(self, digits, **how)

    def to_json(self) -> JsonObject:
        out: JsonObject = {"value": self.value, "ci": list(self.ci), "n": self.n}
        if self.fixed:
            out["fixed_by_design"] = True
        if self.identical:
            out["identical_units"] = True
        if self.n_families is not None:
            out["n_families"] = self.n_families
        if self.reason is not None:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True, eq=False)
class Resampled:
    """One measure on the observed sample and on every resample.

    `value` is NaN when the observed denominator is 0; `draws[b]` is NaN when resample b's is.
    Combine several with `FamilyBootstrap.combine` to get paired differences or products.
    `shares` holds the per-family (num, den), each (F,), of a proportion (binary=True): its estimate
    then also carries the cluster interval of `core.proportion`; None for every other measure.
    `held` (F,) marks the families holding a unit of the measure (`families_of` counts them for a
    printed `n=576 in 144 families`); None where not known.
    """

    value: float
    draws: np.ndarray  # shape (B,)
    n: int
    shares: tuple[np.ndarray, np.ndarray] | None = None
    held: np.ndarray | None = None


def families_of(*parts: Resampled) -> int | None:
    """The number of families holding a unit of any of `parts` (measures of one bootstrap): what an
    interval computed from them rests on. None where a part does not say (`Resampled.held`)."""
    if not parts or any(p.held is None for p in parts):
        return None
    return int(np.logical_or.reduce([p.held for p in parts]).sum())


def percentile_interval(draws: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Column-wise (lo, hi) percentiles of `draws` (B, M), ignoring NaN entries.

    Same numbers as `np.percentile(column[~isnan], [2.5, 97.5], method="linear")` for each column,
    done for all columns at once: sort (NaN goes last), then interpolate between order statistics
    at position q (k - 1), k = the number of finite draws. Columns with no finite draw give NaN.
    """
    draws = np.asarray(draws, dtype=float)
    if draws.ndim == 1:
        draws = draws[:, None]
    ordered = np.sort(draws, axis=0)
    k = np.sum(~np.isnan(draws), axis=0)
    cols = np.arange(draws.shape[1])
    tail = (100.0 - level) / 2.0
    bounds = []
    for q in (tail, 100.0 - tail):
        pos = q / 100.0 * np.maximum(k - 1, 0)
        lo = np.floor(pos).astype(int)
        hi = np.minimum(lo + 1, np.maximum(k - 1, 0))  # never step onto the NaN tail
        frac = pos - lo
        a, b = ordered[lo, cols], ordered[hi, cols]
        value = np.where(frac == 0.0, a, a + (b - a) * frac)  # exact at order statistics
        bounds.append(np.where(k > 0, value, np.nan))
    return bounds[0], bounds[1]


def _as_float(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


def _subset_seed(seed: int, families: Sequence[str]) -> int:
    """A seed for a sub-bootstrap that depends on the parent seed and on which families it holds,
    so the same subset always gets the same resamples and another subset gets other ones."""
    return zlib.crc32(f"{seed}|{'|'.join(families)}".encode()) & 0x7FFFFFFF


class FamilyBootstrap:
    """One seeded set of B family resamples, shared by every measure scored against it.

    `counts` (B, F) is drawn once: `rng.multinomial(F, [1/F] * F, size=B)` with
    `rng = np.random.default_rng(seed)`; row b says how many times each family is drawn.
    """

    def __init__(
        self, families: Sequence[str], n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED
    ) -> None:
        families = tuple(families)
        if not families:
            raise ValueError("a family bootstrap needs at least one family")
        if len(set(families)) != len(families):
            raise ValueError("family ids must be distinct")
        if n_boot < 1:
            raise ValueError(f"n_boot must be a positive integer, got {n_boot}")
        self.families = families
        self.index = {fid: i for i, fid in enumerate(families)}
        self.n_boot = int(n_boot)
        self.seed = int(seed)
        f = len(families)
        rng = np.random.default_rng(self.seed)
        self.counts: np.ndarray = rng.multinomial(f, np.full(f, 1.0 / f), size=self.n_boot)
        self._weights = self.counts.astype(float)  # converted once for the matrix products

    @property
    def n_families(self) -> int:
        return len(self.families)

    def family_index(self, family_ids: Sequence[str]) -> np.ndarray:
        """Positions of `family_ids` in `families` (a ValueError names an unknown id)."""
        try:
            return np.fromiter(
                (self.index[f] for f in family_ids), dtype=int, count=len(family_ids)
            )
        except KeyError as err:
            raise ValueError(f"family {err.args[0]!r} is not in this bootstrap") from None

    def per_family(self, family_idx: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Sum of unit `values` per family: the `num` (or, with ones, `den`) vector of a measure."""
        return np.bincount(family_idx, weights=values, minlength=self.n_families).astype(float)

    # -- many measures at once ------------------------------------------------------------

    def resample_many(
        self, num: np.ndarray, den: np.ndarray, binary: bool | Sequence[bool] = False
    ) -> list[Resampled]:
        """Observed and resampled ratios of M measures; `num`, `den` have shape (F, M).

        `binary` (one flag, or one per measure) marks proportions, whose unit values lie in [0, 1]:
        their per-family sums are checked (a ValueError for sums outside [0, den]) and kept for the
        cluster interval."""
        num, den = self._check(num), self._check(den)
        flags = np.broadcast_to(np.asarray(binary, dtype=bool), (num.shape[1],))
        if flags.any():
            proportion.check_shares(num[:, flags], den[:, flags])
        top, bottom = num.sum(axis=0), den.sum(axis=0)
        draws_num, draws_den = self._weights @ num, self._weights @ den
        with np.errstate(invalid="ignore", divide="ignore"):
            observed = np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0), np.nan)
            draws = np.where(
                draws_den > 0, draws_num / np.where(draws_den > 0, draws_den, 1.0), np.nan
            )
        return [
            Resampled(
                float(observed[m]),
                draws[:, m],
                int(round(bottom[m])),
                (num[:, m], den[:, m]) if flags[m] else None,
                den[:, m] > 0,
            )
            for m in range(num.shape[1])
        ]

    def rates(
        self, num: np.ndarray, den: np.ndarray, binary: bool | Sequence[bool] = False
    ) -> list[Estimate]:
        """Estimates of M ratio measures from per-family (F, M) numerators and denominators;
        `binary` marks proportions (see `resample_many`)."""
        return self.estimates(self.resample_many(num, den, binary))

    @staticmethod
    def estimates(parts: Sequence[Resampled]) -> list[Estimate]:
        """Turn resampled measures into estimates, all percentiles in one vectorised pass; a
        proportion's interval is the hull with its cluster interval (`core.proportion`)."""
        if not parts:
            return []
        draws = np.stack([p.draws for p in parts], axis=1)
        lo, hi = percentile_interval(draws)
        by_size: dict[int, list[int]] = {}  # proportions grouped by F (parts of sub-bootstraps)
        for m, part in enumerate(parts):
            if part.shares is not None:
                by_size.setdefault(len(part.shares[0]), []).append(m)
        for cols in by_size.values():
            num = np.stack([parts[m].shares[0] for m in cols], axis=1)  # (F, K)
            den = np.stack([parts[m].shares[1] for m in cols], axis=1)
            lo[cols], hi[cols] = proportion.hull(
                (lo[cols], hi[cols]), proportion.cluster_interval(num, den)
            )
        out = []
        for m, part in enumerate(parts):
            if np.isnan(part.value):
                out.append(Estimate.empty())
            else:
                out.append(
                    Estimate(float(part.value), (_as_float(lo[m]), _as_float(hi[m])), part.n)
                )
        return out

    # -- one measure ------------------------------------------------------------------------

    def resample(self, num: np.ndarray, den: np.ndarray, binary: bool = False) -> Resampled:
        """One ratio measure from per-family vectors of length F."""
        num2, den2 = np.asarray(num, float)[:, None], np.asarray(den, float)[:, None]
        return self.resample_many(num2, den2, binary)[0]

    def rate(self, num: np.ndarray, den: np.ndarray, binary: bool = False) -> Estimate:
        """One ratio measure; binary=True for a proportion (never a zero-width interval)."""
        return self.estimate(self.resample(num, den, binary))

    @staticmethod
    def estimate(part: Resampled) -> Estimate:
        return FamilyBootstrap.estimates([part])[0]

    # -- functions of measures, per resample ------------------------------------------------

    @staticmethod
    def combine(
        fn: Callable[..., np.ndarray | float], parts: Sequence[Resampled], n: int
    ) -> Estimate:
        """fn applied to the observed values and, elementwise, to every resample's values.

        The parts must come from the same bootstrap (same resamples), which makes the result
        paired. A resample where any part is undefined is dropped; an undefined observed part
        gives an empty estimate. `n` is the count to report (the caller says what it counts).
        """
        values = [p.value for p in parts]
        if any(np.isnan(v) for v in values):
            return Estimate.empty()
        with np.errstate(invalid="ignore"):
            value = float(fn(*[np.float64(v) for v in values]))
            draws = np.asarray(fn(*[p.draws for p in parts]), dtype=float)
        return FamilyBootstrap.estimate(Resampled(value, draws, n))

    @staticmethod
    def difference(a: Resampled, b: Resampled) -> Estimate:
        """Paired difference a - b on the same resamples; n is a's denominator."""
        return FamilyBootstrap.combine(lambda x, y: x - y, [a, b], a.n)

    @staticmethod
    def product(parts: Sequence[Resampled], n: int) -> Estimate:
        """Elementwise product of several measures (e.g. a success rate times a share)."""
        return FamilyBootstrap.combine(lambda *xs: reduce(operator.mul, xs), parts, n)

    # -- sub-bootstraps ---------------------------------------------------------------------

    def subset(self, families: Sequence[str]) -> FamilyBootstrap:
        """A bootstrap over some of the families (the variant subset) with its own resamples.

        The subset keeps this bootstrap's family order and B; its seed is derived from this seed
        and the subset's ids, so it is reproducible and independent of the order of `families`.
        """
        wanted = set(families)
        unknown = sorted(wanted - set(self.families))
        if unknown:
            raise ValueError(f"family {unknown[0]!r} is not in this bootstrap")
        kept = [f for f in self.families if f in wanted]
        return FamilyBootstrap(kept, self.n_boot, _subset_seed(self.seed, kept))

    def _check(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        if x.ndim == 1:
            x = x[:, None]
        if x.ndim != 2 or x.shape[0] != self.n_families:
            raise ValueError(
                f"expected per-family arrays of shape ({self.n_families}, M), got {x.shape}"
            )
        return x
