"""steering_dose_response with a generated readout (analysis.generated_readout): greedy free-form
replies under every direction x dose, read by a caller's reader, on a real tiny model. Known answers:
the unsteered replies are the plain greedy ones, a batch's steered replies are one-prompt-at-a-time
generation under hooks.steering.steer with the same vector, invalid replies stay in the denominators;
bad readers and the letter readout's arguments are refused in one line."""

from __future__ import annotations

import numpy as np
import pytest

import evprobe
from evprobe.core.errors import InputError

PROMPTS = ["Answer A or B.", "Pick one: A or B?", "Is it A or B? Say which.", "Say A or B.", "A or B?",
           "Which is it, A or B?"]
FAMILIES = ["a", "a", "b", "c", "c", "d"]
TOKENS = 4
LAYER = 1
ALPHA = 6.0


def _reader(i: int, reply: str) -> tuple[float, float]:
    """A rule of the test's own: 'abstained' when the reply holds the letter e; item 0's reply is
    invalid (it abstains on nothing, and is still an item)."""
    invalid = float(i == 0)
    return (0.0 if invalid else float("e" in reply.lower()), invalid)


READOUT = evprobe.GeneratedReadout(("abstained", "invalid"), read=_reader, max_new_tokens=TOKENS,
                                   rates=("abstained", "invalid"))


@pytest.fixture(scope="module")
def handle():
    return evprobe.tiny("llava")


@pytest.fixture(scope="module")
def vector(handle) -> np.ndarray:
    v = np.random.default_rng(3).standard_normal(handle.d_model)
    return v / np.linalg.norm(v)


@pytest.fixture(scope="module")
def result(handle, vector):
    # max_rows 4 < directions x prompts: several forwards per batch, a direction never split
    return evprobe.steering_dose_response(handle, PROMPTS, None, direction=vector, layer=LAYER, families=FAMILIES,
                                         alphas=(0.0, ALPHA), units="raw", goal=+1, n_random=3, n_relabel=0,
                                         n_boot=50, readout=READOUT, batch_size=4, max_rows=4)


def _single(handle, vector: np.ndarray | None, alpha: float) -> list[str]:
    """One prompt at a time, greedy, under one Steering (none at alpha 0)."""
    from evprobe.hooks.generation import generate
    from evprobe.hooks.steering import Steering, steer

    out = []
    for p in PROMPTS:
        if vector is None:
            out.append(generate(handle, [p], None, max_new_tokens=TOKENS)[0].text)
            continue
        with steer(handle, Steering(vector, layer=LAYER, alpha=alpha, positions="all")):
            out.append(generate(handle, [p], None, max_new_tokens=TOKENS)[0].text)
    return out


def test_unsteered_replies_are_the_plain_greedy_ones(handle, result) -> None:
    replies = result.replies
    base = replies[replies.direction == "unsteered"].sort_values("item")["reply"].tolist()
    assert base == _single(handle, None, 0.0)
    items = result.items[result.items.direction == "unsteered"].sort_values("item")
    assert items["reply"].tolist() == base
    assert items["abstained"].tolist() == [_reader(i, r)[0] for i, r in enumerate(base)]


def test_batched_steered_replies_equal_single_prompt_steering(handle, result, vector) -> None:
    from evprobe.hooks.direction_vectors import random_directions

    replies = result.replies
    probe = replies[(replies.direction == "probe") & (replies.alpha == ALPHA)].sort_values("item")["reply"].tolist()
    single = _single(handle, vector, ALPHA)
    assert probe == single
    assert single != _single(handle, None, 0.0)  # the dose moves the replies: the comparison can fail
    rand = random_directions(handle.d_model, 3, 20260905)  # the function's default seed
    for j in (0, 2):
        got = replies[(replies.direction == "random") & (replies["index"] == j)].sort_values("item")["reply"].tolist()
        assert got == _single(handle, rand[j], ALPHA)
    assert len(replies) == len(PROMPTS) * (1 + 1 + 3)  # unsteered, probe at one dose, 3 random


def test_invalid_replies_stay_in_the_denominators(result) -> None:
    e = result.effects
    unsteered = e[(e.direction == "unsteered") & (e.group == "all")].set_index("measure")
    assert (e["n"] == len(PROMPTS)).all()  # every cell counts every item, the invalid one too
    assert unsteered.loc["invalid", "value"] == pytest.approx(1 / len(PROMPTS))
    assert set(result.measures) == {"abstained", "invalid"}
    assert {"abstained_change", "invalid_change"} <= set(e.measure)


