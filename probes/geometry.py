"""Direction geometry (TRAPS Table 24): cosine similarity between directions fitted on different
conditions and layers, as a matrix, a Markdown table and a heatmap.

Directions are unit vectors in the same residual basis, so their cosine is their dot product.
Only directions of the same d_model are comparable; the sign of a cosine is meaningful only
because every direction points toward its label's positive class (probes.directions).

No printed number is ever "nan": a value that cannot be computed prints as `not computable:
<why>` (`number_text`; an estimate's missing value is `NA (reason)`, core.estimate_text).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np


def number_text(value: float | None, spec: str, why: str) -> str:
    """`value` formatted with `spec`, or `not computable: <why>` when it is None, NaN or infinite."""
    if value is None or not np.isfinite(value):
        return f"not computable: {why}"
    return format(value, spec)


def cosine_matrix(vectors: Sequence[np.ndarray]) -> np.ndarray:
    """(k, k) cosine similarities of k vectors of one length (zero vectors give 0)."""
    V = np.stack([np.asarray(v, dtype=np.float64) for v in vectors])
    norms = np.linalg.norm(V, axis=1)
    U = V / np.where(norms > 0, norms, 1.0)[:, None]
    return np.clip(U @ U.T, -1.0, 1.0)


def geometry_markdown(names: Sequence[str], matrix: np.ndarray, title: str = "Cosine similarity between directions") -> str:
    head = "| | " + " | ".join(f"{i}" for i in range(len(names))) + " |"
    rule = "|---|" + "---:|" * len(names)
    lines = [f"## {title}", "", "Directions:", ""]
    lines += [f"{i}. `{n}`" for i, n in enumerate(names)]
    lines += ["", head, rule]
    for i in range(len(names)):
        lines.append(f"| {i} | " + " | ".join(number_text(matrix[i, j], "+.2f", "a non-finite vector")
                                            for j in range(len(names))) + " |")
    return "\n".join(lines) + "\n"


def short_labels(names: Sequence[str], width: int = 24) -> tuple[list[str], str]:
    """Axis labels for `names` (dotted direction names such as
    `resolved=True.massmean.L1.last.half=half_a`): the parts that vary between names, and the
    shared pattern with `*` where they vary (for the title). Names of different shapes, or labels
    still longer than `width`, fall back to their index (the Markdown table names them)."""
    split = [str(n).split(".") for n in names]
    if len(split) > 1 and len({len(p) for p in split}) == 1:
        varies = [len({p[i] for p in split}) > 1 for i in range(len(split[0]))]
        labels = [" ".join(part for part, v in zip(p, varies) if v) for p in split]
        common = "" if all(varies) else ".".join("*" if v else part for part, v in zip(split[0], varies))
        if all(0 < len(label) <= width for label in labels) and len(set(labels)) == len(labels):
            return labels, common
    labels = [str(n) for n in names]
    if all(len(label) <= width for label in labels):
        return labels, ""
    return [str(i) for i in range(len(names))], "names by index in the table beside this plot"


def heatmap_png(
    path: str | Path, names: Sequence[str], matrix: np.ndarray, title: str, vmin: float = -1.0, vmax: float = 1.0,
    cmap: str = "RdBu_r", colorbar: str = "cosine similarity", fmt: str = "{:+.2f}",
) -> Path:
    """A labelled heatmap with the value printed in every cell (NaN cells left blank)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = len(names)
    labels, common = short_labels(names)
    size = max(4.0, 0.55 * k + 2.5)
    fig, ax = plt.subplots(figsize=(size + 1.2, size))
    im = ax.imshow(np.ma.masked_invalid(matrix), cmap=cmap, vmin=vmin, vmax=vmax)
    ax.set_xticks(range(k), labels=labels, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(k), labels=labels, fontsize=8)
    if common:
        title = f"{title}\n{common}"
    if k <= 20:
        for i in range(k):
            for j in range(k):
                if np.isfinite(matrix[i, j]):
                    dark = abs(matrix[i, j] - (vmin + vmax) / 2) > 0.3 * (vmax - vmin)
                    ax.text(j, i, fmt.format(matrix[i, j]), ha="center", va="center", fontsize=7,
                            color="white" if dark else "black")
    fig.colorbar(im, ax=ax, label=colorbar, shrink=0.8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
