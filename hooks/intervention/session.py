"""`intervene`: the one intervention core. Reads and edits at any sites, in one forward pass
(the prompt pass and every generated token), composable, always cleaned up.

    from evprobe.hooks.intervention import Add, Read, intervene
    with intervene(handle, [Add("resid_post.L3", 4.0 * v), Read("resid_post.L3"), Read("resid_post.L4")]) as run:
        handle.model(**enc)                          # or hooks.generate / next_token_logprobs / a pipeline
    edited_l3, l4 = run.value(1), run.value(2)      # the read after the edit sees the edited value

How: one torch hook per (module, port) the ops touch (a forward hook for a module's output, a
forward pre-hook for its input), which applies that module's ops in the order given. Hooks run in
the order they were registered, so an intervention entered inside another sees the outer one's
edits (`capture` inside `steer` reads the steered stream), and a Read listed after an Add of the
same site sees the added value; transformers' own recording hooks (output_hidden_states, which
some VLMs feed their language model from) are kept behind ours, so they record the edited value.
Every hook is removed on exit, also when the block raises.

Why plain hooks, and not nnsight, as the substrate: an nnsight intervention lives inside one
`trace` / `generate` block and does not reach later direct calls of the model (a stored
`edit(inplace=True)` applies only to runs through nnsight's interleaver), while the toolkit's
readouts (`generate`, `next_token_logprobs`, the runner) call the model directly; and a
persistent every-step edit needs an open `tracer.iter` loop that warns on every run.
nnsight still works beside it (`handle.nn`; the tests' nnsight twin of steering is the cross-check), but
nnsight reads a module's output inside its forward, before torch hooks run: under `intervene`,
read edited sites with Read, not with nnsight's `.output` (tests/hooks/test_steer_nnsight.py).

A forward is the prompt pass when the model is called without a KV cache or with an empty one
(a full forward, or generate's first), and a decode step when its cache holds positions; so a
one-token prompt is a prompt pass too. (A handle-like object without `.model` falls back to
counting positions: one position is a decode step.)

Positions that differ by row ("image", a RowPositions; hooks.positions) become a (batch, seq) mask
per forward: "image" from the top-level forward's input_ids (the model's image-feature token ids),
found once per forward however many ops use it. A row without any of them is refused, naming the
position and the row, rather than edited nowhere.

`stop_after_reads=True` ends the forward (`Intervention.forward` returns None) once every Read has
its value: a capture computes nothing after its last site.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evprobe.hooks.intervention.ops import Edit, Op, Read, image_mask, per_row
from evprobe.hooks.sites.resolve import HookPoint, SiteMap

if TYPE_CHECKING:
    import torch


@dataclass
class _Forward:
    """What the model's pre-hook saw of the forward under way (cleared by its post-hook): a prompt pass
    or a decode step (None: no top-level forward seen), its input_ids, and the position masks made for it."""

    prompt: bool | None = None
    input_ids: torch.Tensor | None = None
    masks: dict[tuple[int, torch.device], tuple[torch.Tensor, str, set[int]]] = field(default_factory=dict)


class StopForward(Exception):
    """Raised from a hook to end a forward early (stop_after_reads); caught by Intervention.forward."""


def hidden_of(output: Any) -> torch.Tensor:
    """A module's output as one tensor (attention modules return (out, weights))."""
    return output[0] if isinstance(output, tuple) else output


def replace_hidden(output: Any, hidden: torch.Tensor) -> Any:
    """A module's output with its hidden states replaced (a tuple keeps its other members)."""
    if isinstance(output, tuple):
        return (hidden, *output[1:])
    return hidden


def site_map_of(handle: Any) -> SiteMap:
    """handle.sites (a Handle), else the resid_pre / resid_post sites of `handle.layers` (any object
    with the decoder ModuleList as `.layers` and its width as `.d_model`)."""
    sites = getattr(handle, "sites", None)
    if isinstance(sites, SiteMap):
        return sites
    from evprobe.hooks.sites.resolve import LayerSites

    return LayerSites(handle.layers, getattr(handle, "d_model", None))


