"""Paired effects with family-bootstrap intervals: the one estimator of dose-response numbers, for
`evprobe dose-response` (experiments.dose_response.stats builds every curve row with it), for
`steering_dose_response` on your own prompts, and for `evprobe.paired_effects` on per-item
readouts from anywhere (a tidy table; `paired_effects` below).

Input per condition: values (items, M), one column per measure, NaN where a measure is undefined
for an item (it leaves that measure's denominator, as an item without the property's test does).
A cell is one group of items (a boolean mask) x one measure:

- estimate: sum of the defined values / their count (a ratio, so a group's mean or rate);
- interval: the hull of the family bootstrap's 95% percentile interval (core.bootstrap: whole
  families resampled, one resample matrix for every condition, so a change against the baseline is
  paired) and the cluster t interval (core.cluster_t: the linearised standard error over families,
  t on F - 1 degrees of freedom), since the percentile interval alone covered about 88% at 8
  families (issue 52; the coverage of the hull and its width cost: benchmarks/coverage_paired_effects.py);
  for proportions (measures whose values are 0 or 1) hulled also with the cluster Clopper-Pearson
  interval (core.proportion), so a rate is never a point;
- paired change against the baseline's cell: the hull of the percentile interval of the paired
  draws and the cluster t interval of the change; for proportions widened to a MOVER interval
  (core.proportion.saturated_change) where a rate saturates or has fewer than 5 units of its rarer
  outcome (`FEW_EVENTS`; there the MOVER interval credits the pairing by the measured correlation);
  a rate's interval ends within [0, 1], a change of rates' within [-1, 1] (the t interval is symmetric);
- every Estimate carries the number of families its interval was computed on (`n_families`: the
  families holding a defined value of the cell, for a change of either condition's), printed
  `(n=576 in 144 families)`, with a warning below 8 (core.estimate_text);
- where every unit of a cell that is not a proportion has the same value (a change of exactly 0 in
  every item, say), nothing varies to resample: the Estimate is marked `identical`, with no interval.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from evprobe.core import bootstrap, cluster_t
from evprobe.core.bootstrap import DEFAULT_N_BOOT, DEFAULT_SEED, Estimate, FamilyBootstrap, percentile_interval
from evprobe.core.errors import InputError, shown
from evprobe.analysis.inputs import MAX_BOOT, boot_memory, identifiers, integer, readouts
from evprobe.core.proportion import check_shares, cluster_interval, hull, saturated_change

if TYPE_CHECKING:
    import pandas as pd

# A change of rates where either rate has fewer units of its rarer outcome than this is also widened
# to the correlated MOVER interval (core.proportion.saturated_change): with so few events the normal
# approximation behind the percentile and t intervals fails (the textbook n p >= 5 rule); measured in
# benchmarks/coverage_paired_effects.py (a rate near 100% at 72 families: 91.8% without it).
FEW_EVENTS = 5
INTERVAL_METHOD = (  # what a report's meta says of these intervals (bootstrap.INTERVAL_METHOD's and more)
    f"{bootstrap.INTERVAL_METHOD}; every estimate and paired change hulled with the {cluster_t.METHOD}; "
    f"a change of rates where a rate has fewer than {FEW_EVENTS} units of its rarer outcome widened to "
    "the MOVER interval for correlated estimates; a rate's ends cut to [0, 1], a change of rates' to [-1, 1]"
)


@dataclass(frozen=True, eq=False)
class Cells:
    """One condition's cells, ordered mask x measure (C = masks x M), from one pass over its values:
    observed ratios (C,), resampled ratios (B, C) (NaN where a resample's denominator is 0), n (C,),
    the cluster interval (lo, hi) of the proportion cells (NaN for the others), whether each cell is
    a proportion (C,), the per-item values and masks they came from (paired changes read them), and
    the per-family sums (F, C) of the defined values and their count (the cluster t interval's)."""

    observed: np.ndarray
    draws: np.ndarray
    n: np.ndarray
    cluster: tuple[np.ndarray, np.ndarray]
    share: np.ndarray
    values: np.ndarray
    masks: tuple[np.ndarray, ...]
    num: np.ndarray
    den: np.ndarray

    @property
    def n_families(self) -> np.ndarray:
        """(C,) the families holding a defined value of each cell: its interval's effective n."""
        return cluster_t.family_count(self.den)


def cells(values: np.ndarray, masks: Mapping[object, np.ndarray] | Sequence[np.ndarray], boot: FamilyBootstrap,
          fam: np.ndarray, proportions: Sequence[bool]) -> Cells:
    """The cells of one condition. values: (items, M) float, NaN = undefined; masks: (items,) bool
    each; fam: each item's family index in `boot` (items,); proportions: (M,) one flag per measure."""
    V = np.asarray(values, dtype=float)  # (items, M)
    ms = tuple(masks.values()) if isinstance(masks, Mapping) else tuple(masks)
    nums, dens = [], []
    for m in ms:
        for j in range(V.shape[1]):
            defined = m & ~np.isnan(V[:, j])
            nums.append(boot.per_family(fam, np.where(defined, V[:, j], 0.0)))
            dens.append(boot.per_family(fam, defined.astype(float)))
    NUM, DEN = np.stack(nums, axis=1), np.stack(dens, axis=1)  # (F, C) per-family sums
    top, bottom = NUM.sum(0), DEN.sum(0)
    draws_num, draws_den = boot.counts @ NUM, boot.counts @ DEN  # (B, C)
    with np.errstate(invalid="ignore", divide="ignore"):
        observed = np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0), np.nan)
        draws = np.where(draws_den > 0, draws_num / np.where(draws_den > 0, draws_den, 1.0), np.nan)
    share = np.array([bool(p) for _ in ms for p in proportions])  # (C,)
    check_shares(NUM[:, share], DEN[:, share])
    lo, hi = np.full(len(share), np.nan), np.full(len(share), np.nan)
    lo[share], hi[share] = cluster_interval(NUM[:, share], DEN[:, share])
    return Cells(observed, draws, bottom.round().astype(int), (lo, hi), share, V, ms, NUM, DEN)


