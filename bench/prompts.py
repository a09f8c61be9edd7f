"""Prompt text: what the models read (seed 000, sections 3.1 and B.2).

Every prompt states the candidate values, the calibration constants of every test and the ideal
assumptions. Prompts never depend on the hidden world or on which history was observed (the image
carries that), so the two members of an image pair share every prompt byte.
"""

from __future__ import annotations

from dataclasses import dataclass

from evprobe.bench.family import Family
from evprobe.bench.numbers import fmt
from evprobe.bench.reference import Prices
from evprobe.bench.render import STYLES
from evprobe.bench.systems import get_system

TEST_NAMES = {"test_mass": "mass test", "free_fall": "free-fall test", "combined_report": "combined report"}

_SETUP = {
    "sliding": (
        "A block rests on a level surface. Two of its properties are unknown: its mass is either "
        "{m0} kg or {m1} kg, and the coefficient of kinetic friction between the block and the "
        "surface is either {p0} or {p1}."
    ),
    "bouncing": (
        "A ball is dropped onto a rigid floor. Two of its properties are unknown: its mass is "
        "either {m0} kg or {m1} kg, and its coefficient of restitution with the floor is either "
        "{p0} or {p1}."
    ),
    "spring": (
        "A cart is attached to a horizontal spring. Two properties are unknown: the cart's mass "
        "is either {m0} kg or {m1} kg, and the spring's stiffness is either {p0} N/m or {p1} N/m."
    ),
}

ASSUMPTIONS = {
    "sliding": (
        "The block slides without rolling, the friction coefficient is constant, there is no air "
        "drag, and nothing blocks its path."
    ),
    "bouncing": (
        "Motion is vertical with no rotation or air drag, the floor does not move, and the "
        "coefficient of restitution is the same at every impact speed."
    ),
    "spring": (
        "The spring is massless and linear, and there is no friction or damping; the cart moves "
        "horizontally."
    ),
}

SAME_APPARATUS = {"sliding": "block and surface", "bouncing": "ball and floor", "spring": "cart and spring"}

_QUESTION = {
    "sliding": (
        "The block starts at rest on the same surface and receives an impulse of {J} N s. "
        "Will it slide more than {q} m before it stops?"
    ),
    "bouncing": (
        "The ball is dropped from a height of {h} m onto the same floor. Will its kinetic energy "
        "immediately after the bounce be more than {q} J?"
    ),
    "spring": (
        "The cart is pulled aside and released, so that it oscillates on the same spring. Will "
        "its period of oscillation be more than {q} s?"
    ),
}

_QUESTION_REWORDED = {
    "sliding": (
        "An impulse of {J} N s is delivered to the block while it rests on the same surface. "
        "Does it come to rest more than {q} m from where it started?"
    ),
    "bouncing": (
        "Someone releases the ball from {h} m above the same floor. Just after it hits the floor, "
        "does it carry more than {q} J of kinetic energy?"
    ),
    "spring": (
        "The cart is set into oscillation on the same spring. Does one full oscillation take "
        "longer than {q} s?"
    ),
}

_EQUATIONS = {
    "sliding": (
        "- Mass test: position x = F t^2 / (2 m).\n"
        "- Friction test: x = v0 t - mu g t^2 / 2 until the block stops, at x = v0^2 / (2 mu g).\n"
        "- Free-fall test: height = 1.2 - g t^2 / 2.\n"
        "- Question: the impulse gives speed J / m, so the block slides d = J^2 / (2 mu g m^2)."
    ),
    "bouncing": (
        "- Mass test: position x = F t^2 / (2 m).\n"
        "- Restitution test: the rebound speed is e sqrt(2 g H); after the bounce the height is "
        "v t - g t^2 / 2, peaking at e^2 H.\n"
        "- Free-fall test: height = 1.2 - g t^2 / 2.\n"
        "- Question: the kinetic energy just after the bounce is E = m g e^2 h."
    ),
    "spring": (
        "- Mass test: position x = F t^2 / (2 m).\n"
        "- Stiffness test: extension x = load / k.\n"
        "- Free-fall test: height = 1.2 - g t^2 / 2.\n"
        "- Question: the period is T = 2 pi sqrt(m / k)."
    ),
}

