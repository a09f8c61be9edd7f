"""Activation patching between two runs whose token positions align.

The two members of an image pair share every prompt byte and their images have the same size, so
they tokenize to the same positions: patching one member's layer output (at chosen positions) into
its partner's forward pass, layer by layer, shows where the difference between the two is carried.
We read the next-token log-probabilities of candidate strings (the option letters) at the answer
position, and which candidate is ranked first (the decoded option).

Any site can be patched (hooks.sites: `patch_sites`): the residual stream after a layer
(`patch_pair`, layer by layer), a sublayer's output, one attention head (`attn_head.L3.H2`: its
slice of the attention output projection's input), a vision block or the projector (their whole
output: the members' images have the same size).

Runs go through the intervention core (hooks.intervention): one forward of the source Reads every
chosen site, then the target runs as a batch of identical rows, row b Patching its own (site,
position set) (at most `max_rows` rows per forward): one forward instead of one per (site,
position set), which on a small model is most of the cost (benchmarks/patching_speed.py). A test
checks each row equals the one-patch-per-forward result on every tiny architecture, and that the
core's patch equals a plain forward hook's.

Qwen3-VL adds visual features to the residual stream again after its first decoder layers
(DeepStack), after the layer output that is patched here; patching those layers therefore leaves
the target's later image injections in place (a test shows layer 0 is not enough there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from PIL import Image

    from evprobe.hooks.handle import Handle
    from evprobe.hooks.positions import Position


@dataclass(frozen=True)
class Patched:
    """Log-probabilities of each candidate: source run, target run, and target with each patch.

    patched: (n_patched, n_sets, n_candidates), the first axis the layers (PatchResult) or the
    sites (SitePatchResult) in the order asked for.
    """

    position_sets: tuple[str, ...]
    candidates: tuple[str, ...]
    source: np.ndarray  # (n_candidates,)
    target: np.ndarray  # (n_candidates,)
    patched: np.ndarray  # (n_patched, n_sets, n_candidates)

    def top(self) -> np.ndarray:
        """Index of the first-ranked candidate after each patch, (n_patched, n_sets)."""
        return self.patched.argmax(axis=-1)


@dataclass(frozen=True)
class PatchResult(Patched):
    """patched[l, s, c]: candidate c's log-probability when layer `layers[l]` of the target takes the
    source's output at position set `position_sets[s]`."""

    layers: tuple[int, ...]


def _candidate_logprobs(logits, ids: list[int]) -> np.ndarray:
    import torch

    return torch.log_softmax(logits.float(), dim=-1)[0, ids].double().cpu().numpy()


def _repeated(handle: Handle, enc, target: tuple[str, Sequence[Image.Image]], k: int):
    """The target's inputs as k identical rows: its tensors repeated, or encoded k times where a
    tensor is not row-major (pixel patches of several images, Qwen's 3D position ids)."""
    from evprobe.hooks.inputs import build_inputs, repeat_rows

    return repeat_rows(enc, 1, k) or build_inputs(handle, [target[0]] * k, [list(target[1])] * k)


@dataclass(frozen=True)
class SitePatchResult(Patched):
    """patched[k, s, c]: candidate c's log-probability when the target takes the source's value of
    site `sites[k]` at position set `position_sets[s]`."""

    sites: tuple[str, ...]


def _named(v: Any) -> bool:
    """A position set given as a position of hooks.positions (a name, Token, Marker or Frame), not indices."""
    from evprobe.hooks.positions import Frame, Marker, Token

    return isinstance(v, (str, Token, Marker, Frame))


def _prepare(handle: Handle, source, target, position_sets, candidates):
    """Candidate ids, both encodings, and each position set as "all" or the target's token indices
    (a named position resolved on the target's row by hooks.positions, as capture and steering do)."""
    from evprobe.hooks.generation import candidate_token_ids
    from evprobe.hooks.inputs import build_inputs
    from evprobe.hooks.positions import check_positions, resolve_positions

    if not position_sets or any(not _named(v) and len(v) == 0 for v in position_sets.values()):
        raise ValueError("every position set needs at least one token index, 'all' or a named position")
    for name, v in position_sets.items():
        if _named(v) and v != "all":
            try:
                check_positions([v])
            except ValueError as err:
                raise ValueError(f"position set {name!r}: {err}") from None
    ids = candidate_token_ids(handle, candidates)
    src = build_inputs(handle, [source[0]], [list(source[1])])
    tgt = build_inputs(handle, [target[0]], [list(target[1])])
    n_src, n_tgt = src["input_ids"].shape[1], tgt["input_ids"].shape[1]
    if n_src != n_tgt:
        raise ValueError(
            f"source has {n_src} tokens and target {n_tgt}: positions do not align; patch only "
            "pairs whose prompts and image sizes match (image pairs do)"
        )
    sets: dict[str, str | tuple[int, ...]] = {}
    for name, idx in position_sets.items():
        if isinstance(idx, str) and idx == "all":
            sets[name] = "all"
        elif _named(idx):
            try:
                sets[name] = resolve_positions(handle, tgt, [target[0]], [list(target[1])], idx).rows[0]
            except ValueError as err:
                raise ValueError(f"position set {name!r} of the target: {err}") from None
        elif any(not -n_tgt <= i < n_tgt for i in idx):
            raise ValueError(f"position set {name!r} has an index outside the {n_tgt} prompt tokens")
        else:
            sets[name] = tuple(int(i) for i in idx)
    return ids, src, tgt, sets


