"""Numeric estimates the benchmark can check exactly (seed 003, eq. 6): an opt-in block of items.

`evprobe generate --numeric` adds, per family (8 items; 1,152 on the main set's 144 families):

- `estimate_property` (4): one property sheet (mass_0, mass_1, other_0, other_1) and the question
  "what is the mass / friction coefficient / restitution coefficient / stiffness?". The prompt
  states the system, g, the ideal assumptions and the calibration of that one test (force and
  times, launch speed and times, drop height and times, or loads), but not the candidate values:
  with them the task would be recover_property's choice between two printed numbers. The sheet
  and its calibration determine the value exactly (appendix A.2's relations invert in closed
  form); `reference_value` is the candidate value the sheet was drawn from.
- `estimate_outcome` (4): the combined report of one world (its mass sheet, then its other-property
  sheet, as answer_after_test shows it) and the question "what is d / E / T?" of eq. (1). The
  prompt states the calibration of both tests and the question's constants (J or h), not the
  candidate values; the two sheets determine both properties and so the outcome;
  `reference_value` is the world's outcome.

Each asks for a number in one unit (`quantity`), read with units by `bench.parse` (`bench.units`)
and scored by threshold accuracy at 5/10/20/30% and the mean log relative error
(`bench.numeric_scoring`). Pairing: the two sheets of one property (estimate_property) and the four
worlds (estimate_outcome) share every prompt byte (`image_pair_id` names the group), so what
differs between their answers is what the images show. None of these items carries an injection
level. The default benchmark (no `--numeric`) has none of them, and its items.jsonl is unchanged.
"""

from __future__ import annotations

from evprobe.bench.family import Family
from evprobe.bench.items import Item, image_path, test_sheets
from evprobe.bench.numbers import fmt, round_sig
from evprobe.bench.prompts import ASSUMPTIONS, SAME_APPARATUS, PromptBuilder, test_name
from evprobe.bench.systems import get_system
from evprobe.bench.units import Quantity
from evprobe.bench.worlds import WORLDS, world_name

PROPERTY_SHEETS: tuple[str, ...] = ("mass_0", "mass_1", "other_0", "other_1")

_INTRO = {
    "sliding": "A block slides on a level surface; the coefficient of kinetic friction between the block and the surface is constant.",
    "bouncing": "A ball is dropped onto a rigid floor and bounces.",
    "spring": "A cart is attached to a horizontal spring.",
}
_PROPERTY_QUESTION = {
    "mass": "What is the {obj}'s mass? Reply with the number in kg only.",
    "friction": "What is the coefficient of kinetic friction between the block and the surface? Reply with the number only.",
    "restitution": "What is the ball's coefficient of restitution with the floor? Reply with the number only.",
    "stiffness": "What is the spring's stiffness? Reply with the number in N/m only.",
}
_OUTCOME_QUESTION = {
    "sliding": (
        "The block starts at rest on the same surface and receives an impulse of {J} N s. How far "
        "does it slide before it stops? Reply with the number in metres only."
    ),
    "bouncing": (
        "The ball is dropped from a height of {h} m onto the same floor. What is its kinetic energy "
        "immediately after the bounce? Reply with the number in J only."
    ),
    "spring": (
        "The cart is pulled aside and released, so that it oscillates on the same spring. What is "
        "its period of oscillation? Reply with the number in seconds only."
    ),
}
# What each request asks for, in which unit (the prompt names the same unit).
_PROPERTY_QUANTITY = {
    "mass": Quantity("mass", "kg"),
    "friction": Quantity("dimensionless", ""),
    "restitution": Quantity("dimensionless", ""),
    "stiffness": Quantity("stiffness", "N/m"),
}
_OUTCOME_QUANTITY = {
    "sliding": Quantity("length", "m"),
    "bouncing": Quantity("energy", "J"),
    "spring": Quantity("time", "s"),
}
RULER = Quantity("length", "m")


def quantity(item: Item) -> Quantity:
    """The quantity a numeric item asks for (read_ruler: a length in metres)."""
    if item.request == "read_ruler":
        return RULER
    if item.request == "estimate_property":
        return _PROPERTY_QUANTITY[measured_property(item)]
    if item.request == "estimate_outcome":
        return _OUTCOME_QUANTITY[item.system]
    raise ValueError(f"{item.item_id}: request {item.request!r} asks for no number")


def measured_property(item: Item) -> str:
    """estimate_property: "mass" or the system's other property, from the item's test."""
    return "mass" if item.test == "test_mass" else get_system(item.system).other