def spans_of(cur: Cells, base: Cells) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi) of a condition's cells and (dlo, dhi) of their paired change against the base, each
    (C,) (module docstring): the percentile interval hulled with the cluster t interval (and a rate's
    with its Clopper-Pearson one), a rate's ends within [0, 1] and a change of rates' within [-1, 1];
    no rate and no change of rates gets a zero-width interval."""
    lo, hi = hull(hull(percentile_interval(cur.draws), cluster_t.ratio_interval(cur.num, cur.den)), cur.cluster)
    share = np.isfinite(cur.cluster[0]) & np.isfinite(base.cluster[0])  # proportion cells
    dlo, dhi = hull(percentile_interval(cur.draws - base.draws),
                    cluster_t.change_interval(cur.num, cur.den, base.num, base.den))
    sparse = (_rarer(cur) < FEW_EVENTS) | (_rarer(base) < FEW_EVENTS)
    wlo, whi = saturated_change((dlo, dhi), cur.observed, cur.cluster, base.observed, base.cluster, sparse=sparse,
                                r=cluster_t.correlation(cur.num, cur.den, base.num, base.den))
    # a rate lies in [0, 1] and a change of rates in [-1, 1]; the symmetric t interval can reach past
    # them (97.9 [91.6, 100.3] points), so a proportion's ends are cut there (no truth lies beyond)
    lo, hi = np.where(cur.share, np.clip(lo, 0.0, 1.0), lo), np.where(cur.share, np.clip(hi, 0.0, 1.0), hi)
    return lo, hi, np.where(share, np.clip(wlo, -1.0, 1.0), dlo), np.where(share, np.clip(whi, -1.0, 1.0), dhi)


def _rarer(c: Cells) -> np.ndarray:
    """(C,) units of each cell's rarer outcome, min(sum of values, units - sum): for proportions."""
    top, bottom = c.num.sum(axis=0), c.den.sum(axis=0)
    return np.minimum(top, bottom - top)


def _same_units(V: np.ndarray, masks: tuple[np.ndarray, ...]) -> np.ndarray:
    """(C,) whether each cell's defined unit values are all equal (and there is at least one)."""
    out = []
    for m in masks:
        for j in range(V.shape[1]):
            x = V[m, j]
            x = x[~np.isnan(x)]
            out.append(len(x) > 0 and float(np.ptp(x)) == 0.0)
    return np.array(out, dtype=bool)


def estimate_of(value: float, lo: float, hi: float, n: int, identical: bool = False,
                n_families: int | None = None) -> Estimate:
    """A cell's numbers as an Estimate: NaN value -> empty, NaN bound -> None (no bound);
    `n_families`, the families the interval was computed on (`Cells.n_families`, `change_families`),
    is carried for the printers (`(n=576 in 144 families)`); None leaves it unsaid."""
    if np.isnan(value):
        return Estimate.empty()
    if identical:
        return Estimate.identical_units(float(value), int(n)).in_families(n_families)
    return Estimate(float(value), (None if np.isnan(lo) else float(lo), None if np.isnan(hi) else float(hi)),
                    int(n)).in_families(n_families)


def change_families(cur: Cells, base: Cells) -> np.ndarray:
    """(C,) the families a paired change of each cell is computed on: those holding a defined value
    of the cell in either condition."""
    return ((cur.den > 0) | (base.den > 0)).sum(axis=0)


