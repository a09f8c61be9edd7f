"""Activation patching between two runs whose token positions align.

The two members of an image pair share every prompt byte and their images have the same size, so
they tokenize to the same positions: patching one member's layer output (at chosen positions) into
its partner's forward pass, layer by layer, shows where the difference between the two is carried.
We read the next-token log-probabilities of candidate strings (the option letters) at the answer
position, and which candidate is ranked first (the decoded option).

Runs go through nnsight: one trace of the source saves every chosen layer's output, then the
target runs as a batch of identical rows, row b overwriting its own (layer, position set)'s output
(at most `max_rows` rows per trace): one trace instead of one per (layer, position set), which on a
small model is most of the cost (the organism's 15 patches per pair direction: 2.4x faster,
benchmarks/patching_speed.py). A test checks each row equals the one-patch-per-trace result on every
tiny architecture.

Qwen3-VL adds visual features to the residual stream again after its first decoder layers
(DeepStack), after the layer output that is patched here; patching those layers therefore leaves
the target's later image injections in place (a test shows layer 0 is not enough there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from PIL import Image

    from evprobe.hooks.handle import Handle


@dataclass(frozen=True)
class PatchResult:
    """Log-probabilities of each candidate: source run, target run, and target with a patch.

    patched[l, s, c] is candidate c's log-probability when layer `layers[l]` of the target takes
    the source's output at position set `position_sets[s]`.
    """

    layers: tuple[int, ...]
    position_sets: tuple[str, ...]
    candidates: tuple[str, ...]
    source: np.ndarray  # (n_candidates,)
    target: np.ndarray  # (n_candidates,)
    patched: np.ndarray  # (n_layers, n_sets, n_candidates)

    def top(self) -> np.ndarray:
        """Index of the first-ranked candidate after each patch, (n_layers, n_sets)."""
        return self.patched.argmax(axis=-1)


def _candidate_logprobs(logits, ids: list[int]) -> np.ndarray:
    import torch

    return torch.log_softmax(logits.float(), dim=-1)[0, ids].double().cpu().numpy()


def _repeated(handle: Handle, enc, target: tuple[str, Sequence[Image.Image]], k: int):
    """The target's inputs as k identical rows: its tensors repeated, or encoded k times where a
    tensor is not row-major (pixel patches of several images, Qwen's 3D position ids)."""
    from evprobe.hooks.inputs import build_inputs, repeat_rows

    return repeat_rows(enc, 1, k) or build_inputs(handle, [target[0]] * k, [list(target[1])] * k)


def patch_pair(
    handle: Handle,
    source: tuple[str, Sequence[Image.Image]],
    target: tuple[str, Sequence[Image.Image]],
    *,
    layers: Sequence[int],
    position_sets: Mapping[str, Sequence[int]],
    candidates: Sequence[str],
    max_rows: int = 16,
) -> PatchResult:
    """Patch the source's layer outputs into the target, one (layer, position set) per batch row.

    `position_sets` maps a name to token indices of the input row (negative indices count from the
    end, so -1 is the last token: the prompt's, or the handle's answer prefix's); both runs must
    have the same number of tokens.
    """
    import nnsight
    import torch

    from evprobe.hooks.generation import candidate_token_ids
    from evprobe.hooks.inputs import build_inputs

    bad = [i for i in layers if not 0 <= i < handle.n_layers]
    if bad:
        raise ValueError(f"layer {bad[0]} out of range; {handle.model_id} has layers 0..{handle.n_layers - 1}")
    if not position_sets or any(len(v) == 0 for v in position_sets.values()):
        raise ValueError("every position set needs at least one token index")
    ids = candidate_token_ids(handle, candidates)
    src = build_inputs(handle, [source[0]], [list(source[1])])
    tgt = build_inputs(handle, [target[0]], [list(target[1])])
    n_src, n_tgt = src["input_ids"].shape[1], tgt["input_ids"].shape[1]
    if n_src != n_tgt:
        raise ValueError(
            f"source has {n_src} tokens and target {n_tgt}: positions do not align; patch only "
            "pairs whose prompts and image sizes match (image pairs do)"
        )
    for name, idx in position_sets.items():
        if any(not -n_tgt <= i < n_tgt for i in idx):
            raise ValueError(f"position set {name!r} has an index outside the {n_tgt} prompt tokens")
    order = sorted(set(layers))
    nn_layers = handle.nn_layers
    # (row of `patched`, layer, set, token indices), one per patch; each becomes one batch row
    patches = [(li, layer, si, list(idx)) for li, layer in enumerate(layers)
               for si, idx in enumerate(position_sets.values())]
    with torch.inference_mode():
        with handle.nn.trace(**src):
            saved = nnsight.save([nn_layers[i].output for i in order])  # each (1, seq, d_model)
            src_logits = handle.nn.output.logits[:, -1, :].save()
        with handle.nn.trace(**tgt):
            tgt_logits = handle.nn.output.logits[:, -1, :].save()
        by_layer = dict(zip(order, saved))
        patched = np.zeros((len(layers), len(position_sets), len(ids)))
        for start in range(0, len(patches), max(1, max_rows)):
            chunk = patches[start : start + max(1, max_rows)]
            batch = _repeated(handle, tgt, target, len(chunk))
            with handle.nn.trace(**batch):
                for layer in sorted({p[1] for p in chunk}):  # nnsight reads layers in execution order
                    out = nn_layers[layer].output  # (rows, seq, d_model)
                    for b, (_, at, _, index) in enumerate(chunk):
                        if at == layer:
                            out[b, index, :] = by_layer[layer][0, index, :]
                logits = handle.nn.output.logits[:, -1, :].save()  # (rows, vocab)
            for b, (li, _, si, _) in enumerate(chunk):
                patched[li, si] = _candidate_logprobs(logits[b : b + 1], ids)
    return PatchResult(
        layers=tuple(layers),
        position_sets=tuple(position_sets),
        candidates=tuple(candidates),
        source=_candidate_logprobs(src_logits, ids),
        target=_candidate_logprobs(tgt_logits, ids),
        patched=patched,
    )
