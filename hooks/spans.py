"""Token spans of one model-input row: the last prompt token, the image tokens, a text segment.

hooks knows no benchmark: a row is a prompt string plus its images, fed through
`hooks.inputs.build_inputs` (one user turn: images first, then the text; left padding).

Definitions (indices are positions in the padded row, so they index `input_ids_row` and a
layer output's sequence axis directly):

- `last`: the last real token, i.e. the end of the assistant generation prompt, or of the
  handle's answer prefix after it when it has one (Handle.answer_prefix; index seq_len - 1
  under left padding). The prediction of the answer's first token is made here.
- `image`: every position whose input embedding the model replaces with vision features: the
  tokens equal to the model's image-placeholder id, read from the config (`image_token_id`,
  else `image_token_index`), else from the tokenizer's / processor's `image_token`. All images
  of the row together, in order, and a video's frames (the config's `video_token_id` /
  `video_token_index`) where frames are read as a video (hooks.inputs). Per tiny/real architecture:
    qwen2_5_vl, qwen3_vl   <|image_pad|> (not <|vision_start|>, <|vision_end|>)
    idefics3, smolvlm      <image> of every tile and the global view (not
                           <fake_token_around_image>, <row_i_col_j>, <global-img>, newlines)
    llava                  <image> (one per patch)
    llava_next(_video)     <image> (base view, anyres tiles and the row-newline features)
    gemma3                 <image_soft_token> (not <start_of_image>, <end_of_image>, the "\n\n"
                           the processor adds around them)
    mistral3 (Pixtral)     [IMG] (not [IMG_BREAK], [IMG_END])
  Gemma 3's processor reports `image_token_id` = <start_of_image>; the config's id is the one
  the model scatters features into, which is why the config is read first.
- `image_markers`: the structural image tokens around the features: added tokens whose text
  names an image ("image", "img", "vision"; "video" excluded) or is an Idefics3 `<row_i_col_j>`,
  minus the feature id. Searched in the tokenizer's added vocabulary, not hard-coded per arch.
- `text`: the tokens of a text segment of the prompt. With `marker`, the tokens that overlap
  the first occurrence of `marker` inside the prompt text; without it, every token of the
  prompt text itself (the user's words: no role header, no template tokens, no image or
  special tokens, no generation prompt). Tokens that straddle the segment's edges count.

A processor that does not keep the prompt's words (`keeps_prompt_text = False`: the model
organism, which reads facts extracted from the prompt) has no text markers; its `text` is every
non-special, non-image token of the row but the last (the facts and the task word; the last is
its answer prefix `ANSWER:`), and its image tokens are the ids its processor lists in
`image_feature_token_ids`.

How `text` is found: the row's chat-template string (images as unexpanded placeholders) is
tokenized with character offsets. The processor expands image placeholders, which changes the
tokens before the text but not after it (the text comes after all images), so the two token
sequences share a common suffix; tokens in that suffix map one to one onto the row, and their
offsets locate the segment. A segment reaching outside the shared suffix (a token merged
across the image boundary) is an error, not a guess.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from transformers import BatchFeature

    from evprobe.hooks.handle import Handle

# Added-token texts that mark image structure (Pixtral [IMG_BREAK], Gemma <start_of_image>,
# Qwen <|vision_start|>, Idefics3 <fake_token_around_image>, <global-img>, <row_1_col_2>).
_IMAGE_WORDS = re.compile(r"image|img|vision", re.IGNORECASE)
_ROW_COL = re.compile(r"^<row_\d+_col_\d+>$")


@dataclass(frozen=True)
class Spans:
    """Positions in one padded row (see the module docstring for the rules).

    last: index of the last real token (the final prompt token).
    image: indices of the image-feature tokens of all images, ascending.
    image_markers: indices of structural image tokens (start/end/break/tile markers).
    text: indices of the located text segment (or of the whole prompt text), ascending.
    """

    last: int
    image: tuple[int, ...]
    image_markers: tuple[int, ...]
    text: tuple[int, ...]


@dataclass(frozen=True)
class ImageTokens:
    """The image token ids of a model: the feature placeholder(s) and the structural markers.

    features: usually one id (the placeholder the model scatters vision features into); a
    processor that writes image content as several token ids lists them in its
    `image_feature_token_ids` attribute (the model organism's sheet readings, two tokens each).
    """

    features: frozenset[int]
    markers: frozenset[int]
    video: frozenset[int] = frozenset()  # the video-feature placeholder (a video's frames), where the model has one

    @property
    def feature(self) -> int | None:
        """The single feature id, or None (no image tokens, or several)."""
        return next(iter(self.features)) if len(self.features) == 1 else None


def image_token_ids(handle: Handle) -> ImageTokens:
    """The image-feature placeholder id (config first) and the marker ids (added-token search)."""
    return _image_token_ids(handle.model.config, handle.tokenizer, handle.processor)


def _image_token_ids(config: Any, tokenizer: Any, processor: Any) -> ImageTokens:
    declared = getattr(processor, "image_feature_token_ids", None)
    if declared is not None:
        return ImageTokens(features=frozenset(int(i) for i in declared), markers=frozenset())
    feature = _config_id(config, "image")
    if feature is None:
        token = getattr(tokenizer, "image_token", None) or getattr(processor, "image_token", None)
        if isinstance(token, str):
            found = tokenizer.convert_tokens_to_ids(token)
            feature = found if isinstance(found, int) and found != tokenizer.unk_token_id else None
    markers = set()
    for token_id, added in tokenizer.added_tokens_decoder.items():
        text = added.content
        if "video" in text.lower():
            continue
        if _IMAGE_WORDS.search(text) or _ROW_COL.match(text):
            markers.add(int(token_id))
    markers.discard(feature)  # type: ignore[arg-type]
    features = frozenset() if feature is None else frozenset({feature})
    video = _config_id(config, "video")
    return ImageTokens(features=features, markers=frozenset(markers),
                       video=frozenset() if video is None else frozenset({video}))


def _config_id(config: Any, kind: str) -> int | None:
    """The config's `<kind>_token_id` (or `<kind>_token_index`), kind "image" or "video"."""
    for name in (f"{kind}_token_id", f"{kind}_token_index"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return None


def render_row(handle: Handle, prompt_text: str, n_images: int) -> str:
    """The chat-template string of one row, exactly as `build_inputs` renders it (answer prefix included)."""
    from evprobe.hooks.inputs import render_prompts

    return render_prompts(handle, [prompt_text], [[None] * n_images])[0]


def _tokenize_with_offsets(tokenizer: Any, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    # Deliberately not cached: ~1,000-token prompts cost ~0.2 MB each as Python tuples, and a
    # cache over thousands of distinct prompts would make capture memory grow with items.
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return list(enc["input_ids"]), [(int(s), int(e)) for s, e in enc["offset_mapping"]]


def _find_prompt(rendered: str, prompt_text: str) -> tuple[int, int]:
    """Character range of the prompt text inside the rendered turn (templates may trim it)."""
    for candidate in (prompt_text, prompt_text.strip()):
        if candidate:
            start = rendered.rfind(candidate)
            if start >= 0:
                return start, start + len(candidate)
    raise ValueError(
        "the prompt text does not appear in its chat-template rendering (the template rewrites "
        "it); text spans need the text verbatim"
    )


def _ints(row: torch.Tensor | Sequence[int]) -> list[int]:
    return [int(v) for v in (row.tolist() if hasattr(row, "tolist") else row)]


def token_spans(
    handle: Handle,
    input_ids_row: torch.Tensor | Sequence[int],
    attention_mask_row: torch.Tensor | Sequence[int],
    prompt_text: str,
    marker: str | None = None,
    *,
    n_images: int,
    tokens: ImageTokens | None = None,
) -> Spans:
    """The spans of one row of `build_inputs(handle, prompts, images)`.

    input_ids_row, attention_mask_row: that row, padding included, (seq,).
    prompt_text: the row's prompt as given to build_inputs.
    marker: a substring of prompt_text to locate (e.g. the question sentence); None = the
        whole prompt text.
    n_images: the number of images of the row (the rendering must match build_inputs').
    tokens: `image_token_ids(handle)`, if already known (saves a vocabulary scan per row).
    Raises ValueError when the marker is not in the prompt or cannot be aligned to tokens.
    """
    ids = _ints(input_ids_row)  # (seq,)
    mask = _ints(attention_mask_row)  # (seq,)
    if len(ids) != len(mask):
        raise ValueError(f"input_ids row has {len(ids)} tokens but the attention mask {len(mask)}")
    real = [i for i, m in enumerate(mask) if m]  # padded index of each real token
    if not real:
        raise ValueError("the row has no real tokens (attention mask all zero)")
    real_ids = [ids[i] for i in real]

    tokens = tokens or image_token_ids(handle)
    image = tuple(i for i in real if ids[i] in tokens.features or ids[i] in tokens.video)
    image_markers = tuple(i for i in real if ids[i] in tokens.markers)

    if not handle.keeps_prompt_text:
        # The processor rewrites the prompt (the model organism reads facts, not words).
        if marker is not None:
            raise ValueError(
                f"{handle.model_id} does not read the prompt's words, so text marker {marker[:60]!r} has no "
                "tokens; use the 'last' or 'image' positions"
            )
        special = set(handle.tokenizer.all_special_ids)
        text_all = tuple(i for i in real[:-1] if ids[i] not in tokens.features and ids[i] not in special)
        return Spans(last=real[-1], image=image, image_markers=image_markers, text=text_all)
    rendered = render_row(handle, prompt_text, n_images)
    r_ids, offsets = _tokenize_with_offsets(handle.tokenizer, rendered)
    p0, p1 = _find_prompt(rendered, prompt_text)
    if marker is None:
        c0, c1 = p0, p1
        what = "the prompt text"
    else:
        if not marker.strip():
            raise ValueError("text marker is empty; pass None to use the whole prompt text")
        c0 = rendered.find(marker, p0, p1)
        if c0 < 0:
            raise ValueError(f"text marker {marker[:60]!r} does not occur in the prompt text")
        c1 = c0 + len(marker)
        what = f"text marker {marker[:60]!r}"

    # Longest common suffix of the rendered tokens and the row's real tokens.
    shared = 0
    while shared < min(len(r_ids), len(real_ids)) and r_ids[-1 - shared] == real_ids[-1 - shared]:
        shared += 1
    skip = set(handle.tokenizer.all_special_ids) | set(tokens.features) | set(tokens.markers) | set(tokens.video)
    hits = [k for k, (s, e) in enumerate(offsets) if s < c1 and e > c0 and e > s and r_ids[k] not in skip]
    if not hits:
        raise ValueError(f"{what} covers no tokens")
    first_shared = len(r_ids) - shared
    if hits[0] < first_shared:
        raise ValueError(
            f"{what} reaches tokens that the processor's image expansion tokenizes differently; "
            "choose a segment further from the images"
        )
    text = tuple(real[len(real_ids) - (len(r_ids) - k)] for k in hits)
    return Spans(last=real[-1], image=image, image_markers=image_markers, text=text)


def batch_spans(
    handle: Handle,
    enc: BatchFeature,
    prompts: Sequence[str],
    n_images: Sequence[int],
    markers: Sequence[str | None] | None = None,
    *,
    first_row: int = 0,
) -> list[Spans]:
    """`token_spans` of every row of `enc = build_inputs(handle, prompts, images)`.

    first_row: the caller's index of row 0, used in error messages only.
    """
    rows = enc["input_ids"].shape[0]
    if len(prompts) != rows or len(n_images) != rows:
        raise ValueError(f"{rows} input rows but {len(prompts)} prompts and {len(n_images)} image counts")
    markers = [None] * rows if markers is None else list(markers)
    if len(markers) != rows:
        raise ValueError(f"{rows} input rows but {len(markers)} text markers (give one per row, or None)")
    ids, mask = enc["input_ids"].cpu(), enc["attention_mask"].cpu()
    tokens = image_token_ids(handle)
    out = []
    for r in range(rows):
        try:
            out.append(token_spans(handle, ids[r], mask[r], prompts[r], markers[r], n_images=n_images[r],
                                   tokens=tokens))
        except ValueError as err:
            raise ValueError(f"row {first_row + r}: {err}") from None
    return out
