"""The PECS space of seed 002 (Figure 3a, appendix M): epistemic discrimination J = AbsRec - FalseAbs
across, control accuracy up, with iso-PECS contours (PECS = Acc x max(0, J) is constant on each).

One point per dataset of a scored run (bench.pecs), their equal-weight mean and the pooled value, each
with its 95% family-bootstrap intervals on both axes; `evprobe compare` draws several runs' means in one
space (a regime's change is an arrow from A to B). A value printed without an interval (every resample
the same: bench.pecs) is drawn without a bar on that axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from evprobe.core.json_types import JsonObject

FIGURE = "pecs_space.png"
CONTOURS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


@dataclass(frozen=True)
class PecsPoint:
    """One (J, Acc) point: its label and the two estimates' JSON ({"value", "ci", "n", ...})."""

    label: str
    j: JsonObject
    acc: JsonObject
    kind: str = "dataset"  # dataset | mean | pooled | run


def points_of(scores: JsonObject) -> list[PecsPoint]:
    """The datasets, equal-weight mean and pooled point of one scored run (empty: no answer records)."""
    section = scores.get("pecs_datasets") or {}
    if "datasets" not in section:
        return []
    out = [PecsPoint(name, d["j"], d["acc"]) for name, d in section["datasets"].items()]
    mean = section["equal_weight_mean"]
    out.append(PecsPoint("equal-weight mean", mean["j"], mean["acc"], "mean"))
    out.append(PecsPoint("pooled", section["pooled_j"], scores["pecs_acc"], "pooled"))
    return [p for p in out if p.j.get("value") is not None and p.acc.get("value") is not None]


def _bar(e: JsonObject) -> tuple[float, float] | None:
    lo, hi = e.get("ci") or (None, None)
    return None if lo is None or hi is None else (e["value"] - lo, hi - e["value"])


# marker, colour, size per kind; datasets and runs take the next colour of tab10 instead (a legend names them)
STYLE = {"dataset": ("o", "tab:blue", 6), "mean": ("D", "black", 7), "pooled": ("s", "tab:gray", 6),
         "run": ("D", "tab:red", 7)}


def pecs_space_png(points: Sequence[PecsPoint], path: Path | BinaryIO, *, title: str,
                   arrows: Sequence[tuple[int, int]] = ()) -> Path | BinaryIO:
    """Draw `points` in the PECS space with iso-PECS contours into `path` (a file or a buffer);
    `arrows` join point i to point j."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.0, 4.6))
    js = np.linspace(0.005, 1.0, 400)
    for level in CONTOURS:  # Acc = PECS / J
        acc = level / js
        keep = acc <= 1.0
        ax.plot(js[keep], acc[keep], color="0.85", lw=0.8, zorder=0)
        ax.text(level, 1.0, f"{level:.1f}", fontsize=6, color="0.55", ha="center", va="bottom")
    ax.axvline(0.0, color="0.6", lw=0.8, ls="--", zorder=0)  # J <= 0: PECS = 0 (appendix M.3)
    for i, j in arrows:
        a, b = points[i], points[j]
        ax.annotate("", xy=(b.j["value"], b.acc["value"]), xytext=(a.j["value"], a.acc["value"]),
                    arrowprops={"arrowstyle": "->", "color": "0.4", "lw": 1.0})
    palette = iter(plt.get_cmap("tab10").colors)
    for p in points:  # a legend names them: labels written at clustered points would overlap
        marker, color, size = STYLE[p.kind]
        if p.kind in ("dataset", "run"):
            color = next(palette)
        xerr, yerr = _bar(p.j), _bar(p.acc)
        ax.errorbar(p.j["value"], p.acc["value"], xerr=None if xerr is None else [[xerr[0]], [xerr[1]]],
                    yerr=None if yerr is None else [[yerr[0]], [yerr[1]]], fmt=marker, color=color,
                    ms=size, capsize=2, lw=0.9, label=p.label)
    if points:
        ax.legend(fontsize=7, loc="lower right", framealpha=0.9)
    lows = [p.j["value"] - (_bar(p.j) or (0.0, 0.0))[0] for p in points]
    ax.set_xlim(min(-0.05, *lows) - 0.02 if lows else -0.05, 1.0)
    ax.set_ylim(-0.02, 1.06)
    ax.set_xlabel("J = AbsRec - FalseAbs (epistemic discrimination)")
    ax.set_ylabel("Acc (controls correct)")
    ax.set_title(title, fontsize=9)
    fig.text(0.01, 0.01, "grey curves: iso-PECS (PECS = Acc x max(0, J)); bars: 95% family-bootstrap intervals",
             fontsize=6, color="0.4")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path


def write_run_figure(scores: JsonObject, run_dir: Path) -> Path | None:
    """RUN/pecs_space.png for a scored run, written atomically; None when the run has no answer
    records (a figure of an earlier scoring of the folder, which would no longer match, is removed)."""
    import io

    from evprobe.core.files import atomic_write_bytes

    points = points_of(scores)
    target = run_dir / FIGURE
    if not points:
        target.unlink(missing_ok=True)
        return None
    buffer = io.BytesIO()
    pecs_space_png(points, buffer, title=f"PECS space of {run_dir.name}: one point per "
                   f"{scores['pecs_datasets']['dataset'].split(':')[0]}")
    atomic_write_bytes(target, buffer.getvalue())
    return target


def arrows_between(models: Sequence[str | None]) -> list[tuple[int, int]]:
    """(i, i + 1) for every two consecutive runs of the same model: one model's change of setting."""
    return [(i, i + 1) for i in range(len(models) - 1) if models[i] is not None and models[i] == models[i + 1]]


def write_runs_figure(runs: Sequence[tuple[Path, JsonObject]], path: Path) -> Path:
    """Several scored runs, (folder, scores), in one PECS space (`evprobe compare --pecs-space`): each
    run's equal-weight mean over its datasets with 95% intervals; consecutive runs of the same model
    are joined by an arrow in the order given (seed 002's Figure 3a: standard -> guided). A run
    without answer records is refused in one line."""
    import io

    from evprobe.core.errors import InputError
    from evprobe.core.files import atomic_write_bytes

    points, models = [], []
    for run_dir, scores in runs:
        section = scores.get("pecs_datasets") or {}
        if "datasets" not in section:
            why = section.get("reason", "scored before PECS per dataset")
            raise InputError(f"{run_dir}: no PECS to draw ({why}); drop it or rescore it with `evprobe score RUN`")
        run = scores.get("run") or {}
        mean = section["equal_weight_mean"]
        points.append(PecsPoint(f"{run_dir.name}: {run.get('model')} ({run.get('regime')})", mean["j"], mean["acc"],
                                "run"))
        models.append(run.get("model"))
    arrows = arrows_between(models)
    buffer = io.BytesIO()
    pecs_space_png(points, buffer, title="PECS space: each run's equal-weight mean over its datasets", arrows=arrows)
    atomic_write_bytes(path, buffer.getvalue())
    return path
