"""Every token of every row, unreduced: `capture_tokens` -> `TokenActs` (ragged, one array per row).

Layout (chosen so that nothing about a row depends on the batch it ran in):
    acts[r]       float32 (len(layers), n_tokens[r], d_model): row r's REAL tokens only, in order
                  (padding dropped), for the layers in the order asked for, of one component.
    input_ids[r]  int64 (n_tokens[r],): the token ids of those positions.
    spans[r]      row r's hooks.spans.Spans re-based to its own token axis: index k means
                  acts[r][:, k] (so spans[r].last == n_tokens[r] - 1).
`padded(fill=nan)` gives one block instead: (rows, len(layers), max n_tokens, d_model) with row
r's tokens at [r, :, :n_tokens[r]] (left-aligned, unlike the model's left padding) and `fill`
after them, plus the (rows,) length vector; NaN by default so a padded slot cannot pass for data.

Cost: the whole (batch, seq, d_model) output of each asked layer leaves the model (to the CPU,
float32): rows x layers x seq x d_model x 4 bytes, e.g. 8 rows x 4 layers x 1,300 tokens x 3,584
(a 7B model) = 600 MB per batch; use batch_size and few layers on real models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from evprobe.hooks.inputs import image_rows
from evprobe.hooks.spans import Spans

if TYPE_CHECKING:
    from PIL import Image

    from evprobe.hooks.handle import Handle


@dataclass(frozen=True)
class TokenActs:
    """Per-token activations of a batch of rows (module docstring: layout)."""

    acts: list[np.ndarray]
    input_ids: list[np.ndarray]
    spans: list[Spans]
    layers: tuple[int, ...]
    component: str

    @property
    def n_tokens(self) -> np.ndarray:
        """(rows,) int: each row's token count."""
        return np.array([a.shape[1] for a in self.acts], dtype=np.int64)

    def padded(self, fill: float = np.nan) -> tuple[np.ndarray, np.ndarray]:
        """((rows, layers, max_tokens, d_model) float32 left-aligned, filled with `fill`; (rows,) lengths)."""
        lengths = self.n_tokens
        rows, n_layers, d = len(self.acts), len(self.layers), self.acts[0].shape[-1]
        out = np.full((rows, n_layers, int(lengths.max()), d), fill, dtype=np.float32)
        for r, a in enumerate(self.acts):
            out[r, :, : a.shape[1]] = a
        return out, lengths


def _rebase(spans: Spans, real: list[int]) -> Spans:
    """Spans in padded-row indices -> indices on the row's own real-token axis."""
    at = {p: k for k, p in enumerate(real)}
    return replace(spans, last=at[spans.last], image=tuple(at[i] for i in spans.image),
                   image_markers=tuple(at[i] for i in spans.image_markers), text=tuple(at[i] for i in spans.text))


def capture_tokens(
    handle: Handle,
    prompts: Sequence[str],
    images: Sequence[Sequence[Image.Image]] | None = None,
    *,
    layers: Sequence[int],
    component: str = "resid_post",
    text_markers: Sequence[str | None] | None = None,
    batch_size: int | None = None,
) -> TokenActs:
    """`component` of `layers` at every real token of each row (one forward per batch).

    component: "resid_post", "resid_pre", "attn_out" or "mlp_out" (hooks.capture.COMPONENTS; hooks.sites).
    text_markers: per row, the substring `spans[r].text` locates (None = whole prompt text).
    batch_size: rows per forward; None = all at once. A row's arrays do not depend on it
        (float32 noise aside; tests/hooks/test_positions.py).
    """
    images = image_rows(prompts, images)
    import torch

    from evprobe.hooks.capture import check_rows, check_components, check_layers, sites, trace_sites
    from evprobe.hooks.inputs import build_inputs
    from evprobe.hooks.spans import batch_spans

    step = check_rows(prompts, images, text_markers, batch_size)
    layers = check_layers(layers, handle.n_layers)
    (component,) = check_components([component])
    sites(handle, layers, [component])  # an unavailable component fails before any work
    acts: list[np.ndarray] = []
    ids: list[np.ndarray] = []
    spans: list[Spans] = []
    for start in range(0, len(prompts), step):
        rows = slice(start, start + step)
        p, im = list(prompts[rows]), list(images[rows])
        markers = None if text_markers is None else list(text_markers[rows])
        enc = build_inputs(handle, p, im)
        row_spans = batch_spans(handle, enc, p, [len(i) for i in im], markers, first_row=start)
        got = trace_sites(handle, enc, layers, [component], lambda out: out.detach())  # each (batch, seq, d)
        block = torch.stack([got[i, component].float().cpu() for i in layers], 1).numpy()  # (batch, L, seq, d)
        mask, input_ids = enc["attention_mask"].cpu().numpy(), enc["input_ids"].cpu().numpy()
        for r in range(block.shape[0]):
            real = np.flatnonzero(mask[r])  # padded index of each real token
            acts.append(np.ascontiguousarray(block[r][:, real]))  # (L, n_tokens, d)
            ids.append(input_ids[r][real].astype(np.int64))
            spans.append(_rebase(row_spans[r], real.tolist()))
        del got, block, enc
    return TokenActs(acts=acts, input_ids=ids, spans=spans, layers=tuple(layers), component=component)
