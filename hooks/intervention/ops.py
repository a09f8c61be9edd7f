"""The operations of the intervention core: what is done to a site's value in a forward pass.

    Read(site, positions, reduce)      keep the value (or reduce(value)) of each forward it runs on
    Add(site, delta, positions)        value + delta (raw units; a (width,) vector or one per row)
    Ablate(site, direction, positions) value - (value . v) v, v the unit direction
    Replace(site, value, positions)    the value at the positions set to `value`
    Patch(site, source, positions)     the value at the positions set to another run's value there

A value is (batch, seq, width) on the text stream (a head's slice is head_dim wide) and whatever
the module returns on the vision stream. `positions` picks prompt positions (the vocabulary of
hooks.positions): "all", "last" (index -1, every row's last real token under left padding),
"image" (each row's image-feature tokens, found in the forward's input_ids), a RowPositions
(hooks.positions.resolve_positions: "text", a Marker, a Token or a Frame resolved per row of one
encoded batch), a tuple of indices or a slice; a decode step's one new position is edited by a
schedule "every-step" op whatever `positions` says, and left alone by a "prompt-only" one, except
at "image" and a RowPositions (per-row prompt tokens: a generated token is never one of them),
which leave every decode step alone. A Read at those returns one (n_tokens, width) tensor per
row. A forward of more than one position is the prompt pass (a full forward, or generate's first); cached greedy decoding feeds one token per step. Sites on
the vision stream run on the prompt pass only and take positions "all". `rows` (Replace, Patch,
Add, Ablate) restricts an edit to those batch rows.

The arithmetic is the steering's as it always was (out of place: `value + delta`, or a clone
edited at the positions), so results are bit-identical to the forward hooks they replace.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from evprobe.hooks.sites.vocabulary import Site

if TYPE_CHECKING:
    import torch

@dataclass(frozen=True)
class RowPositions:
    """A position resolved on one encoded batch: per batch row, its padded-row indices (what an
    edit at "text", a Marker, a Token or a Frame needs, since the forward alone cannot tell them).
    Valid for forwards over that batch (same rows, same padded length)."""

    rows: tuple[tuple[int, ...], ...]
    seq_len: int
    label: str

    def __post_init__(self) -> None:
        rows = tuple(tuple(int(i) for i in row) for row in self.rows)
        bad = next((r for r, row in enumerate(rows) if not row or not all(0 <= i < self.seq_len for i in row)), None)
        if bad is not None:
            raise ValueError(f"position {self.label!r}: row {bad} needs at least one index in 0..{self.seq_len - 1}, "
                             f"got {list(rows[bad])}")
        object.__setattr__(self, "rows", rows)

    def mask(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """(rows, seq_len) bool, True at each row's indices."""
        import torch

        m = torch.zeros((len(self.rows), self.seq_len), dtype=torch.bool)
        for r, idx in enumerate(self.rows):
            m[r, list(idx)] = True
        return m.to(device)


def image_mask(input_ids: torch.Tensor, ids: frozenset[int]) -> torch.Tensor:
    """(batch, seq) bool: where the row holds one of the image-feature token `ids` (the position
    "image"; the ids are hooks.positions.image_ids(handle), which a Handle gives as `image_ids()`)."""
    import torch

    return torch.isin(input_ids, torch.tensor(sorted(ids), dtype=input_ids.dtype, device=input_ids.device))


Positions = Literal["all", "last", "image"] | tuple[int, ...] | slice | RowPositions
Schedule = Literal["every-step", "prompt-only"]
SCHEDULES: tuple[str, ...] = ("every-step", "prompt-only")


FORWARD_NAMES: tuple[str, ...] = ("all", "last", "image")  # resolved by the forward itself
_KINDS = "'all', 'last', 'image', resolve_positions(...), a slice or a list of ints"