def cell_estimates(cur: Cells, base: Cells) -> tuple[list[Estimate], list[Estimate]]:
    """Per cell of `cur`: its Estimate and the Estimate of its paired change against `base` (the
    same items, masks and bootstrap), in cell order (module docstring)."""
    if cur.values.shape != base.values.shape:
        raise ValueError(f"a paired change needs the same items and measures: {cur.values.shape} vs "
                         f"{base.values.shape}")
    lo, hi, dlo, dhi = spans_of(cur, base)
    same = _same_units(cur.values, cur.masks) & ~cur.share
    same_change = _same_units(cur.values - base.values, cur.masks) & ~cur.share
    fam, dfam = cur.n_families, change_families(cur, base)
    values = [estimate_of(cur.observed[c], lo[c], hi[c], cur.n[c], same[c], int(fam[c])) for c in range(len(lo))]
    changes = [estimate_of(cur.observed[c] - base.observed[c], dlo[c], dhi[c], cur.n[c], same_change[c],
                           int(dfam[c])) for c in range(len(lo))]
    return values, changes


def estimate_columns(e: Estimate) -> dict[str, Any]:
    """An Estimate as a tidy frame's columns: value, lo, hi, n, n_families, identical (identical: no
    interval; n_families: the families the interval was computed on, None where not given)."""
    lo, hi = (None, None) if e.identical else e.ci
    return {"value": e.value, "lo": lo, "hi": hi, "n": e.n, "n_families": e.n_families, "identical": e.identical}


def _one_per_item(frame: pd.DataFrame, item: str, field: str) -> dict[Any, Any]:
    """item -> its `field`, refused where an item has two values (a family or group must not change
    with the condition: pairs are whole items)."""
    seen: dict[Any, Any] = {}
    for key, value in zip(frame[item], frame[field], strict=True):
        if seen.setdefault(key, value) != value:
            raise InputError(f"item {key!r} has {field} {seen[key]!r} in one row and {value!r} in another; "
                             f"give each item one {field} in every condition")
    return seen


def _names(name: str, given: Any) -> list[Hashable]:
    """measures= or proportions= as a list of column names (refused: a string, a mapping, a non-iterable)."""
    example = f"[{given!r}]" if isinstance(given, str) else "['log_odds']"
    try:
        if isinstance(given, str | bytes | Mapping):
            raise TypeError
        out = list(given)
        for m in out:
            hash(m)
    except TypeError:
        raise InputError(f"{name} must be a list of column names, e.g. {name}={example}, not "
                         f"{shown(given, 40)}") from None
    return out


def _columns(frame: pd.DataFrame, keys: dict[str, Any], measures: list[Hashable]) -> None:
    """Refuse absent, repeated or shared columns: each key column and measure its own single column."""
    named = list(keys.values())
    if len(set(named)) != len(named):
        raise InputError(f"condition=, item=, family= and group= must name different columns, got "
                         f"{', '.join(f'{k}={v!r}' for k, v in keys.items())}")
    if not measures or len(set(measures)) != len(measures):
        raise InputError(f"give at least one measure, each once: got {list(measures)}")
    shared = next((m for m in measures if m in set(named)), None)
    if shared is not None:
        what = next(k for k, v in keys.items() if v == shared)
        raise InputError(f"measure {shared!r} is also the {what} column; a measure must be a column of its own "
                         f"(rename it, or name the {what} column with {what}=)")
    need = [*named, *measures]
    absent = [c for c in need if c not in frame.columns]
    if absent:
        raise InputError(f"no column {', '.join(map(repr, absent))} in the frame; its columns: "
                         f"{', '.join(map(str, frame.columns))} (name them with condition=, item=, family=, group=)")
    twice = next((c for c in need if int((frame.columns == c).sum()) > 1), None)
    if twice is not None:
        raise InputError(f"the frame has {int((frame.columns == twice).sum())} columns named {twice!r}; give each "
                         "column one name")
    for m in measures:
        kind = frame[m].dtype.kind
        if kind not in "biufO":
            raise InputError(f"measure {m!r} holds {frame[m].dtype} values; measures must be numbers (NaN where "
                             "undefined)")


