"""The own-data experiments' figures, drawn like the pipeline's: a value per dose with its 95%
interval over the null's band (dose-response)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from evprobe.analysis.specificity import band_name
from evprobe.hooks.dose import RAW


def dose_curves(result: Any, path: Path, measure: str = "log_odds_change") -> Path:
    """One panel per group: the probe's (and each control's) `measure` against alpha, a line per
    layer with its interval, the random directions' band per layer (central 95%), and the
    ablation's level (dashed, with its interval) where it was read."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    effects, null = result.effects, result.null
    groups = list(dict.fromkeys(effects["group"]))
    rows = effects[(effects["measure"] == measure) & effects["layer"].notna() & (effects["direction"] != "ablation")]
    ablated = effects[(effects["measure"] == measure) & (effects["direction"] == "ablation")]
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.4), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, group in zip(axes[0], groups):
        for li, layer in enumerate(sorted(rows["layer"].dropna().unique())):
            color = colors[li % len(colors)]
            band = null[(null["layer"] == layer) & (null["group"] == group) & (null["measure"] == measure)]
            band = band.sort_values("alpha")
            if len(band) and band["n_directions"].iloc[0]:
                xs = [0.0, *band["alpha"]]
                order = np.argsort(xs)
                lo = np.array([0.0, *band["lo"]])[order]
                hi = np.array([0.0, *band["hi"]])[order]
                ax.fill_between(np.array(xs)[order], lo, hi, color=color, alpha=0.15,
                                label=f"L{int(layer)} null: {band_name(int(band['n_directions'].iloc[0]))}")
            for di, name in enumerate(dict.fromkeys(rows["direction"])):
                line = rows[(rows["layer"] == layer) & (rows["group"] == group) & (rows["direction"] == name)]
                line = line.sort_values("alpha")
                x = np.array([0.0, *line["alpha"]])
                y = np.array([0.0, *line["value"].astype(float)])
                lo = np.array([0.0, *line["lo"].fillna(line["value"]).astype(float)])
                hi = np.array([0.0, *line["hi"].fillna(line["value"]).astype(float)])
                order = np.argsort(x)
                ax.errorbar(x[order], y[order], yerr=[y[order] - lo[order], hi[order] - y[order]], color=color,
                            marker="o" if di == 0 else "s", linestyle="-" if di == 0 else ":", capsize=2,
                            label=f"L{int(layer)} {name}")
            for a in ablated[(ablated["layer"] == layer) & (ablated["group"] == group)].itertuples():
                # no dose: a level line with its interval across the plot
                ax.axhline(a.value, color=color, linestyle="--", linewidth=1.0, label=f"L{int(layer)} ablation")
                if a.lo == a.lo and a.hi == a.hi:
                    ax.axhspan(a.lo, a.hi, color=color, alpha=0.07)
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_xlabel("alpha (" + ("multiples of the mean residual norm" if any(
            u.how != RAW for u in result.units.values()) else "raw units") + ")")
        ax.set_ylabel(measure.replace("_", " "))
        n = rows[(rows["group"] == group)]["n"].max()
        ax.set_title(f"{group} (n={int(n) if n == n else 0})", fontsize=9)
        ax.legend(fontsize=6)
    fig.suptitle("Steering dose-response: change vs alpha = 0, 95% family-bootstrap intervals", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
