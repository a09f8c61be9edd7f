"""The layer sweep: grouped cross-validated AUROC and accuracy at every captured layer and
position, with controls beside every row and a nested (validation-only) best layer.

Per (layer, position), on the labelled rows X (n, d) read from the capture in float32:

- family folds (probes.splits; K = 5 by default, seeded), both members of every pair on one
  side; out-of-fold decision values of the probe (`auroc`, `accuracy` = sign of the decision);
- the same with labels shuffled within families (`control_auroc`, probes.controls);
- the within-family variance ratio and identical pairs; a row whose representation does not
  vary within families, for a label that does, is `degenerate`: nothing is fitted there and
  the row says why instead of reporting 0.5;
- inner fits for nested selection (probes.nested).

Intervals: one `FamilyBootstrap` (B = 2000, seed 20260905 by default) over the labelled rows'
families serves every number, so rows, controls and baselines see the same resamples. AUROC
intervals use the weighted Mann-Whitney formula over the bootstrap's counts (probes.metrics),
accuracy its ratio estimator. Out-of-fold scores of the K fold models are pooled into one AUROC
(their scales agree closely after standardisation; this is what the interval resamples).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from evprobe.core.bootstrap import DEFAULT_N_BOOT, DEFAULT_SEED, Estimate, FamilyBootstrap
from evprobe.probes.captures import CaptureSet, LabelSet
from evprobe.probes.controls import (
    BASELINES,
    DEGENERATE_RATIO,
    baseline_scores,
    control_labels,
    identical_pairs,
    one_hot,
    within_family_variance,
)
from evprobe.probes.engine import Fitter, cv_scores, make_fitter, map_layers
from evprobe.probes.metrics import accuracy_estimate, auroc_estimate
from evprobe.probes.nested import NestedResult, nested_estimate
from evprobe.probes.splits import DEFAULT_FOLDS, family_folds

PAIR_FIELDS = ("image_pair_id", "threshold_pair_id")
DEGENERATE_REASON = (
    "the representation is identical for all rows of each family (within-family variance ratio {ratio:.2e} < "
    "{limit:g}) while the label varies within families: every grouped probe scores 0.5 by construction"
)


@dataclass(frozen=True)
class SweepConfig:
    probe: str = "logistic"  # logistic | massmean | centroid
    C: float = 1.0  # logistic inverse regularisation (TRAPS: 1)
    pooled_covariance: bool = False  # mass-mean probe through the pooled covariance
    n_splits: int = DEFAULT_FOLDS
    seed: int = DEFAULT_SEED
    n_boot: int = DEFAULT_N_BOOT
    layers: tuple[int, ...] | None = None  # model layer numbers; None = every captured layer
    positions: tuple[str, ...] | None = None  # None = every captured position
    controls: bool = True
    nested: bool = True
    n_jobs: int | None = None  # threads over layer chunks; None = the CPUs this process may use


@dataclass(frozen=True)
class SweepRow:
    layer: int  # the model's layer number (meta.json "layers")
    layer_index: int  # its place on the capture's layer axis
    position: str
    auroc: Estimate
    accuracy: Estimate
    control: Estimate
    within_family_variance: float
    degenerate: bool
    identical: dict[str, tuple[int, int]] = field(default_factory=dict)  # pair field -> (identical, pairs)
    reason: str | None = None

    def to_json(self, baselines: dict[str, Estimate]) -> dict[str, Any]:
        sel = None
        if self.auroc.value is not None and self.control.value is not None:
            sel = self.auroc.value - self.control.value
        out = {
            "layer": self.layer,
            "layer_index": self.layer_index,
            "position": self.position,
            "auroc": self.auroc.value,
            "ci": list(self.auroc.ci),
            "n": self.auroc.n,
            "accuracy": self.accuracy.value,
            "accuracy_ci": list(self.accuracy.ci),
            "control_auroc": self.control.value,
            "control_ci": list(self.control.ci),
            "selectivity": sel,
            "baseline_history_auroc": _value(baselines.get("history")),
            "baseline_threshold_auroc": _value(baselines.get("threshold")),
            "baseline_history_threshold_auroc": _value(baselines.get("history_threshold")),
            "within_family_variance": self.within_family_variance,
            "degenerate": self.degenerate,
            "identical_pairs": {k: list(v) for k, v in self.identical.items()},
        }
        if self.reason:
            out["reason"] = self.reason
        return out


def _value(e: Estimate | None) -> float | None:
    return None if e is None else e.value


@dataclass(frozen=True, eq=False)
class SweepResult:
    label: str
    positive: Any
    probe: str
    config: SweepConfig
    model: str
    regimes: tuple[str, ...]
    n: int
    n_families: int
    n_dropped: dict[str, int]
    restriction: str | None
    control_kind: str
    rows: tuple[SweepRow, ...]
    baselines: dict[str, Estimate]
    best: NestedResult | None
    naive_best: dict[str, Any] | None  # argmax over rows: selected on test folds (TRAPS-style)
    warnings: tuple[str, ...]
    seconds: float

    @property
    def degenerate(self) -> bool:
        return bool(self.rows) and all(r.degenerate for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "positive": self.positive,
            "probe": self.probe,
            "model": self.model,
            "regimes": list(self.regimes),
            "n": self.n,
            "n_families": self.n_families,
            "dropped": self.n_dropped,
            "restriction": self.restriction,
            "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self.config).items()},
            "control": f"labels shuffled {self.control_kind} (seeded), same probe, folds and scoring",
            "baselines": {k: e.to_json() for k, e in self.baselines.items()},
            "rows": [r.to_json(self.baselines) for r in self.rows],
            "best": None if self.best is None else self.best.to_json(),
            "naive_best": self.naive_best,
            "degenerate": self.degenerate,
            "warnings": list(self.warnings),
            "seconds": round(self.seconds, 3),
        }


def input_baselines(
    captures: CaptureSet, labelset: LabelSet, folds: np.ndarray, boot: FamilyBootstrap
) -> dict[str, Estimate]:
    """AUROC of logistic models on one-hot prompt inputs alone (probes.controls), grouped CV."""
    out = {}
    for name, fields in BASELINES.items():
        values = [tuple(captures.index[r].get(f) for f in fields) for r in labelset.rows]
        scores = baseline_scores(one_hot(values), labelset.y, folds)
        out[name] = auroc_estimate(scores, labelset.y, labelset.families, boot)
    return out


def candidate_indices(captures: CaptureSet, config: SweepConfig) -> tuple[list[int], list[int]]:
    layers = [captures.layer_index(l) for l in config.layers] if config.layers else list(range(len(captures.layers)))
    positions = ([captures.position_index(p) for p in config.positions] if config.positions
                 else list(range(len(captures.positions))))
    return layers, positions


def sweep(
    captures: CaptureSet,
    labelset: LabelSet,
    config: SweepConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SweepResult:
    """Run the sweep (see the module docstring). `progress(done, total)` is called per layer."""
    started = time.perf_counter()
    config = config or SweepConfig()
    y, fam = labelset.y, labelset.families
    folds = family_folds(fam, config.n_splits, config.seed, y)
    boot = FamilyBootstrap(sorted(set(fam)), config.n_boot, config.seed)
    y_control, control_kind = control_labels(y, fam, config.seed)
    varies = labelset.varies_within_families
    baselines = input_baselines(captures, labelset, folds, boot) if config.controls else {}
    layer_idx, pos_idx = candidate_indices(captures, config)
    candidates = [(captures.layers[li], captures.positions[pi]) for li in layer_idx for pi in pos_idx]
    pair_ids = {f: [captures.index[r].get(f) for r in labelset.rows] for f in PAIR_FIELDS}
    ys = {"y": y, "control": y_control} if config.controls else {"y": y}

    def work(li: int, block: np.ndarray, fitter: Fitter) -> list[tuple[SweepRow, np.ndarray | None, np.ndarray | None]]:
        out = []
        for pj, pi in enumerate(pos_idx):
            X = block[:, pj]  # (n, d) float32
            ratio = within_family_variance(X, fam)
            identical = {f: identical_pairs(X, ids) for f, ids in pair_ids.items() if any(v is not None for v in ids)}
            layer, position = captures.layers[li], captures.positions[pi]
            if varies and ratio < DEGENERATE_RATIO:
                empty = Estimate.empty("degenerate")
                reason = DEGENERATE_REASON.format(ratio=ratio, limit=DEGENERATE_RATIO)
                out.append((SweepRow(layer, li, position, empty, empty, empty, ratio, True, identical, reason), None, None))
                continue
            res = cv_scores(X, fitter, folds, ys, inner_label="y" if config.nested else None, key=pi)
            s = res.oof["y"]
            auc = auroc_estimate(s, y, fam, boot)
            correct = np.where(np.isfinite(s), ((s > 0) == y.astype(bool)).astype(float), np.nan)
            acc = accuracy_estimate(correct, fam, boot)
            ctrl = auroc_estimate(res.oof["control"], y_control, fam, boot) if config.controls else Estimate.empty()
            out.append((SweepRow(layer, li, position, auc, acc, ctrl, ratio, False, identical), s, res.inner))
        return out

    def make() -> Fitter:
        return make_fitter(config.probe, config.C, config.pooled_covariance)

    per_layer = map_layers(captures, labelset.rows, layer_idx, pos_idx, work, make, config.n_jobs, progress)
    flat = [item for layer_items in per_layer for item in layer_items]
    rows = [row for row, _, _ in flat]
    n = labelset.n
    oof_all = np.full((len(candidates), n), np.nan)
    inner_all = np.full((len(candidates), config.n_splits, n), np.nan) if config.nested else None
    for g, (_, s, inner) in enumerate(flat):
        if s is not None:
            oof_all[g] = s
        if inner_all is not None and inner is not None:
            inner_all[g] = inner
    best = None
    if inner_all is not None:
        best = nested_estimate(oof_all, inner_all, y, folds, fam, boot, candidates)
    scored = [r for r in rows if r.auroc.value is not None]
    naive = None
    if scored:
        top = max(scored, key=lambda r: r.auroc.value)
        naive = {"layer": top.layer, "position": top.position, "auroc": top.auroc.value, "ci": list(top.auroc.ci),
                 "n": top.auroc.n, "note": "maximum over layers of test-fold AUROC (TRAPS-style; optimistic)"}
    warnings = _warnings(rows, varies, baselines, labelset)
    return SweepResult(
        label=labelset.name, positive=labelset.positive, probe=config.probe, config=config, model=captures.model,
        regimes=tuple(captures.source_names), n=n, n_families=len(set(fam)), n_dropped=labelset.dropped,
        restriction=labelset.restriction, control_kind=control_kind, rows=tuple(rows), baselines=baselines,
        best=best, naive_best=naive, warnings=tuple(warnings), seconds=time.perf_counter() - started,
    )


def _warnings(rows: Sequence[SweepRow], varies: bool, baselines: dict[str, Estimate], labelset: LabelSet) -> list[str]:
    out = []
    bad = [r for r in rows if r.degenerate]
    if bad and len(bad) == len(rows):
        out.append(
            f"DEGENERATE CAPTURE: at every probed layer and position the representation is identical within "
            f"families while '{labelset.name}' varies within families; every grouped probe scores 0.5 by "
            "construction. No sweep is reported: the model's state at these positions ignores the measurement "
            "and the threshold (or the positions precede them)."
        )
    elif bad:
        where = ", ".join(f"L{r.layer}/{r.position}" for r in bad[:8]) + (" ..." if len(bad) > 8 else "")
        out.append(f"DEGENERATE at {len(bad)} of {len(rows)} layer/positions ({where}): the representation is "
                   "identical within families there, so no probe can separate the label; those rows are not scored.")
    for f in PAIR_FIELDS:
        full = [r for r in rows if f in r.identical and r.identical[f][1] and r.identical[f][0] == r.identical[f][1]]
        if full and not all(r.degenerate for r in full):
            kind = f.removesuffix("_pair_id")
            out.append(f"{kind} pairs are bit-identical at {len(full)} layer/positions (e.g. L{full[0].layer}/"
                       f"{full[0].position}): there the two members of every {kind} pair cannot be told apart.")
    for name, est in baselines.items():
        above = est.value is not None and est.ci[0] is not None and est.ci[0] > 0.5
        if above and name != "history_threshold" and labelset.name == "resolved":
            out.append(f"input-only baseline '{name}' is above chance ({est.value:.3f}, CI {est.ci}); the "
                       "selection is not balanced within families, so a probe can partly read the prompt's "
                       "surface variables")
    return out


def stderr_progress(label: str) -> Callable[[int, int], None]:
    started = time.perf_counter()

    def report(done: int, total: int) -> None:
        elapsed = time.perf_counter() - started
        end = "\n" if done >= total else "\r"
        sys.stderr.write(f"{label} layer {done}/{total} ({elapsed:.1f} s)   {end}")
        sys.stderr.flush()

    return report
