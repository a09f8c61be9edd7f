"""Known-answer readings of the capture itself at the planted row (layer m, last position); the list
of checks and the fault each catches is experiments.known_answer.checks's.

- `group_readings`: the planted profile per system x initial-test group (initial test `mass` or
  another, the groups experiments.known_answer.mutations flips). The plant is one direction for every system, so
  each group's difference of class means points where the other groups' pooled one points
  (cosine >= GROUP_COSINE), and a probe trained on the other groups scores the group's rows
  (AUROC >= DECODE_FLOOR, 0.90). The pooled grouped CV cannot see a label flipped for whole
  groups: it learns part of the flip from the group (a 2-of-6 flip still decoded at 0.857 pooled, README).
  Measured at L3/last (family-bootstrap intervals, 200 resamples) on the clean full quickstart (24
  families and n=192 rows per group): cosine 0.939 [0.933, 0.944] (sliding/other, the lowest) to
  0.983, AUROC 0.999 to 1.000; on the mutation test's reduced run (4 families, n=32 per group): cosine
  0.933 [0.914, 0.945] to 0.982, AUROC 1.000 [0.398, 1.000] in every group (an exact interval on 4
  families: too wide to gate on, so the gate reads the values). With sufficiency flipped for every
  mass-initial family, the mass groups' cosines are -0.80 to -0.82 and the others' -0.07 to +0.33 (both
  runs), and the probe trained on the others scores sliding's groups at 0.56-0.93; with the 2-of-6
  flip the flipped groups read -0.95 and -0.98. GROUP_COSINE = 0.70 lies 0.23 below the clean runs'
  lowest cosine, and every group under the mass flip reads below it (the highest +0.33).
- `direction_check`: each direction stored at layer m (OUT/directions) projects the rows of the
  families it was not fitted on (its provenance lists its fit items) so that its label's positive
  class ranks above the negatives (AUROC >= DECODE_FLOOR), on every held-out family of the bench
  (the expected n, experiments.known_answer.counts). Before it, a direction's sign was read by steering
  alone.
"""

from __future__ import annotations

from evprobe.core.estimate_text import estimate_text
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from evprobe.experiments.known_answer.counts import Expectations, Expected, n_problems
from evprobe.core.json_types import JsonObject
from evprobe.experiments.known_answer.rows import CheckRow, check_row

GROUP_COSINE = 0.70
DECODE_FLOOR = 0.90  # every AUROC gate of the suite (experiments.known_answer.checks imports it)
N_BOOT = 200
SEED = 20260905


def group_of(row: Any) -> str:
    """`system/mass` or `system/other`: the planted profile's groups (an index row or a bench Item)."""
    get = row.get if isinstance(row, dict) else lambda k: getattr(row, k, None)
    return f"{get('system')}/{'mass' if get('initial_property') == 'mass' else 'other'}"


def _cosine_draws(X: np.ndarray, y: np.ndarray, fam_idx: np.ndarray, in_group: np.ndarray,
                  weights: np.ndarray) -> np.ndarray:
    """(B,) cosine between the group's difference of class means and the other rows', under each row
    of family weights `weights` (B, F): per-family class sums, so a resample is two matrix products."""
    F, d = weights.shape[1], X.shape[1]

    def diff(mask: np.ndarray) -> np.ndarray:
        means = []
        for cls in (1, 0):
            sel = mask & (y == cls)
            sums = np.zeros((F, d))
            np.add.at(sums, fam_idx[sel], X[sel])
            counts = np.bincount(fam_idx[sel], minlength=F).astype(float)
            means.append((weights @ sums) / (weights @ counts)[:, None])
        return means[0] - means[1]

    with np.errstate(invalid="ignore", divide="ignore"):  # a resample without the group: NaN, dropped
        a, b = diff(in_group), diff(~in_group)
        return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@dataclass(frozen=True)
class GroupReading:
    """One system x initial-test group at (m, last): its rows and families (and the expected ones), and
    its cosine and AUROC estimates (core.bootstrap Estimate.to_json; None where the capture lacks the group)."""

    group: str
    n: int
    families: int
    expected: Expected | None
    cosine: JsonObject | None = None
    auroc: JsonObject | None = None


