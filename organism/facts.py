"""What the organism reads: the facts of one request, written as a short token sequence.

The organism never reads the English prompt word by word. Its front end (`organism.reader`)
extracts what a careful reader would note from the prompt and the sheets, and nothing else:

    <bos> {system} <mass:m0> <mass:m1> <{other}:p0> <{other}:p1> <g:G> [<J:J> | <h:h>] <q:Q>
          <seen_{property}:B> <fine_{property}:F> ...   per attached sheet, in order ("none" if none):
                                           its reading V as a span of two image tokens, V's
                                           0.4-decade block and its offset there
          options <A:{action}> <cost:c> ...  the menu as shown: one token per row (letter and
                                           what it offers), then its price
          {task}                           select | answer | recover | read | task

Each number is one token of its quantity's type (`organism.vocab`); V is the value of the property
that best explains the sheet's four marked positions. No label, no candidate index and no world is
ever written: which candidate a sheet shows, which worlds remain and whether the evidence settles
the question are left to the transformer.

Training builds the same `Facts` straight from a freshly drawn family (`from_family`), with the
sheet value jittered by the eye's measured error; `organism.reader` builds them from a real
prompt and its images. A test checks that both give the same tokens on the benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass

from evprobe.organism.vocab import number_token, reading_tokens

# How a menu action is written (the prompt's wording differs per system and variant).
ACTION_WORDS = {
    "stop": "stop",
    "test_mass": "mass_test",
    "test_other": "other_test",
    "free_fall": "fall_test",
    "combined_report": "report",
}
OTHER_WORDS = {"sliding": "friction", "bouncing": "restitution", "spring": "stiffness"}
CONSTANT_OF = {"sliding": "J", "bouncing": "h", "spring": None}


@dataclass(frozen=True)
class Facts:
    """The facts of one request (see the module docstring for their token form).

    seen: one (property word, value) per attached sheet; value None = the sheet could not be
        read (no calibration for it in the prompt, or no marker found).
    options: (letter, what, cost) per menu row; what is an action word, an answer word or a
        number; cost None when the row has no price.
    """

    system: str
    mass: tuple[float, float]
    other: tuple[float, float]
    g: float
    constant: float | None
    q: float | None
    seen: tuple[tuple[str, float | None], ...]
    options: tuple[tuple[str, str | float, float | None], ...]
    task: str

    def tokens(self) -> list[str]:
        other = OTHER_WORDS[self.system]
        out = ["<bos>", self.system, number_token("mass", self.mass[0]), number_token("mass", self.mass[1])]
        out += [number_token(other, self.other[0]), number_token(other, self.other[1])]
        out.append(number_token("g", self.g))
        name = CONSTANT_OF[self.system]
        if name is not None and self.constant is not None:
            out.append(number_token(name, self.constant))
        if self.q is not None:
            out.append(number_token("q", self.q))
        if not self.seen:
            out.append("none")
        for prop, value in self.seen:
            out += ["unread"] if value is None else reading_tokens(prop, value)
        out.append("options")
        for letter, what, cost in self.options:
            if isinstance(what, str):
                out.append(f"<{letter}:{what}>")
            else:
                out += [f"<{letter}:value>", number_token("num", what)]
            if cost is not None:
                out.append(number_token("cost", cost))
        out.append(self.task)
        return out

    def text(self) -> str:
        return " ".join(self.tokens())