def patch_sites(
    handle: Handle,
    source: tuple[str, Sequence[Image.Image]],
    target: tuple[str, Sequence[Image.Image]],
    *,
    sites: Sequence[Any],
    position_sets: Mapping[str, Sequence[int] | Position],
    candidates: Sequence[str],
    max_rows: int = 16,
) -> SitePatchResult:
    """Patch the source's value of each site into the target, one (site, position set) per batch row.

    sites: site spellings or Sites (hooks.sites), checked against the model first (one line
        listing the valid ones). `position_sets` maps a name to token indices of the input row
        (negative indices count from the end, so -1 is the last token: the prompt's, or the
        handle's answer prefix's), to "all", or to a position of hooks.positions resolved on the
        target's row ("image": its image-feature tokens, "text", "last", a Marker, a Token, a
        Frame: the same tokens capture and steering use); both runs must have the same number of tokens. A
        vision-stream site (vision_block, projector_out) takes only "all" (its token axis is the
        tower's own) and is patched one target row per forward.
    """
    import torch

    from evprobe.hooks.intervention import Patch, Read, intervene
    from evprobe.hooks.intervention.session import site_map_of

    site_map = site_map_of(handle)
    checked = [site_map.check(s) for s in sites]
    if not checked:
        raise ValueError("no sites given; e.g. sites=['resid_post.L2'] or handle.sites.all('attn_head')")
    for s in checked:
        if s.stream == "vision" and any(v != "all" for v in position_sets.values()):
            raise ValueError(f"site {s} is on the vision stream: its only position set is 'all' (the tower's "
                             "own token axis), e.g. position_sets={'all': 'all'}")
    ids, src, tgt, resolved = _prepare(handle, source, target, position_sets, candidates)
    distinct = sorted(set(checked), key=site_map.order_key)
    sets = list(resolved.values())
    # (row of `patched`, site, set index, positions), one per patch; each becomes one batch row
    patches = [(k, site, si, pos) for k, site in enumerate(checked) for si, pos in enumerate(sets)]
    with torch.inference_mode():
        with intervene(handle, [Read(s) for s in distinct]) as run:
            src_logits = handle.model(**src).logits[:, -1, :]
        by_site = {s: run.value(i) for i, s in enumerate(distinct)}  # each the site's whole value
        tgt_logits = handle.model(**tgt).logits[:, -1, :]
        patched = np.zeros((len(checked), len(sets), len(ids)))
        text = [p for p in patches if p[1].stream == "text"]
        vision = [p for p in patches if p[1].stream == "vision"]
        step = max(1, max_rows)
        chunks = [text[i : i + step] for i in range(0, len(text), step)] + [[p] for p in vision]
        for chunk in chunks:
            batch = _repeated(handle, tgt, target, len(chunk))
            ops = [Patch(site, by_site[site], positions=pos, rows=None if site.stream == "vision" else (b,))
                   for b, (_, site, _, pos) in enumerate(chunk)]
            with intervene(handle, ops):
                logits = handle.model(**batch).logits[:, -1, :]  # (rows, vocab)
            for b, (k, _, si, _) in enumerate(chunk):
                patched[k, si] = _candidate_logprobs(logits[b : b + 1], ids)
    return SitePatchResult(
        sites=tuple(str(s) for s in checked),
        position_sets=tuple(position_sets),
        candidates=tuple(candidates),
        source=_candidate_logprobs(src_logits, ids),
        target=_candidate_logprobs(tgt_logits, ids),
        patched=patched,
    )


def _check_layers(handle: Handle, layers: Sequence[int]) -> None:
    bad = [i for i in layers if not 0 <= i < handle.n_layers]
    if bad:
        raise ValueError(f"layer {bad[0]} out of range; {handle.model_id} has layers 0..{handle.n_layers - 1}")


def patch_pair(
    handle: Handle,
    source: tuple[str, Sequence[Image.Image]],
    target: tuple[str, Sequence[Image.Image]],
    *,
    layers: Sequence[int],
    position_sets: Mapping[str, Sequence[int] | Position],
    candidates: Sequence[str],
    max_rows: int = 16,
    kind: str = "resid_post",
) -> PatchResult:
    """Patch the source's layer outputs into the target, one (layer, position set) per batch row.

    `position_sets` maps a name to token indices of the input row (negative indices count from the
    end, so -1 is the last token: the prompt's, or the handle's answer prefix's), or to a position
    ("image", "text", ...) as in `patch_sites`; both runs must have the same number of tokens. kind: the layer site patched (resid_post, the layer's output;
    resid_pre, attn_out or mlp_out); `patch_sites` patches any site.
    """
    _check_layers(handle, layers)
    from evprobe.hooks.sites.vocabulary import Site

    result = patch_sites(handle, source, target, sites=[Site(kind, int(i)) for i in layers],
                         position_sets=position_sets, candidates=candidates, max_rows=max_rows)
    return PatchResult(layers=tuple(layers), position_sets=result.position_sets, candidates=result.candidates,
                       source=result.source, target=result.target, patched=result.patched)