def group_readings(acts: Path | None, plant: dict[str, int], expect: Expectations | None = None, *,
                   n_boot: int = N_BOOT, seed: int = SEED) -> list[GroupReading] | None:
    """Per group at (m, last): its rows and families (and the expected ones), the cosine of its
    class-mean difference with the other groups' pooled one, and the AUROC at which a logistic probe
    trained on the other groups scores it; each with its family-bootstrap interval. None without a
    capture of L{m}/last."""
    if acts is None or not (acts / "meta.json").is_file():
        return None
    from evprobe.core.bootstrap import Estimate, FamilyBootstrap, percentile_interval
    from evprobe.probes.label_sets import field_values
    from evprobe.probes.estimators import make_probe
    from evprobe.probes.metrics import auroc_estimate
    from evprobe.probes.runs import labelled

    m = plant["aux_layer"]
    cs, ls = labelled([acts], "resolved")
    if m not in cs.layers or "last" not in cs.positions:
        return None
    X = cs.block(cs.layer_index(m), ls.rows, [cs.position_index("last")])[:, 0].astype(np.float64)
    y, fam = ls.y.astype(int), ls.families
    groups = np.array(field_values(cs, ls, group_of))
    boot = FamilyBootstrap(sorted(set(fam)), n_boot, seed)
    fam_idx = boot.family_index(list(fam))
    weights = np.vstack([np.ones(boot.n_families), boot.counts])  # the sample, then the resamples
    expected = expect.captured_by(group_of) if expect is not None else {}
    out = []
    for name in sorted(set(groups)):
        g = groups == name
        row = GroupReading(name, int(g.sum()), len(set(fam[g])), expected.get(name))
        if y[g].min() == y[g].max() or y[~g].min() == y[~g].max():
            empty = Estimate.empty("one class only").to_json()
            out.append(replace(row, cosine=empty, auroc=empty))
            continue
        draws = _cosine_draws(X, y, fam_idx, g, weights)
        lo, hi = percentile_interval(draws[1:, None])
        # the cosine reads the group's rows and the others': its resamples draw every family, while the
        # AUROC scores the group's rows alone, whose families are its interval's effective n (issue 52)
        cosine = Estimate(float(draws[0]), (float(lo[0]), float(hi[0])), int(g.sum())).in_families(
            boot.n_families).to_json()
        probe = make_probe("logistic").fit(X[~g], y[~g])
        auroc = auroc_estimate(probe.decision_function(X[g]), y[g], fam[g], boot).in_families(
            row.families).to_json()
        out.append(replace(row, cosine=cosine, auroc=auroc))
    # groups the bench holds and the capture lacks: no rows at all
    out += [GroupReading(name, 0, 0, e) for name, e in sorted(expected.items()) if name not in set(groups)]
    return out


def group_problems(groups: list[GroupReading]) -> tuple[list[str], str]:
    """(problems, text) of the per-group readings for the planted profile check."""
    problems, parts = [], []
    for r in groups:
        cos, auc = r.cosine or {}, r.auroc or {}
        c, a = cos.get("value"), auc.get("value")
        cos_text = estimate_text(cos, 3, sign=True, n=False)
        auc_text = estimate_text(auc, 3, n=False)
        parts.append(f"{r.group} cosine {cos_text}, AUROC {auc_text} (n={r.n}, {r.families} families)")
        if c is None or c < GROUP_COSINE:
            problems.append(f"{r.group} (cosine {cos_text})")
        if a is None or a < DECODE_FLOOR:
            problems.append(f"{r.group} (AUROC {auc_text})")
        problems += n_problems([(r.group, r.expected, r.n, r.families)])
    return problems, "; ".join(parts)


def direction_check(acts: Path | None, directions: Path | None, plant: dict[str, int], expect: Expectations, *,
                    n_boot: int = N_BOOT, seed: int = SEED) -> CheckRow:
    """Each direction stored at layer m ranks its label's positive class first on its held-out families."""
    m = plant["aux_layer"]
    title = "stored directions point to their class"
    target = (f"L{m}: each stored direction's projection x.v of the families it was not fitted on ranks its "
              f"label's positive class above the negatives at AUROC >= {DECODE_FLOOR:.2f}, n = those families' "
              "rows of its fit request types, every held-out family of the bench")
    if directions is None or not (directions / "directions.json").is_file():
        return check_row(title, None, "no directions", target)
    if acts is None or not (acts / "meta.json").is_file():
        return check_row(title, None, "no capture", target)
    from evprobe.core.bootstrap import FamilyBootstrap
    from evprobe.probes.captures import load_captures
    from evprobe.probes.directions import check_width, read_directions
    from evprobe.probes.metrics import auroc_estimate
    from evprobe.probes.runs import labelled

    stored = sorted((d for d in read_directions(directions).values() if d.layer == m), key=lambda d: d.name)
    if not stored:
        return check_row(title, None, f"no direction stored at L{m}", target)
    cs = load_captures([acts])
    if m not in cs.layers:
        return check_row(title, None, f"L{m} was not captured", target)
    problems, parts, expected_text = [], [], []
    for d in stored:
        check_width(d, cs.d_model, f"capture {acts}")  # one line before the product below
        prov = d.provenance
        fit = list(prov.get("items") or [])
        exp: Expected | None = (expect.heldout(fit, prov["label"]) or {}).get("all")
        _, ls = labelled(cs, prov["label"], positive=prov.get("positive"), requests=expect.requests_of(fit) or None)
        keep = ~np.isin(ls.families.astype(str), sorted(expect.families_of(fit)))
        fam, y = ls.families[keep], ls.y[keep]
        if d.position not in cs.positions or not keep.any():
            problems.append(f"{d.name}: no held-out rows at {d.position}")
            continue
        X = cs.block(cs.layer_index(m), ls.rows[keep], [cs.position_index(d.position)])[:, 0].astype(np.float64)
        held = len(set(fam))  # the held-out families: the interval's effective n, printed beside n
        e = auroc_estimate(X @ d.vector.astype(np.float64), y, fam,
                           FamilyBootstrap(sorted(set(fam)), n_boot, seed)).in_families(held).to_json()
        short = d.name.removeprefix(f"{prov['label']}.")
        parts.append(f"{short} {estimate_text(e)} (fitted on {len(fit)} items of "
                     f"{len(expect.families_of(fit))} families)")
        if e["value"] is None or e["value"] < DECODE_FLOOR:
            problems.append(f"{short} (AUROC {estimate_text(e, 3, n=False)})")
        problems += n_problems([(short, exp, e["n"], held)])
        if exp is not None:
            expected_text.append(f"{short} {exp.text}")
    measured = f"L{m}: " + "; ".join(parts) + (f"; FAILS at {', '.join(problems)}" if problems else "")
    return check_row(title, not problems, measured, target + (f" ({'; '.join(expected_text)})" if expected_text else ""))
