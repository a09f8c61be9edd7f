"""Checks and baselines reported beside every sweep (the control tasks: probes.control_tasks).

1. Leakage check (labels shuffled within families): the labels are permuted within each family
   (seeded), and the same probe, folds and scoring run on them. With folds of whole families the
   shuffled labels of a held-out family are unrelated to anything a probe can learn from other
   families, so this AUROC sits at 0.5 *by construction*: it measures no selectivity. What it
   checks is the pipeline. If folds split families (a row's family mates in training) or the
   features carry family-specific label information, it leaves 0.5 (below, when a probe learns a
   family's mean label from the mates of a held-out row, which is anti-correlated with the row's
   own shuffled label; above, when features encode the labels). The permutation is balanced: it
   keeps the chance share of positives in place (a 2 + 2 family keeps exactly one positive), so
   the shuffled labels are uncorrelated with the real ones on the sample, and a probe reading the
   real label scores exactly chance on them. A label that is constant within every family
   (system, initial property) is unchanged by a within-family permutation, so for such labels the
   family labels are permuted across families instead, balanced the same way (`leakage_kind`).
   L independent shuffles (16 by default, `SweepConfig.leakage_shuffles`; 4 were too few: the
   shuffles share their draws across rows, so with 4 a clean organism sweep read 0.467 at z 3.3 and a
   leaking one 0.39 at z 3.5) run beside each other
   (one Gram matrix); a row's leakage AUROC is their mean. The check *fires* at a layer/position
   when |mean - 0.5| > t_{df, 1 - 0.025/R} standard errors, the standard error taken from the
   spread between shuffles pooled over the sweep's R scored rows (`leakage_check`; Bonferroni over
   the rows, so a sound sweep raises a false alarm anywhere with probability <= 5%). The spread
   between shuffles is the null variability of a cross-validated AUROC with the fitting included;
   the family bootstrap with scores held fixed understates it by about a third. Grouped CV on
   labels unbalanced within families can sit a little below 0.5 (a fold's training rows hold the
   other class's surplus): a firing check there is worth reading too.

2. Input-only baselines, all logistic (C = 1) on one-hot prompt variables with the same folds:
   - the one-hot cell (system x initial property x history x threshold level,
     core.capture_schema.BENCHMARK_CELL_FIELDS): sufficiency is a function of the cell in the benchmark, so
     this baseline is ~1.0 by construction. It says the label is computable from the prompt's
     type; the sweep asks where, and how selectively, the model computes it (control tasks).
   - details, at chance by design: the initial history alone, the threshold level alone, and the
     (history, threshold level) pair. Sufficiency is the exclusive-or of history and threshold
     level within a family (each history is answerable at exactly one of the two thresholds), and
     which XOR it is depends on the family's physics; pooled over a balanced benchmark every
     (history, level) cell is half resolved, so all three sit at 0.5. They catch an unbalanced
     selection (a warning), nothing more.

3. Within-family variance: sum over families of the squared distances of a family's rows from
   their family mean, divided by the total sum of squares about the grand mean, per layer and
   position. When it is ~0 (< 1e-6) the model's state at that position is the same for every
   decision of a family (it ignores the measurement and the threshold, or the position sees
   neither, as image tokens before the question do), so every grouped probe of a label that
   varies within families scores exactly 0.5 by construction. The sweep then says so, loudly,
   instead of printing a row of chance values. The identical-pairs count does the same per
   pair: image pairs or threshold pairs whose two rows are bit-identical.

   The plain ratio is relative to a total that a few extreme rows can dominate (five families of
   rows at 60,000 made 14 of 15 organism layer/positions read ~1e-8), so the verdict also asks a
   robust ratio (`robust_spread`): each dimension centred on its median and scaled by its median
   absolute deviation (x 1.4826, a standard deviation for normal data; where over half the rows
   share one value, the mean absolute deviation x 1.2533; constant dimensions left out), medians
   and deviations estimated on at most SCALE_ROWS evenly spaced rows; a row's distance is the root
   mean square of its scaled coordinates ("robust SDs from the median"; ~1 for typical rows); a row
   farther than EXTREME_SDS (50) is *extreme* and is shrunk to that distance (its direction kept);
   the robust ratio is the within-family over the total sum of squares of these scaled rows.
   (Shrunk rows still weigh up to 50^2 each, so the robust ratio guards the verdict rather than
   estimating the bulk's ratio: five extreme families of 36 read ~1e-3, far above the limit, where
   the plain ratio read ~1e-8.) A layer/position is degenerate when both ratios are below
   DEGENERATE_RATIO (the sweep computes the robust ratio only where the plain one is below it).
   Rows identical within a family stay identical under the scaling, so a truly degenerate position
   gives 0 for both; extreme rows cannot make the robust total large enough to hide within-family
   variation, and reweighting dimensions cannot either, since the plain ratio must agree. Extreme
   rows are reported as such (count and an example, probes.sweep).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.linear_model import LogisticRegression

from evprobe.core.bootstrap import Estimate, FamilyBootstrap
from evprobe.probes.metrics import auroc_estimate

if TYPE_CHECKING:
    from evprobe.probes.captures import CaptureSet
    from evprobe.probes.label_sets import LabelSet

DEGENERATE_RATIO = 1e-6
EXTREME_SDS = 50.0  # a row farther than this from the median (RMS robust SDs) is extreme (module docstring)
SCALE_ROWS = 2048  # rows the per-dimension medians and deviations are estimated on: cost stays O(n d)
LEAK_FAMILYWISE = 0.05  # false-alarm probability of the leakage check over a whole sweep
BASELINES = {
    "history": ("history",),
    "threshold": ("threshold_level",),
    "history_threshold": ("history", "threshold_level"),
}


def _balanced_permutation(y: np.ndarray, rng: np.random.Generator, carry: list[float]) -> np.ndarray:
    """A permutation of one group's 0/1 labels whose overlap with the originals is as close to
    chance as integers allow.

    With k positives among m rows, a uniform permutation keeps on average k^2/m positives on
    positive rows; here exactly floor(k^2/m) or that plus one are kept, the choice carried over
    groups (`carry`) so the total matches chance. Within the group the kept positives and the
    moved ones are drawn uniformly. A plain uniform permutation of a 2 + 2 family reproduces the
    label or its negation one time in three, leaving a luck-dependent share of the real signal
    in the control; this one never does (it keeps exactly one of the two positives).
    """
    m, k = len(y), int(y.sum())
    if k in (0, m):
        return y.copy()
    target = k * k / m
    keep = int(np.floor(target))
    carry[0] += target - keep
    if carry[0] >= 0.5:
        keep += 1
        carry[0] -= 1.0
    keep = int(np.clip(keep, max(0, 2 * k - m), k))
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    new_pos = np.concatenate([rng.choice(pos, keep, replace=False), rng.choice(neg, k - keep, replace=False)])
    out = np.zeros_like(y)
    out[new_pos] = 1
    return out


def leakage_labels(y: np.ndarray, families: Sequence[str], seed: int, copy: int = 0) -> tuple[np.ndarray, str]:
    """Labels permuted within families (or, for a family-constant label, across families).

    The permutations are drawn uniformly among those that keep the chance share of positives
    in place (`_balanced_permutation`): the shuffled labels are uncorrelated with the real
    ones on the sample, whatever the luck of the draw. Families are visited in a seeded random
    order. `copy` numbers independent shuffles (seed streams [seed, 1] for copy 0, else
    [seed, 1, copy]). Returns (shuffled y (n,), kind), kind "within-family" or "across-families".
    """
    y = np.asarray(y).astype(np.int8)
    fam = np.asarray(families, dtype=object)
    unique, inverse = np.unique(fam, return_inverse=True)
    rng = np.random.default_rng([seed, 1] if copy == 0 else [seed, 1, copy])  # apart from the folds
    members = [np.flatnonzero(inverse == f) for f in range(len(unique))]
    varies = any(y[idx].min() != y[idx].max() for idx in members)
    carry = [float(rng.random()) - 0.5]  # random start of the rounding carry
    if varies:
        out = y.copy()
        for f in rng.permutation(len(unique)):
            out[members[f]] = _balanced_permutation(y[members[f]], rng, carry)
        return out, "within-family"
    family_label = np.array([y[idx[0]] for idx in members], dtype=np.int8)
    return _balanced_permutation(family_label, rng, carry)[inverse], "across-families"


def one_hot(values: Sequence[Sequence[Any]]) -> np.ndarray:
    """(n, categories) one-hot of each row's tuple of values (None is a category of its own)."""
    keys = [tuple(str(v) for v in row) for row in values]
    cats = {k: i for i, k in enumerate(sorted(set(keys)))}
    out = np.zeros((len(keys), len(cats)))
    out[np.arange(len(keys)), [cats[k] for k in keys]] = 1.0
    return out