def check_positions(positions: Any) -> Positions:
    """"all", "last", "image", a RowPositions, a slice or a non-empty tuple of ints (one ValueError
    line otherwise; a name that needs the prompt, e.g. "text", says to resolve it)."""
    if isinstance(positions, str) and positions in FORWARD_NAMES:
        return positions
    if isinstance(positions, (slice, RowPositions)):
        return positions
    try:
        if isinstance(positions, str):
            raise TypeError
        idx = tuple(int(p) for p in positions)
    except (TypeError, ValueError):  # a name or a position object of hooks.positions, or nothing known
        raise ValueError(f"position {positions!r} is not one a forward finds by itself ({_KINDS}): a position of "
                         "hooks.positions that needs each row's prompt text or image count (\"text\", a Marker, a "
                         "Token, a Frame) is passed as positions=resolve_positions(handle, enc, prompts, images, "
                         f"{positions!r})") from None
    if not idx:
        raise ValueError("positions is an empty list; use 'all', 'last' or at least one index")
    return idx


def _check_schedule(schedule: str) -> None:
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")


def per_row(positions: Positions) -> bool:
    """Whether the positions differ by row (found per forward as a (batch, seq) mask)."""
    return positions == "image" or isinstance(positions, RowPositions)


def _index(positions: Positions) -> Any:
    """The sequence-axis index of `positions` (not "all")."""
    if positions == "last":
        return -1
    return list(positions) if isinstance(positions, tuple) else positions


def _rows(rows: Any) -> tuple[int, ...] | None:
    if rows is None:
        return None
    out = tuple(int(r) for r in ([rows] if isinstance(rows, (int, np.integer)) else rows))
    if not out:
        raise ValueError("rows is empty; give at least one batch row, or None for all rows")
    return out


class Op:
    """Base of the operations. Each declares its site first and its payload second
    (`Add("resid_post.L3", delta)`), then keyword settings: positions, schedule, rows."""

    site: Site
    positions: Positions
    schedule: Schedule
    rows: tuple[int, ...] | None

    def _check(self) -> None:
        object.__setattr__(self, "site", Site.parse(self.site))
        object.__setattr__(self, "positions", check_positions(self.positions))
        object.__setattr__(self, "rows", _rows(self.rows))
        _check_schedule(self.schedule)
        if self.site.stream == "vision" and self.positions != "all":
            raise ValueError(f"site {self.site} is on the vision stream, whose token axis is the tower's own: "
                             "use positions='all'")

    def runs(self, prompt: bool) -> bool:
        return prompt or self.schedule == "every-step"


@dataclass(frozen=True, eq=False)
class Read(Op):
    """Keep `reduce(value)` (or a detached copy of the value at `positions`) of every forward it
    runs on: the prompt pass, and each decode step too under schedule "every-step". A Read placed
    after an edit of the same site sees the edited value; one placed before it, the unedited."""

    site: Site | str
    positions: Positions = "all"
    reduce: Callable[[Any], Any] | None = field(default=None, repr=False)
    schedule: Schedule = "prompt-only"
    rows: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        self._check()

    def take(self, value: torch.Tensor, prompt: bool, mask: torch.Tensor | None = None) -> Any:
        if mask is not None:  # per-row positions ("image", a RowPositions): one (n_tokens, width) per row
            rows = range(value.shape[0]) if self.rows is None else self.rows
            got = [value[b][mask[b]].detach().clone() for b in rows]
            return self.reduce(got) if self.reduce is not None else got
        if self.rows is not None:
            value = value[list(self.rows)]
        if prompt and self.positions != "all":
            value = value[:, _index(self.positions)]  # "last": (batch, width); indices: (batch, n, width)
        if self.reduce is not None:
            return self.reduce(value)
        return value.detach().clone()