SELECT_INSTRUCTION = (
    "Choose the cheapest option that lets you answer the question with certainty: stop if the "
    "evidence already determines the answer; otherwise choose the cheapest measurement whose "
    "result, whatever it turns out to be, determines the answer. Reply with the option letter only."
)
SELECT_INSTRUCTION_REWORDED = (
    "Which option is the least expensive way to be sure of the answer? If what you have already "
    "seen settles it, answer now; if not, pick the least expensive measurement that is guaranteed "
    "to settle it. Respond with just the letter."
)
CHECK_POSSIBILITIES = (
    "Before you choose, work out which combinations of mass and {other} are still possible given "
    "the evidence, and check whether they all give the same answer to the question."
)
ANSWER_INSTRUCTION = "Reply with the option letter only."
_ANSWER_LABELS = {
    "yes": "yes",
    "no": "no",
    "undetermined": "undetermined: the evidence does not settle the answer",
}


def test_name(action: str, other: str) -> str:
    """How prompts name a test: "mass test", "friction test", "free-fall test"."""
    return TEST_NAMES.get(action, f"{other} test")


@dataclass(frozen=True)
class PromptBuilder:
    """Builds every prompt of one family in one drawing style and at one set of prices."""

    family: Family
    style: str = "a"
    prices: Prices = Prices()
    # Frames of a clip benchmark's evidence (`bench.clips`); None: sheets. Only the words that name
    # the evidence change with it.
    clip_frames: int | None = None

    @property
    def noun(self) -> str:
        """What the evidence is called: "sheet" or "clip"."""
        return "sheet" if self.clip_frames is None else "clip"

    def _shows(self, line: str) -> str:
        """A test-menu line with "the panels show" said of a clip's four panel frames."""
        n = self.clip_frames
        if n is None:
            return line
        q = n // 4
        return line.replace("the panels show", f"frames {q}, {2 * q}, {3 * q} and {n} of its clip show", 1)

    # ---- shared blocks -------------------------------------------------------------------
    def setup(self) -> str:
        f = self.family
        m0, m1 = f.candidates["mass"]
        p0, p1 = f.candidates[f.other]
        text = _SETUP[f.system].format(m0=fmt(m0), m1=fmt(m1), p0=fmt(p0), p1=fmt(p1))
        return (
            f"{text} All four combinations are equally likely before any measurement; everything "
            f"else is known. Take g = {fmt(f.constants['g'])} m/s^2.\n"
            f"Ideal assumptions: {ASSUMPTIONS[f.system]} Every test uses the same "
            f"{SAME_APPARATUS[f.system]}, and a measurement shows exact values with no noise."
        )

    def question(self, level: str, reworded: bool = False, threshold_text: str | None = None) -> str:
        """The question at threshold `level`; `threshold_text` writes the threshold as given (the
        unstated void, `bench.voids`, writes a symbol with no value)."""
        f = self.family
        template = (_QUESTION_REWORDED if reworded else _QUESTION)[f.system]
        return template.format(
            q=fmt(f.thresholds[level]) if threshold_text is None else threshold_text,
            J=fmt(f.constants.get("J", 0.0)),
            h=fmt(f.constants.get("h", 0.0)),
        )

    def marker(self) -> str:
        return STYLES[self.style].marker_name

    def tests(self) -> str:
        """The menu of measurements with their calibration constants."""
        f = self.family
        cal, obj = f.calibration, get_system(f.system).object_name
        mass = cal["test_mass"]
        if self.clip_frames is None:
            head = "Each gives a sheet of four panels; every panel has a "
        else:
            head = (f"Each gives a clip of {self.clip_frames} frames, the motion slowed down (each frame is "
                    "labelled with its time or load); every frame has a ")
        lines = [
            f"Measurements that can be made. {head}"
            f"ruler in metres, and a {self.marker()} dot with a line to the ruler marks the "
            "measured position.",
            f"- Mass test: the {obj} is pushed from rest by a constant force of {fmt(mass['force'])} N "
            f"along a frictionless {fmt(mass['ruler'])} m track; the panels show its position at "
            f"t = {_list(mass['times'])} s.",
        ]
        other = cal["test_other"]
        if f.system == "sliding":
            lines.append(
                f"- Friction test: the block is launched at {fmt(other['launch_speed'])} m/s along "
                f"a {fmt(other['ruler'])} m track of the same surface and coasts; the panels show "
                f"its position at t = {_list(other['times'])} s after launch."
            )
        elif f.system == "bouncing":
            lines.append(
                f"- Restitution test: the ball is dropped from {fmt(other['drop_height'])} m onto "
                f"the same floor; the panels show its height above the floor at "
                f"t = {_list(other['times'])} s after the bounce."
            )
        else:
            lines.append(
                "- Stiffness test: static loads of "
                f"{_list(other['loads'])} N stretch the same spring; the panels show its "
                "extension from the rest position under each load."
            )
        fall = cal["free_fall"]
        lines.append(
            f"- Free-fall test: the {obj} is released from rest {fmt(fall['release_height'])} m "
            f"above the floor; the panels show its height at t = {_list(fall['times'])} s, "
            "before it reaches the floor."
        )
        lines.append(f"- Combined report: the {self.noun}s of both the mass test and the {f.other} test.")
        return "\n".join(self._shows(line) for line in lines)

    def evidence_initial(self) -> str:
        name = test_name("test_mass" if self.family.initial == "mass" else "test_other", self.family.other)
        return f"Evidence so far: the attached {self.noun} shows the result of the {name}, already performed."

    def evidence_after(self, test: str) -> str:
        f = self.family
        first = test_name("test_mass" if f.initial == "mass" else "test_other", f.other)
        if test == "combined_report":
            then = f"the next two {self.noun}s show the combined report: the mass test, then the {f.other} test"
        else:
            then = f"the next {self.noun} shows the {test_name(test, f.other)}, just performed"
        return f"Evidence: the first attached {self.noun} shows the {first}, already performed; {then}."

    def option_menu(self, options: dict[str, str], reworded: bool = False) -> str:
        other = self.family.other
        labels = {
            "stop": "Stop and answer the question now",
            "test_mass": "Perform the mass test",
            "test_other": f"Perform the {other} test",
            "free_fall": "Perform the free-fall test",
            "combined_report": f"Get the combined report (mass test and {other} test)",
        }
        if reworded:
            labels = {
                "stop": "Answer now, with no further measurement",
                "test_mass": "Run the mass test",
                "test_other": f"Run the {other} test",
                "free_fall": "Run the free-fall test",
                "combined_report": f"Buy the combined report of the mass and {other} tests",
            }
        rows = [
            f"{letter}. {labels[action]} (cost {fmt(self.prices.of(action))})"
            for letter, action in options.items()
        ]
        return "Options:\n" + "\n".join(rows)

    def answer_menu(self) -> str:
        rows = [f"{letter}. {_ANSWER_LABELS[a]}" for letter, a in self.family.answer_options.items()]
        return "What is the answer to the question, given the evidence?\n" + "\n".join(rows)

    # ---- whole prompts -----------------------------------------------------------------
    def select(
        self,
        level: str,
        *,
        variant: str | None = None,
        readings_text: str | None = None,
    ) -> str:
        f = self.family
        reworded = variant == "reworded"
        evidence = (
            "Evidence so far: no measurement has been performed yet."
            if variant == "no_initial_test"
            else self.evidence_initial()
        )
        if variant == "text_readings":
            assert readings_text is not None
            evidence += "\n" + readings_text
        parts = [self.setup(), "Question: " + self.question(level, reworded), self.tests(), evidence]
        if variant == "given_equations":
            parts.append("Relations you may use:\n" + _EQUATIONS[f.system])
        options = f.reworded_options if reworded else f.options
        parts.append(self.option_menu(options, reworded))
        instruction = SELECT_INSTRUCTION_REWORDED if reworded else SELECT_INSTRUCTION
        if variant == "check_possibilities":
            instruction = CHECK_POSSIBILITIES.format(other=f.other) + " " + instruction
        parts.append(instruction)
        return "\n\n".join(parts)

    def answer_initial(self, level: str) -> str:
        return self._answer(level, self.evidence_initial())

    def answer_after(self, level: str, test: str) -> str:
        return self._answer(level, self.evidence_after(test))

    def both_given(self, level: str, mass: float, other: float) -> str:
        f = self.family
        unit = " N/m" if f.system == "spring" else ""
        evidence = (
            f"Evidence: both unknowns have been established. The mass is {fmt(mass)} kg and the "
            f"{f.other} is {fmt(other)}{unit}."
        )
        parts = [self.setup(), "Question: " + self.question(level), evidence]
        return "\n\n".join(parts + [self.answer_menu(), ANSWER_INSTRUCTION])

    def _answer(self, level: str, evidence: str) -> str:
        parts = [self.setup(), "Question: " + self.question(level), self.tests(), evidence]
        return "\n\n".join(parts + [self.answer_menu(), ANSWER_INSTRUCTION])

    def read_ruler(self, test: str) -> str:
        name = test_name(test, self.family.other)
        if self.clip_frames is None:
            parts, last = "four panels, each", "the last panel (bottom right)"
        else:
            parts, last = f"{self.clip_frames} frames, each", "the last frame"
        return (
            f"The attached {self.noun} shows the result of a {name}: {parts} with a ruler in "
            f"metres, where a {self.marker()} dot with a line to the ruler marks the measured "
            f"position.\n\nWhat is the ruler reading at the marked position in {last}? "
            "Reply with the number in metres only."
        )

    def recover_property(self, test: str) -> str:
        f = self.family
        prop = "mass" if test == "test_mass" else f.other
        unit = " kg" if prop == "mass" else (" N/m" if f.system == "spring" else "")
        rows = [
            f"{letter}. {fmt(f.value('mass' if prop == 'mass' else 'other', idx))}{unit}"
            for letter, idx in f.recover_options.items()
        ]
        parts = [
            self.setup(),
            self.tests(),
            f"The attached {self.noun} shows the result of the {test_name(test, f.other)}.",
            f"Which value of the {prop} does this measurement show?\n" + "\n".join(rows),
            ANSWER_INSTRUCTION,
        ]
        return "\n\n".join(parts)