def baseline_scores(features: np.ndarray, y: np.ndarray, folds: np.ndarray, C: float = 1.0) -> np.ndarray:
    """Grouped out-of-fold decision values of a logistic model (C) on `features` (n, k)."""
    out = np.full(len(y), np.nan)
    for k in range(int(folds.max()) + 1):
        held = folds == k
        train = ~held
        if y[train].min() == y[train].max():
            continue
        model = LogisticRegression(C=C).fit(features[train], y[train])
        out[held] = model.decision_function(features[held])
    return out


def within_family_variance(X: np.ndarray, families: Sequence[str]) -> float:
    """Pooled within-family sum of squares / total sum of squares of rows X (n, d).

    Computed in float64: sums of float32 values are exact there, so rows identical within a
    family give exactly 0. All rows identical (total 0) also gives 0.
    """
    X = np.asarray(X, dtype=np.float64)
    within, total = _sums_of_squares(X, families)
    if not (np.isfinite(within) and np.isfinite(total)):  # a NaN total once read as "0: degenerate"
        raise ValueError("activations hold NaN or inf; read captures with probes.captures.load_capture, which "
                         "refuses them (or leaves their families out with nonfinite='drop')")
    return within / total if total > 0 else 0.0


def _sums_of_squares(X: np.ndarray, families: Sequence[str]) -> tuple[float, float]:
    """(pooled within-family, total) sums of squares of float64 rows X (n, d)."""
    _, inverse = np.unique(np.asarray(families, dtype=object), return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(inverse[order]) != 0])
    counts = np.bincount(inverse).astype(np.float64)
    means = np.add.reduceat(X[order], starts, axis=0) / counts[:, None]  # (families, d)
    return float(np.sum((X - means[inverse]) ** 2)), float(np.sum((X - X.mean(axis=0)) ** 2))


