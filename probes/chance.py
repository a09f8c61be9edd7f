"""The per-layer test against chance: when a sweep may call a layer "decodable".

Why a test. A row's AUROC interval (refit family bootstrap, probes.inference) is an interval for
the procedure's *expected* held-out AUROC; it is not a test that the label is readable at all, and
how narrow it is says nothing about chance. On the organism's capture L1/last printed 0.517 [0.510,
0.524] and the sweep page called `resolved` decodable there from the interval alone; the whole
per-layer pipeline rerun on uniformly within-family permuted labels gave p = 0.25, which is not the
right null for that label either (below: those permutations are not exact for sufficiency). So
"decodable" is the verdict of this test, and the interval keeps its own meaning.

The test, per (layer, position) of a sweep:

- statistic: the pooled out-of-fold AUROC of the row's probe, same folds, same fitting and scoring
  as the row (the engine fits the observed labels and every permutation in one batch, probes.engine
  / probes.multilabel, so observed and null values come from the same solver);
- null: the same statistic on `P` relabellings (`chance_labels`, drawn once per sweep and shared by
  every row, which the multiplicity rule needs), chosen by the label's design (`scheme`). A label
  balanced within every family (as many positive rows as negative ones: sufficiency on the
  benchmark, two of each family's four decisions) has each family's labels complemented with
  probability 1/2 (H0: the representation carries nothing about which of a family's two halves is
  positive). Uniform within-family permutations are not exact there: sufficiency is history XOR
  threshold level XOR a per-family flip, so given a representation that carries history and level
  only the flip is random, and a permuted label (history-aligned in a third of the families, level-
  aligned in another) is not one of the observed label's equally likely values (on such data with no
  signal, `python benchmarks/coverage_chance.py --row` counts how often each scheme gives p <= 0.05:
  docs/reference/probes.md quotes it). Other labels that vary within families are
  permuted uniformly within every family (H0: the rows of a family are exchangeable). Either way
  each family keeps its count of positives, so its fold (probes.splits deals families by their
  share of positives) is the same. A label constant within every family (system,
  initial property) is permuted across the families *of the same fold* (H0: nothing about which
  families are positive): relabelling across all families would change the stratified deal, and
  keeping the observed folds for such labels would make the folds' class balance differ between
  the observed labels and the permuted ones (unbalanced training folds pull the pooled AUROC
  below 0.5, which would make the test anticonservative). Within a fold a family's label moves
  among families that share its fold, so the folds stay right for every draw and the test is exact;
- per-row p = (1 + #{null >= observed}) / (1 + P) (a NaN null value, a permutation a fold could not
  fit, counts as >= observed: the conservative reading);
- multiplicity: a sweep tests every scored (layer, position), so the verdict uses Westfall and
  Young's step-down maxT adjustment over them (the same permutations at every row, so the maximum
  over rows of each permutation is the null of the largest observed value, and so on down): the
  family-wise error rate over the sweep is at most `ALPHA` under any combination of true and false
  nulls (subset pivotality holds: a row's statistic depends on its own representation only). With
  P permutations the smallest adjusted p is 1 / (P + 1): P = 99 (the default) can reject at 0.01.
- decodable: adjusted p <= `ALPHA` (0.05). Rows are named "decodable" only by this verdict; with
  no test (`--chance-permutations 0`) no row is called decodable.

Size and power are measured by benchmarks/coverage_chance.py on data whose truth is known (null
and planted labels, 30 and 144 families, and random labels on a real capture).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from evprobe.core.json_types import JsonObject

ALPHA = 0.05
DEFAULT_CHANCE_PERMUTATIONS = 99
PREFIX = "chance:"  # label names of the test in the engine's label dict (probes.multilabel.BATCHED)
OBSERVED = f"{PREFIX}observed"  # the observed labels, fitted in the same batch as the permutations
METHOD = (
    "pooled out-of-fold AUROC of the row's probe (same folds, fits and scoring) against the same statistic on "
    "{P} relabellings drawn once per sweep: a label balanced within every family has each family's labels "
    "complemented at random, another label that varies within families is permuted uniformly within them, a label "
    "constant within families is permuted among the families of each fold; p = (1 + #{{null >= observed}}) / (1 + P); "
    "decodable = step-down maxT adjusted p (Westfall and Young, over the sweep's scored layer/positions) <= {alpha}"
)


FLIP = "each family's labels complemented at random (the label is balanced within every family)"
WITHIN = "the label permuted uniformly within families"
AMONG = "family labels permuted among the families of each fold (the label is constant within families)"


def scheme(y: np.ndarray, families: Sequence[str]) -> str:
    """How `chance_labels` moves y (module docstring): FLIP when every family holds as many positive
    rows as negative ones, AMONG when y is constant within every family, else WITHIN."""
    y = np.asarray(y, dtype=np.float64)
    _, inverse = np.unique(np.asarray(families, dtype=object), return_inverse=True)
    positives = np.bincount(inverse, weights=y)
    rows = np.bincount(inverse)
    if np.all(2 * positives == rows):
        return FLIP
    return AMONG if np.all((positives == 0) | (positives == rows)) else WITHIN


def chance_names(n_permutations: int) -> list[str]:
    return [f"{PREFIX}{i:03d}" for i in range(n_permutations)]


def chance_labels(y: np.ndarray, families: Sequence[str], folds: np.ndarray, n_permutations: int,
                  seed: int, how: str | None = None) -> np.ndarray:
    """(P, n) relabellings of y (n,) under H0 (module docstring, `scheme`): each family's labels
    complemented with probability 1/2 (FLIP), permuted uniformly within families (WITHIN), or family
    labels permuted among the families of each fold (`folds` (n,); AMONG). `how` forces a scheme (the
    benchmark compares them); by default `scheme(y, families)`."""
    rng = np.random.default_rng([seed, 3])  # a stream apart from folds, controls, shuffles and refits
    y = np.asarray(y)
    _, inverse = np.unique(np.asarray(families, dtype=object), return_inverse=True)
    members = [np.flatnonzero(inverse == f) for f in range(inverse.max() + 1)]  # rows of each family
    out = np.empty((n_permutations, len(y)), dtype=y.dtype)
    how = how or scheme(y, families)
    if how == FLIP:
        flips = rng.integers(0, 2, (n_permutations, len(members)))[:, inverse].astype(bool)  # (P, n)
        return np.where(flips, 1 - y, y).astype(y.dtype)
    if how == WITHIN:
        for p in range(n_permutations):
            row = y.copy()
            for idx in members:
                row[idx] = y[rng.permutation(idx)]
            out[p] = row
        return out
    first = np.array([idx[0] for idx in members])  # one row per family
    family_label, family_fold = y[first], np.asarray(folds)[first]
    groups = [np.flatnonzero(family_fold == k) for k in np.unique(family_fold)]
    for p in range(n_permutations):
        labels = family_label.copy()
        for g in groups:
            labels[g] = family_label[rng.permutation(g)]
        out[p] = labels[inverse]
    return out


@dataclass(frozen=True)
class ChanceTest:
    """One row's test: the observed statistic, its null (P,), the per-row p and the adjusted p (set once
    the sweep has every row, `adjust`)."""

    observed: float
    null: tuple[float, ...]
    p_adjusted: float | None = None
    alpha: float = ALPHA

    @property
    def permutations(self) -> int:
        return len(self.null)

    @property
    def p_value(self) -> float:
        hits = int(np.sum(~(np.asarray(self.null) < self.observed - 1e-12)))  # NaN counts as a hit
        return (1 + hits) / (1 + self.permutations)

    @property
    def decodable(self) -> bool | None:
        """adjusted p <= alpha; None before the adjustment."""
        return None if self.p_adjusted is None else self.p_adjusted <= self.alpha

    def to_json(self) -> JsonObject:
        null = np.asarray(self.null, dtype=np.float64)
        finite = null[np.isfinite(null)]
        return {"observed": self.observed, "p_value": self.p_value, "p_adjusted": self.p_adjusted,
                "decodable": self.decodable, "alpha": self.alpha, "permutations": self.permutations,
                "null_mean": float(finite.mean()) if len(finite) else None,
                "null_95th": float(np.percentile(finite, 95)) if len(finite) else None}


def step_down_maxt(observed: np.ndarray, null: np.ndarray) -> np.ndarray:
    """Westfall-Young step-down maxT adjusted p-values (G,) of `observed` (G,) against `null` (G, P)
    drawn with the same permutations for every row; NaN null values count as +inf (conservative)."""
    observed = np.asarray(observed, dtype=np.float64)
    null = np.where(np.isfinite(null), null, np.inf)
    n_perm = null.shape[1]
    order = np.argsort(-observed, kind="stable")  # largest observed first
    # running maximum from the smallest observed row upwards: u[j] = max over rows order[j:] (G, P)
    u = np.maximum.accumulate(null[order][::-1], axis=0)[::-1]
    raw = (1 + np.sum(u >= observed[order][:, None] - 1e-12, axis=1)) / (1 + n_perm)
    adjusted = np.empty_like(raw)
    adjusted[order] = np.maximum.accumulate(raw)  # monotone: never below a larger statistic's
    return adjusted


def adjust(rows: Sequence[Any]) -> list[Any]:
    """The rows (dataclasses with a `chance` field) with every tested row's adjusted p filled in, over
    the rows with a finite observed statistic (the sweep's family of tests)."""
    tested = [i for i, r in enumerate(rows) if r.chance is not None and np.isfinite(r.chance.observed)]
    out = list(rows)
    if not tested:
        return out
    observed = np.array([rows[i].chance.observed for i in tested])
    null = np.array([rows[i].chance.null for i in tested], dtype=np.float64)  # (G, P)
    for i, p in zip(tested, step_down_maxt(observed, null), strict=True):
        out[i] = replace(rows[i], chance=replace(rows[i].chance, p_adjusted=float(p)))
    return out


@dataclass(frozen=True)
class ChanceDesign:
    """The sweep-level description of the test against chance (sweep.json "chance_test"): how many
    relabellings, how many rows were tested, and how the label was permuted (`scheme`'s answer)."""

    permutations: int
    rows_tested: int
    permuted: str

    def to_json(self) -> JsonObject:
        return {"permutations": self.permutations, "alpha": ALPHA, "rows_tested": self.rows_tested,
                "permuted": self.permuted, "method": METHOD.format(P=self.permutations, alpha=ALPHA),
                "multiplicity": f"step-down maxT over the {self.rows_tested} scored layer/positions: family-wise "
                                f"error <= {ALPHA}",
                "interval": "the AUROC interval beside it is for the procedure's expected held-out AUROC, not a test",
                "size_and_power": "benchmarks/coverage_chance.py"}


def chance_reading(best: Mapping[str, Any], row: Mapping[str, Any]) -> str:
    """Whether a sweep.json's nested estimate `best` is above chance, by a permutation test: its own (the
    whole pipeline rerun, `--permutations`), else its row's test here (adjusted over the sweep); never by
    the interval. Page one's words (experiments.report.summary)."""
    nested = best.get("permutation_test") or {}
    if nested.get("p_value") is not None:
        above = nested["p_value"] <= ALPHA
        return (f"permutation p = {nested['p_value']:.2g} ({nested.get('permutations')} relabellings under chance, "
                f"whole pipeline rerun): {'above' if above else 'not distinguishable from'} chance")
    test = row.get("chance_test") or {}
    if test.get("p_adjusted") is not None:
        return (f"that row's permutation p = {test['p_value']:.2g}, {test['p_adjusted']:.2g} adjusted over the sweep's "
                f"layer/positions: {'decodable' if test.get('decodable') else 'not distinguishable from chance'}")
    return "not tested against chance (the interval is for the expected held-out AUROC, not a test)"
