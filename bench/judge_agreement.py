"""Inter-judge agreement per task x dataset cell, as seed 002 reports it (section 4.2, appendix D.4, Table 7).

The seed gives Fleiss' kappa, the unanimous share and pairwise agreement for each (judge task,
dataset) cell. Its judge tasks are "void abstain", "ctrl abstain" and "correctness"; its datasets
are occlusion / chaotic splits. evprobe's panel makes one four-way judgement per reply (yes, no,
undetermined, unclear: abstention and the answer at once), so here:

- the **task** is the kind of item the reply answers: `control` (a resolved item: the evidence
  settles the answer; the seed's "ctrl abstain" and "correctness" judged together) or `void` (an
  unresolved item: the evidence leaves it undetermined; the seed's "void abstain"). An item with no
  resolution recorded is `other` (answer requests always record one);
- the **dataset** is the physical system (sliding, bouncing, spring...), as in `bench.pecs.DATASET`:
  a run has one regime and one kind of void, and each family belongs to one system.

Under `evprobe judge --panel seed002` (`bench.seed002_panel`) each judge makes the seed's two
decisions, so the tasks are the seed's own: `void-abstain`, `ctrl-abstain` (the abstention judge's
abstained / answered on voids and on controls) and `correctness` (each judge's extracted value
matched against the ground truth, on controls); `grouped_cells` takes such per-task rows.

Per cell, over the replies every judge decided (the pooled kappa's replies): Fleiss' kappa
(`bench.judges.kappa_estimate`, the pooled one's code and resamples), the unanimous share (every
judge gave the same decision), the mean pairwise agreement (per reply, the share of judge pairs that
agree, averaged over replies) and, per judge pair, the share of the replies both decided on which
they agree. Every interval is the family bootstrap's over the cell's own families, seeded as the
pooled one (so a run with one cell gets the pooled kappa and its interval exactly); the shares are
proportions (their interval is the percentile one hulled with the cluster interval, never a point);
a kappa every resample reproduces has no interval and says why. Fleiss' kappa's percentile interval
alone is too narrow with few families (87.7% / 88.5% coverage at 8 families in
`benchmarks/coverage_audit_scoring.py`), so it is hulled with a delete-one-family jackknife t interval
on F - 1 degrees of freedom, clipped to [-1, 1] (`core.cluster_t.jackknife_interval`, which says why
the jackknife): 93.9% / 95.2% at 8 families, 95.0-95.6% at 24 and 72, the mean width 30% wider at 8
families and 4-9% at 24 and 72. The pooled kappa (`bench.judges`) is this function's. A cell with fewer than
`MIN_REPLIES` replies decided by every judge, or whose decisions all fall in one category (kappa's
chance agreement is then 1), gives the reason instead of a number.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from evprobe.bench import pecs
from evprobe.bench.items import Item
from evprobe.core import cluster_t
from evprobe.core.bootstrap import Estimate, FamilyBootstrap
from evprobe.core.json_types import JsonObject

TASKS = ("control", "void", "other")
TASK = ("the kind of item the reply answers: control (resolved: the evidence settles it; the seed's ctrl-abstain "
        "and correctness tasks, judged at once) or void (unresolved; the seed's void-abstain task)")
DATASET = "the physical system (as bench.pecs: a run has one regime and one kind of void)"
MIN_REPLIES = 5
TOO_FEW = f"fewer than {MIN_REPLIES} replies decided by every judge"
ONE_CATEGORY = "every decision in one category: kappa undefined (chance agreement 1)"


def fleiss_kappa(table: np.ndarray) -> float:
    """Fleiss' kappa of an (N subjects, k categories) table of rater counts, every row summing to n >= 2."""
    table = np.asarray(table, dtype=float)
    n = table.sum(axis=1)
    if table.ndim != 2 or len(table) == 0 or np.any(n != n[0]) or n[0] < 2:
        raise ValueError("Fleiss' kappa needs subjects rated by the same number (2 or more) of raters")
    p_j = table.sum(axis=0) / table.sum()
    p_i = ((table ** 2).sum(axis=1) - n) / (n * (n - 1))
    p_e = float((p_j ** 2).sum())
    return float("nan") if p_e == 1.0 else float((p_i.mean() - p_e) / (1.0 - p_e))


