"""Named measures as per-family sums, resolved in one family-bootstrap pass (`Tally`): how
`bench.scoring` and `bench.void_scoring` count, so every measure of a score shares one resample matrix."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import TypeAlias

import numpy as np

from evprobe.core.bootstrap import Estimate, FamilyBootstrap, Resampled, families_of
from evprobe.core.json_types import JsonValue

Key = tuple[str, ...]  # a measure's place in the output, e.g. ("policies", "model", "correct")
# A section of scores.json before it is written: JSON whose leaves may still be Estimates
# (bench.scoring._jsonable and bench.pecs.section_json turn each into its JSON).
ScoreValue: TypeAlias = Estimate | JsonValue | list["ScoreValue"] | dict[str, "ScoreValue"]
ScoreSection: TypeAlias = dict[str, ScoreValue]


class Tally:
    """Named measures as per-family numerators and denominators, resolved in one bootstrap pass."""

    def __init__(self, boot: FamilyBootstrap) -> None:
        self.boot = boot
        self.keys: list[Key] = []
        self.num: list[np.ndarray] = []
        self.den: list[np.ndarray] = []
        self.binary: list[bool] = []  # per measure: a proportion (cluster interval too) or a mean
        self.reasons: dict[Key, str] = {}
        self.bounds: dict[Key, tuple[float, float]] = {}  # bounded means: (lower, span) to undo the rescaling
        self.fixed: set[Key] = set()  # values fixed by design (core.bootstrap): no sampling interval
        self.identical: set[Key] = set()  # means whose every unit is the same value (core.bootstrap): no interval

    def rate(self, key: Key, units: Iterable[tuple[int, float]]) -> None:
        """A proportion from (family index, unit value) pairs, unit values 0/1 (or a unit's mean of
        0/1 outcomes, as a policy's success over two hidden worlds); every unit adds 1 to the
        denominator. Its interval is `FamilyBootstrap`'s for binary=True: never zero width."""
        self._add(key, units, binary=True)

    def mean(self, key: Key, units: Iterable[tuple[int, float]]) -> None:
        """A mean of unbounded unit values (a log error): the plain percentile interval. When every
        unit has the same value (every estimate exact: a log error of 0 in each) no resample can
        differ, and the percentile interval would be a point: it is reported as identical in every
        unit (`Estimate.identical_units`), with no interval."""
        pairs = list(units)
        if pairs and all(v == pairs[0][1] for _, v in pairs):
            self.identical.add(key)
        self._add(key, pairs, binary=False)

    def bounded_mean(self, key: Key, units: Iterable[tuple[int, float]], lower: float, upper: float) -> None:
        """A mean of unit values known to lie in [lower, upper] (a cost lies between the cheapest
        and the dearest price). It is tallied as the share (v - lower) / (upper - lower), so its
        interval is a proportion's (`FamilyBootstrap`'s binary=True: the percentile interval hulled
        with the cluster Clopper-Pearson interval, conservative for bounded units since a 0/1 unit
        has the largest variance of any unit with its mean), then mapped back to the value's
        scale. So a sample whose every family agrees (every decision at the reference's cost)
        does not print a zero-width interval, as a plain mean would."""
        if upper <= lower:
            self.mean(key, units)
            return
        span = upper - lower
        self._add(key, ((f, (v - lower) / span) for f, v in units), binary=True)
        self.bounds[key] = (lower, span)

    def design_mean(self, key: Key, units: Iterable[tuple[int, float]], lower: float, upper: float) -> None:
        """A mean of unit values that the benchmark's design sets alone (items and prices, never the
        replies): a fixed rule's or the random test's cost. When every family's mean equals the
        overall mean (every decision at the same price, or every family with the same mix of
        decisions) every family resample reproduces it: it is fixed by design (core.bootstrap,
        `Estimate.by_design`), with no interval. Otherwise the families differ and the value depends
        on which were sampled: a bounded mean, as any cost."""
        pairs = list(units)
        fam = np.fromiter((f for f, _ in pairs), dtype=int, count=len(pairs))
        val = np.fromiter((v for _, v in pairs), dtype=float, count=len(pairs))
        num, den = self.boot.per_family(fam, val), self.boot.per_family(fam, np.ones(len(pairs)))
        if den.sum() == 0:
            self.bounded_mean(key, pairs, lower, upper)
            return
        value = num.sum() / den.sum()
        if np.allclose(num, value * den, rtol=0.0, atol=1e-12 * max(1.0, abs(value)) * max(1.0, den.max())):
            self._add(key, pairs, binary=False)  # its resamples, for paired measures: all equal to value
            self.fixed.add(key)
        else:
            self.bounded_mean(key, pairs, lower, upper)

    def _add(self, key: Key, units: Iterable[tuple[int, float]], *, binary: bool) -> None:
        pairs = list(units)
        fam = np.fromiter((f for f, _ in pairs), dtype=int, count=len(pairs))
        val = np.fromiter((v for _, v in pairs), dtype=float, count=len(pairs))
        if binary and np.any((val < 0.0) | (val > 1.0) | np.isnan(val)):
            bad = val[(val < 0.0) | (val > 1.0) | np.isnan(val)][0]
            raise ValueError(f"measure {key}: unit value {bad:g} is not a share in [0, 1]")
        self.keys.append(key)
        self.binary.append(binary)
        self.num.append(self.boot.per_family(fam, val))
        self.den.append(self.boot.per_family(fam, np.ones(len(pairs))))

    def skip(self, key: Key, reason: str) -> None:
        """A measure whose inputs are absent: reported as empty with `reason`."""
        self.reasons[key] = reason

    def resolve(self) -> tuple[dict[Key, Resampled], dict[Key, Estimate]]:
        """Every measure's resamples and its Estimate, which carries the number of families holding
        its units (`n=576 in 144 families`: the interval's effective n, issue 52); a value fixed by
        design has no interval and no count."""
        if self.keys:
            parts = self.boot.resample_many(
                np.stack(self.num, axis=1), np.stack(self.den, axis=1), self.binary
            )
        else:
            parts = []
        resampled = dict(zip(self.keys, parts, strict=True))
        estimates = {key: e.in_families(families_of(part))
                     for key, e, part in zip(self.keys, self.boot.estimates(parts), parts, strict=True)}
        for key, (lower, span) in self.bounds.items():  # bounded means back on their own scale
            e, r = estimates[key], resampled[key]
            if e.value is not None:
                lo, hi = e.ci
                estimates[key] = replace(e, value=lower + span * e.value, ci=(None if lo is None else lower + span * lo,
                                                                             None if hi is None else lower + span * hi))
            resampled[key] = Resampled(lower + span * r.value, lower + span * r.draws, r.n, held=r.held)
        for key in self.fixed:
            estimates[key] = Estimate.by_design(resampled[key].value, resampled[key].n)
        for key in self.identical:
            estimates[key] = Estimate.identical_units(resampled[key].value, resampled[key].n).in_families(
                families_of(resampled[key]))
        estimates.update({key: Estimate.empty(reason) for key, reason in self.reasons.items()})
        return resampled, estimates


__all__ = ["Key", "Tally"]
