"""Direction geometry (TRAPS Table 24): cosine similarity between directions fitted on different
conditions and layers, as a matrix, a Markdown table and a heatmap.

Directions are unit vectors in the same residual basis, so their cosine is their dot product.
Only directions of the same d_model are comparable; the sign of a cosine is meaningful only
because every direction points toward its label's positive class (probes.directions).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np


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
        lines.append(f"| {i} | " + " | ".join(f"{matrix[i, j]:+.2f}" for j in range(len(names))) + " |")
    return "\n".join(lines) + "\n"


def heatmap_png(
    path: str | Path, names: Sequence[str], matrix: np.ndarray, title: str, vmin: float = -1.0, vmax: float = 1.0,
    cmap: str = "RdBu_r", colorbar: str = "cosine similarity", fmt: str = "{:+.2f}",
) -> Path:
    """A labelled heatmap with the value printed in every cell (NaN cells left blank)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = len(names)
    size = max(4.0, 0.55 * k + 2.5)
    fig, ax = plt.subplots(figsize=(size + 1.2, size))
    im = ax.imshow(np.ma.masked_invalid(matrix), cmap=cmap, vmin=vmin, vmax=vmax)
    ax.set_xticks(range(k), labels=list(names), rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(k), labels=list(names), fontsize=8)
    if k <= 20:
        for i in range(k):
            for j in range(k):
                if np.isfinite(matrix[i, j]):
                    ax.text(j, i, fmt.format(matrix[i, j]), ha="center", va="center", fontsize=7)
    fig.colorbar(im, ax=ax, label=colorbar, shrink=0.8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