def kappa_estimate(table: np.ndarray, families: list[str], n_boot: int, seed: int) -> Estimate:
    """Fleiss' kappa with its family-bootstrap percentile interval hulled with the jackknife t interval
    (module docstring)."""
    table = np.asarray(table, dtype=float)
    if len(table) == 0:
        return Estimate.empty("no reply decided by every judge")
    boot = FamilyBootstrap(sorted(set(families)), n_boot, seed)
    fidx = boot.family_index(families)
    n = table.sum(axis=1)[0]
    agree = ((table ** 2).sum(axis=1) - n) / (n * (n - 1))  # (N,) P_i
    ones = np.ones(len(table))
    num = np.stack([boot.per_family(fidx, agree), *[boot.per_family(fidx, table[:, j] / n)
                                                    for j in range(table.shape[1])]], axis=1)
    den = np.stack([boot.per_family(fidx, ones)] * (1 + table.shape[1]), axis=1)
    parts = boot.resample_many(num, den)

    def kappa(p_bar: Any, *p_j: Any) -> Any:
        p_e = sum(p ** 2 for p in p_j)
        return (p_bar - p_e) / (1.0 - p_e)

    est = pecs.combined_estimate(kappa, parts, len(table))  # a value every resample gives: no interval, and why
    if est.value is None:
        return est
    return replace(est, ci=cluster_t.jackknife_interval(kappa, num, den, est.value, est.ci, (-1.0, 1.0)))


def task_of(item: Item) -> str:
    """The judge task of an item's reply (module docstring)."""
    return "control" if item.resolved is True else "void" if item.resolved is False else "other"


@dataclass(frozen=True)
class AgreementCell:
    """Agreement among the judges on one task x dataset cell's replies (module docstring)."""

    task: str
    dataset: str
    n_replies: int  # answer replies in the cell
    n_decided_by_all: int  # of them, decided by every judge: kappa's, unanimity's and mean pairwise's n
    n_families: int  # families holding those
    fleiss_kappa: Estimate
    unanimous: Estimate
    mean_pairwise: Estimate
    pairs: tuple[tuple[str, Estimate], ...]  # ("a / b", agreement of the replies both decided)
    reason: str | None = None  # why the cell gives no numbers

    def to_json(self) -> JsonObject:
        out: JsonObject = {"task": self.task, "dataset": self.dataset, "n_replies": self.n_replies,
                           "n_decided_by_all": self.n_decided_by_all, "n_families": self.n_families,
                           "fleiss_kappa": self.fleiss_kappa.to_json(), "unanimous": self.unanimous.to_json(),
                           "mean_pairwise_agreement": self.mean_pairwise.to_json(),
                           "pairwise_agreement": {k: v.to_json() for k, v in self.pairs}}
        if self.reason is not None:
            out["reason"] = self.reason
        return out


def _share(rows: Sequence[JsonObject], hit: Callable[[JsonObject], float], n_boot: int, seed: int) -> Estimate:
    """The mean of a per-reply value in [0, 1] with its family-bootstrap interval (a proportion)."""
    if not rows:
        return Estimate.empty("no replies to compare")
    return family_rate([float(hit(r)) for r in rows], [str(r["family_id"]) for r in rows], n_boot, seed)


def family_rate(values: Sequence[float], families: Sequence[str], n_boot: int, seed: int) -> Estimate:
    """The mean of per-reply values in [0, 1] (each reply one unit) with the family bootstrap's
    proportion interval (the percentile interval hulled with the cluster one: never a point)."""
    boot = FamilyBootstrap(sorted(set(families)), n_boot, seed)
    fidx = boot.family_index(list(families))
    est = boot.rate(boot.per_family(fidx, np.asarray(values, dtype=float)), boot.per_family(fidx, np.ones(len(values))),
                    binary=True)
    return est.in_families(boot.n_families)


def pair_agreement(judges: Mapping[str, str | None], names: Sequence[str]) -> float:
    """The share of judge pairs that give the same decision on one reply every judge decided."""
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    return sum(judges[a] == judges[b] for a, b in pairs) / len(pairs)