def paired_effects(
    frame: pd.DataFrame,
    *,
    baseline: Hashable,
    measures: Sequence[str],
    proportions: Sequence[str] = (),
    condition: str = "condition",
    item: str = "item",
    family: str = "family",
    group: str | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
) -> pd.DataFrame:
    """Your own per-item readouts, from any model, engine or API, with the pipeline's statistics
    (module docstring): per condition, group and measure the estimate, and its paired change
    against `baseline`.

    frame: one row per item x condition (a tidy table: `condition`, `item`, `family`, optionally
        `group`, and one column per measure; NaN where a measure is undefined for an item). Every
        condition must hold exactly the baseline's items: changes are paired item by item.
    proportions: the measures whose values are 0 or 1 (a choice, a stop): a cluster interval keeps
        them from ever being a point.
    Returns one row per number: condition, group (`all` and each label of `group`), measure (and
    `<measure>_change` for every condition but the baseline), value, lo, hi, n, n_families (the
    families the interval was computed on; below 8 its coverage was not measured), identical.
    """
    import pandas as pd

    if not isinstance(frame, pd.DataFrame):
        raise InputError(f"frame must be a pandas DataFrame (one row per item x condition), got "
                         f"{type(frame).__name__}; pass pd.DataFrame(your_table)")
    measures, proportions = _names("measures", measures), _names("proportions", proportions)
    keys = {"condition": condition, "item": item, "family": family, **({"group": group} if group is not None else {})}
    _columns(frame, keys, measures)
    odd = [m for m in proportions if m not in measures]
    if odd:
        raise InputError(f"proportion {odd[0]!r} is not one of the measures {list(measures)}")
    n_boot = integer("n_boot", n_boot, 1, MAX_BOOT, "the number of family resamples, e.g. 2000")
    seed = integer("seed", seed, 0, fix="a non-negative integer seeds the resamples")
    for what, column in keys.items():
        identifiers(f"column {column!r}", list(frame[column]), "row", f"give every row a {what} id (a string or number)")
    conditions = list(dict.fromkeys(frame[condition]))
    if baseline not in conditions:
        raise InputError(f"baseline {baseline!r} is not a condition; the frame's conditions: "
                         f"{', '.join(map(repr, conditions[:10]))}")
    fam_of = _one_per_item(frame, item, family)
    group_of = _one_per_item(frame, item, group) if group else {}
    items = list(frame.loc[frame[condition] == baseline, item])  # an item twice: refused below, as anywhere
    if len({fam_of[i] for i in items}) < 2:
        raise InputError("a family bootstrap needs at least 2 families")
    n_groups = 1 + (len({str(group_of[i]) for i in items}) if group else 0)
    boot_memory(n_boot, len({fam_of[i] for i in items}), n_groups * len(measures))
    flags = [m in proportions for m in measures]
    per: dict[Hashable, np.ndarray] = {}
    for c, sub in frame.groupby(condition, sort=False):  # one pass; conditions in order of appearance
        got = list(sub[item])
        if len(set(got)) != len(got) or set(got) != set(items):
            extra, lost = set(got) - set(items), set(items) - set(got)
            what = (f"item {sorted(lost, key=str)[0]!r} is missing" if lost else
                    f"item {sorted(extra, key=str)[0]!r} is not in the baseline" if extra else "an item appears twice")
            raise InputError(f"condition {c!r}: {what}; every condition needs exactly the baseline's "
                             f"{len(items)} items, once each (changes are paired item by item)")
        try:
            V = sub.set_index(item).loc[items, list(measures)].to_numpy(dtype=float)  # (items, M)
        except (TypeError, ValueError) as err:
            raise InputError(f"condition {c!r}: the measures {list(measures)} must be numbers ({err})") from None
        readouts(V, lambda at, c=c: f"condition {c!r}, item {items[at[0]]!r}, measure {measures[at[1]]!r}")
        for j, m in enumerate(measures):
            bad = flags[j] & ~np.isnan(V[:, j]) & ~np.isin(V[:, j], (0.0, 1.0))
            if bad.any():
                i = int(np.argmax(bad))
                raise InputError(f"condition {c!r}, item {items[i]!r}: proportion {m!r} is {float(V[i, j])!r}; "
                                 "a proportion's values are 0, 1 or NaN (or leave it out of proportions=)")
        per[c] = V
    fam = [fam_of[i] for i in items]
    boot = FamilyBootstrap(sorted(set(fam), key=str), n_boot, seed)
    fidx = boot.family_index(fam)
    labels = np.array([str(group_of[i]) for i in items] if group else ["all"] * len(items), dtype=object)
    names = ["all"] + (sorted(set(labels)) if group else [])
    masks = {g: np.ones(len(items), bool) if g == "all" else labels == g for g in names}
    order = [(g, m) for g in names for m in measures]  # the cells' order
    base = cells(per[baseline], masks, boot, fidx, flags)
    rows = []
    for c in conditions:
        values, changes = cell_estimates(cells(per[c], masks, boot, fidx, flags), base)
        for k, (g, m) in enumerate(order):
            for e, name in ((values[k], m), (changes[k], f"{m}_change")):
                if c == baseline and name != m:
                    continue  # the baseline against itself: 0 by design, not an estimate
                rows.append({"condition": c, "group": g, "measure": name, **estimate_columns(e)})
    return pd.DataFrame(rows)


__all__ = ["FEW_EVENTS", "INTERVAL_METHOD", "Cells", "cell_estimates", "cells", "change_families", "estimate_columns",
           "estimate_of", "paired_effects", "spans_of"]
