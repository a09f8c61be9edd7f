"""The organism's causal model of an image span: what a reading made of two sheets' tokens shows.

A sheet enters as two image tokens (`vocab.reading_tokens`): its reading's 0.4-decade block and the
offset within it. Patching part of an image pair's span at a layer where no position reads another
(below the planted layer) gives the target a reading made of one member's block and the other's
offset: a hybrid. Training taught one rule for any reading within `DataConfig.spread` decades of a
candidate: the sheet shows the candidate nearest in log10 (`organism.data.nearest`). So the answer to
the hybrid is known: the source's reference option if the hybrid is nearest the source's candidate,
the target's if nearest the target's, and undefined (None) where the rule was not taught (farther
than `spread` from both) or where it is a coin toss (within `MARGIN` decades of the midpoint).

`part`: "image" (block and offset from the source: the source's reading), "image_first" (the block
from the source: the first token of the span), "image_rest" (the offset from the source).
"""

from __future__ import annotations

import math

from evprobe.organism.data import DataConfig
from evprobe.organism.facts import OTHER_WORDS, Facts
from evprobe.organism.vocab import BLOCK_BINS, LOG_MIN, LOG_STEP, number_bin

PARTS = ("image", "image_first", "image_rest")
MARGIN = 0.03  # decades either side of the midpoint between the candidates: not scored
SPREAD = DataConfig().spread  # decades: how far from a candidate training taught the nearest-candidate rule


def _candidates(facts: Facts, prop: str) -> tuple[float, float]:
    return facts.mass if prop == "mass" else facts.other


def shown(facts: Facts, prop: str, log_value: float) -> int | None:
    """Index of the candidate a reading of log10 `log_value` shows; None where untaught or a tie."""
    d = [abs(log_value - math.log10(c)) for c in _candidates(facts, prop)]
    if min(d) > SPREAD or abs(d[0] - d[1]) < 2 * MARGIN:
        return None
    return int(d[1] < d[0])


def hybrid_prediction(source: Facts, target: Facts, part: str) -> str | None:
    """"source" or "target": whose reference option the patched target should choose; None: undefined.

    Both facts must be one select item's each, of an image pair (one sheet, same property, same
    candidates); anything else is a ValueError."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {', '.join(PARTS)}, got {part!r}")
    if len(source.seen) != 1 or len(target.seen) != 1:
        raise ValueError("an image pair's members show one sheet each")
    (prop_s, v_s), (prop_t, v_t) = source.seen[0], target.seen[0]
    if prop_s != prop_t or v_s is None or v_t is None or source.mass != target.mass or source.other != target.other:
        raise ValueError("not an image pair: the members differ in more than the sheet's reading")
    if prop_s not in ("mass", OTHER_WORDS[source.system]):
        raise ValueError(f"a sheet of {prop_s!r} is not one of the system's two properties")
    prop = "mass" if prop_s == "mass" else "other"
    k_s, k_t = number_bin(v_s), number_bin(v_t)
    if k_s is None or k_t is None:
        raise ValueError(f"readings must be positive numbers, got {v_s!r} and {v_t!r}")
    block = {"image": k_s, "image_first": k_s, "image_rest": k_t}[part] // BLOCK_BINS * BLOCK_BINS
    offset = {"image": k_s, "image_first": k_t, "image_rest": k_s}[part] % BLOCK_BINS
    hybrid = shown(source, prop, LOG_MIN + (block + offset) * LOG_STEP)
    s, t = shown(source, prop, math.log10(v_s)), shown(target, prop, math.log10(v_t))
    if hybrid is None or s is None or t is None or s == t:
        return None
    return "source" if hybrid == s else "target"