def cell(task: str, dataset: str, rows: Sequence[JsonObject], names: Sequence[str], categories: Sequence[str],
         n_boot: int, seed: int) -> AgreementCell:
    """One cell's agreement (module docstring); rows: judgments.jsonl rows of the cell."""
    full = [r for r in rows if all(r["judges"][n] is not None for n in names)]
    n_fam = len({r["family_id"] for r in full})
    pair_names = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    if len(full) < MIN_REPLIES:
        missing = Estimate.empty(TOO_FEW)
        return AgreementCell(task, dataset, len(rows), len(full), n_fam, missing, missing, missing,
                             tuple((f"{a} / {b}", missing) for a, b in pair_names), TOO_FEW)
    table = np.array([[sum(r["judges"][n] == c for n in names) for c in categories] for r in full], dtype=float)
    if np.count_nonzero(table.sum(axis=0)) == 1:
        kappa, reason = Estimate.empty(ONE_CATEGORY), ONE_CATEGORY
    else:
        kappa, reason = kappa_estimate(table, [str(r["family_id"]) for r in full], n_boot, seed), None
    pairs = tuple((f"{a} / {b}", _share([r for r in rows if r["judges"][a] is not None and r["judges"][b] is not None],
                                        lambda r, a=a, b=b: r["judges"][a] == r["judges"][b], n_boot, seed))
                  for a, b in pair_names)
    return AgreementCell(task, dataset, len(rows), len(full), n_fam, kappa,
                         _share(full, lambda r: len(set(r["judges"].values())) == 1, n_boot, seed),
                         _share(full, lambda r: pair_agreement(r["judges"], names), n_boot, seed), pairs, reason)


def agreement_cells(rows: Sequence[JsonObject], items: Mapping[str, Item], names: Sequence[str],
                    categories: Sequence[str], n_boot: int, seed: int) -> tuple[AgreementCell, ...]:
    """Every task x dataset cell holding a reply, tasks in `TASKS` order, datasets sorted."""
    groups: dict[tuple[str, str], list[JsonObject]] = {}
    for r in rows:
        item = items[str(r["item_id"])]
        groups.setdefault((task_of(item), item.system), []).append(r)
    return grouped_cells(groups, names, {t: categories for t in TASKS}, n_boot, seed)


def grouped_cells(groups: Mapping[tuple[str, str], Sequence[JsonObject]], names: Sequence[str],
                  categories: Mapping[str, Sequence[str]], n_boot: int, seed: int) -> tuple[AgreementCell, ...]:
    """One cell per (task, dataset) group, tasks in `categories`' order, datasets sorted; each
    task's rows hold that task's decisions in `judges`, from `categories[task]`."""
    order = sorted(groups, key=lambda k: (list(categories).index(k[0]), k[1]))
    return tuple(cell(t, d, groups[(t, d)], names, categories[t], n_boot, seed) for t, d in order)


def cells_json(cells: Sequence[AgreementCell], task: str = TASK) -> JsonObject:
    """judge.json's `agreement_by_task_dataset`; task: what a task is."""
    return {"task": task, "dataset": DATASET, "min_replies": MIN_REPLIES, "cells": [c.to_json() for c in cells]}


def cells_markdown(section: JsonObject) -> list[str]:
    """judge.md's table of the cells (from judge.json's section)."""
    from evprobe.bench.score_cells import pct, plain, table_text

    rows = []
    for c in section["cells"]:
        pairs = "; ".join(f"{k} {pct(v)}" for k, v in c["pairwise_agreement"].items())
        rows.append([c["task"], c["dataset"], f"{c['n_decided_by_all']} of {c['n_replies']}", str(c["n_families"]),
                     plain(c["fleiss_kappa"]), pct(c["unanimous"]), pct(c["mean_pairwise_agreement"]), pairs])
    head = ["task", "dataset", "replies decided by all", "families", "Fleiss' kappa", "unanimous (%)",
            "mean pairwise agreement (%)", "each pair (%)"]
    return ["## Agreement per task x dataset (seed 002, Table 7)", "",
            (f"Task: {section['task']}. Dataset: {section['dataset']}. Intervals: family bootstrap over the cell's "
            f"families; a cell with fewer than {section['min_replies']} replies decided by every judge, or one "
            "category only, says why."), "", table_text(head, rows)]


__all__ = [
    "DATASET",
    "MIN_REPLIES",
    "TASK",
    "TASKS",
    "AgreementCell",
    "agreement_cells",
    "cell",
    "cells_json",
    "cells_markdown",
    "family_rate",
    "grouped_cells",
    "fleiss_kappa",
    "kappa_estimate",
    "pair_agreement",
    "task_of",
]
