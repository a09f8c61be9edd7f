"""The information-injection ladder (seed 003, section 4.6) as items: the same decisions and answer
requests, with the visual evidence pointed out in the prompt step by step.

Levels (cumulative: each keeps the text of the levels below it):

- -1 (`TARGET_EXCLUSIVE`, opt-in: `--injection te`), target-exclusive baseline: seed 003's own level 0
  (sections 4.1 and 4.4: "prompts explicitly request the final target value ... but intentionally omit
  any mention of the available visual evidence"). The level-0 prompt less the clause that names the
  reference objects, "; every panel has a ruler in metres, and a <marker> dot with a line to the ruler
  marks the measured position." (of a clip: "every frame has ..."), which becomes "." (`REFERENCE_CLAUSE`);
  nothing else changes, so no ruler, no dot and no panel position is named (tested on every item).
  What each measurement records ("the panels show its position at t = ...") stays: a selection's
  options are those measurements, and without it the prompt would not say what an option buys, a
  change of task rather than of pointer. Why -1: the main set's prompt, which names the ruler and the
  dot but does not point at them, sits between the seed's level 0 and its level 1, so it keeps the
  number 0 (every run, capture and score of level 0 is unchanged) and the seed's baseline is the level
  below it. Level -1 minus level 0 measures what naming the ruler and dot is worth; level L minus
  level -1 is the seed's ladder step (scored as `injection.differences_target_exclusive`).
- 0, implicit baseline: today's prompt, unchanged (the main set's items).
- 1, object awareness: a "Where to look:" paragraph after the evidence points to the reference
  objects, the last panel (bottom right) of each attached sheet, its ruler and the marker dot.
- 2, attribute awareness: the same paragraph adds, per sheet, "What to read:" the ruler reading at
  the marker in that panel, which physical coordinate it is (position, height, extension), at
  which time or load, and which property it tells apart (or, for free fall, that it is the same
  for every candidate value, the physical fact a reader would have to work out).
- 3, oracle guidance: the readings of every panel of every attached sheet as numbers, appended to
  the evidence paragraph exactly as the `text_readings` variant appends them (`prompts.readings_text`;
  one sheet: byte for byte that variant's block), so the model has to calculate only.
  Level 3's select prompt, without its "Where to look" paragraph, is the `text_readings` variant's
  prompt (tests/bench/test_injection.py checks it for every subset family). The mechanics
  equations are not added: they are the `given_equations` variant's separate factor, and stacking
  them here would change two things in one step.

Which requests: `INJECTED_REQUESTS`, the base selections and the answers before and after a test
(the requests that show a sheet and ask for a decision), and the opt-in numeric estimates
(`bench.numeric`, with `--numeric`: seed 003 traces threshold accuracy across the ladder; their
guidance follows the sheet paragraph, and level 2 says the reading determines the property, since
their prompts print no candidates); both_given shows no sheet (it is already the given-values
control), the ruler and property probes ask about the sheet directly, and the variants are their
own conditions.

Why items, not a run-time flag like the regimes: a level's text depends on the family (its
sheets, times, loads and readings), so the rendered prompt would no longer be fixed by the
benchmark's items hash and the protocol/regime template hash the run pins. As items, every level's
prompt is in items.jsonl (hashed in bench.json), `evprobe check` checks each level's pairs, and
every later stage (run records, captures, sweeps, dose-response) can group by `Item.injection`.
`evprobe generate --injection 1,2,3` adds the levels (`te` or -1 the target-exclusive one); level 0 is
always the main set's items.

Matched pairs at every level (checked by `evprobe check`): the two members of an image pair share
every prompt byte at levels -1 to 2; at level 3 they differ only in the readings block, which is the
history written as numbers. Threshold pairs differ only in the printed threshold. Hidden-world
pairs of an uninformative test (appendix D) keep identical prompts at every level, because their
sheets, and so their readings, are identical.

Ids: a level-L item is its level-0 item's id with ".L<L>" appended (".L-1" at level -1); its decision id and pair ids
carry the same suffix, so a level's decisions, pairs and answers link only among themselves.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import PurePosixPath

from evprobe.bench.calibration import sheet_spec
from evprobe.bench.family import Family
from evprobe.bench.items import Item
from evprobe.bench.numbers import fmt
from evprobe.bench.prompts import readings_text, test_name
from evprobe.bench.render import STYLES

TARGET_EXCLUSIVE = -1  # seed 003's level 0 (module docstring); `--injection te`
TE_NAME = "te"  # the level's name on the command line
# Every level an item may carry; the ones generate adds are [1:] (the target-exclusive one last, so
# that slice stays "every level but the main items'").
INJECTION_LEVELS: tuple[int, ...] = (0, 1, 2, 3, TARGET_EXCLUSIVE)
LEVEL_NAMES: dict[int, str] = {
    TARGET_EXCLUSIVE: "target-exclusive baseline",
    0: "implicit baseline",
    1: "object awareness",
    2: "attribute awareness",
    3: "oracle guidance",
}
INJECTED_REQUESTS: tuple[str, ...] = ("select", "answer_initial", "answer_after_test", "estimate_property",
                                      "estimate_outcome")
NUMERIC_INJECTED: tuple[str, ...] = ("estimate_property", "estimate_outcome")  # no candidates in their prompts
# The paragraph a level's guidance follows (and level 3's readings extend): the evidence of a decision
# prompt, the sheet paragraph of a numeric estimate (bench.numeric).
_ANCHORS: tuple[str, ...] = ("Evidence", "The attached sheet", "The first attached sheet", "The attached clip",
                             "The first attached clip")
GUIDANCE_OPENING = "Where to look:"
# The clause of the measurements' description (bench.prompts.PromptBuilder.tests) and of a numeric
# estimate's sheet note (bench.numeric) that names the reference objects: the ruler and the marker dot.
REFERENCE_CLAUSE = re.compile(r"; every (?:panel|frame) has a ruler in metres, and a [a-z]+ dot with a line to "
                              r"the ruler marks the measured position\.")
_ORDINALS = ("first", "second", "third")
_COORDINATE = {
    "mass": "the {obj}'s position along the track",
    "coasting": "the block's position along the track",
    "rebound": "the ball's height above the floor",
    "extension": "the spring's extension from its rest position",
    "free_fall": "the {obj}'s height above the floor",
}
_TEST_OF_KIND = {"mass": "test_mass", "coasting": "test_other", "rebound": "test_other",
                 "extension": "test_other", "free_fall": "free_fall"}


def level_suffix(level: int) -> str:
    return f".L{level}"


def parse_level(text: str) -> int:
    """One level as the command line writes it: an integer, or `te` for the target-exclusive level."""
    return TARGET_EXCLUSIVE if text.strip().lower() == TE_NAME else int(text)


def target_exclusive_prompt(prompt: str) -> str:
    """`prompt` with its one reference clause (`REFERENCE_CLAUSE`) replaced by "."; a prompt that
    does not hold the clause exactly once is refused, so a change of the main set's wording cannot
    leave a reference standing in the level."""
    found = REFERENCE_CLAUSE.findall(prompt)
    if len(found) != 1:
        raise ValueError(f"a target-exclusive prompt removes the reference clause once; the prompt holds it "
                         f"{len(found)} times")
    return REFERENCE_CLAUSE.sub(".", prompt)


def _sheet_of(rel: str) -> str:
    """images/<family>/<sheet>[.clip].png -> <sheet> (level items show style-a sheets or their clips only)."""
    return PurePosixPath(rel).name.split(".", 1)[0]


def _last(clip_frames: int | None) -> tuple[str, str]:
    """(what the evidence is called, its last panel or frame as the guidance names it)."""
    if clip_frames is None:
        return "sheet", "last panel (bottom right)"
    return "clip", f"last frame (frame {clip_frames})"


def guidance(family: Family, images: list[str], level: int, style: str = "a", numeric: bool = False,
             clip_frames: int | None = None) -> str:
    """The "Where to look" paragraph of `level` (1 or more) for a prompt showing `images`.
    numeric: the prompt is a numeric estimate's, which prints no candidate values, so level 2
    says the reading determines the property rather than which candidate holds.
    clip_frames: the images are clips of that many frames (`bench.clips`), read at their last frame,
    which is the sheet's last panel."""
    f, marker = family, STYLES[style].marker_name
    obj = {"sliding": "block", "bouncing": "ball", "spring": "cart"}[f.system]
    noun, last = _last(clip_frames)
    many = len(images) > 1
    where = (
        f"{GUIDANCE_OPENING} {f'every attached {noun}. In the {last} of each' if many else f'the attached {noun}. In its {last}'}, "
        f"look at the ruler and at the {marker} dot with its line to the ruler."
    )
    if level < 2:
        return where
    lines = [where]
    last_short = "last panel" if clip_frames is None else "last frame"
    for i, rel in enumerate(images):
        spec = sheet_spec(f.system, f.candidates, f.calibration, _sheet_of(rel))
        test = test_name(_TEST_OF_KIND[spec.kind], f.other)
        key = _last_key(f, spec.kind)
        coordinate = _COORDINATE[spec.kind].format(obj=obj)
        if spec.kind == "free_fall":
            tells = "this reading is the same for every candidate value of the mass and of the " + f.other
        else:
            prop = "mass" if spec.kind == "mass" else f.other
            tells = (f"with the calibration above, this reading determines the {prop}" if numeric
                     else f"this reading tells which candidate value of the {prop} holds")
        sheet = f"the {_ORDINALS[i]} {noun} ({test})" if many else f"the {noun} ({test})"
        lines.append(
            f"What to read: on {sheet}, the ruler reading at the {marker} dot in the {last_short} is "
            f"{coordinate} at {key}; {tells}."
        )
    return "\n".join(lines)


