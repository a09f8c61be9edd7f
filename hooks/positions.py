"""Where capture reads a row: named spans, token indices of the user's choosing, marker spans.

A position turns each row into a non-empty tuple of padded-row indices (they index a layer
output's sequence axis directly); capture averages the layer's output over them (one index:
that token's vector). Kinds:

    "last", "image_mean", "text_mean"   the named spans of hooks.spans (POSITIONS in hooks.capture)
    Token(i) or a bare int i            the i-th REAL token of the row: padding is not counted, so
                                        0 is the row's first real token (BOS where the template has
                                        one), -1 its last (== "last"), -2 the one before; the same
                                        token whatever the batch's padding. Out of range is an error
                                        naming the row (rows differ in length).
    Marker(text, reduce)                the tokens overlapping the first occurrence of `text` in the
                                        row's prompt text (hooks.spans rules: tokens straddling the
                                        edges count; special, template and image tokens never do),
                                        reduced by "mean" over them, or the "first" / "last" one.
                                        text=None uses each row's own text marker (capture's
                                        `text_markers`), or its whole prompt text when it has none,
                                        so Marker(None, "mean") == "text_mean".
    Frame(k)                            the image-feature tokens of the row's k-th image (0 is the
                                        first; negative from the last), their mean: a clip fed as
                                        frames has one image per frame, in order, so Frame(k) is
                                        frame k + 1. The row's feature tokens (`image_mean`'s) are
                                        split evenly among its images, so every image of the row
                                        must have one size (a clip's frames do; `image_sizes` lets
                                        row_indices refuse a row that mixes sizes).

Every token of a row (no reduction) is `hooks.token_capture.capture_tokens`, not a position here: its
result is ragged (one array per row), not a (rows, positions, d_model) block.

Choices where nothing forces one: token indices count real tokens (not padded slots), because a
padded-slot index would move with the batch's longest row; a marker absent from a row's prompt is
an error (not a silently skipped row), as in hooks.spans.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from evprobe.hooks.spans import Spans, image_token_ids, token_spans

if TYPE_CHECKING:
    from transformers import BatchFeature

    from evprobe.hooks.handle import Handle

NAMED: tuple[str, ...] = ("last", "image_mean", "text_mean")
REDUCTIONS: tuple[str, ...] = ("mean", "first", "last")


@dataclass(frozen=True)
class Token:
    """The `index`-th real token of each row (negative counts from the row's end)."""

    index: int

    def __post_init__(self) -> None:
        if isinstance(self.index, bool) or not isinstance(self.index, (int, np.integer)):
            raise TypeError(f"Token index must be an integer, got {self.index!r}")


@dataclass(frozen=True)
class Marker:
    """The tokens of substring `text` of each row's prompt (None: the row's own text marker),
    reduced by `reduce`: "mean" over them, or the "first" / "last" token."""

    text: str | None
    reduce: Literal["mean", "first", "last"] = "mean"

    def __post_init__(self) -> None:
        if self.reduce not in REDUCTIONS:
            raise ValueError(f"Marker reduce must be one of {', '.join(REDUCTIONS)}, got {self.reduce!r}")
        if self.text is not None and (not isinstance(self.text, str) or not self.text.strip()):
            raise ValueError(f"Marker text must be a non-empty string or None, got {self.text!r}")


@dataclass(frozen=True)
class Frame:
    """The image-feature tokens of each row's `index`-th image (negative from the last), averaged."""

    index: int

    def __post_init__(self) -> None:
        if isinstance(self.index, bool) or not isinstance(self.index, (int, np.integer)):
            raise TypeError(f"Frame index must be an integer, got {self.index!r}")


Position = str | Token | Marker | Frame


def check_positions(positions: Sequence[str | int | Token | Marker | Frame]) -> list[Position]:
    """Validated positions, bare ints made `Token`s: at least one, each known, none repeated."""
    if isinstance(positions, (str, int, Token, Marker, Frame)):
        raise TypeError("positions must be a list (e.g. ['last'] or [-1, Marker('red')]), not a single value")
    out: list[Position] = []
    for p in positions:
        if isinstance(p, (int, np.integer)) and not isinstance(p, bool):
            p = Token(int(p))
        if isinstance(p, str):
            if p not in NAMED:
                raise ValueError(f"unknown position {p!r}; choose from {', '.join(NAMED)}, or give a token index "
                                 "(int / Token) or a Marker")
        elif not isinstance(p, (Token, Marker, Frame)):
            raise TypeError(f"position {p!r} is not a name, an int, a Token, a Marker or a Frame")
        out.append(p)
    if not out:
        raise ValueError(f"no positions given; choose from {', '.join(NAMED)}, a token index or a Marker")
    if len(set(out)) != len(out):
        raise ValueError(f"positions {out} repeat one; give each once")
    return out


def parse_position(spec: str) -> Position:
    """A position written as text (the CLI capture job's `--positions`): a NAMED span, `token:I`
    (Token(I); negative from the row's end), `frame:K` (Frame(K): the row's K-th image's tokens) or
    `marker:TEXT` / `marker:TEXT:first|last|mean`
    (Marker(TEXT, reduce); the default reduction is mean). The text is the folder's position name,
    so it must not hold a comma (the flag's separator)."""
    if not isinstance(spec, str):
        raise TypeError(f"a position spec is a string, got {spec!r}")
    kind, sep, rest = spec.partition(":")
    if not sep:
        return check_positions([spec])[0]
    if kind == "token":
        try:
            return Token(int(rest))
        except ValueError:
            raise ValueError(f"position {spec!r}: token:I needs an integer index, e.g. token:-3") from None
    if kind == "frame":
        try:
            return Frame(int(rest))
        except ValueError:
            raise ValueError(f"position {spec!r}: frame:K needs an integer image index, e.g. frame:0 or frame:-1") from None
    if kind == "marker":
        text, reduce = rest, "mean"
        head, sep2, tail = rest.rpartition(":")
        if sep2 and tail in REDUCTIONS:
            text, reduce = head, tail
        if not text.strip():
            raise ValueError(f"position {spec!r}: marker:TEXT needs the text to find, e.g. marker:Question:last")
        return Marker(text, reduce)  # type: ignore[arg-type]
    raise ValueError(f"unknown position {spec!r}; choose from {', '.join(NAMED)}, token:I, frame:K or "
                     "marker:TEXT[:first|last|mean]")


def position_rule(spec: str) -> str:
    """What a `parse_position` spec reads, in words (meta.json's position_rules)."""
    p = parse_position(spec)
    if isinstance(p, Token):
        return (f"the real token at index {p.index} of the row (padding not counted; negative from the end)")
    if isinstance(p, Frame):
        return (f"the mean over the image-feature tokens of the row's image {p.index} (0 first, negative from the "
                "last; a clip's frames are its images)")
    if isinstance(p, Marker):
        return (f"the {p.reduce if p.reduce != 'mean' else 'mean over the'} token(s) overlapping the first "
                f"occurrence of {p.text!r} in the prompt text (an item without it is an error)")
    return ""


def position_label(p: Position) -> str:
    """A short stable name: 'last', 'token[-2]', 'marker[first]:Question:' (for tables and metadata)."""
    if isinstance(p, str):
        return p
    if isinstance(p, Token):
        return f"token[{p.index}]"
    if isinstance(p, Frame):
        return f"frame[{p.index}]"
    return f"marker[{p.reduce}]:{'<row text marker>' if p.text is None else p.text}"


def row_indices(
    handle: Handle,
    enc: BatchFeature,
    prompts: Sequence[str],
    n_images: Sequence[int],
    spans: list[Spans],
    positions: list[Position],
    *,
    first_row: int = 0,
    image_sizes: Sequence[Sequence[tuple[int, int]]] | None = None,
) -> list[list[tuple[int, ...]]]:
    """Per position, per row: the padded-row indices capture reduces over (never empty).

    image_sizes: per row, each image's (width, height); given, a Frame position refuses a row whose
        images differ in size (their tokens could not be split evenly).
    Raises ValueError naming the row and the position when a row has no such token(s).
    """
    mask = enc["attention_mask"].cpu()
    real = [[i for i, m in enumerate(mask[r].tolist()) if m] for r in range(len(spans))]  # padded index of each
    out = []
    for p in positions:
        rows = []
        for r, s in enumerate(spans):
            try:
                if isinstance(p, Frame) and image_sizes is not None and len(set(image_sizes[r])) > 1:
                    raise ValueError(f"its images differ in size ({sorted(set(image_sizes[r]))}), so their tokens "
                                     "cannot be told apart by an even split")
                got = _indices(handle, enc, prompts, n_images, r, s, real[r], p)
            except ValueError as err:
                raise ValueError(f"row {first_row + r}: position {position_label(p)!r}: {err}") from None
            if not got:
                raise ValueError(f"row {first_row + r}: position {position_label(p)!r} has no tokens (e.g. a row "
                                 "without images asked for image_mean)")
            rows.append(got)
        out.append(rows)
    return out


def _indices(handle, enc, prompts, n_images, r: int, s: Spans, real: list[int], p: Position) -> tuple[int, ...]:
    if p == "last":
        return (s.last,)
    if p == "image_mean":
        return s.image
    if p == "text_mean":
        return s.text
    if isinstance(p, Frame):
        video = image_token_ids(handle).video
        share = int(getattr(getattr(handle.processor, "video_processor", None), "temporal_patch_size", 1) or 1)
        if share > 1 and video & set(enc["input_ids"][r].tolist()):
            raise ValueError(f"its video's frames share tokens ({share} frames a temporal patch), so no token is one "
                             "frame's; read the frames as images, or use image_mean")
        return frame_tokens(s.image, n_images[r], p.index)
    if isinstance(p, Token):
        if not -len(real) <= p.index < len(real):
            raise ValueError(f"token index {p.index} is out of range: the row has {len(real)} tokens")
        return (real[p.index],)
    span = s.text if p.text is None else token_spans(
        handle, enc["input_ids"][r].cpu(), enc["attention_mask"][r].cpu(), prompts[r], p.text,
        n_images=n_images[r]).text
    if p.reduce == "first":
        return span[:1]
    if p.reduce == "last":
        return span[-1:]
    return span


def frame_tokens(image: tuple[int, ...], n_images: int, index: int) -> tuple[int, ...]:
    """The `index`-th of `n_images` equal consecutive groups of a row's image-feature tokens."""
    if not -n_images <= index < n_images:
        raise ValueError(f"image index {index} is out of range: the row has {n_images} images")
    if len(image) % n_images:
        raise ValueError(f"its {len(image)} image tokens do not split evenly among its {n_images} images")
    per = len(image) // n_images
    k = index % n_images
    return image[k * per:(k + 1) * per]
