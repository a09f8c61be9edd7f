"""OUT/scores.md of a folder of repeated runs (bench.repeats_scoring builds the summary): per
headline measure each run's score, the runs' mean and sd, and the estimate pooled over the runs;
then PECS per dataset the same way. Cells print as everywhere else (bench.score_cells).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from evprobe.bench import pecs
from evprobe.bench.score_cells import COSTS, PLAIN, at, headline_cell, label, table_text
from evprobe.core.estimate_text import missing_text


def number_text(name: str, x: float | None) -> str:
    """A mean or sd on its estimate's scale (headline_cell's): percent for rates, 2 decimals for costs,
    3 for PECS."""
    if x is None:
        return missing_text()
    if name in COSTS:
        return f"{x:.2f}"
    if name in PLAIN:
        return f"{x:.3f}"
    return f"{100 * x:.1f}"


def repeats_markdown(summary: Mapping[str, Any], title: str) -> str:
    runs = summary["runs"]
    meta = summary["meta"]
    header = ["measure", *[f"{r['folder']} (seed {r['seed']})" for r in runs], "mean", "sd", "pooled over runs"]
    rows = []
    for name, block in summary["headline"].items():
        rows.append([label(name), *[headline_cell(name, e) for e in block["runs"]], number_text(name, block["mean"]),
                     number_text(name, block["sd"]), headline_cell(name, block["pooled"])])
    note = (f"{len(runs)} runs. Each run's column is its own score (family-bootstrap interval, RUN/scores.md). "
            f"Mean and sd: the {len(runs)} runs' values and their sample standard deviation, the spread of "
            "decoding on the same items (not an interval). Pooled: one family bootstrap of all runs "
            f"({meta['n_boot']} resamples, seed {meta['seed']}, {meta['n_families']} families; each resample "
            "draws the families once and takes every run's units of them), an interval for the setting's "
            "expected score with decoding and families both sampled; its n counts units over all runs.")
    return f"# {title}\n\n{note}\n\n{table_text(header, rows)}\n" + pecs_markdown(summary, header)


def pecs_markdown(summary: Mapping[str, Any], header: list[str]) -> str:
    """PECS per dataset: each run's, their mean and sd (seed 002's mean +- std over runs) and pooled."""
    block = summary.get(pecs.SECTION) or {}
    pooled = block.get("pooled") or {}
    if "datasets" not in pooled:
        return ""
    runs = [r if isinstance(r, dict) else {} for r in block["runs"]]

    def row(label: str, path: tuple[str, ...], pooled_estimate: Any) -> list[str]:
        estimates = [at(r, *path) for r in runs]
        values = [e.get("value") for e in estimates if isinstance(e, dict) and e.get("value") is not None]
        mean = float(np.mean(values)) if values else None
        sd = float(np.std(values, ddof=1)) if len(values) >= 2 else None
        return [label, *[headline_cell("pecs", e) for e in estimates], number_text("pecs", mean), number_text("pecs", sd),
                headline_cell("pecs", pooled_estimate)]

    rows = [row(f"PECS: {name}", ("datasets", name, "pecs"), d["pecs"]) for name, d in pooled["datasets"].items()]
    rows.append(row("PECS: equal-weight mean", ("equal_weight_mean", "pecs"), pooled["equal_weight_mean"]["pecs"]))
    zero = pooled["zero_boundary"]
    note = (f"PECS per dataset (bench.pecs; datasets: {pooled['dataset']}): each run's, the runs' mean and sd "
            "(seed 002 reports mean +- std over runs) and pooled over the runs on the same family resamples as "
            f"above. Pooled zero boundary: {zero['count']} of {zero['of']} datasets with J <= 0.")
    return f"\n{note}\n\n{table_text(header, rows)}\n"
