"""The pair-patching heatmaps: layer (or site) x position set, and layer x head per position set;
each cell with its value and 95% interval, the measures of analysis.patching.aggregate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from evprobe.core.json_types import JsonObject
from evprobe.core.decimals import fixed
from evprobe.core.estimate_text import count_text

MIN_GAP = 0.1  # nats: pairs whose members the model barely separates give no share (of the gap)
# The decoded-flip panel's title: the benchmark's words for its option letters (`evprobe patching`,
# whose figure the quickstart pins), or what the number is, for your own candidates (pair_patching)
FLIP_TITLES = {"letter": "Top letter becomes the source's (IIA)",
               "candidate": "Decoded flips: how often the\ntop candidate becomes the source's"}


def _panel(fig: Any, ax: Any, cells: list[list[dict]], cmap: str, scale: tuple[float, float], columns: list,
           layers: list[int], xlabel: str, title: str, *, fontsize: tuple[int, int],
           row_label: str = "decoder layer") -> None:
    """One heatmap panel: layers up, `columns` across, each cell's value and 95% interval written
    on it (white on the darkest cells). fontsize: (cells, title)."""
    lo, hi = scale
    grid = np.array([[np.nan if e["value"] is None else e["value"] for e in row] for row in cells])
    im = ax.imshow(grid, cmap=cmap, vmin=lo, vmax=hi, aspect="auto", origin="lower")
    for i, row in enumerate(cells):
        for j, e in enumerate(row):
            if e["value"] is None:
                continue
            ci = e.get("ci") or [None, None]
            text = fixed(e["value"], 2) + ("" if ci[0] is None else f"\n[{fixed(ci[0], 2)}, {fixed(ci[1], 2)}]")
            ax.text(j, i, text, ha="center", va="center", fontsize=fontsize[0],
                    color="white" if abs(e["value"]) > 0.6 * max(abs(lo), abs(hi)) else "black")
    ax.set_xticks(range(len(columns)), columns)
    ax.set_yticks(range(len(layers)), layers)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(row_label)
    ax.set_title(title, fontsize=fontsize[1])
    fig.colorbar(im, ax=ax, fraction=0.05)


def _count(cells: list[list[dict]]) -> str:
    """A panel's `(n=24 in 6 families)`: every cell of a measure counts the same pairs and families."""
    first = cells[0][0] if cells and cells[0] else {}
    return count_text(first.get("n"), first.get("n_families"))


def _mean_change_scale(cells: list[list[dict]]) -> tuple[float, float]:
    """A symmetric colour scale for mean changes in nats: their largest |value| (at least 0.1)."""
    top = max((abs(e["value"]) for row in cells for e in row if e["value"] is not None), default=0.0)
    return -max(top, MIN_GAP), max(top, MIN_GAP)


def heatmap_png(summary: JsonObject, path: Path, measures: tuple[str, ...] = ("share_of_gap", "decoded_flip"),
                row_label: str = "decoder layer", decoded: str = "letter") -> None:
    """One panel per measure, row (layer or site) x patched positions: the mean change of the
    log-odds (nats), the share of the source-target gap the patch recovers, the decoded flips; each
    cell with its value and 95% interval, the same measures as patching.md. `evprobe patching`
    draws the last two; `pair_patching`'s plot all three (a mean change is defined for every pair,
    the share only where the gap is at least MIN_GAP). decoded: what a flip reads, a key of
    FLIP_TITLES ("letter": the benchmark's options; "candidate": your candidates)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers, positions = summary["layers"], summary["positions"]
    known = {"mean_change": ("Mean change of the log-odds (nats)", "RdBu_r", None),
             "share_of_gap": (f"Share of the gap recovered (|gap| >= {MIN_GAP} nats)", "RdBu_r", (-1.0, 1.0)),
             "decoded_flip": (FLIP_TITLES[decoded], "Greens", (0.0, 1.0))}
    panels = [(key, *known[key]) for key in measures]
    fig, axes = plt.subplots(1, len(panels), figsize=(0.6 + (1.4 + 2.6 * len(positions)) * len(panels) / 2,
                                                      1.4 + 0.55 * len(layers)), squeeze=False)
    for ax, (key, title, cmap, scale) in zip(axes[0], panels):
        cells = summary[key]  # (layers, positions) of estimates
        _panel(fig, ax, cells, cmap, scale or _mean_change_scale(cells), positions, layers, "patched positions",
               f"{title}\n{_count(cells)}", fontsize=(7, 9), row_label=row_label)
    fig.suptitle(f"Pair patching, {summary['n_rows']} patched pair directions; 95% family-bootstrap intervals",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def head_heatmap_png(summary: JsonObject, path: Path) -> None:
    """An attn_head job's figure: per position set, two layer x head panels (the share of the gap
    recovered, and decoded flips), each cell with its value and 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers, heads, sets = summary["layers"], summary["heads"], summary["position_sets"]
    panels = (("share_of_gap", "share of the gap recovered", "RdBu_r", (-1.0, 1.0)),
              ("decoded_flip", "top letter becomes the source's (IIA)", "Greens", (0.0, 1.0)))
    fig, axes = plt.subplots(len(sets), 2, figsize=(2.6 + 1.1 * len(heads) * 2, 1.2 + 0.6 * len(layers) * len(sets)),
                             squeeze=False)
    for si, name in enumerate(sets):
        for ax, (key, title, cmap, (lo, hi)) in zip(axes[si], panels):
            cells = [[summary[key][i][h * len(sets) + si] for h in range(len(heads))] for i in range(len(layers))]
            _panel(fig, ax, cells, cmap, (lo, hi), [f"H{h}" for h in heads], layers, "attention head",
                   f"{name}: {title} {_count(cells)}", fontsize=(6, 8))
    fig.suptitle(f"Head patching, {summary['n_rows']} patched pair directions; 95% family-bootstrap intervals",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


