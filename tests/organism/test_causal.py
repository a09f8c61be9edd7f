"""The organism's causal model (evprobe.organism.causal): the answer to a reading made of one sheet's
block and another's offset."""

from __future__ import annotations

from dataclasses import replace

import pytest

from evprobe.organism.causal import hybrid_prediction, shown
from evprobe.organism.facts import Facts


def _facts(mass: tuple[float, float], reading: float) -> Facts:
    return Facts(system="sliding", mass=mass, other=(0.1, 0.3), g=9.8, constant=2.0, q=1.5,
                 seen=(("mass", reading),), options=(("A", "stop", 0.0), ("B", "other_test", 1.0)), task="select")


def test_block_shared_the_offset_decides() -> None:
    # candidates 1.0 (bin 200 = block 200 + 0) and 2.0 (bin 230 = block 200 + 30): one block
    source, target = _facts((1.0, 2.0), 2.0), _facts((1.0, 2.0), 1.0)
    assert hybrid_prediction(source, target, "image") == "source"
    assert hybrid_prediction(source, target, "image_first") == "target"  # same block: nothing changes
    assert hybrid_prediction(source, target, "image_rest") == "source"  # offset 30 in block 200: 2.0
    assert hybrid_prediction(target, source, "image_rest") == "source"


def test_blocks_differ_the_block_decides() -> None:
    # 1.0 (block 200 + 0) and 2.5 (bin 240 = block 240 + 0): the offsets agree, the blocks do not
    source, target = _facts((1.0, 2.5), 2.5), _facts((1.0, 2.5), 1.0)
    assert hybrid_prediction(source, target, "image_first") == "source"
    assert hybrid_prediction(source, target, "image_rest") == "target"


def test_undefined_where_untaught_or_a_tie() -> None:
    facts = _facts((1.0, 2.0), 1.0)
    assert shown(facts, "mass", 0.0) == 0 and shown(facts, "mass", 0.301) == 1
    assert shown(facts, "mass", 0.15) is None  # the midpoint: a coin toss
    assert shown(facts, "mass", 0.301 + 0.36) is None  # farther than training's spread from both
    assert shown(facts, "mass", -0.34) == 0


def test_not_an_image_pair_is_refused() -> None:
    a, b = _facts((1.0, 2.0), 2.0), _facts((1.0, 2.0), 1.0)
    with pytest.raises(ValueError, match="part must be one of"):
        hybrid_prediction(a, b, "text")
    with pytest.raises(ValueError, match="one sheet each"):
        hybrid_prediction(replace(a, seen=a.seen * 2), b, "image")
    with pytest.raises(ValueError, match="not an image pair"):
        hybrid_prediction(a, replace(b, mass=(1.0, 2.1)), "image")
