"""Transfer matrices: train a probe on one condition, test it on another.

Conditions (`conditions(kind)`), each a set of labelled rows:

- `system`: sliding | bouncing | spring (family attributes: conditions share no family);
- `initial`: initial test measured the mass | the other property (family attribute);
- `pairs`: image pairs | threshold pairs. In each family one image pair (the two histories at
  one threshold level) and one threshold pair (the two levels at one history) are taken, the
  level and the history drawn per family with a seeded coin. On image pairs the label flips
  with the measurement (same question), on threshold pairs with the threshold (same image):
  does a probe trained on one kind of contrast read the other?
- `half`: two halves of the families (within each system, families in a seeded hash order
  alternate between the halves: same systems, disjoint families, balanced): a direction fitted
  on one half can be steered on the other, in distribution;
- `request`: the request type (`select`, `answer_initial`, ...; variants by their names);
- `regime`: the capture a row came from (pool captures of several prompt regimes);
- `void`: the void type (bench.voids: `occluded`, visual; `unstated`, textual): a type's void rows
  whose twin was captured too, with those twins' rows (index field `twin_id`), so each condition holds both classes of
  `resolved` and differs from the other only in the kind of void; the twins are shared, so cells run
  over the family folds (capture with `--requests answer_initial,voids`);
- `void_system`: seed 002's Table 3 as one matrix, modality x domain: one condition per (system, void
  type), named `"<system> <void>"` as bench.void_scoring's PECS datasets (a system is a physics domain,
  the void type a modality), each that system's voids of that type with their twins. Every cell is
  tagged with Table 3's kind of transfer (`category`): `within` (the diagonal), `cross-modality` (same
  system, other void type: shared twins, so over the family folds), `cross-domain` (other system,
  same void type: disjoint families) and `cross-both` (other system and other void type: disjoint);
- any other index field: one condition per value.

Train and test families are always disjoint. When two conditions share no family (system ->
system, initial -> initial) the probe trains on every row of the training condition and scores
every row of the test condition (`scheme: "disjoint"`). When they share families (image pairs
-> threshold pairs come from the same families; request types and regimes are the same items
under other prompts) the cell runs over the family folds: the probe trains on the training
condition's rows of the other folds and scores the test condition's rows of the held-out fold,
pooled over folds (`scheme: "folds"`). The diagonal is ordinary grouped CV within a condition.

Every cell reports AUROC per layer and position with family-bootstrap intervals, and a nested
best: the layer/position is chosen by cross-validation on the training condition's rows of the
training families only (never with test-condition labels, unlike TRAPS's per-pair maximum);
for a disjoint cell that is the grouped CV within the training condition, for a folded cell
the nested procedure of probes.nested with the training condition's rows as validation rows.

Combine with `probes.label_sets.restrict_wrong` for TRAPS's Cf -> Cf restriction: rows where the
model's behaviour was wrong, with their matched partners, in training and test alike.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from evprobe.core.bootstrap import Estimate, FamilyBootstrap
from evprobe.core.json_types import JsonObject
from evprobe.probes.captures import CaptureError, CaptureSet
from evprobe.probes.label_sets import LabelSet
from evprobe.probes.engine import Fitter, cv_scores, map_layers
from evprobe.probes.metrics import accuracy_estimate, auroc, auroc_estimate
from evprobe.probes.nested import FoldChoice, NestedResult, nested_estimate
from evprobe.probes.splits import family_folds
from evprobe.probes.sweep import SweepConfig, candidate_indices

KINDS = ("system", "initial", "pairs", "half", "request", "regime", "void", "void_system")
# Table 3's kinds of transfer between (system, void type) conditions, by what the two share.
CATEGORIES = {(True, True): "within", (True, False): "cross-modality", (False, True): "cross-domain",
              (False, False): "cross-both"}
MAX_CONDITIONS = 12


@dataclass(frozen=True, eq=False)
class Condition:
    name: str
    mask: np.ndarray  # (n,) bool over the labelled rows
    cell: tuple[str, str] | None = None  # (system, void type) of a `void_system` condition

    @property
    def n(self) -> int:
        return int(self.mask.sum())


def _coin(family: str, seed: int, salt: str) -> int:
    return zlib.crc32(f"{seed}|{salt}|{family}".encode()) & 1


def _halves(system_of: dict[str, str | None], seed: int) -> dict[str, str]:
    """Family -> half_a | half_b: within each system the families, in a seeded hash order, alternate
    between the halves, so both halves hold every system and differ in size by at most one family
    per system."""
    out: dict[str, str] = {}
    by_system: dict[str | None, list[str]] = {}
    for family, system in system_of.items():
        by_system.setdefault(system, []).append(family)
    for families in by_system.values():
        ranked = sorted(families, key=lambda f: (zlib.crc32(f"{seed}|half|{f}".encode()), f))
        out.update({f: ("half_a", "half_b")[i % 2] for i, f in enumerate(ranked)})
    return out


def conditions(captures: CaptureSet, labelset: LabelSet, kind: str, seed: int = 0) -> list[Condition]:
    """The conditions of a transfer kind (module docstring), each with at least one row."""
    rows = [captures.index[r] for r in labelset.rows]
    if kind == "half":
        halves = _halves({r["family_id"]: r.get("system") for r in rows}, seed)
        out = [Condition(name, np.array([halves[r["family_id"]] == name for r in rows])) for name in ("half_a", "half_b")]
    elif kind == "pairs":
        level = [("low", "high")[_coin(r["family_id"], seed, "level")] for r in rows]
        hist = [_coin(r["family_id"], seed, "history") for r in rows]
        image = np.array([r.get("threshold_level") == lv and r.get("history") is not None for r, lv in zip(rows, level)])
        thresh = np.array([r.get("history") == h and r.get("threshold_level") is not None for r, h in zip(rows, hist)])
        out = [Condition("image_pairs", image), Condition("threshold_pairs", thresh)]
    elif kind in ("void", "void_system"):
        out = _void_conditions(rows, by_system=kind == "void_system")
    else:
        if kind == "initial":
            values = [None if r.get("initial_property") is None else
                      ("initial_mass" if r["initial_property"] == "mass" else "initial_other") for r in rows]
        elif kind == "request":
            values = [r.get("variant") or r.get("request") for r in rows]
        elif kind == "regime":
            if len(captures.captures) < 2:
                raise CaptureError("transfer across regimes needs two or more captures of the same items, e.g. "
                                   "`evprobe sweep ACTS_standard ACTS_guided --transfer regime`")
            values = [r["source_name"] for r in rows]
        else:
            if not any(kind in r for r in rows):
                raise CaptureError(f"unknown transfer {kind!r}; use one of {', '.join(KINDS)} or an index field")
            values = [r.get(kind) for r in rows]
        distinct = sorted({v for v in values if v is not None}, key=str)
        if kind == "regime":  # the order the captures were given in
            distinct = [n for n in captures.source_names if n in distinct]
        if len(distinct) > MAX_CONDITIONS:
            raise CaptureError(f"transfer by {kind!r} gives {len(distinct)} conditions (at most {MAX_CONDITIONS}); "
                               "pick a field with fewer values")
        out = [Condition(str(v), np.array([x == v for x in values])) for v in distinct]
    out = [c for c in out if c.n > 0]
    if len(out) < 2:
        raise CaptureError(f"transfer by {kind!r} finds {len(out)} condition(s) among the labelled rows; it needs two")
    return out


def _void_conditions(rows: list[Any], by_system: bool) -> list[Condition]:
    """Per void type (with `by_system`, per (system, void type)): its void rows whose twin is among the
    labelled rows, with those twins' rows (a twin shared by two void types is in both conditions)."""
    present = {r["item_id"] for r in rows}
    paired = [r.get("void") is not None and r.get("twin_id") in present for r in rows]  # a void whose twin is here
    keys = [(r.get("system"), r["void"]) if p else None for r, p in zip(rows, paired)]
    if not by_system:
        keys = [None if k is None else (None, k[1]) for k in keys]
    cells = sorted({k for k in keys if k is not None}, key=lambda k: (k[1], str(k[0])))  # modality blocks
    twins = {c: {r["twin_id"] for r, k in zip(rows, keys) if k == c} for c in cells}
    out = [Condition(c[1] if not by_system else f"{c[0]} {c[1]}",
                     np.array([k == c or r["item_id"] in twins[c] for r, k in zip(rows, keys)]),
                     (str(c[0]), c[1]) if by_system else None) for c in cells]
    if len(out) < 2:
        what = "(system, void type) cell(s)" if by_system else "void type(s)"
        raise CaptureError(f"transfer by {'void_system' if by_system else 'void'} finds {len(out)} {what} among the "
                           "labelled rows; capture a benchmark generated with --voids occluded,unstated with "
                           "--requests answer_initial,voids")
    return out