@dataclass(eq=False)
class Intervention:
    """What an `intervene` block did: each Read's values, and a log of the edits.

    log: one (op index, layer or -1, sequence length, edited) entry per edit op per forward it
        saw, in order; edited is False where the schedule left the forward alone (a decode step
        of a prompt-only op).
    """

    ops: tuple[Op, ...]
    points: tuple[HookPoint, ...]
    log: list[tuple[int, int, int, bool]] = field(default_factory=list)
    _values: dict[int, list[Any]] = field(default_factory=dict)

    def _index(self, op: int | Op) -> int:
        if isinstance(op, int):
            index = op
        else:
            index = next((i for i, o in enumerate(self.ops) if o is op), -1)
        if not 0 <= index < len(self.ops) or not isinstance(self.ops[index], Read):
            raise ValueError(f"{op!r} is not one of this intervention's Read ops")
        return index

    def values(self, op: int | Op) -> list[Any]:
        """A Read's values, one per forward it ran on (the prompt pass first, then decode steps)."""
        return list(self._values[self._index(op)])

    def value(self, op: int | Op) -> Any:
        """A Read's one value (exactly one forward recorded; a ValueError otherwise)."""
        got = self._values[self._index(op)]
        if len(got) != 1:
            raise ValueError(f"{self.ops[self._index(op)].site}: {len(got)} values recorded, not 1; use values()")
        return got[0]

    def forward(self, model: Any, enc: Any, **kwargs: Any) -> Any:
        """model(**enc, **kwargs); None when stop_after_reads ended it early."""
        try:
            return model(**enc, **kwargs)
        except StopForward:
            return None


# Forward hooks that record outputs: transformers installs one on every layer of a model, for good,
# the first time a forward asks for output_hidden_states (transformers 5). Vision-language models
# feed their language model from those records (LLaVA reads the vision tower's hidden_states[-2]),
# so an edit must be made before they record: they are moved behind every hook added here.
_RECORDING_HOOK_MODULES = ("transformers.utils.output_capturing",)


def _behind_recorders(module: Any) -> None:
    """Move transformers' recording forward hooks of `module` to the end of its hook order."""
    hooks = module._forward_hooks
    for hook_id, fn in list(hooks.items()):
        if getattr(fn, "__module__", None) in _RECORDING_HOOK_MODULES:
            hooks.move_to_end(hook_id)


def _cache_says_prompt(kwargs: dict) -> bool:
    """Whether a top-level forward is a prompt pass: no KV cache given, or one still empty (generate's
    first forward); a cache holding positions makes it a decode step. transformers 5 passes the
    cache as `cache` (older versions as `past_key_values`)."""
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    if cache is None:
        return True
    length = getattr(cache, "get_seq_length", None)
    if callable(length):
        return int(length()) == 0
    return False  # a legacy tuple cache: only generation passes one


def _first_tensor(args: tuple, kwargs: dict) -> tuple[Any, str | int]:
    if args:
        return args[0], 0
    if "hidden_states" in kwargs:
        return kwargs["hidden_states"], "hidden_states"
    raise RuntimeError("an input hook found no positional input and no hidden_states keyword")


def _image_ids(handle: Any) -> frozenset[int]:
    """The model's "image" token ids (Handle.image_ids: hooks.positions), refused in one line where
    it has none (a text-only model) or the handle cannot say (a bare layer list)."""
    ids = getattr(handle, "image_ids", None)
    if not callable(ids):
        raise TypeError("position 'image' needs a Handle (its model's image token ids), not a bare layer list")
    return ids()