def test_the_choice_and_verdict_are_on_the_first_measure(result) -> None:
    cf = result.crossfit
    goal = cf[(cf.group == "all") & (cf.measure == "abstained_change") & (cf.null == "random")]
    assert len(goal) == 1 and goal["p_goal"].notna().all()
    other = cf[(cf.measure == "invalid_change") & (cf.null == "random")]
    assert other["p_goal"].isna().all() if "p_goal" in other else True
    assert result.verdict is not None and "relabel" in result.verdict.missing


def _refused(handle, match: str, **kw) -> None:
    args = dict(direction=np.ones(handle.d_model), layer=LAYER, families=FAMILIES, alphas=(ALPHA,), units="raw",
                n_random=0, n_relabel=0, n_boot=20, readout=READOUT)
    with pytest.raises(InputError, match=match) as err:
        evprobe.steering_dose_response(handle, PROMPTS, None, **{**args, **kw})
    assert "\n" not in str(err.value)


def test_a_reader_of_the_wrong_length_is_refused_in_one_line(handle) -> None:
    short = evprobe.GeneratedReadout(("abstained", "invalid"), read=lambda i, r: (1.0,), max_new_tokens=2)
    _refused(handle, r"the reader returned \[1.0\] for item 0's reply '';.*return 2 finite numbers", readout=short)
    rate = evprobe.GeneratedReadout(("abstained",), read=lambda i, r: (0.5,), max_new_tokens=2, rates=("abstained",))
    _refused(handle, r"rate 'abstained' the value 0.5 for item 0; a rate is 0 or 1", readout=rate)


def test_the_letter_readouts_arguments_are_refused_with_a_generated_one(handle) -> None:
    _refused(handle, r"candidates and target are the letter readout's", candidates=["A", "B"], target="A")
    _refused(handle, r"give candidates= and target=", readout=None)
    _refused(handle, r"readout must be None \(letter log-probs\) or an evprobe GeneratedReadout", readout="free")
    _refused(handle, r"measure 'log_odds' is not read here", choice=evprobe.ChoiceRule("log_odds"))


@pytest.mark.parametrize("change, match", [
    (dict(measures="abstained"), r"measures must be a tuple of distinct names"),
    (dict(rates=("chose",)), r"rates must be a tuple of its measures"),
    (dict(max_new_tokens=0), r"max_new_tokens must be an integer >= 1, got 0"),
    (dict(read="rule"), r"read must be a function"),
])
def test_a_bad_readout_spec_is_one_line(change, match: str) -> None:
    args = dict(measures=("abstained",), read=_reader, max_new_tokens=2)
    with pytest.raises(InputError, match=match):
        evprobe.GeneratedReadout(**{**args, **change})


def test_controls_ablation_and_the_plot_read_replies_too(handle, vector, tmp_path) -> None:
    """A control is read like the probe; the ablation's replies are one-prompt greedy generation with the direction
    projected out (hooks.ablation.ablate); the curve plots the first measure's change."""
    from evprobe.hooks.ablation import ablate
    from evprobe.hooks.generation import generate

    other = np.random.default_rng(9).standard_normal(handle.d_model)
    got = evprobe.steering_dose_response(handle, PROMPTS, None, direction=vector, layer=LAYER, families=FAMILIES,
                                         alphas=(ALPHA,), units="raw", n_random=2, n_relabel=0, n_boot=30,
                                         readout=READOUT, controls={"other": other}, ablation=True)
    replies = got.replies
    assert set(replies.direction) == {"unsteered", "probe", "other", "random", "ablation"}
    control = got.items[got.items.direction == "other"].sort_values("item")
    assert control["reply"].tolist() == _single(handle, other / np.linalg.norm(other), ALPHA)
    with ablate(handle, vector, layers=[LAYER]):
        single = [generate(handle, [p], None, max_new_tokens=TOKENS)[0].text for p in PROMPTS]
    assert replies[replies.direction == "ablation"].sort_values("item")["reply"].tolist() == single
    assert single != _single(handle, None, 0.0)  # the ablation moves this model's replies: the check can fail
    assert got.plot(tmp_path / "curve.png").stat().st_size > 5_000