def readings_text(system: str, calibration: dict, marks: tuple[float, ...], sheet_kind: str,
                  clip_frames: int | None = None) -> str:
    """The text-readings variant: each panel's timestamp or load and its marked reading (of a clip:
    its four panel frames', `bench.clips`)."""
    if sheet_kind == "extension":
        keys = [f"load {fmt(x)} N" for x in calibration["test_other"]["loads"]]
        what = "extension"
    else:  # free fall: only the injection ladder's level 3 shows its readings (bench.injection)
        test = {"mass": "test_mass", "free_fall": "free_fall"}.get(sheet_kind, "test_other")
        cal = calibration[test]
        keys = [f"t = {fmt(t)} s" for t in cal["times"]]
        what = "height above the floor" if sheet_kind in ("rebound", "free_fall") else "position"
    if clip_frames is None:
        rows = [f"- panel {i + 1} ({k}): {what} {fmt(v)} m" for i, (k, v) in enumerate(zip(keys, marks))]
        return "Readings from the sheet:\n" + "\n".join(rows)
    q = clip_frames // 4
    rows = [f"- frame {q * (i + 1)} ({k}): {what} {fmt(v)} m" for i, (k, v) in enumerate(zip(keys, marks))]
    return "Readings from the clip:\n" + "\n".join(rows)


def _list(values: list[float]) -> str:
    texts = [fmt(v) for v in values]
    return ", ".join(texts[:-1]) + " and " + texts[-1]