@dataclass(frozen=True, eq=False)
class RobustSpread:
    """The robust within-family variance ratio and the extreme rows of X (module docstring, item 3)."""

    ratio: float | None  # within / total sum of squares of the robustly scaled, shrunk rows (None: not asked)
    extreme: np.ndarray  # (k,) indices of the rows of X farther than EXTREME_SDS, farthest first
    distance: np.ndarray  # (n,) each row's distance from the median, RMS robust SDs


def robust_scales(X: np.ndarray, max_rows: int = SCALE_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """(median (d,), robust SD (d,)) per dimension of X (n, d), from at most `max_rows` evenly
    spaced rows; the SD is 1.4826 MAD, or 1.2533 x the mean absolute deviation where the MAD is 0,
    and 0 only for a dimension constant on those rows."""
    X = np.asarray(X, dtype=np.float32)
    S = X if len(X) <= max_rows else X[np.linspace(0, len(X) - 1, max_rows).round().astype(np.int64)]
    median = np.median(S, axis=0)
    dev = np.abs(S - median)
    mad = 1.4826 * np.median(dev, axis=0)
    return median, np.where(mad > 0, mad, 1.2533 * dev.mean(axis=0))


def robust_spread(X: np.ndarray, families: Sequence[str], limit: float = EXTREME_SDS, *,
                  ratio: bool = True) -> RobustSpread:
    """The robust ratio and extreme rows of rows X (n, d) (module docstring, item 3); `ratio`
    False skips the ratio (its sums of squares cost as much as the plain ratio's: the sweep asks
    for it only where the plain ratio is below the limit, the only place it decides anything).

    The scaled rows are float32 and their sums of squares float64, so rows identical within a
    family give exactly 0, as in `within_family_variance`."""
    X = np.asarray(X, dtype=np.float32)
    if not np.isfinite(X).all():  # a NaN median would drop its dimension silently
        raise ValueError("activations hold NaN or inf; read captures with probes.captures.load_capture, which "
                         "refuses them (or leaves their families out with nonfinite='drop')")
    median, scale = robust_scales(X)
    used = scale > 0  # a dimension constant on the scale rows carries no spread to compare
    if not used.any():
        return RobustSpread(0.0 if ratio else None, np.zeros(0, dtype=np.int64), np.zeros(len(X)))
    Z = (X[:, used] - median[used]) / scale[used]  # (n, d') float32
    distance = np.sqrt(np.einsum("ij,ij->i", Z, Z, dtype=np.float64) / Z.shape[1])
    far = distance > limit
    extreme = np.flatnonzero(far)
    extreme = extreme[np.argsort(-distance[extreme], kind="stable")]
    if not ratio:
        return RobustSpread(None, extreme, distance)
    if far.any():  # shrink extreme rows to the limit: they may not dominate the total
        Z[far] *= (limit / distance[far]).astype(np.float32)[:, None]
    within, total = _sums_of_squares(Z.astype(np.float64), families)
    return RobustSpread(within / total if total > 0 else 0.0, extreme, distance)


def identical_pairs(X: np.ndarray, pair_ids: Sequence[Any]) -> tuple[int, int]:
    """(pairs whose two rows of X are bit-identical, pairs with two rows) for one pair field."""
    groups: dict[Any, list[int]] = {}
    for i, key in enumerate(pair_ids):
        if key is not None:
            groups.setdefault(key, []).append(i)
    pairs = [g for g in groups.values() if len(g) == 2]
    same = sum(bool(np.array_equal(X[a], X[b])) for a, b in pairs)
    return same, len(pairs)


@dataclass(frozen=True, eq=False)
class LeakageCheck:
    """The leakage check over a sweep's R scored rows (module docstring, item 1).

    auroc (R,): mean AUROC over the L shuffles; lo, hi (R,): its 95% interval; z (R,):
    (auroc - 0.5) / se; fires (R,); limit: the |z| beyond which it fires; df: R (L - 1)."""

    auroc: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    z: np.ndarray
    fires: np.ndarray
    limit: float
    se: float
    df: int


def leakage_check(values: np.ndarray) -> LeakageCheck:
    """From the AUROCs of L independent within-family shuffles at R rows, `values` (R, L).

    The spread between shuffles at a row is the null variability of a cross-validated AUROC,
    fitting included; pooled over the rows (variance averaged, df = R (L - 1)) it gives the
    standard error of a row's mean, se = s / sqrt(L). The family bootstrap with the scores held
    fixed understates that variability (measured on noise: its z has sd ~1.35, not 1), so it is
    not used here. Interval: mean +- t_{df, 0.975} se. Fires when |mean - 0.5| > t_{df, 1 - 0.025/R}
    se (Bonferroni over the R rows: <= 5% false alarms per sweep). Needs L >= 2."""
    from scipy.stats import t as student_t

    values = np.asarray(values, dtype=np.float64)
    R, L = values.shape
    mean = values.mean(axis=1)
    var = float(np.mean(values.var(axis=1, ddof=1))) if R and L > 1 else float("nan")
    df = R * (L - 1)
    se = float(np.sqrt(var / L)) if np.isfinite(var) else float("nan")
    limit = float(student_t.ppf(1.0 - LEAK_FAMILYWISE / (2 * max(R, 1)), max(df, 1)))
    half = float(student_t.ppf(0.975, max(df, 1))) * se
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, (mean - 0.5) / se, np.where(mean == 0.5, 0.0, np.sign(mean - 0.5) * np.inf))
    return LeakageCheck(mean, mean - half, mean + half, z, np.abs(z) > limit, limit, se, df)


def input_baselines(
    captures: CaptureSet, labelset: LabelSet, folds: np.ndarray, boot: FamilyBootstrap
) -> dict[str, Estimate]:
    """AUROC of logistic models on single one-hot prompt inputs (probes.controls), grouped CV; a
    baseline whose fields are not in every labelled row's index (a user capture) is left out."""
    out = {}
    for name, fields in BASELINES.items():
        if any(f not in captures.index[r] for r in labelset.rows for f in fields):
            continue
        values = [tuple(captures.index[r].get(f) for f in fields) for r in labelset.rows]
        scores = baseline_scores(one_hot(values), labelset.y, folds)
        out[name] = auroc_estimate(scores, labelset.y, labelset.families, boot)
    return out


def cell_baseline(cells: np.ndarray | None, labelset: LabelSet, folds: np.ndarray, boot: FamilyBootstrap,
                  reason: str | None) -> Estimate:
    """AUROC of a logistic model on the one-hot cell, grouped CV (None cells: skipped, `reason`)."""
    if cells is None:
        return Estimate.empty(reason)
    scores = baseline_scores(one_hot([(c,) for c in cells]), labelset.y, folds)
    return auroc_estimate(scores, labelset.y, labelset.families, boot)