def _last_key(family: Family, kind: str) -> str:
    """The last panel's time or load, printed as the prompt's test menu prints it (six digits)."""
    cal = family.calibration[_TEST_OF_KIND[kind]]
    if kind == "extension":
        return f"a load of {fmt(cal['loads'][-1])} N"
    return f"t = {fmt(cal['times'][-1])} s"


def readings_block(family: Family, images: list[str], clip_frames: int | None = None) -> str:
    """Level 3's numbers: every panel's reading of every attached sheet (the text_readings block;
    with several sheets, one block per sheet, named by its order and test). Of clips: each clip's
    four panel frames, as the text_readings variant prints them on clips."""
    f, many, blocks = family, len(images) > 1, []
    noun = _last(clip_frames)[0]
    for i, rel in enumerate(images):
        spec = sheet_spec(f.system, f.candidates, f.calibration, _sheet_of(rel))
        text = readings_text(f.system, f.calibration, spec.readings, spec.kind, clip_frames)
        if many:
            test = test_name(_TEST_OF_KIND[spec.kind], f.other)
            text = text.replace(f"Readings from the {noun}:", f"Readings from the {_ORDINALS[i]} {noun} ({test}):", 1)
        blocks.append(text)
    return "\n".join(blocks)


def level_prompt(family: Family, base: Item, level: int, clip_frames: int | None = None) -> str:
    """`base`'s prompt (level 0) at `level`: the readings appended to the evidence paragraph
    (level 3) and the guidance paragraph inserted after it (levels 1-3), or the reference clause
    removed (level -1); nothing else changes.
    clip_frames: the base item shows clips of that many frames (`bench.clips`)."""
    if level == 0:
        return base.prompt
    if level not in INJECTION_LEVELS:
        raise ValueError(f"no injection level {level}; the levels are {', '.join(map(str, INJECTION_LEVELS))}")
    if base.request not in INJECTED_REQUESTS or base.variant is not None or not base.images:
        raise ValueError(f"injection levels apply to base {', '.join(INJECTED_REQUESTS)} items, not {base.item_id}")
    clips = [rel.endswith(".clip.png") for rel in base.images]
    if any(clips) != all(clips) or all(clips) != (clip_frames is not None):
        shows = "clips" if all(clips) else "sheets" if not any(clips) else "sheets and clips"
        raise ValueError(f"{base.item_id} shows {shows} but clip_frames is {clip_frames}; give the clips' frame "
                         "count for clips, None for sheets")
    if level == TARGET_EXCLUSIVE:
        return target_exclusive_prompt(base.prompt)
    parts = base.prompt.split("\n\n")
    at = next(i for i, p in enumerate(parts) if p.startswith(_ANCHORS))
    if level >= 3:
        parts[at] += "\n" + readings_block(family, base.images, clip_frames)
    parts.insert(at + 1, guidance(family, base.images, level, base.style, numeric=base.request in NUMERIC_INJECTED,
                                  clip_frames=clip_frames))
    return "\n\n".join(parts)


def level_item(family: Family, base: Item, level: int, clip_frames: int | None = None) -> Item:
    """The level-`level` copy of a level-0 item: same labels, images and options; its prompt,
    ids and `injection` changed (module docstring)."""
    sfx = level_suffix(level)

    def tag(x: str | None) -> str | None:
        return None if x is None else x + sfx

    return replace(
        base,
        item_id=base.item_id + sfx,
        decision_id=tag(base.decision_id),
        image_pair_id=tag(base.image_pair_id),
        threshold_pair_id=tag(base.threshold_pair_id),
        prompt=level_prompt(family, base, level, clip_frames),
        injection=level,
    )


def injected_items(family: Family, base_items: list[Item], levels: tuple[int, ...],
                   clip_frames: int | None = None) -> list[Item]:
    """The level items of one family for each level in `levels` (0 excluded: those are the base
    items themselves), level by level, in the base items' order; `clip_frames` as level_prompt's."""
    eligible = [it for it in base_items if it.variant is None and it.request in INJECTED_REQUESTS]
    return [level_item(family, it, level, clip_frames) for level in levels if level != 0 for it in eligible]