class Edit(Op):
    """An operation that changes the value; `apply` returns the new value (never edits in place)."""

    def apply(self, value: torch.Tensor, prompt: bool, cache: dict, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The new value; mask: (batch, seq) bool where the positions differ by row (the session
        finds it per forward), else None."""
        raise NotImplementedError


def _masked(value: torch.Tensor, mask: torch.Tensor, rows: tuple[int, ...] | None, new: torch.Tensor) -> torch.Tensor:
    """`new` where the mask (restricted to `rows`) is set, `value` elsewhere."""
    import torch

    if rows is not None:
        keep = torch.zeros_like(mask)
        keep[list(rows)] = mask[list(rows)]
        mask = keep
    return torch.where(mask.unsqueeze(-1), new, value)


def _edited_at(value: torch.Tensor, positions: Positions, rows: tuple[int, ...] | None, prompt: bool,
               edit: Callable[[torch.Tensor], torch.Tensor], mask: torch.Tensor | None = None) -> torch.Tensor:
    """value with `edit` applied to the selected rows and prompt positions (a clone), or to the whole
    value when nothing is selected (every position, every row, or a decode step)."""
    if mask is not None:
        return _masked(value, mask, rows, edit(value))
    whole = positions == "all" or not prompt
    if whole and rows is None:
        return edit(value)
    out = value.clone()
    if rows is None:
        index = _index(positions)
        out[:, index] = edit(out[:, index])
        return out
    r = list(rows)
    if whole:
        out[r] = edit(out[r])
    else:
        sub = out[r]
        index = _index(positions)
        sub[:, index] = edit(sub[:, index])
        out[r] = sub
    return out


@dataclass(frozen=True, eq=False)
class Add(Edit):
    """value + delta: delta raw (alpha already applied), (width,) for every row or (rows, width) one
    per batch row (every forward must then have that many rows)."""

    site: Site | str
    delta: Any = field(repr=False)
    positions: Positions = "all"
    schedule: Schedule = "every-step"
    rows: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        self._check()
        d = _as_float64(self.delta, "delta")
        if d.ndim not in (1, 2):
            raise ValueError(f"delta must be (width,) or (rows, width), got shape {d.shape}")
        object.__setattr__(self, "delta", d)

    def apply(self, value: torch.Tensor, prompt: bool, cache: dict, mask: torch.Tensor | None = None) -> torch.Tensor:
        import torch

        key = (value.dtype, value.device)
        if key not in cache:
            d = torch.from_numpy(self.delta).to(device=value.device, dtype=value.dtype)
            cache[key] = d if d.ndim == 1 else d[:, None, :]  # (width,) or (rows, 1, width)
        delta = cache[key]
        if delta.ndim == 3 and self.rows is None and value.shape[0] != delta.shape[0]:
            raise RuntimeError(f"{self.site}: {delta.shape[0]} row vectors but the forward has {value.shape[0]} rows; "
                               "run the readout with batch_size equal to the number of rows")
        if mask is not None:
            return _masked(value, mask, self.rows, value + delta)
        whole = self.positions == "all" or not prompt
        if whole and self.rows is None:
            return value + delta
        if self.rows is None:  # the steering's own spelling, bit for bit
            out = value.clone()
            if self.positions == "last":
                if delta.ndim == 3:
                    out[:, -1:] += delta
                else:
                    out[:, -1] += delta
            else:
                out[:, _index(self.positions)] += delta
            return out
        return _edited_at(value, self.positions, self.rows, prompt, lambda v: v + delta)


@dataclass(frozen=True, eq=False)
class Ablate(Edit):
    """value - (value . v) v at the positions, v the unit direction (normalised here)."""

    site: Site | str
    direction: Any = field(repr=False)
    positions: Positions = "all"
    schedule: Schedule = "every-step"
    rows: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        self._check()
        v = _as_float64(self.direction, "direction")
        if v.ndim != 1:
            raise ValueError(f"direction must be one vector (width,), got shape {v.shape}")
        norm = float(np.linalg.norm(v))
        if norm == 0.0:
            raise ValueError("direction is the zero vector and has no direction")
        object.__setattr__(self, "direction", v if norm == 1.0 else v / norm)  # a unit vector stays bit for bit

    def apply(self, value: torch.Tensor, prompt: bool, cache: dict, mask: torch.Tensor | None = None) -> torch.Tensor:
        import torch

        key = (value.dtype, value.device)
        if key not in cache:
            cache[key] = torch.tensor(self.direction, device=value.device, dtype=value.dtype)  # (width,)
        v = cache[key]

        def project_out(x: torch.Tensor) -> torch.Tensor:
            coeff = x @ v  # (..., seq)
            return x - coeff.unsqueeze(-1) * v

        return _edited_at(value, self.positions, self.rows, prompt, project_out, mask)


@dataclass(frozen=True, eq=False)
class Replace(Edit):
    """The value at the positions (and rows) set to `value`: (width,) everywhere, or an array that
    broadcasts to the selected block (e.g. (n_positions, width); at "image" or a RowPositions,
    whose blocks differ by row, (width,) or the whole (batch, seq, width))."""

    site: Site | str
    value: Any = field(repr=False)
    positions: Positions = "all"
    schedule: Schedule = "prompt-only"
    rows: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        self._check()

    def apply(self, value: torch.Tensor, prompt: bool, cache: dict, mask: torch.Tensor | None = None) -> torch.Tensor:
        key = (value.dtype, value.device)
        if key not in cache:
            cache[key] = _as_tensor(self.value, value)
        new = cache[key]
        return _edited_at(value, self.positions, self.rows, prompt, lambda v: new.expand_as(v).clone(), mask)


@dataclass(frozen=True, eq=False)
class Patch(Edit):
    """The value at the positions (and rows) set to another run's value there: `source` is that
    run's whole value of the same site, (seq, width) or (1, seq, width) on the text stream (a Read
    without positions), over the same token positions (the members of an image pair); the
    module's whole output on the vision stream (images of the same size). Prompt pass only."""

    site: Site | str
    source: Any = field(repr=False)
    positions: Positions = "all"
    rows: tuple[int, ...] | None = None
    schedule: Schedule = "prompt-only"

    def __post_init__(self) -> None:
        self._check()
        if self.schedule != "prompt-only":
            raise ValueError("Patch edits the prompt pass only (a decode step has no source positions)")

    def apply(self, value: torch.Tensor, prompt: bool, cache: dict, mask: torch.Tensor | None = None) -> torch.Tensor:
        key = (value.dtype, value.device)
        if key not in cache:
            src = _as_tensor(self.source, value)
            if self.site.stream == "text":
                src = src[0] if src.ndim == 3 else src  # (seq, width)
                if src.shape[0] != value.shape[1]:
                    raise ValueError(f"{self.site}: the source has {src.shape[0]} positions and the target "
                                     f"{value.shape[1]}; patch only runs whose token positions align")
            elif tuple(src.shape) != tuple(value.shape):
                raise ValueError(f"{self.site}: the source's value has shape {tuple(src.shape)} and the target's "
                                 f"{tuple(value.shape)}; patch only runs whose images have the same size")
            cache[key] = src
        src = cache[key]
        if self.site.stream == "vision":
            return src.clone()
        if mask is not None:
            return _masked(value, mask, self.rows, src.unsqueeze(0))
        out = value.clone()
        rows = range(value.shape[0]) if self.rows is None else self.rows
        index = slice(None) if self.positions == "all" else _index(self.positions)
        for b in rows:
            out[b, index, :] = src[index, :]
        return out


def _as_float64(x: Any, what: str) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().to("cpu").double().numpy()
    a = np.array(x, dtype=np.float64)
    if not np.isfinite(a).all():
        raise ValueError(f"{what} contains NaN or inf")
    return a


def _as_tensor(x: Any, like: torch.Tensor) -> torch.Tensor:
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().to(device=like.device, dtype=like.dtype)
    return torch.as_tensor(np.asarray(x), device=like.device).to(like.dtype)
