"""Voids (seed 002, sections 3.2 and 5.2): items whose evidence or question cannot settle the answer,
each matched with a *sufficient twin* so that only the void differs. An opt-in block
(`evprobe generate --voids occluded,unstated`, and the question-side `false_premise`, `unobservable`);
without it items.jsonl is the main set's, byte for byte.

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
- `false_premise` (textual; the seed's chaotic ill-posed question, "a false premise detectable from the
  text alone", its invalid entity): the twin's image and prompt, with the question's subject (the
  block, ball or cart) written as an object the prompt never introduces, the seed's own example
  entity, a triangle ("What material are the triangles made of?" when no triangles exist): "The
  triangle starts at rest on the same surface and receives an impulse of 2.38603 N s. Will it slide
  more than 0.6 m before it stops?". The threshold is still stated (`threshold` is the twin's, what
  the prompt prints); `reference_answer` undetermined, `reference_action` null; answer request only.
- `unobservable` (textual; the seed's occlusion ill-posed question, "details unobservable in the fully
  visible video"): the twin's image and prompt, with the question's last sentence asking for a
  detail no sheet shows and no sentence states, whether a face the side-view panels never show is
  painted red ("The block starts at rest ... Is the face of the block that rests on the surface
  painted red?"; the ball's inside, the cart's underside). `threshold` and `reference_action` null,
  `reference_answer` undetermined; answer request only.

The last two are the seed's question-side voids (Table 6); the seed gives no example of an
unobservable detail, so the painted face is our choice, one that neither the physics nor the
sheets can settle.

Not built, and why (`NOT_BUILT`): the seed's *chaotic sensitivity* void needs an outcome that lies
within the evidence's resolution of the threshold. Our worlds are discrete: once a sheet shows
which candidate value holds, the outcome follows exactly from the stated candidates, and every
threshold sits at least 17.2% from every outcome (`evprobe check`'s margin), far beyond the sheets'
reading error (under 0.5%). No item of these worlds is such a void, so none is generated (asking
for one is refused in one line).

Which items: the twins are the main set's *sufficient* decisions (`resolved` true, 2 per family:
each history at the threshold it settles): per family 2 occluded selections, 2 occluded initial
answers and 2 unstated initial answers, 864 items on the main set (2 initial answers a family, 288,
for each of false_premise and unobservable). A void item's id, decision id
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
from evprobe.bench.systems import get_system

VOID_TYPES: dict[str, str] = {"occluded": "visual", "unstated": "textual", "false_premise": "textual",
                              "unobservable": "textual"}
NOT_BUILT: dict[str, str] = {
    "sensitivity": ("these worlds are discrete and every threshold lies at least 17.2% from every outcome, far "
                    "beyond the sheets' reading error, so no outcome is within the evidence's resolution of its "
                    "threshold"),
}
# The base requests each void type is built for (module docstring: an unstated threshold has no
# settling action, so it has no selection).
VOID_REQUESTS: dict[str, tuple[str, ...]] = {"occluded": ("select", "answer_initial"), "unstated": ("answer_initial",),
                                             "false_premise": ("answer_initial",), "unobservable": ("answer_initial",)}
# The fields a void item of each type leaves null where its request needs them (bench.schema checks it).
VOID_UNSET: dict[str, tuple[str, ...]] = {"occluded": (), "unstated": ("threshold", "reference_action"),
                                          "false_premise": ("reference_action",),
                                          "unobservable": ("threshold", "reference_action")}
UNSTATED_SYMBOL = "q"
FALSE_ENTITY = "triangle"  # seed 002's invalid entity: "What material are the triangles made of?"
# What an unobservable-detail void asks about, per system: a face the side-view panels never show.
UNOBSERVED_PART: dict[str, str] = {"sliding": "the face of the block that rests on the surface",
                                   "bouncing": "the inside of the ball", "spring": "the underside of the cart"}
UNOBSERVED_QUESTION = "Is {part} painted red?"
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


def _asked(family: Family, twin: Item, prices: Prices) -> tuple[PromptBuilder, str]:
    """The twin's prompt builder and its question as printed (without "Question: "), which must
    appear exactly once in its prompt."""
    prompts = PromptBuilder(family, twin.style, prices)
    level = twin.threshold_level
    assert level is not None
    stated = prompts.question(level)
    if twin.prompt.count("Question: " + stated) != 1:
        raise ValueError(f"{twin.item_id}: its question does not appear exactly once in its prompt")
    return prompts, stated


def _with_question(twin: Item, stated: str, question: str) -> str:
    return twin.prompt.replace("Question: " + stated, "Question: " + question)


def unstated_prompt(family: Family, twin: Item, prices: Prices = Prices()) -> str:
    """The twin's prompt with the question's threshold written as the symbol q."""
    prompts, stated = _asked(family, twin, prices)
    assert twin.threshold_level is not None
    return _with_question(twin, stated, prompts.question(twin.threshold_level, threshold_text=UNSTATED_SYMBOL))


def false_premise_prompt(family: Family, twin: Item, prices: Prices = Prices()) -> str:
    """The twin's prompt with the question's subject ("The block ...") written as FALSE_ENTITY."""
    _, stated = _asked(family, twin, prices)
    subject = f"The {get_system(family.system).object_name} "
    if not stated.startswith(subject) or FALSE_ENTITY in twin.prompt:
        raise ValueError(f"{twin.item_id}: its question does not open with {subject!r}, or its prompt names a "
                         f"{FALSE_ENTITY}")
    return _with_question(twin, stated, f"The {FALSE_ENTITY} " + stated[len(subject):])


def unobservable_prompt(family: Family, twin: Item, prices: Prices = Prices()) -> str:
    """The twin's prompt with the question's last sentence asking UNOBSERVED_QUESTION of its system."""
    _, stated = _asked(family, twin, prices)
    setup, sep, _ = stated.rpartition(". ")
    if not sep:
        raise ValueError(f"{twin.item_id}: its question has no setup sentence before what it asks")
    return _with_question(twin, stated, setup + sep + UNOBSERVED_QUESTION.format(part=UNOBSERVED_PART[family.system]))


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
            else:  # a textual void: the question settles nothing, whatever the evidence
                prompt = {"unstated": unstated_prompt, "false_premise": false_premise_prompt,
                          "unobservable": unobservable_prompt}[void](family, twin, prices)
                out.append(replace(twin, **common, prompt=prompt,
                                   threshold=None if "threshold" in VOID_UNSET[void] else twin.threshold,
                                   reference_action=None, reference_answer="undetermined",
                                   reference_option=next(k for k, v in options.items() if v == "undetermined")))
    return out


__all__ = [
    "FALSE_ENTITY",
    "NOT_BUILT",
    "OCCLUDER",
    "UNOBSERVED_PART",
    "UNOBSERVED_QUESTION",
    "UNSTATED_SYMBOL",
    "VOID_REQUESTS",
    "VOID_TYPES",
    "VOID_UNSET",
    "check_voids",
    "false_premise_prompt",
    "occlude",
    "occlude_clip",
    "occluded_path",
    "parse_voids",
    "unobservable_prompt",
    "unstated_prompt",
    "void_items",
    "void_suffix",
]
