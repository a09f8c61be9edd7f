"""Activation steering: add alpha * unit direction to a decoder layer's output.

    with steer(handle, Steering(v, layer=2, alpha=4.0)):
        gens = generate(handle, prompts, images, max_new_tokens=16)      # steered
        logp = next_token_logprobs(handle, prompts, images, letters)     # steered
    # hooks removed here, also when the block raised

What is edited: layer `layer`'s output (the residual stream after that decoder
layer, a (batch, seq, d_model) tensor) gets `alpha * v` added, v the unit
direction. `positions` picks the prompt positions ("all", "last" = index -1,
which with left padding is every row's last real token, or explicit indices /
a slice; negative indices are safe under left padding, non-negative ones count
padding). On a decode step the layer sees one new position per row, and that
position is edited under schedule "every-step" whatever `positions` says
(each generated token is the "last" one at its step); "prompt-only" leaves all
decode steps alone.

How the prompt pass is told from decode steps: the forward's KV cache (hooks.intervention): none,
or an empty one, is a prompt pass (a full forward, e.g. next_token_logprobs, or the first forward
of generate); a cache holding positions is a decode step, which feeds one new token per row. The
tests' nnsight twin counts steps instead (`tracer.iter` step 0 is the prompt); the tests check the
two agree.

Alpha units: `Steering.alpha` is raw (residual-stream units of that model).
`Steering.from_norm_units(v, layer, alpha_norm, mean_norm, measured_at=...)` takes
alpha in multiples of the layer's mean residual norm and stores raw = alpha_norm *
mean_norm plus both inputs, so doses compare across models. The norm must be
measured where the vector is added: `hooks.steer_rows.residual_norms_at(handle, ..., layers, positions)`
averages the per-token L2 norm of the layer's output over exactly the prompt
positions `positions` edits ("all": every real token, padding excluded; "last":
each row's last token). Position 0 (BOS) often has a norm many times the others,
so a norm read at the last token and a vector added at every position are not
the same unit; `from_norm_units` refuses `measured_at` != `positions` for that
reason (a test checks it).

Directions (hooks.direction_vectors: unit vectors, random ones, the model check) with provenance
(a `probes.directions.Direction`, or anything with a `vector` and a `provenance` mapping naming its
`model`, `layer`, `position` and `mean_norm`):
`Steering.from_direction(direction, alpha)` steers along it at its layer, alpha in multiples of its
stored mean norm, and remembers the model it was fitted on. `steer`, `steered_generate`,
`option_logprobs` and `hooks.ablation.ablate` refuse such a direction on
another model with the CLI's one-line refusal (hooks.fingerprint.check_fitted_on: the model is its
name as loaded, a registered name and its folder being one model, a tiny model and a folder it
was saved to two) unless given `allow_other_model=True`. A raw vector carries no provenance and
is never checked. `steer(handle, direction)` with a Direction (no alpha) is a one-line TypeError
pointing to `Steering.from_direction`; so is `Steering(direction, ...)` (it would drop the
provenance: pass `direction.vector` to mean that).

Many directions at once (hooks.steer_rows): `steer_rows(handle, layer, deltas)` adds a different raw
vector to each row of the batch (deltas: (rows, d_model)), and
`option_logprobs_rows` uses it to read K directions x n prompts in a few large
forwards (the prompts encoded once and repeated when every input tensor is
row-major, else re-encoded), which is how the dose-response null runs 50 random
directions for about the price of a handful of conditions on a small model.

The edit runs on the intervention core (hooks.intervention: one Add per Steering), so a Steering
can sit at any site (`Steering.at("attn_head.L2.H1", v, alpha)`), and a capture inside the
block reads the steered values, the steered site included. Why torch hooks under the core and not
nnsight (nnsight 0.8.1): an nnsight intervention lives inside one `trace` / `generate` block, and
its only persistent form, `handle.nn.edit(inplace=True)`, applies only to runs through nnsight's
interleaver ("calling the wrapped torch.nn.Module directly runs the model as it was",
nnsight/intervention/editing.py), while `hooks.generate` and `hooks.next_token_logprobs` call
`handle.model` directly (test_nnsight_edit_does_not_reach_direct_model_calls); and a persistent
every-step edit needs an open `tracer.iter` loop that warns on every run. The tests'
`steered_generate_nnsight` (tests/hooks/nnsight_twins.py) does the same edit with nnsight's
iteration API (`for step in tracer.iter[:n]`, editing `output` in place each step) as the
cross-check: same generated ids and scores within 1e-5 on all tiny archs (in practice bit-identical). Cost:
benchmarks/steer_overhead.py and benchmarks/intervention_overhead.py.

With nnsight beside it: nnsight reads a module's `.output` inside the module's forward, before
torch hooks run, so an nnsight `.output` of the steered layer shows the unedited value; layers
after it (and the next layer's `.input`) see the edit (tests/hooks/test_steer_nnsight.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from evprobe.hooks.direction_vectors import direction_label, model_of, provenance_of, unit_direction
from evprobe.hooks.inputs import image_rows
from evprobe.hooks.intervention.ops import SCHEDULES, Positions, Schedule
from evprobe.hooks.intervention.ops import check_positions as check_steer_positions

if TYPE_CHECKING:
    import torch
    from PIL import Image

    from evprobe.hooks.dose import Dose
    from evprobe.hooks.generation import GenerateOptions
    from evprobe.hooks.handle import Handle
    from evprobe.hooks.sites.vocabulary import Site

LETTERS: tuple[str, ...] = ("A", "B", "C", "D", "E")


# ---------------------------------------------------------------- the steering spec

@dataclass(frozen=True, eq=False)
class Steering:
    """Add `alpha * direction` to decoder layer `layer`'s output.

    direction: unit vector, shape (d_model,) (normalised on construction; stored
        as read-only float64 numpy).
    layer: decoder layer index, 0 .. n_layers - 1 (checked against the model by steer()).
    alpha: raw dose, in the model's residual-stream units.
    positions: prompt positions edited (hooks.positions' vocabulary): "all", "last" (-1: every
        row's last real token under left padding), "image" (each row's image-feature tokens),
        a RowPositions (hooks.positions.resolve_positions: "text", a Marker, a Token, a Frame),
        a tuple of indices or a slice. Decode steps edit their one new position under schedule
        "every-step", except at "image" / a RowPositions (a generated token is neither).
    schedule: "every-step" (prompt pass and every generated token) or
        "prompt-only" (the prompt pass only).
    alpha_norm, mean_norm: set by from_norm_units (alpha = alpha_norm * mean_norm).
    fitted_on, direction_name: set by from_direction: the model the direction was fitted on
        (its provenance's `model`) and its name; steer() refuses it on another model.
    allow_other_model: set by from_direction(..., allow_other_model=True): no such refusal.
    site: None = the residual stream after `layer` (resid_post.L<layer>); else any site of the
        vocabulary (hooks.sites), e.g. "attn_out.L2", "attn_head.L2.H1" (a head_dim-wide
        direction), "vision_block.L0" (positions "all"); its layer must equal `layer` (use
        `Steering.at(site, direction, alpha)`, which sets it).
    """

    direction: np.ndarray = field(repr=False)
    layer: int
    alpha: float
    positions: Positions = "all"
    schedule: Schedule = "every-step"
    alpha_norm: float | None = None
    mean_norm: float | None = None
    fitted_on: str | None = None
    direction_name: str | None = None
    allow_other_model: bool = False
    site: Site | str | None = None

    def __post_init__(self) -> None:
        from evprobe.hooks.sites.vocabulary import Site

        object.__setattr__(self, "direction", unit_direction(self.direction))
        if self.site is not None:
            site = Site.parse(self.site)
            if (site.layer or 0) != self.layer:
                raise ValueError(f"site {site} is at layer {site.layer} but the Steering's layer is {self.layer}; "
                                 "use Steering.at(site, direction, alpha)")
            object.__setattr__(self, "site", site)
        if isinstance(self.layer, bool) or not isinstance(self.layer, (int, np.integer)) or self.layer < 0:
            raise ValueError(f"layer must be a decoder layer index >= 0, got {self.layer!r}")
        object.__setattr__(self, "layer", int(self.layer))
        alpha = float(self.alpha)
        if not np.isfinite(alpha):
            raise ValueError(f"alpha must be finite, got {self.alpha!r}")
        object.__setattr__(self, "alpha", alpha)
        object.__setattr__(self, "positions", check_steer_positions(self.positions))
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")

    @classmethod
    def at(cls, site: Site | str, direction: Any, alpha: float, **kwargs: Any) -> Steering:
        """Add `alpha * direction` at any site (hooks.sites): `Steering.at("attn_head.L2.H1", v, 3.0)`."""
        from evprobe.hooks.sites.vocabulary import Site

        parsed = Site.parse(site)
        return cls(direction, parsed.layer or 0, alpha, site=parsed, **kwargs)

    def site_of(self) -> Site:
        """The site edited: `site`, else the residual stream after `layer`."""
        from evprobe.hooks.sites.vocabulary import Site

        return self.site if isinstance(self.site, Site) else Site("resid_post", self.layer)

    @classmethod
    def from_norm_units(
        cls,
        direction: Any,
        layer: int,
        alpha_norm: float,
        mean_norm: float,
        *,
        positions: Positions = "all",
        schedule: Schedule = "every-step",
        measured_at: Positions | None = None,
    ) -> Steering:
        """Alpha in multiples of the layer's mean residual norm: raw alpha = alpha_norm * mean_norm.

        measured_at: the prompt positions mean_norm was averaged over (residual_norms_at); when
        given it must equal `positions` (the unit is the norm of what is edited)."""
        if not (np.isfinite(mean_norm) and mean_norm > 0):
            raise ValueError(f"mean_norm must be a positive number (mean_residual_norm(acts)), got {mean_norm!r}")
        if measured_at is not None and check_steer_positions(measured_at) != check_steer_positions(positions):
            raise ValueError(f"mean_norm was measured at positions {measured_at!r} but the vector is added at "
                             f"{positions!r}; measure the norm where the vector is added "
                             "(residual_norms_at(..., positions)) or restrict the edit to where it was measured")
        return cls(direction, layer, float(alpha_norm) * float(mean_norm), positions, schedule,
                   alpha_norm=float(alpha_norm), mean_norm=float(mean_norm))

    @classmethod
    def from_dose(cls, direction: Any, dose: Dose, *, positions: Positions = "all",
                  schedule: Schedule = "every-step") -> Steering:
        """`dose.raw` times the unit direction at the dose's layer (hooks.dose): a unit measured at
        other positions than `positions` is refused, as in from_norm_units (a given or raw unit,
        positions None, is not compared)."""
        return cls.from_norm_units(direction, dose.layer, dose.alpha, dose.unit.norm, positions=positions,
                                   schedule=schedule, measured_at=dose.unit.positions)

    @classmethod
    def from_direction(
        cls,
        direction: Any,
        alpha: float,
        *,
        handle: Any = None,
        positions: Positions | None = None,
        schedule: Schedule = "every-step",
        units: Literal["norm", "raw"] = "norm",
        mean_norm: float | None = None,
        measured_at: Positions | None = None,
        allow_other_model: bool = False,
    ) -> Steering:
        """Steer along a direction with provenance (probes.directions.Direction) at its layer.

        alpha: with units "norm" (the default), in multiples of the residual norm: raw alpha =
            alpha * mean_norm, mean_norm the direction's stored `mean_norm` (the mean norm at its
            layer and capture position over the items it was fitted on) unless `mean_norm` is
            given (e.g. residual_norms_at(handle, ..., positions)[layer], with measured_at).
            A stored norm was measured at the direction's capture position, so it is the unit only
            where the vector is added there: for a "last" direction `positions` defaults to "last"
            and another value is refused (as from_norm_units refuses measured_at != positions); for
            any other capture position give `mean_norm` measured where the vector is added, or
            units "raw". units "raw": alpha in the model's residual-stream units.
        positions: None = "last" for a direction read at "last", else "all".
        handle: when given, the direction is checked against it now (the model it was fitted on,
            the layer's range, the width); steer() checks it again against the handle it meets.
        allow_other_model: steer a model other than the one it was fitted on (no refusal, here
            or in steer()).
        """
        prov = provenance_of(direction)
        if prov is None:
            raise TypeError(f"Steering.from_direction takes a direction with provenance (probes.directions.Direction"
                            f", e.g. read_directions(DIR)[name]), got {type(direction).__name__}; for a bare vector "
                            "use Steering(vector, layer, alpha) or Steering.from_norm_units")
        name = direction_label(direction)
        if "layer" not in prov:
            raise ValueError(f"direction {name} has no layer in its provenance; use "
                             "Steering(direction.vector, layer, alpha)")
        position = str(prov.get("position", ""))
        if positions is None:
            positions = "last" if position == "last" else "all"
        fitted_on = prov.get("model")
        fitted_on = None if fitted_on is None else str(fitted_on)
        common = dict(fitted_on=fitted_on, direction_name=name, allow_other_model=bool(allow_other_model))
        if units == "raw":
            s = cls(direction.vector, prov["layer"], alpha, positions, schedule, **common)
        elif units == "norm":
            if mean_norm is None:
                if measured_at is not None:  # a place without the norm measured there: not silently replaced
                    raise ValueError(f"measured_at={measured_at!r} names where a mean_norm was measured; give that "
                                     "mean_norm too, or neither (the direction's stored norm, measured at 'last')")
                if prov.get("mean_norm") is None:
                    raise ValueError(f"direction {name} has no stored mean_norm (a folder written before it); give "
                                     "mean_norm=residual_norms_at(...) or units='raw'")
                if position != "last":
                    raise ValueError(f"direction {name}'s mean_norm was measured at its capture position "
                                     f"{position!r}, which no steering position equals; give mean_norm="
                                     "residual_norms_at(handle, ..., positions)[layer] or units='raw'")
                mean_norm, measured_at = float(prov["mean_norm"]), "last"
            base = cls.from_norm_units(direction.vector, prov["layer"], alpha, mean_norm, positions=positions,
                                       schedule=schedule, measured_at=measured_at)
            # the raw vector again, not base.direction: normalising a unit vector twice can move its last
            # bits, and a direction on its own model must steer exactly as its bare vector does
            s = cls(direction.vector, base.layer, base.alpha, base.positions, base.schedule,
                    alpha_norm=base.alpha_norm, mean_norm=base.mean_norm, **common)
        else:
            raise ValueError(f"units must be 'norm' (alpha in multiples of the mean residual norm) or 'raw', "
                             f"got {units!r}")
        if handle is not None:
            _check_against(handle, s, allow_other_model=allow_other_model)
        return s

    def delta(self, dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
        """alpha * direction as a (d_model,) tensor: product in float64, then cast (both paths use this)."""
        import torch

        return torch.from_numpy(self.alpha * self.direction).to(device=device, dtype=dtype)


def _as_list(steering: Steering | Sequence[Steering] | None) -> list[Steering]:
    if steering is None:
        return []
    if isinstance(steering, Steering):
        return [steering]
    if provenance_of(steering) is not None:
        raise TypeError(f"got the direction {direction_label(steering)}, not a Steering; steer along it with "
                        "Steering.from_direction(direction, alpha) (alpha in multiples of its mean norm)")
    out = list(steering)
    for s in out:
        if not isinstance(s, Steering):
            hint = ("; use Steering.from_direction(direction, alpha)" if provenance_of(s) is not None else "")
            raise TypeError(f"expected Steering objects, got {type(s).__name__}{hint}")
    return out


def _check_against(handle: Any, s: Steering, *, allow_other_model: bool = False) -> None:
    if s.fitted_on is not None and not (allow_other_model or s.allow_other_model):
        from evprobe.hooks.fingerprint import check_fitted_on

        check_fitted_on(s.direction_name or "(unnamed)", s.fitted_on, model_of(handle) or "an unnamed model")
    from evprobe.hooks.intervention.session import site_map_of

    sites = site_map_of(handle)
    site = s.site_of()
    n_layers = len(handle.layers)
    if site.kind == "resid_post" and s.layer >= n_layers:
        raise ValueError(f"layer {s.layer} is out of range: this model has {n_layers} decoder layers; "
                         f"use 0 .. {n_layers - 1}")
    sites.check(site)  # one line naming the valid sites
    width = handle.d_model if site.kind == "resid_post" else sites.width(site)
    if width is not None and s.direction.shape != (width,):
        what = "residual width" if site.stream == "text" and site.kind != "attn_head" else f"{site} width"
        raise ValueError(f"direction has shape {s.direction.shape} but the model's {what} is "
                         f"{width}; use a direction of shape ({width},) fitted on this model")


# ---------------------------------------------------------------- the edit itself

@dataclass
class SteeringLog:
    """What the active edits did: one (steering index, layer, seq_len, edited) entry per forward each
    Steering saw, the index being its place in the list given to steer() (the intervention core's log)."""

    calls: list[tuple[int, int, int, bool]] = field(default_factory=list)


def steering_ops(specs: Sequence[Steering]) -> list[Any]:
    """One intervention-core Add per Steering, in order: alpha * direction (float64 product, cast
    to the model's dtype where it is added) at its site, positions and schedule."""
    from evprobe.hooks.intervention import Add

    return [Add(s.site_of(), s.alpha * s.direction, positions=s.positions, schedule=s.schedule) for s in specs]


@contextmanager
def steer(handle: Any, steering: Steering | Sequence[Steering], *,
          allow_other_model: bool = False) -> Iterator[SteeringLog]:
    """Steer every forward of `handle.model` inside the block (the intervention core: hooks.intervention).

    Covers `hooks.generate` (prompt pass and every decode step, or the prompt pass
    only), `hooks.next_token_logprobs`, plain forwards and nnsight traces alike.
    Several Steerings apply in list order. Yields a SteeringLog of the edits.
    The hooks are removed on exit, also when the block raises. A capture (or a Read) inside the
    block reads the steered values, the steered site included.

    handle: a Handle, or anything with `.layers` (the decoder ModuleList) and `.d_model`.
    allow_other_model: steer with a Steering.from_direction fitted on another model than
        handle.model_id (refused otherwise, one line, before any hook is added).
    """
    from evprobe.hooks.intervention import intervene

    specs = _as_list(steering)
    if not specs:
        raise ValueError("no Steering given; pass one Steering or a non-empty list")
    for s in specs:
        _check_against(handle, s, allow_other_model=allow_other_model)
    with intervene(handle, steering_ops(specs)) as run:
        yield SteeringLog(calls=run.log)


# ---------------------------------------------------------------- generation with scores, both paths

@dataclass(frozen=True, eq=False)
class SteeredRun:
    """A greedy generation with its per-step scores.

    token_ids: (batch, new) new token ids (rows that ended early are padded with pad_token_id).
    scores: (batch, new, vocab) processed scores of each step (generate's output_scores).
    prompt_len: padded prompt length.
    edited: sequence length of each forward the first Steering edited, in order
        (prompt pass first, then 1 per edited decode step).
    """

    token_ids: torch.Tensor
    scores: torch.Tensor
    prompt_len: int
    edited: tuple[int, ...]


def _generate_kwargs(handle: Any, max_new_tokens: int | None, min_new_tokens: int | None) -> GenerateOptions:
    if max_new_tokens is None:
        raise TypeError("steered generation needs max_new_tokens (e.g. max_new_tokens=16)")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    kw: GenerateOptions = dict(max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                               pad_token_id=handle.tokenizer.pad_token_id, temperature=None, top_p=None,
                               top_k=None, output_scores=True, return_dict_in_generate=True)
    if min_new_tokens is not None:
        kw["min_new_tokens"] = min_new_tokens
    return kw


def _run(out: Any, prompt_len: int, edited: Sequence[int]) -> SteeredRun:
    import torch

    return SteeredRun(token_ids=out.sequences[:, prompt_len:].detach().clone(),
                      scores=torch.stack([s.detach() for s in out.scores], dim=1),  # (batch, new, vocab)
                      prompt_len=prompt_len, edited=tuple(edited))


def _prepared(handle: Handle, prompts: Sequence[str], images: Sequence[Sequence[Image.Image]] | None,
              steering: Steering | Sequence[Steering] | None, max_new_tokens: int | None, min_new_tokens: int | None,
              allow_other_model: bool) -> tuple[list[Steering], GenerateOptions, Any, int]:
    """(steerings, generate kwargs, encoded inputs, prompt length) of a steered generation; every
    Steering is checked against the model before the inputs are built. The tests' nnsight twin
    (tests/hooks/nnsight_twins.py) shares it, so only the edit differs."""
    from evprobe.hooks.inputs import build_inputs

    images = image_rows(prompts, images)
    specs = _as_list(steering)
    for s in specs:
        _check_against(handle, s, allow_other_model=allow_other_model)
    kw = _generate_kwargs(handle, max_new_tokens, min_new_tokens)
    enc = build_inputs(handle, list(prompts), list(images), position_ids=False, for_generation=True)
    return specs, kw, enc, int(enc["input_ids"].shape[1])


def steered_generate(
    handle: Handle,
    prompts: Sequence[str],
    images: Sequence[Sequence[Image.Image]] | None = None,
    steering: Steering | Sequence[Steering] | None = None,
    max_new_tokens: int | None = None,
    *,
    min_new_tokens: int | None = None,
    allow_other_model: bool = False,
) -> SteeredRun:
    """Greedy generation of all rows in one batch under `steer` (plain hooks); None = unsteered."""
    import torch

    specs, kw, enc, prompt_len = _prepared(handle, prompts, images, steering, max_new_tokens, min_new_tokens,
                                           allow_other_model)
    if not specs:
        with torch.inference_mode():
            return _run(handle.model.generate(**enc, **kw), prompt_len, ())
    with steer(handle, specs, allow_other_model=allow_other_model) as log, torch.inference_mode():
        out = handle.model.generate(**enc, **kw)
    return _run(out, prompt_len, [n for i, _, n, e in log.calls if e and i == 0])


# ---------------------------------------------------------------- readouts

def option_logprobs(
    handle: Handle,
    prompts: Sequence[str],
    images: Sequence[Sequence[Image.Image]] | None = None,
    letters: Sequence[str] = LETTERS,
    steering: Steering | Sequence[Steering] | None = None,
    *,
    batch_size: int | None = None,
    allow_other_model: bool = False,
) -> np.ndarray:
    """Next-token log-probs of the option letters at the answer position, optionally steered.

    (rows, len(letters)) float64: a full-vocabulary log-softmax at each row's last
    position, restricted to the letters' first tokens (hooks.next_token_logprobs).
    allow_other_model: as in steer().
    """
    images = image_rows(prompts, images)
    from evprobe.hooks.generation import next_token_logprobs

    specs = _as_list(steering)
    if not specs:
        return next_token_logprobs(handle, prompts, images, list(letters), batch_size=batch_size)
    with steer(handle, specs, allow_other_model=allow_other_model):
        return next_token_logprobs(handle, prompts, images, list(letters), batch_size=batch_size)


__all__ = [
    "LETTERS",
    "SCHEDULES",
    "SteeredRun",
    "Steering",
    "SteeringLog",
    "option_logprobs",
    "steer",
    "steered_generate",
]