def category(train: Condition, test: Condition) -> str | None:
    """Table 3's kind of transfer between two `void_system` conditions (None for other kinds)."""
    if train.cell is None or test.cell is None:
        return None
    return CATEGORIES[(train.cell[0] == test.cell[0], train.cell[1] == test.cell[1])]


@dataclass(frozen=True)
class TransferCell:
    train: str
    test: str
    scheme: str  # "folds" | "disjoint"
    n_train: int
    n_test: int
    rows: tuple[tuple[int, str, Estimate], ...]  # (layer, position, AUROC) per candidate
    best: NestedResult | None
    reason: str | None = None
    category: str | None = None  # Table 3's kind of transfer (`void_system` only)

    def to_json(self) -> JsonObject:
        return {
            "train": self.train, "test": self.test, "scheme": self.scheme, "n_train": self.n_train,
            "n_test": self.n_test,
            "rows": [{"layer": l, "position": p, "auroc": e.value, "ci": list(e.ci), "n": e.n,
                      "n_families": e.n_families} for l, p, e in self.rows],
            "best": None if self.best is None else self.best.to_json(),
            **({"reason": self.reason} if self.reason else {}),
            **({"category": self.category} if self.category else {}),
        }


@dataclass(frozen=True, eq=False)
class TransferResult:
    kind: str
    label: str
    positive: Any
    probe: str
    model: str
    restriction: str | None
    conditions: tuple[tuple[str, int, int], ...]  # (name, rows, families)
    cells: tuple[TransferCell, ...]
    seconds: float

    def cell(self, train: str, test: str) -> TransferCell:
        return next(c for c in self.cells if c.train == train and c.test == test)

    def matrix(self) -> tuple[list[str], np.ndarray]:
        """(condition names, (k, k) nested-best AUROC, NaN where none)."""
        names = [c[0] for c in self.conditions]
        out = np.full((len(names), len(names)), np.nan)
        for c in self.cells:
            if c.best is not None and c.best.auroc.value is not None:
                out[names.index(c.train), names.index(c.test)] = c.best.auroc.value
        return names, out

    def to_json(self) -> JsonObject:
        return {
            "kind": self.kind, "label": self.label, "positive": self.positive, "probe": self.probe,
            "model": self.model, "restriction": self.restriction,
            "conditions": [{"name": n, "n": k, "n_families": f} for n, k, f in self.conditions],
            "cells": [c.to_json() for c in self.cells],
            "seconds": round(self.seconds, 3),
        }