def _test_line(prompts: PromptBuilder, action: str) -> str:
    """One test's line of the prompts' test menu (the same words the main set's prompts use)."""
    name = test_name(action, prompts.family.other)
    opening = f"- {name[0].upper()}{name[1:]}:"
    return next(line for line in prompts.tests().split("\n") if line.startswith(opening))


def _preamble(f: Family) -> str:
    return (
        f"{_INTRO[f.system]} Take g = {fmt(f.constants['g'])} m/s^2.\n"
        f"Ideal assumptions: {ASSUMPTIONS[f.system]} Every test uses the same {SAME_APPARATUS[f.system]}, "
        "and a measurement shows exact values with no noise."
    )


def _sheet_note(prompts: PromptBuilder) -> str:
    """What the evidence is and where its reading is marked (of a clip: its frames, `bench.clips`)."""
    if prompts.clip_frames is None:
        parts = "Each sheet has four panels; every panel has"
    else:
        parts = (f"Each clip has {prompts.clip_frames} frames, the motion slowed down (each frame is labelled "
                 "with its time or load); every frame has")
    return f"{parts} a ruler in metres, and a {prompts.marker()} dot with a line to the ruler marks the measured position."


def property_prompt(f: Family, action: str, clip_frames: int | None = None) -> str:
    """`clip_frames`: the evidence is clips of that many frames (`bench.clips`), not sheets."""
    prompts = PromptBuilder(f, clip_frames=clip_frames)
    prop = "mass" if action == "test_mass" else f.other
    obj = get_system(f.system).object_name
    return "\n\n".join([
        _preamble(f),
        "The measurement:\n" + _test_line(prompts, action),
        f"The attached {prompts.noun} shows the result of the {test_name(action, f.other)}. " + _sheet_note(prompts),
        _PROPERTY_QUESTION[prop].format(obj=obj),
    ])


def outcome_prompt(f: Family, clip_frames: int | None = None) -> str:
    prompts = PromptBuilder(f, clip_frames=clip_frames)
    question = _OUTCOME_QUESTION[f.system].format(
        J=fmt(f.constants.get("J", 0.0)), h=fmt(f.constants.get("h", 0.0))
    )
    return "\n\n".join([
        _preamble(f),
        "The measurements:\n" + _test_line(prompts, "test_mass") + "\n" + _test_line(prompts, "test_other"),
        f"The first attached {prompts.noun} shows the result of the mass test, the second the result of the "
        f"{f.other} test. " + _sheet_note(prompts),
        question,
    ])


def numeric_items(family: Family, clip_frames: int | None = None) -> list[Item]:
    """The 8 numeric items of one family (module docstring); `clip_frames`: each sheet shown as its clip
    of that many frames, in the clip's words (`bench.clips`)."""
    clip = clip_frames is not None
    f, fid = family, family.family_id
    outcomes = f.outcomes()
    blank = dict(
        variant=None, family_id=fid, system=f.system, initial_property=f.initial_property,
        decision_id=None, history=None, threshold_level=None, threshold=None, test=None,
        hidden_world=None, options=None, images=[], image_pair_id=None, threshold_pair_id=None,
        resolved=None, reference_action=None, reference_answer=None, reference_option=None,
        reference_value=None, style="a",
    )
    out: list[Item] = []
    prompts = {action: property_prompt(f, action, clip_frames) for action in ("test_mass", "test_other")}
    for sheet in PROPERTY_SHEETS:
        prop, _, index = sheet.partition("_")
        action = "test_mass" if prop == "mass" else "test_other"
        out.append(Item(**{
            **blank,
            "item_id": f"{fid}.estimate_property.{sheet}",
            "request": "estimate_property",
            "history": int(index),
            "test": action,
            "prompt": prompts[action],
            "images": [image_path(fid, sheet, clip=clip)],
            "image_pair_id": f"{fid}.estimate_property.{prop}",
            "reference_value": f.value(prop, int(index)),
        }))
    prompt = outcome_prompt(f, clip_frames)
    for w in WORLDS:
        out.append(Item(**{
            **blank,
            "item_id": f"{fid}.estimate_outcome.{world_name(w)}",
            "request": "estimate_outcome",
            "test": "combined_report",
            "hidden_world": world_name(w),
            "prompt": prompt,
            "images": [image_path(fid, s, clip=clip) for s in test_sheets("combined_report", w)],
            "image_pair_id": f"{fid}.estimate_outcome",
            "reference_value": round_sig(outcomes[w]),
        }))
    return out
