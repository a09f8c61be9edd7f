"""The label-free steering null: directions fitted the same way as the probe on rows whose label
carries nothing, so that "the probe moves the model more than these" says something about the label.

Why not permute the label within families (what the relabelled null did). In a family of a matched
pair, or of a 2x2 design (label x another factor), a within-family permutation gives back the label,
its flip, or the other factor: when the model encodes the label strongly, the mass-mean over such a
relabelling lies close to +- the probe itself (on the organism at L3: mean |cos| 0.74 with the
probe, a third above 0.9), so the stronger the effect the less it can be shown, and for pairs the
null is +- the probe exactly. Removing the label's mean effect is not enough either: the organism
encodes the label with strengths that vary across families (sd 26% of the mean along the probe), and
flipping centred family contrasts keeps that variation, which lies along the probe (mean |cos| 0.53).

Construction (for rows X (n, d), labels y in {0, 1}, families; the probe's unit direction p):

1. Remove the label's own direction from every row: X_res = X - (X Q) Q^T, Q an orthonormal basis
   of span{p, Dbar}, Dbar the mean of the families' class-mean contrasts (the same line as p for a
   mass-mean probe; the two differ for other probes, and both carry the label).
2. Flip units: the families that hold both classes. Each null labelling keeps or flips (y -> 1 - y)
   every such family at random (a sign pattern eps in {+1, -1}^F, never all equal: all +1 is the
   label itself, all -1 its negation); a family of one class keeps its labels, as it does for the
   probe. Within a family nothing else changes, so whatever the design balances within families
   (a history crossed with the label) stays balanced, and whatever varies between families stays
   out of the contrast, for matched pairs and 2x2 families alike.
3. Fit the probe's own estimator (its name and parameters) on (X_res, flipped labels) and keep its
   direction, with the label's line removed once more (a probe that rescales its features, as the
   logistic one does, can map a direction back onto it), unit-normalised and as fitted (a flipped
   labelling's "positive" class means nothing, so no sign is chosen). Every null direction is thus
   orthogonal to the probe: the share within |cos| 0.9 of it is 0 by construction (the relabelled
   null it replaced had a third of its directions there on the organism).

For a mass-mean probe a null direction is sum_f eps_f w_f (D_f)_perp: a random-sign combination of
the families' own label contrasts with the label's line removed, i.e. the family-to-family variation
of the contrast. Under "the label has no effect on the rows" the contrasts are symmetric about 0
and the probe's direction is one more such combination (the sign-flip randomisation argument; the
projection removes one dimension of d). What this null is *not*: it does not contain directions of
other design factors (named controls do: history, threshold level), and it is not exchangeable with
the probe when the label is encoded; its size and power are therefore measured by simulation under
both hypotheses (benchmarks/steering_null_power.py), not argued.

Patterns: with F flip units there are 2^F - 2 non-constant patterns; up to 2^20 units the n drawn
are distinct (drawn without replacement), and with fewer than n patterns all are used (K < n, said
in `source`). Seeded on the stream [seed, 3].
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evprobe.core.json_types import JsonObject
from evprobe.core.errors import InputError
from evprobe.probes.directions import FitRows  # the value lives beside Direction, which can carry one

DEFAULT_N_NULL = 50
NEAR_COSINE = 0.9  # "within |cos| 0.9 of the probe": a null direction that is nearly the probe itself
MIN_FLIP_FAMILIES = 2  # fewer leaves no non-constant pattern


@dataclass(frozen=True, eq=False)
class LabelFreeNull:
    """K label-free unit directions (K, d_model) float64, their cosines with the probe (K,), how many
    families were flip units, and where they came from (one line)."""

    vectors: np.ndarray = field(repr=False)
    cosines: np.ndarray = field(repr=False)
    n_flip_families: int
    source: str

    @property
    def k(self) -> int:
        return int(self.vectors.shape[0])

    @property
    def sha256(self) -> str:
        return hashlib.sha256(np.ascontiguousarray(self.vectors, dtype="<f8").tobytes()).hexdigest()

    def near_share(self, threshold: float = NEAR_COSINE) -> float:
        """The share of null directions within |cos| `threshold` of the probe (NaN when K = 0)."""
        return float(np.mean(np.abs(self.cosines) >= threshold)) if self.k else float("nan")

    def to_dataframe(self, table: str = "directions") -> Any:
        """One row per null direction: its index and cosine with the probe (the vectors stay arrays)."""
        import pandas as pd

        if table != "directions":
            raise InputError(f"table {table!r} is not one of LabelFreeNull's: directions")
        return pd.DataFrame({"direction": np.arange(self.k), "cosine_with_probe": self.cosines})

    def record(self) -> JsonObject:
        """JSON-able summary: size, source, sha256, cosines with the probe and the near share."""
        c = self.cosines
        return {"n": self.k, "source": self.source, "sha256": self.sha256, "n_flip_families": self.n_flip_families,
                "cosine_with_probe": {"min": round(float(c.min()), 6), "max": round(float(c.max()), 6),
                                      "mean_abs": round(float(np.abs(c).mean()), 6)},
                "near_share": round(self.near_share(), 6), "near_cosine": NEAR_COSINE}


def flip_patterns(n_units: int, n: int, seed: int) -> np.ndarray:
    """(K, n_units) int8 in {+1, -1}: K = min(n, 2^n_units - 2) distinct non-constant sign patterns,
    drawn uniformly without replacement (seeded [seed, 3]; module docstring)."""
    if n_units < MIN_FLIP_FAMILIES:
        raise InputError(f"the label-free null needs at least {MIN_FLIP_FAMILIES} families holding both classes, "
                         f"got {n_units}")
    rng = np.random.default_rng([seed, 3])  # a stream of its own, apart from the random directions and shuffles
    total = 2 ** n_units - 2 if n_units < 63 else None
    if total is not None and total <= n:  # every non-constant pattern
        codes = np.arange(1, total + 1, dtype=np.int64)
        bits = (codes[:, None] >> np.arange(n_units)) & 1
        return np.where(bits == 1, -1, 1).astype(np.int8)
    out, seen = [], set()
    while len(out) < n:
        p = rng.integers(0, 2, n_units).astype(np.int8)
        key = p.tobytes()
        if p.min() == p.max() or (n_units <= 20 and key in seen):
            continue
        seen.add(key)
        out.append(np.where(p == 1, -1, 1).astype(np.int8))
    return np.stack(out)


def check_rows(acts: Any, labels: Any, families: Any, min_rows: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows to fit on, checked (one line each): acts (rows, d_model) finite float64, labels (rows,)
    0/1 int8, families (rows,) ids as strings."""
    X = np.asarray(acts, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < min_rows:
        raise InputError(f"acts must be (rows, d_model) with at least {min_rows} rows, got shape {X.shape}")
    if not np.isfinite(X).all():
        bad = int(np.argwhere(~np.isfinite(X))[0][0])
        raise InputError(f"acts row {bad} is not finite; drop it (and its label and family) before fitting")
    y = np.asarray(labels)
    if y.shape != (X.shape[0],):
        raise InputError(f"{X.shape[0]} rows of acts but labels of shape {y.shape}; give one 0/1 label per row")
    if y.dtype == bool:
        y = y.astype(np.int8)
    if not np.isin(y, (0, 1)).all():
        raise InputError(f"labels must be 0/1 (or bool), got values {sorted(set(np.unique(y).tolist()))[:5]}")
    fam = np.asarray([str(f) for f in families], dtype=object) if not isinstance(families, str) else None
    if fam is None or fam.shape != (X.shape[0],):
        raise InputError(f"{X.shape[0]} rows of acts but {0 if fam is None else len(fam)} family ids; give one "
                         "family per row (rows that share a source share a family)")
    return X, y.astype(np.int8), fam


def _check(acts: Any, labels: Any, families: Any, direction: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                          np.ndarray]:
    X, y, fam = check_rows(acts, labels, families)
    v = np.asarray(direction, dtype=np.float64).reshape(-1)
    if v.shape != (X.shape[1],) or not np.isfinite(v).all() or not np.linalg.norm(v) > 0:
        raise InputError(f"direction must be a finite non-zero vector of length d_model = {X.shape[1]}, got shape "
                         f"{v.shape}")
    return X, y, fam, v / np.linalg.norm(v)


def label_free_directions(acts: Any, labels: Sequence[int] | np.ndarray, families: Sequence[Any] | np.ndarray,
                          direction: Any, *, n: int = DEFAULT_N_NULL, probe: Any = "massmean",
                          probe_params: Mapping[str, Any] | None = None, seed: int = 0) -> LabelFreeNull:
    """n label-free null directions for steering along `direction` (module docstring).

    acts: (rows, d_model) the rows the direction was fitted on, at its layer and position;
    labels: one 0/1 label per row (the direction's label); families: one id per row;
    direction: the probe's vector (d_model,); probe, probe_params: the estimator it was fitted with
    (a registered probe name, spec or instance: probes.registry.ProbeSpec)."""
    from evprobe.probes.registry import ProbeSpec

    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InputError(f"n must be a positive integer (null directions), got {n!r}")
    X, y, fam, p = _check(acts, labels, families, direction)
    spec = ProbeSpec.of(probe, probe_params or {})
    names, inverse = np.unique(fam, return_inverse=True)
    both = [f for f in range(len(names)) if 0 < y[inverse == f].sum() < (inverse == f).sum()]
    if len(both) < MIN_FLIP_FAMILIES:
        raise InputError(f"the label-free null needs at least {MIN_FLIP_FAMILIES} families holding both classes; "
                         f"these rows have {len(both)} (of {len(names)} families)")
    # Dbar: the mean of the families' class-mean contrasts, (d,)
    dbar = np.mean([X[(inverse == f) & (y == 1)].mean(0) - X[(inverse == f) & (y == 0)].mean(0) for f in both], axis=0)
    Q, R = np.linalg.qr(np.stack([p, dbar], axis=1))  # (d, 2) orthonormal basis of span{p, Dbar}
    Q = Q[:, np.abs(np.diag(R)) > 1e-9 * max(1.0, float(np.abs(R).max()))]  # Dbar on p's line: one column
    X_res = X - (X @ Q) @ Q.T  # (rows, d): the label's line removed from every row
    patterns = flip_patterns(len(both), n, seed)  # (K, F_both)
    unit_of_row = np.full(len(y), -1)
    for j, f in enumerate(both):
        unit_of_row[inverse == f] = j
    vecs = []
    for eps in patterns:
        flip = (unit_of_row >= 0) & (eps[np.maximum(unit_of_row, 0)] < 0)
        lab = np.where(flip, 1 - y, y)
        v = np.asarray(spec.make().fit(X_res, lab).direction_, np.float64)
        v = v - Q @ (Q.T @ v)  # a probe that rescales features (logistic) can map back onto the line: removed
        norm = float(np.linalg.norm(v))
        if not np.isfinite(norm) or norm == 0:
            raise InputError("a label-free refit gave a zero vector (the rows vary only along the label's line); "
                             "no label-free null can be fitted on them")
        vecs.append(v / norm)
    V = np.stack(vecs)  # (K, d)
    short = f"; all {len(patterns)} sign patterns of {len(both)} families" if len(patterns) < n else ""
    source = (f"{len(patterns)} x {spec.name} on {len(y)} rows, the label's line removed, {len(both)} families' labels "
              f"kept or flipped at random (seed {seed}){short}")
    return LabelFreeNull(V, V @ p, len(both), source)


def direction_rows(direction: Any) -> FitRows:
    """The rows a fitted Direction (probes.directions) was fitted on: the rows it carries (fitted
    from arrays), or else read from the capture its provenance names (numpy only, no model): its
    layer and position, its label, its fit items."""
    from evprobe.probes.captures import CaptureError
    from evprobe.probes.label_sets import labels
    from evprobe.probes.provenance import fit_captures, named_in

    held = getattr(direction, "fit_rows", None)
    if isinstance(held, FitRows):  # fitted from arrays (analysis.directions.fit_direction): it carries its rows
        return held
    prov = getattr(direction, "provenance", None) or {}
    name = getattr(direction, "name", "the direction")
    if not prov.get("captures"):
        raise InputError(f"{name} names no captures in its provenance, so the rows it was fitted on are unknown")
    try:
        cs = fit_captures(direction)  # from the file naming them, checked to be the ones it was fitted on
        ls = labels(cs, prov["label"], positive=prov.get("positive"))
        fit_items = set(prov.get("items") or ())
        mask = np.array([cs.index[r]["item_id"] in fit_items for r in ls.rows], dtype=bool)
        counts = {"n_items": int(mask.sum()), "n_positive": int(ls.y[mask].sum())}
        odd = next((k for k, v in counts.items() if type(prov.get(k)) is int and prov[k] != v), None)
        if odd:  # same item ids, other labels (or rows): not the rows it was fitted on
            raise CaptureError(f"{cs.captures[0].path}: its labels give {odd} {counts[odd]} on the direction's items, "
                               f"but {named_in(direction)} says {prov[odd]}; give the capture it was fitted on")
        X = cs.block(cs.layer_index(int(prov["layer"])), ls.rows[mask], [cs.position_index(prov["position"])])[:, 0]
    except (CaptureError, OSError, KeyError) as e:
        raise InputError(f"cannot read the rows {name} was fitted on ({e})") from None
    return FitRows(X, ls.y[mask], np.asarray(ls.families, dtype=object)[mask], prov.get("probe", "massmean"),
                   dict(prov.get("probe_params") or {}))


def fit_rows_null(rows: FitRows, direction: Any, n: int = DEFAULT_N_NULL, seed: int = 0) -> LabelFreeNull:
    """label_free_directions on a FitRows, with the probe it names."""
    return label_free_directions(rows.acts, rows.labels, rows.families, direction, n=n, probe=rows.probe,
                                 probe_params=rows.probe_params, seed=seed)


__all__ = ["DEFAULT_N_NULL", "NEAR_COSINE", "FitRows", "LabelFreeNull", "check_rows", "direction_rows", "fit_rows_null",
           "flip_patterns", "label_free_directions"]
