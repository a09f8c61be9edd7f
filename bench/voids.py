"""Voids (seed 002, sections 3.2 and 5.2): items whose evidence or question cannot settle the answer,
each matched with a *sufficient twin* so that only the void differs. An opt-in block
(`evprobe generate --voids occluded,unstated`); without it items.jsonl is the main set's, byte for byte.

Void types (`VOID_TYPES`, each with its modality):

- `occluded` (visual): the initial sheet (on a clip benchmark, `bench.clips`, every frame of the initial
  clip) with every panel's measurement hidden behind an opaque grey occluder (`occlude`: everything below the panel's title and time / load label, so the object,
  the marker and the ruler are all covered). The prompt is the twin's byte for byte; only the image
  differs. The two histories' occluded sheets are pixel-identical (`evprobe check` verifies it, and
  that the detector finds no marker), so the sheet carries no information: all four worlds remain,
  and the labels are recomputed from that state (`resolved` false, `reference_answer`
  undetermined, and for the selection the cheapest action that settles the answer in every world,
  which at the default prices is the combined report).
- `unstated` (textual): the twin's image and prompt, with the question's threshold written as the
  symbol `q`, never given a value ("Will it slide more than q m before it stops?"): a quantity the
  question needs is missing, detectable from the text alone. Only the answer request is built (a
  selection has no option that settles an unstated threshold, so it would have no reference
  action): `reference_answer` undetermined, `threshold` and `reference_action` null.

Not built, and why (`NOT_BUILT`): the seed's *chaotic sensitivity* void needs an outcome that lies
within the evidence's resolution of the threshold. Our worlds are discrete: once a sheet shows
which candidate value holds, the outcome follows exactly from the stated candidates, and every
threshold sits at least 17.2% from every outcome (`evprobe check`'s margin), far beyond the sheets'
reading error (under 0.5%). No item of these worlds is such a void, so none is generated (asking
for one is refused in one line).

Which items: the twins are the main set's *sufficient* decisions (`resolved` true, 2 per family:
each history at the threshold it settles): per family 2 occluded selections, 2 occluded initial
answers and 2 unstated initial answers, 864 items on the main set. A void item's id, decision id
are its twin's with `.void-<type>` appended (so void decisions link only among themselves), its
pair ids are null (the image and threshold pairs of the main set have no void counterparts), and
`twin_id` names the twin. Scoring: `bench.void_scoring`.
"""

from __future__ import annotations

import io
from dataclasses import replace

from PIL import ImageDraw

from evprobe.bench.clips import ClipSpec, encode_clip, read_frames
from evprobe.bench.decode import decode
from evprobe.bench.family import Family
from evprobe.bench.items import Item
from evprobe.bench.prompts import PromptBuilder
from evprobe.bench.reference import Prices, reference_action, reference_answer, resolved
from evprobe.bench.render import PANEL, SIZE, panel_origin

VOID_TYPES: dict[str, str] = {"occluded": "visual", "unstated": "textual"}
NOT_BUILT: dict[str, str] = {
    "sensitivity": ("these worlds are discrete and every threshold lies at least 17.2% from every outcome, far "
                    "beyond the sheets' reading error, so no outcome is within the evidence's resolution of its "
                    "threshold"),
}
# The base requests each void type is built for (module docstring: an unstated threshold has no
# settling action, so it has no selection).
VOID_REQUESTS: dict[str, tuple[str, ...]] = {"occluded": ("select", "answer_initial"), "unstated": ("answer_initial",)}
UNSTATED_SYMBOL = "q"
OCCLUDER = (128, 128, 128)  # an opaque mid grey, drawn on every style
OCCLUDER_EDGE = (64, 64, 64)
OCCLUDER_TOP = 48  # panel rows above this hold the title and the time / load label, shown as they are


def void_suffix(void: str) -> str:
    return f".void-{void}"


def occluded_path(family_id: str, sheet: str, clip: bool = False) -> str:
    """Where an occluded sheet (with `clip`, an occluded clip) lives inside the benchmark folder."""
    return f"images/{family_id}/{sheet}.occluded{'.clip' if clip else ''}.png"


def check_voids(voids: tuple[str, ...]) -> tuple[str, ...]:
    """`--voids`' types, validated: distinct, each a built type; a type not built is refused with why."""
    for v in voids:
        if v in NOT_BUILT:
            raise ValueError(f"--voids {v}: not built for these worlds: {NOT_BUILT[v]}; choose from "
                             f"{', '.join(VOID_TYPES)}")
        if v not in VOID_TYPES:
            raise ValueError(f"--voids takes void types among {', '.join(VOID_TYPES)}, got {v!r}")
    if len(set(voids)) != len(voids):
        raise ValueError(f"--voids names a void type twice: {','.join(voids)}")
    return tuple(v for v in VOID_TYPES if v in voids)  # a fixed order, whatever the flag's