def transfer(
    captures: CaptureSet,
    labelset: LabelSet,
    kind: str,
    config: SweepConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> TransferResult:
    """The transfer matrix of `kind` for every layer/position, with nested best per cell."""
    started = time.perf_counter()
    config = config or SweepConfig()
    y, fam = labelset.y, labelset.families
    conds = conditions(captures, labelset, kind, config.seed)
    folds = family_folds(fam, config.folds, config.seed, y)
    boot = FamilyBootstrap(sorted(set(fam)), config.n_boot, config.seed)
    fam_sets = [set(fam[c.mask]) for c in conds]
    k = len(conds)
    disjoint = np.array([[i != j and not (fam_sets[i] & fam_sets[j]) for j in range(k)] for i in range(k)])
    layer_idx, pos_idx = candidate_indices(captures, config)
    candidates = [(captures.layers[li], captures.positions[pi]) for li in layer_idx for pi in pos_idx]
    G, n = len(candidates), labelset.n

    def work(li: int, block: np.ndarray, fitter: Fitter) -> list[list[Any]]:
        out = []
        for pj, pi in enumerate(pos_idx):
            X = block[:, pj]
            per_train = []
            for i, cond in enumerate(conds):
                res = cv_scores(X, fitter, folds, {"y": y}, train_mask=cond.mask,
                                inner_label="y" if config.nested else None, want_full=bool(disjoint[i].any()),
                                key=(pi, i))
                per_train.append((res.oof["y"], res.inner, None if res.full is None else res.full["y"]))
            out.append(per_train)
        return out

    def make() -> Fitter:
        return config.spec.fitter()

    per_layer = map_layers(captures, labelset.rows, layer_idx, pos_idx, work, make, config.jobs, progress)
    flat = [pos_item for layer_items in per_layer for pos_item in layer_items]  # G entries
    oof = np.stack([[flat[g][i][0] for g in range(G)] for i in range(k)])  # (k, G, n)
    full = np.stack([[flat[g][i][2] if flat[g][i][2] is not None else np.full(n, np.nan) for g in range(G)]
                     for i in range(k)])
    inner = (np.stack([[flat[g][i][1] for g in range(G)] for i in range(k)]) if config.nested else None)  # (k,G,K,n)

    cells = []
    for i, ci in enumerate(conds):
        for j, cj in enumerate(conds):
            scheme = "disjoint" if disjoint[i, j] else "folds"
            scores = full[i] if disjoint[i, j] else oof[i]  # (G, n)
            rows = tuple(
                (layer, pos, auroc_estimate(scores[g, cj.mask], y[cj.mask], fam[cj.mask], boot))
                for g, (layer, pos) in enumerate(candidates)
            )
            best, reason = None, None
            if y[ci.mask].min() == y[ci.mask].max():
                reason = f"the training condition {ci.name} has one class only"
            elif config.nested and scheme == "folds":
                best = nested_estimate(oof[i], inner[i], y, folds, fam, boot, candidates, eval_mask=ci.mask,
                                       test_mask=cj.mask)
            elif config.nested:
                best = _disjoint_best(oof[i], full[i], y, fam, boot, candidates, ci.mask, cj.mask)
            cells.append(TransferCell(ci.name, cj.name, scheme, ci.n, cj.n, rows, best, reason, category(ci, cj)))
    return TransferResult(
        kind=kind, label=labelset.name, positive=labelset.positive, probe=config.probe, model=captures.model,
        restriction=labelset.restriction,
        conditions=tuple((c.name, c.n, len(fam_sets[i])) for i, c in enumerate(conds)),
        cells=tuple(cells), seconds=time.perf_counter() - started,
    )


def _disjoint_best(
    oof_i: np.ndarray, full_i: np.ndarray, y: np.ndarray, fam: np.ndarray, boot: FamilyBootstrap,
    candidates: list[tuple[int, str]], train_mask: np.ndarray, test_mask: np.ndarray,
) -> NestedResult | None:
    """Choose the candidate by grouped CV within the training condition (its own out-of-fold
    AUROC), then score the disjoint test condition with the fit on all training rows there."""
    inner = np.array([auroc(oof_i[g, train_mask], y[train_mask]) if np.isfinite(oof_i[g, train_mask]).all()
                      else np.nan for g in range(len(candidates))])
    if not np.isfinite(inner).any():
        return None
    g = int(np.nanargmax(inner))
    s = full_i[g, test_mask]
    est = auroc_estimate(s, y[test_mask], fam[test_mask], boot)
    correct = np.where(np.isfinite(s), ((s > 0) == y[test_mask].astype(bool)).astype(float), np.nan)
    acc = accuracy_estimate(correct, fam[test_mask], boot)
    layer, position = candidates[g]
    method = ("layer/position chosen by grouped CV within the training condition; probe refit on all its rows; "
              "test condition's families are disjoint; family-bootstrap 95% interval")
    return NestedResult(int(layer), str(position), est, acc, (FoldChoice(-1, int(layer), str(position),
                                                                          float(inner[g])),), method)
