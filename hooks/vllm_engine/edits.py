"""One request's steering edit as it travels to a vLLM worker, and which of its tokens it edits.

An `EngineEdit` is `hooks.steering.Steering` at the residual stream (`resid_post.L<layer>`) with the
delta already scaled (alpha * unit direction, float64). It travels inside the request's
`SamplingParams(extra_args={EXTRA_KEY: [edit.to_json(), ...]})` as plain JSON-able data (the
engine's msgpack carries lists of floats exactly; no pickling) and the worker reads it back with
`EngineEdit.from_json`.

Which tokens, as hooks.steering / hooks.intervention.ops do on hf (one request = one unpadded hf row):
- a prompt token (position < num_prompt_tokens) at `positions`: "all" every one, "last" the prompt's
  last (position num_prompt_tokens - 1), a tuple of indices those prompt positions (negative = from
  the prompt's end, as hf's negative indices under left padding; non-negative ones count from the
  prompt's first token, which on hf equals the padded index only for an unpadded row);
- a generated token (position >= num_prompt_tokens: each decode step's one new token, or a generated
  token recomputed after preemption) under schedule "every-step", whatever `positions` says (hf
  edits a decode step's one position for "all", "last" and indices alike); none under "prompt-only".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

EXTRA_KEY = "evprobe_edits"  # the SamplingParams.extra_args key the worker reads
SCHEDULES: tuple[str, ...] = ("every-step", "prompt-only")  # hooks.intervention.ops.SCHEDULES


@dataclass(frozen=True, eq=False)
class EngineEdit:
    """Add `delta` to the residual stream after decoder layer `layer` of one request.

    layer: decoder layer index (checked against the engine's model before any request).
    delta: (d_model,) float64, raw: alpha * unit direction (hooks.steering's Steering.delta before
        its cast to the model's dtype, which the worker does).
    positions: "all", "last", or a non-empty tuple of prompt positions (negative from the end).
    schedule: "every-step" (prompt and every generated token) or "prompt-only".
    """

    layer: int
    delta: np.ndarray = field(repr=False)
    positions: str | tuple[int, ...] = "all"
    schedule: str = "every-step"

    def __post_init__(self) -> None:
        if isinstance(self.layer, bool) or not isinstance(self.layer, (int, np.integer)) or self.layer < 0:
            raise ValueError(f"EngineEdit.layer must be a decoder layer index >= 0, got {self.layer!r}")
        object.__setattr__(self, "layer", int(self.layer))
        d = np.array(self.delta.detach().cpu().double().numpy() if hasattr(self.delta, "detach") else self.delta,
                     dtype=np.float64)
        if d.ndim != 1 or d.shape[0] == 0 or not np.isfinite(d).all():
            raise ValueError(f"EngineEdit.delta must be one finite (d_model,) vector, got shape {d.shape}")
        d.setflags(write=False)
        object.__setattr__(self, "delta", d)
        object.__setattr__(self, "positions", _positions(self.positions))
        if self.schedule not in SCHEDULES:
            raise ValueError(f"EngineEdit.schedule must be one of {SCHEDULES}, got {self.schedule!r}")

    @classmethod
    def from_steering(cls, steering: Any) -> EngineEdit:
        """The same edit as a hooks.steering.Steering at the residual stream (alpha * direction)."""
        site = steering.site_of()
        if site.stream == "vision":
            raise ValueError(f"{site} is not steered through vLLM: its encoder cache keys a tower's output by the image "
                             "(hash or multi_modal_uuids), not by an edit, so a steered output could serve another "
                             "request or call with the same image; steer vision sites with backend 'hf'")
        if site.kind != "resid_post":
            raise ValueError(f"vLLM steering edits the residual stream after a decoder layer; {site} is another site")
        if steering.positions == "image" or not isinstance(steering.positions, (str, tuple)):
            raise ValueError(f"positions {steering.positions!r} differ by request: resolve them on its prompt ids first "
                             "(hooks.vllm_engine.vision.image_edit for 'image')")
        return cls(steering.layer, steering.alpha * steering.direction, steering.positions, steering.schedule)

    def to_json(self) -> dict[str, Any]:
        positions = self.positions if isinstance(self.positions, str) else list(self.positions)
        return {"layer": self.layer, "delta": self.delta.tolist(), "positions": positions, "schedule": self.schedule}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EngineEdit:
        positions = data["positions"]
        return cls(int(data["layer"]), np.asarray(data["delta"], dtype=np.float64),
                   positions if isinstance(positions, str) else tuple(positions), str(data["schedule"]))

    def check_prompt(self, num_prompt_tokens: int) -> None:
        """Explicit indices inside a prompt of that length (hf raises IndexError beyond it)."""
        if isinstance(self.positions, tuple):
            bad = [p for p in self.positions if not -num_prompt_tokens <= p < num_prompt_tokens]
            if bad:
                raise ValueError(f"EngineEdit positions {bad} are outside a {num_prompt_tokens}-token prompt; use "
                                 f"indices in {-num_prompt_tokens}..{num_prompt_tokens - 1}")

    def edited(self, position: np.ndarray, num_prompt_tokens: int) -> np.ndarray:
        """(n,) bool: which of one request's rows (their absolute positions, (n,) int) this edit changes."""
        prompt = position < num_prompt_tokens
        generated = ~prompt if self.schedule == "every-step" else np.zeros_like(prompt)
        if self.positions == "all":
            return prompt | generated
        if self.positions == "last":
            chosen = position == num_prompt_tokens - 1
        else:
            chosen = np.isin(position, [p % num_prompt_tokens for p in self.positions])
        return (prompt & chosen) | generated


def _positions(positions: Any) -> str | tuple[int, ...]:
    if positions in ("all", "last"):
        return str(positions)
    if isinstance(positions, str) or not isinstance(positions, Sequence) or not positions:
        raise ValueError(f"EngineEdit.positions must be 'all', 'last' or a non-empty tuple of prompt indices, got "
                         f"{positions!r} (resolve a named position to indices first)")
    if any(isinstance(p, bool) or not isinstance(p, (int, np.integer)) for p in positions):
        raise ValueError(f"EngineEdit.positions must be integers, got {positions!r}")
    return tuple(int(p) for p in positions)


def as_edit_lists(edits: Sequence[EngineEdit | Sequence[EngineEdit] | None]) -> list[list[EngineEdit]]:
    """Each request's edits as a list (None: none; one EngineEdit: a list of one)."""
    out = []
    for r, e in enumerate(edits):
        got = [] if e is None else [e] if isinstance(e, EngineEdit) else list(e)
        if not all(isinstance(x, EngineEdit) for x in got):
            raise TypeError(f"edits[{r}] must be an EngineEdit, a list of them or None, got {type(e).__name__}")
        out.append(got)
    return out


__all__ = ["EXTRA_KEY", "SCHEDULES", "EngineEdit", "as_edit_lists"]