def parse_voids(text: str) -> tuple[str, ...]:
    """The `--voids` flag (comma-separated types, blanks ignored) as check_voids' tuple; ValueError as it."""
    return check_voids(tuple(v.strip() for v in text.split(",") if v.strip()))


def occlude(png: bytes) -> bytes:
    """A rendered sheet with each panel below its label band covered by the occluder (PNG bytes)."""
    img = decode(png, "sheet")[0]
    if img.size != (SIZE, SIZE):
        raise ValueError(f"a sheet is {SIZE}x{SIZE} pixels, this image is {img.size[0]}x{img.size[1]}")
    draw = ImageDraw.Draw(img)
    for i in range(4):
        _cover(draw, *panel_origin(i))
    buf = io.BytesIO()
    img.save(buf, "PNG", optimize=False, compress_level=6)
    return buf.getvalue()


def occlude_clip(data: bytes, clip: ClipSpec) -> bytes:
    """A rendered clip (`bench.clips`) with every frame covered as a sheet's panel is (`occlude`):
    the motion hidden from its first frame to its last, each frame's label shown as it is."""
    frames = read_frames(data, clip)
    for frame in frames:
        _cover(ImageDraw.Draw(frame), 0, 0)
    return encode_clip(frames, clip)


def _cover(draw: ImageDraw.ImageDraw, x0: int, y0: int) -> None:
    """The occluder over one panel whose top-left pixel is (x0, y0): inside its 1-px frame,
    (x0 + 1 .. x0 + PANEL - 2) x (y0 + OCCLUDER_TOP .. y0 + PANEL - 2)."""
    draw.rectangle([x0 + 1, y0 + OCCLUDER_TOP, x0 + PANEL - 2, y0 + PANEL - 2], fill=OCCLUDER,
                   outline=OCCLUDER_EDGE, width=2)


def unstated_prompt(family: Family, twin: Item, prices: Prices = Prices()) -> str:
    """The twin's prompt with the question's threshold written as the symbol q."""
    prompts = PromptBuilder(family, twin.style, prices)
    level = twin.threshold_level
    assert level is not None
    stated = "Question: " + prompts.question(level)
    if twin.prompt.count(stated) != 1:
        raise ValueError(f"{twin.item_id}: its question does not appear exactly once in its prompt")
    return twin.prompt.replace(stated, "Question: " + prompts.question(level, threshold_text=UNSTATED_SYMBOL))


def void_items(family: Family, block: list[Item], voids: tuple[str, ...], prices: Prices = Prices(),
               clip: bool = False) -> list[Item]:
    """The void items of one family (module docstring), built from its main items `block`, in
    `block`'s order per void type; with `clip`, a clip benchmark's (the occluded void shows the
    initial clip occluded, `occlude_clip`)."""
    outcomes = family.outcomes()
    nothing: frozenset = frozenset()  # an occluded sheet shows nothing: every world remains
    out: list[Item] = []
    for void in check_voids(voids):
        for twin in block:
            if (twin.variant is not None or twin.injection or twin.request not in VOID_REQUESTS[void]
                    or not twin.resolved):
                continue
            suffix = void_suffix(void)
            common = dict(item_id=twin.item_id + suffix, decision_id=f"{twin.decision_id}{suffix}",
                          image_pair_id=None, threshold_pair_id=None, resolved=False, void=void,
                          twin_id=twin.item_id)
            options = twin.options or {}
            if void == "occluded":
                q = twin.threshold
                assert q is not None and twin.history is not None
                answer = reference_answer(nothing, q, outcomes)
                action = reference_action(nothing, q, outcomes, prices)
                assert not resolved(nothing, q, outcomes)
                value = action if twin.request == "select" else answer
                sheet = f"{family.initial}_{twin.history}"
                out.append(replace(twin, **common, images=[occluded_path(family.family_id, sheet, clip)],
                                   reference_action=action, reference_answer=answer,
                                   reference_option=next(k for k, v in options.items() if v == value)))
            else:
                out.append(replace(twin, **common, prompt=unstated_prompt(family, twin, prices), threshold=None,
                                   reference_action=None, reference_answer="undetermined",
                                   reference_option=next(k for k, v in options.items() if v == "undetermined")))
    return out


__all__ = [
    "NOT_BUILT",
    "OCCLUDER",
    "UNSTATED_SYMBOL",
    "VOID_REQUESTS",
    "VOID_TYPES",
    "check_voids",
    "occlude",
    "occlude_clip",
    "occluded_path",
    "parse_voids",
    "unstated_prompt",
    "void_items",
    "void_suffix",
]
