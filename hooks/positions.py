"""The one position vocabulary: where capture reads a row, and where steering, the intervention
core and patching edit it. Every consumer resolves positions here, so "image" is the same tokens
for all of them (a test checks capture, steering and patching agree).

A position turns each row into a non-empty tuple of padded-row indices (they index a layer
output's sequence axis directly). Capture averages the layer's output over them (one index: that
token's vector); an edit (hooks.intervention's Add / Ablate / Replace / Patch, a Steering, a
patch_sites position set) changes every one of them. Kinds:

    "last"                              the row's last token (hooks.spans Spans.last)
    "all"                               every real token of the row (padding excluded)
    "image"                             every image-feature token of the row: the ids the model
                                        scatters vision features into (hooks.spans: the config's
                                        image / video token id), all images and a video's frames;
                                        markers around them excluded. A model without image tokens,
                                        or a row without images, is refused, naming the position.
    "text"                              the row's text segment (Spans.text: the tokens of its text
                                        marker, or of its whole prompt text when it has none)
    "image_mean", "text_mean"           capture's names for the means over "image" / "text"
                                        (REDUCED, kept for capture; capture reduces every position
                                        by its mean, so "image" there equals "image_mean")
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
                                        first; negative from the last): a clip fed as frames has
                                        one image per frame, in order, so Frame(k) is frame k + 1.
                                        The row's "image" tokens are split evenly among its images,
                                        so every image of the row must have one size (a clip's
                                        frames do; `image_sizes` lets row_indices refuse a row that
                                        mixes sizes).

The intervention core resolves "all", "last" and "image" inside each forward (image tokens from the
forward's input_ids: `image_mask`); the others need the row's prompt text or image count, so an
edit at them takes `resolve_positions(handle, enc, prompts, images, position)` (a RowPositions:
per batch row, its indices in that encoded batch).

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
from evprobe.hooks.intervention.ops import RowPositions
from evprobe.hooks.spans import Spans, batch_spans, image_token_ids, token_spans

if TYPE_CHECKING:
    from evprobe.hooks.handle import Handle
    from transformers import BatchFeature

# Capture's named reductions (capture.POSITIONS): one vector per row each.
REDUCED: tuple[str, ...] = ("last", "image_mean", "text_mean")
# Token sets: edited at each of their tokens; capture reads their mean.
SETS: tuple[str, ...] = ("all", "image", "text")
NAMED: tuple[str, ...] = ("last", "image_mean", "text_mean", "all", "image", "text")
# What each name reads, in words (meta.json's position_rules).
RULES: dict[str, str] = {
    "last": "the last real prompt token (end of the assistant generation prompt; index -1 under left padding)",
    "all": "every real token of the row (padding excluded); capture reads their mean",
    "image": "the image-feature placeholder tokens of all images (the config's image / video token id; "
    "start/end/break/tile marker tokens excluded); capture reads their mean",
    "text": "the tokens overlapping the text marker inside the prompt text (or every token of the prompt text "
    "when there is no marker); capture reads their mean",
    "image_mean": "mean over the image-feature placeholder tokens of all images (the config's image token id; "
    "start/end/break/tile marker tokens excluded)",
    "text_mean": "mean over the tokens overlapping the text marker inside the prompt text (or over every token of "
    "the prompt text when there is no marker); role headers, template, image and special tokens excluded",
}
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
    if isinstance(p, str):
        return RULES[p]
    if isinstance(p, Token):
        return (f"the real token at index {p.index} of the row (padding not counted; negative from the end)")
    if isinstance(p, Frame):
        return (f"the mean over the image-feature tokens of the row's image {p.index} (0 first, negative from the "
                "last; a clip's frames are its images)")
    if isinstance(p, Marker):
        return (f"the {p.reduce if p.reduce != 'mean' else 'mean over the'} token(s) overlapping the first "
                f"occurrence of {p.text!r} in the prompt text (an item without it is an error)")
    raise AssertionError(p)  # parse_position returns only the kinds above


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
    for p in positions:
        if uses_images(p):
            image_ids(handle, p)  # a text-only model: one line naming the position, not "no tokens" per row
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
                                 "without images asked for image or image_mean); give the row images or drop it")
            rows.append(got)
        out.append(rows)
    return out


def span_indices(s: Spans, name: str) -> tuple[int, ...]:
    """The padded-row indices of a name read off a row's Spans: last, image(_mean), text(_mean)."""
    if name == "last":
        return (s.last,)
    if name in ("image", "image_mean"):
        return s.image
    if name in ("text", "text_mean"):
        return s.text
    raise ValueError(f"position {name!r} is not one of a row's spans (last, image, text)")


def _indices(handle, enc, prompts, n_images, r: int, s: Spans, real: list[int], p: Position) -> tuple[int, ...]:
    if p == "all":
        return tuple(real)
    if isinstance(p, str):
        return span_indices(s, p)
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


IMAGE_POSITIONS = ("image", "image_mean")


def uses_images(p: Position) -> bool:
    """Whether `p` reads image tokens (a model without them cannot have it)."""
    return isinstance(p, Frame) or p in IMAGE_POSITIONS


def image_ids(handle: Handle, position: Position = "image") -> frozenset[int]:
    """The token ids of "image" (the image-feature and video-feature placeholders, hooks.spans);
    a model without any (a text-only model) is one ValueError line naming the position."""
    tokens = image_token_ids(handle)
    ids = tokens.features | tokens.video
    if not ids:
        raise ValueError(f"position {position_label(position)!r}: {getattr(handle, 'model_id', 'this model')} has "
                         "no image tokens (a text-only model); use last, all, text or token positions")
    return ids


def resolve_positions(
    handle: Handle,
    enc: BatchFeature,
    prompts: Sequence[str],
    images: Sequence[Sequence[object]] | None,
    position: str | int | Token | Marker | Frame,
    *,
    text_markers: Sequence[str | None] | None = None,
) -> RowPositions:
    """`position` on every row of `enc = build_inputs(handle, prompts, images)`, for an edit there:
    `Add(site, delta, positions=resolve_positions(handle, enc, prompts, images, "text"))`."""
    p = check_positions([position])[0]
    n_images = [len(row) for row in images] if images is not None else [0] * len(prompts)
    spans = batch_spans(handle, enc, list(prompts), n_images, text_markers)
    sizes = None if images is None else [[getattr(im, "size", None) for im in row] for row in images]
    rows = row_indices(handle, enc, list(prompts), n_images, spans, [p], image_sizes=sizes)[0]
    return RowPositions(rows=tuple(rows), seq_len=int(enc["input_ids"].shape[1]), label=position_label(p))
