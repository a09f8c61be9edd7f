"""Capture at any site (hooks.sites): attention heads, sublayers, the residual stream before or
after a layer, the vision tower's blocks and the projector, reduced at positions.

    got = capture_sites(handle, prompts, images, sites=["attn_head.L3.H2", "resid_pre.L4", "projector_out"],
                        positions=["last", "image_mean"])
    got["attn_head.L3.H2"]      # (rows, 2, head_dim)
    got["projector_out"]        # (rows, 1, d_model): positions of the vision stream are "image_mean" only

Text-stream sites are read in one forward per batch through the intervention core, reduced inside
the forward exactly as `capture_layers` reduces (same positions, same masking), and the forward
stops after the last site. A vision-stream site's token axis is the tower's own, laid out
differently by every architecture (Qwen packs every image's patches on one axis, LLaVA-NeXT tiles
each image), so it takes one position, `image_mean`: the mean over every token the site outputs
for the row's images, read one row per forward (a row without images is refused, naming it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from evprobe.hooks.inputs import image_rows

if TYPE_CHECKING:
    from PIL import Image

    from evprobe.hooks.handle import Handle


def capture_sites(
    handle: Handle,
    prompts: Sequence[str],
    images: Sequence[Sequence[Image.Image]] | None = None,
    *,
    sites: Sequence[Any],
    positions: Sequence[Any],
    text_markers: Sequence[str | None] | None = None,
    batch_size: int | None = None,
) -> dict[str, np.ndarray]:
    """{site: float32 (rows, n_positions, width)} for each site (its spelling as the key).

    sites: site spellings or Sites, checked against the model before any work (one line listing
        the valid ones). positions: as `capture_layers` for text-stream sites; a vision-stream site
        (vision_block, projector_out) needs positions == ["image_mean"].
    batch_size: rows per forward for the text-stream sites (None = all at once); a row gives the
        same values batched or alone (float32 reduction-order noise aside).
    """
    import torch

    from evprobe.hooks.capture import position_plan, reduce_at, no_cache_kwargs, check_rows
    from evprobe.hooks.inputs import build_inputs
    from evprobe.hooks.intervention import Read, intervene
    from evprobe.hooks.positions import check_positions, row_indices
    from evprobe.hooks.spans import batch_spans

    images = image_rows(prompts, images)
    step = check_rows(prompts, images, text_markers, batch_size)
    if isinstance(sites, str):
        raise TypeError("sites must be a list of site names, not a string")
    checked = [handle.sites.check(s) for s in sites]
    if not checked:
        raise ValueError(f"no sites given; valid sites of {handle.model_id}: {handle.sites.valid()}")
    names = [str(s) for s in checked]
    if len(set(names)) != len(names):
        raise ValueError(f"sites {names} repeat one; give each once")
    text = [s for s in checked if s.stream == "text"]
    vision = [s for s in checked if s.stream == "vision"]
    if vision and [p for p in positions] != ["image_mean"]:
        raise ValueError(f"{vision[0]} is on the vision stream: its only position is image_mean (the mean over the "
                         "tokens it outputs for the row's images); capture it in a call of its own")
    out: dict[str, list[np.ndarray]] = {str(s): [] for s in checked}
    if text:
        positions = check_positions(positions)
        for start in range(0, len(prompts), step):
            rows = slice(start, start + step)
            p, im = list(prompts[rows]), list(images[rows])
            markers = None if text_markers is None else list(text_markers[rows])
            enc = build_inputs(handle, p, im)
            n_images = [len(i) for i in im]
            spans = batch_spans(handle, enc, p, n_images, markers, first_row=start)
            sizes = [[i.size for i in row] for row in im]
            plan = position_plan(row_indices(handle, enc, p, n_images, spans, positions, first_row=start,
                                             image_sizes=sizes), handle.device)
            ops = [Read(s, reduce=lambda value: reduce_at(value, plan)) for s in text]  # each (batch, n_pos, width)
            with torch.no_grad(), intervene(handle, ops, stop_after_reads=True) as run:
                run.forward(handle.model, no_cache_kwargs(handle, enc))
            for k, s in enumerate(text):
                out[str(s)].append(run.value(k).cpu().numpy())
    for r, (prompt, row_images) in enumerate(zip(prompts, images, strict=True)):
        if not vision:
            break
        if not row_images:
            raise ValueError(f"row {r}: {vision[0]} needs the row's images, and it has none")
        enc = build_inputs(handle, [prompt], [list(row_images)])
        ops = [Read(s, reduce=lambda value: value.float().reshape(-1, value.shape[-1]).mean(0)) for s in vision]
        with torch.no_grad(), intervene(handle, ops, stop_after_reads=True) as run:
            run.forward(handle.model, no_cache_kwargs(handle, enc))
        for k, s in enumerate(vision):
            out[str(s)].append(run.value(k).cpu().numpy()[None, None, :])  # (1, 1, width)
    return {name: np.concatenate(parts, axis=0) for name, parts in out.items()}