@contextmanager
def intervene(handle: Any, ops: Sequence[Op], *, stop_after_reads: bool = False) -> Iterator[Intervention]:
    """Apply `ops` (hooks.intervention.ops) to every forward of `handle.model` inside the block.

    handle: a Handle (its `sites`), or anything with the decoder ModuleList as `.layers` (then only
    resid_pre / resid_post sites). Every site is checked against the model before any hook is
    added (one ValueError line listing the valid sites). Yields the Intervention.
    """
    ops = tuple(ops)
    if not ops:
        raise ValueError("no operations given; pass Read / Add / Ablate / Replace / Patch ops")
    for op in ops:
        if not isinstance(op, Op):
            raise TypeError(f"expected hooks.intervention ops (Read, Add, Ablate, Replace, Patch), got {type(op).__name__}")
    sites = site_map_of(handle)
    points = tuple(sites.point(op.site) for op in ops)  # every site checked before any hook
    run = Intervention(ops, points, _values={i: [] for i, op in enumerate(ops) if isinstance(op, Read)})
    groups: dict[tuple[int, str], list[int]] = {}
    for i, point in enumerate(points):
        groups.setdefault(point.key, []).append(i)
    reads = [i for i, op in enumerate(ops) if isinstance(op, Read)]
    image = _image_ids(handle) if any(op.positions == "image" for op in ops) else None
    caches: dict[int, dict] = {i: {} for i in range(len(ops))}
    # Prompt pass or decode step: read off the top-level forward's KV cache (the model's pre-hook
    # below); where no top-level forward was seen (a handle-like object without `.model`, a model
    # called piecewise), a forward of one position counts as a decode step.
    state = _Forward()

    def mask_of(op: Op, value: torch.Tensor) -> torch.Tensor:
        """The (batch, seq) mask of a per-row position in this forward, checked against `value`."""
        key = (id(op.positions), value.device)
        masks = state.masks
        if key not in masks:
            if op.positions == "image":
                ids = state.input_ids
                if ids is None:
                    raise RuntimeError(f"{op.site}: position 'image' reads the forward's input_ids; call the model "
                                       "with input_ids (not inputs_embeds)")
                mask, label = image_mask(ids, image).to(value.device), "image"
            else:
                mask, label = op.positions.mask(value.device), op.positions.label
            if tuple(mask.shape) != tuple(value.shape[:2]):
                raise ValueError(f"{op.site}: position {label!r} was found for {mask.shape[0]} rows of {mask.shape[1]} "
                                 f"tokens but the forward has {value.shape[0]} x {value.shape[1]}; resolve it on this "
                                 "forward's inputs")
            empty = (mask.sum(1) == 0).nonzero().flatten().tolist()
            masks[key] = (mask, label, set(empty))
        mask, label, empty = masks[key]
        bad = sorted(empty if op.rows is None else empty & set(op.rows))
        if bad:
            raise ValueError(f"position {label!r}: row {bad[0]} of the batch has no such token (e.g. a row without "
                             "images at 'image'); give it images, or restrict the op with rows=")
        return mask

    def apply(members: list[int], value: torch.Tensor) -> torch.Tensor:
        stream = points[members[0]].stream
        prompt = state.prompt
        if stream == "vision" or value.dim() < 3:
            prompt = True
        elif prompt is None:
            prompt = value.shape[1] > 1
        seq = int(value.shape[1]) if value.dim() >= 3 else int(value.shape[0])
        for i in members:
            op, point = ops[i], points[i]
            layer = -1 if point.site.layer is None else point.site.layer
            rowwise = per_row(op.positions)
            if not op.runs(prompt) or (rowwise and not prompt):  # a generated token is no row's prompt token
                if isinstance(op, Edit):
                    run.log.append((i, layer, seq, False))
                continue
            mask = mask_of(op, value) if rowwise else None
            view = value if point.columns is None else value[..., point.columns]
            if isinstance(op, Read):
                run._values[i].append(op.take(view, prompt, mask))
                continue
            new = op.apply(view, prompt, caches[i], mask)
            run.log.append((i, layer, seq, True))
            if point.columns is None:
                value = new
            else:
                value = value.clone()
                value[..., point.columns] = new
        if stop_after_reads and reads and all(run._values[j] for j in reads):
            raise StopForward
        return value

    def output_hook(members: list[int]):
        def hook(module, args, output):
            value = hidden_of(output)
            new = apply(members, value)
            return None if new is value else replace_hidden(output, new)
        return hook

    def input_hook(members: list[int]):
        def hook(module, args, kwargs):
            value, where = _first_tensor(args, kwargs)
            new = apply(members, value)
            if new is value:
                return None
            if where == 0:
                return (new, *args[1:]), kwargs
            return args, {**kwargs, where: new}
        return hook

    def model_pre(module, args, kwargs):
        state.prompt = _cache_says_prompt(kwargs)
        state.input_ids = kwargs.get("input_ids", args[0] if args else None)
        state.masks = {}

    def model_post(module, args, output):
        state.prompt, state.input_ids, state.masks = None, None, {}

    removers = []
    try:
        model = getattr(handle, "model", None)
        if hasattr(model, "register_forward_pre_hook"):
            removers.append(model.register_forward_pre_hook(model_pre, with_kwargs=True))
            removers.append(model.register_forward_hook(model_post, always_call=True))
        for members in groups.values():
            point = points[members[0]]
            if point.port == "output":
                removers.append(point.module.register_forward_hook(output_hook(members)))
                _behind_recorders(point.module)
            else:
                removers.append(point.module.register_forward_pre_hook(input_hook(members), with_kwargs=True))
        yield run
    finally:
        for r in reversed(removers):
            r.remove()
