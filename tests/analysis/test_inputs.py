"""The own-data functions' inputs checked before any work (issue 53 item 8): each hostile input the
issue measured gets one InputError line naming the argument, the value and the fix, and property
tests generate hostile tables: every call either returns finite numbers or raises InputError."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import evprobe
from evprobe.core.errors import InputError
from evprobe.analysis.inputs import MAX_VALUE


def _table(values: list[float], families: list | None = None) -> pd.DataFrame:
    """Two conditions of 8 items in 4 families; `values` are the steered condition's readouts."""
    fams = families or [f"f{i // 2}" for i in range(8)]
    return pd.DataFrame([{"condition": c, "item": i, "family": fams[i], "x": values[i] if c == "steer" else 0.5}
                         for c in ("base", "steer") for i in range(8)])


def _effects(frame, **kw) -> pd.DataFrame:
    return evprobe.paired_effects(frame, **{"baseline": "base", "measures": ["x"], "n_boot": 50, **kw})


def _one_line(match: str, call) -> None:
    with pytest.raises(InputError, match=match) as err:
        call()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("bad", [math.inf, -math.inf, 1e308, -1e51])
def test_a_value_past_the_bound_is_refused_naming_condition_item_and_measure(bad: float) -> None:
    """On main inf and 1e308 were accepted (6 non-finite numbers returned: 1e308 squared is inf)."""
    _one_line(rf"condition 'steer', item 0, measure 'x': {re.escape(repr(bad))} is not a readout.*rescale",
              lambda: _effects(_table([bad] + [1.0] * 7)))


def test_the_largest_accepted_value_gives_finite_numbers() -> None:
    got = _effects(_table([MAX_VALUE, -MAX_VALUE, MAX_VALUE, MAX_VALUE / 3, -MAX_VALUE, 0.0, MAX_VALUE, 1.0]))
    steered = got[got.condition == "steer"][["value", "lo", "hi"]].to_numpy(dtype=float)
    assert np.isfinite(steered).all() and (steered[:, 2] > steered[:, 1]).all()  # a real interval, no inf


@pytest.mark.parametrize("family", [math.nan, None, pd.NA])
def test_a_missing_family_is_no_family(family) -> None:
    """On main NaN families read as a family (and then failed as 'family nan in one row and nan in another')."""
    _one_line(r"column 'family': row 0 is .*not an id; give every row a family id",
              lambda: _effects(_table([1.0] * 8, [family, family, "a", "a", "b", "b", "c", "c"])))


@pytest.mark.parametrize("n_boot, shown", [(True, "a bool"), (0, "0"), (2.5, "2.5"), ("100", "'100'"),
                                           (10**7, "10000000")])
def test_n_boot_is_a_count_of_resamples(n_boot, shown: str) -> None:
    """On main n_boot=True ran as 1 resample."""
    _one_line(rf"n_boot must be an integer from 1 to 1000000, got {shown}", lambda: _effects(_table([1.0] * 8),
                                                                                          n_boot=n_boot))


def test_seed_is_a_non_negative_integer() -> None:
    _one_line("seed must be an integer >= 0, got a bool", lambda: _effects(_table([1.0] * 8), seed=True))
    _one_line("seed must be an integer >= 0, got -1", lambda: _effects(_table([1.0] * 8), seed=-1))


def test_a_dict_is_not_a_frame() -> None:
    """On main: AttributeError 'dict' object has no attribute 'columns'."""
    _one_line(r"frame must be a pandas DataFrame .* got dict; pass pd.DataFrame",
              lambda: _effects(_table([1.0] * 8).to_dict("list")))


def test_a_measure_named_like_a_key_column_is_refused() -> None:
    """On main: a pandas KeyError ("None of [Index(['item'] ...")."""
    _one_line(r"measure 'item' is also the item column", lambda: _effects(_table([1.0] * 8), measures=["item"]))
    _one_line(r"measure 'family' is also the family column", lambda: _effects(_table([1.0] * 8), measures=["family"]))
    _one_line(r"must name different columns", lambda: _effects(_table([1.0] * 8), family="item"))


def test_odd_columns_and_names_are_refused() -> None:
    frame = _table([1.0] * 8)
    _one_line(r"measures must be a list of column names, e.g. measures=\['x'\]", lambda: _effects(frame, measures="x"))
    _one_line(r"measures must be a list of column names", lambda: _effects(frame, measures=3))
    _one_line(r"measures must be a list of column names", lambda: _effects(frame, measures=[["x"]]))
    twice = pd.concat([frame, frame[["x"]]], axis=1)
    _one_line(r"2 columns named 'x'", lambda: _effects(twice))
    _one_line(r"measure 'x' holds complex128 values", lambda: _effects(frame.assign(x=frame.x + 1j)))


def test_a_bootstrap_past_the_memory_bound_is_refused() -> None:
    many = pd.DataFrame([{"condition": c, "item": i, "family": i, "x": 1.0} for c in ("base", "steer")
                         for i in range(200)])
    _one_line(r"n_boot 1000000 x \(200 families \+ 1 cells\) = 201,000,000 numbers.*lower n_boot",
              lambda: _effects(many, n_boot=1_000_000))


HOSTILE_NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**400, 10**400),
                            st.booleans(), st.none(), st.text(max_size=3), st.just(1e308), st.just(-1e308))
IDS = st.one_of(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 3), st.none(), st.just(math.nan),
                st.just(pd.NA), st.lists(st.integers(), max_size=1).map(tuple), st.just(("x", [1])))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(HOSTILE_NUMBERS, min_size=8, max_size=8), families=st.lists(IDS, min_size=8, max_size=8),
       n_boot=st.one_of(st.integers(-2, 60), st.booleans(), st.floats(), st.none()),
       seed=st.one_of(st.integers(-2, 2**70), st.booleans(), st.none()),
       measures=st.one_of(st.just(["x"]), st.just("x"), st.just(["item"]), st.just([]), st.just(["x", "x"]),
                          st.just(["nope"]), st.none()))
def test_hostile_tables_give_finite_numbers_or_one_input_error(values, families, n_boot, seed, measures) -> None:
    frame = _table(values, families)
    try:
        got = _effects(frame, n_boot=n_boot, seed=seed, measures=measures)
    except InputError as err:
        assert "\n" not in str(err)
        return
    numbers = got[["value", "lo", "hi"]].to_numpy(dtype=float)
    assert np.isfinite(numbers[~np.isnan(numbers)]).all()  # NaN: no number (None), never inf


@settings(max_examples=80, deadline=None)
@given(values=st.lists(st.one_of(st.floats(-MAX_VALUE, MAX_VALUE), st.just(math.nan), st.just(MAX_VALUE),
                                 st.just(-MAX_VALUE), st.just(5e-324)), min_size=8, max_size=8),
       proportion=st.booleans())
def test_every_accepted_table_gives_finite_numbers(values, proportion) -> None:
    """The success path: any readouts within the bound (NaN: undefined) give finite estimates and
    bounds, or one InputError (a proportion that is not 0/1), never inf or another exception."""
    try:
        got = _effects(_table(values), proportions=["x"] if proportion else [])
    except InputError as err:
        assert proportion and "a proportion's values are 0, 1 or NaN" in str(err)
        return
    numbers = got[["value", "lo", "hi"]].to_numpy(dtype=float)
    assert np.isfinite(numbers[~np.isnan(numbers)]).all()


# -- steering_dose_response: refused before any forward ------------------------------------------

PROMPTS = ["Answer A or B.", "Pick one: A or B?", "Is it A or B?", "Say A or B."]


@pytest.fixture(scope="module")
def tiny_llava():
    return evprobe.tiny("llava")


def _dose(handle, prompts=PROMPTS, **kw):
    vector = np.random.default_rng(0).standard_normal(handle.d_model)
    args = dict(direction=vector, layer=1, candidates=["A", "B"], target="A", families=["a", "b", "c", "d"],
                n_random=0, n_relabel=0, n_boot=20, alphas=(0.5,))
    images = kw.pop("images", None)
    return evprobe.steering_dose_response(handle, prompts, images, **{**args, **kw})


@pytest.mark.parametrize("change, message", [
    # on main: mean_norm 0 gave non-finite numbers, a negative one flipped every dose's sign
    (dict(mean_norm=0), r"mean_norm must be a finite number > 0, got 0; the mean residual norm"),
    (dict(mean_norm=-2.0), r"mean_norm must be a finite number > 0, got -2.0"),
    (dict(mean_norm=math.nan), r"mean_norm must be a finite number > 0, got NaN"),
    (dict(mean_norm={1: 0.0}), r"mean_norm\[1\] must be a finite number > 0, got 0.0"),
    (dict(mean_norm={3: 1.0}), r"mean_norm has key 3, not a steered layer \(\[1\]\)"),
    # on main: "range() arg 3 must not be zero"
    (dict(batch_size=0), r"batch_size must be an integer >= 1, got 0"),
    (dict(batch_size=True), r"batch_size must be an integer >= 1, got a bool"),
    (dict(max_rows=0), r"max_rows must be an integer >= 1, got 0"),
    (dict(n_boot=True), r"n_boot must be an integer from 1 to 1000000, got a bool"),
    (dict(n_random=True), r"n_random must be an integer from 0 to 100000, got a bool"),
    (dict(seed=-1), r"seed must be an integer >= 0, got -1"),
    (dict(goal=True), r"goal must be \+1 .* got True"),
    (dict(alphas=(True,)), r"alphas\[0\] must be a finite number of magnitude <= 1000, got a bool"),
    (dict(alphas=(0.5, math.inf)), r"alphas\[1\] must be a finite number"),
    (dict(alphas=(5000.0,)), r"alphas\[0\] must be a finite number of magnitude <= 1000, got 5000.0; doses are in "
                             r"multiples of the mean residual norm"),
    (dict(prompts=[None, "a", "b", "c"]), r"prompts\[0\] is null; each must be a string"),
    (dict(prompts=[]), r"prompts is empty"),
    (dict(families=[None, "b", "c", "d"]), r"families: prompt 0 is null, not an id"),
    (dict(candidates=["A", ""]), r"candidates\[1\] is ''; each must be a non-empty string"),
    (dict(layer=True), r"layer must be an integer >= 0, got a bool"),
    (dict(direction=np.full(64, 1e308)), None),  # accepted: normalised without overflow (was a zero vector)
    (dict(direction="vec"), r"direction at layer 1: could not convert"),
    (dict(images=[[]]), r"images must hold one list of images per prompt \(4 lists"),
    (dict(choice="chose"), r"choice must be an evprobe ChoiceRule \(analysis.dose_grid\), got 'chose'"),
    (dict(choice=evprobe.ChoiceRule("stop_rate")), r"measure 'stop_rate' is not read here; choose from log_odds, chose"),
])
def test_each_bad_argument_is_one_line_before_any_forward(tiny_llava, change, message) -> None:
    prompts = change.pop("prompts", PROMPTS)
    if message is None:  # a hostile but valid input: measured by the forwards below
        assert np.isfinite(_dose(tiny_llava, prompts, **change).effects.value.astype(float)).all()
        return
    _one_line(message, lambda: _dose(tiny_llava, prompts, **change))


def test_a_prompt_past_the_context_is_refused_in_tokens(tiny_llava) -> None:
    """On main a 20,000-word prompt went on to allocate 28.8 GB."""
    _one_line(r"prompts\[0\] is \d+ tokens \(images included\), beyond the 4096-token context of tiny:llava \(its "
              r"config's max_position_embeddings\); shorten it",
              lambda: _dose(tiny_llava, ["word " * 20000, *PROMPTS[1:]]))


def test_forwards_past_the_free_memory_are_refused(tiny_llava) -> None:
    """3,000 tokens in forwards of 320,016 rows (20,001 directions x 4 doses x 4 prompts): about 46 TiB."""
    _one_line(r"prompts\[0:8\] \(\d+ tokens padded\) in forwards of 320016 rows need about [\d.]+ GiB, beyond the "
              r"[\d.]+ GiB free; lower max_rows and batch_size",
              lambda: _dose(tiny_llava, ["word " * 1000, *PROMPTS[1:]], n_random=20_000, max_rows=10**6,
                            alphas=(-1, -0.5, 0.5, 1)))


def test_a_dose_that_overflows_the_model_is_refused_not_returned(tiny_llava) -> None:
    """mean_norm 1e300 passes the checks (a finite positive unit), but the raw doses overflow float32:
    one line instead of NaN log-odds."""
    _one_line(r"layer 1: the steered model's log-probabilities are not finite at raw doses up to 5e\+299 "
              r"\(torch.float32\); lower \|alpha\|", lambda: _dose(tiny_llava, mean_norm=1e300))


BAD = {
    "mean_norm": [0, -1.0, math.nan, math.inf, True, "1", {1: 0}, {True: 1.0}, {"1": 1.0}, [1.0]],
    "batch_size": [0, -1, True, 1.5, "8", None, math.nan],
    "max_rows": [0, False, 2.0, None],
    "n_boot": [0, True, 10**7, 2.0, None],
    "seed": [-1, True, 1.0, None, "0"],
    "split_seed": [-3, False, 0.5],
    "random_seed": [-5, True, 1.5, "1"],
    "n_random": [-1, True, 10**6, 1.0],
    "n_relabel": [-1, False, 10**6, "2"],
    "goal": [True, 0, 2, None, "+1"],
    "alphas": [[], [0], (True,), (math.inf,), (math.nan,), (1e9,), "1", 5, [None], [0.5, "x"], None],
    "prompts": ["text", [], [None, "x", "y", "z"], [1, 2, 3, 4], None],
    "families": [None, [None] * 4, ["a"] * 4, ["a", "b"], [["a"], "b", "c", "d"], "abcd"],
    "candidates": [["A"], ["A", "A"], "AB", [None, "B"], ["", "B"], None],
    "target": ["Z", None, 1, ["A"]],
    "units": ["x", None, 1],
    "groups": [[None] * 4, ["g"] * 3, "g", 5],
    "goal_group": [1, None, "nobody", ["all"]],
    "layer": [True, -1, 99, "1", 1.5],
    "direction": [np.zeros(64), np.full(64, math.nan), np.ones(3), "vec", None, [[1.0] * 64]],
    "controls": ["c", [np.ones(64)], {"c": np.zeros(64)}, {"c": "v"}],
    "images": ["img", [[]], [None] * 4, 5],
}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(broken=st.sampled_from(sorted(BAD)), data=st.data())
def test_hostile_arguments_raise_one_input_error_and_nothing_else(tiny_llava, broken, data) -> None:
    """One argument drawn from its hostile values, the others from theirs or left valid: the call is
    refused with one InputError line before any forward, never another exception."""
    change = {broken: data.draw(st.sampled_from(BAD[broken]), label=broken)}
    for name in data.draw(st.lists(st.sampled_from(sorted(BAD)), max_size=3, unique=True), label="others"):
        change.setdefault(name, data.draw(st.sampled_from(BAD[name]), label=name))
    prompts = change.pop("prompts", PROMPTS)
    with pytest.raises(InputError) as err:
        _dose(tiny_llava, prompts, **change)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("change, message", [
    (dict(n_boot=True), r"n_boot must be an integer from 1 to 1000000, got a bool"),
    (dict(seed=-1), r"seed must be an integer >= 0, got -1"),
    (dict(families=[None, "b"]), r"families: pair 0 is null, not an id"),
    (dict(pairs=[("a", "b"), (("x", None), ("y", None))]), r"pairs\[0\] is \[\"a\", \"b\"\]; give \(\(prompt, images\)"),
    (dict(pairs=[(("word " * 20000, None), ("y", None)), (("x", None), ("y", None))]),
     r"prompts\[0\] is \d+ tokens .* beyond the 4096-token context"),
])
def test_pair_patching_checks_its_inputs_before_any_forward(tiny_llava, change, message) -> None:
    """n_boot=True used to fail only after every pair was patched (FamilyBootstrap's ValueError)."""
    args = dict(pairs=[(("Say A.", None), ("Say B.", None)), (("Pick A.", None), ("Pick B.", None))],
                families=["a", "b"], candidates=["A", "B"], n_boot=20)
    _one_line(message, lambda: evprobe.pair_patching(tiny_llava, **{**args, **change}))


@pytest.mark.parametrize("change, message", [
    (dict(batch_size=0), r"batch_size must be an integer >= 1, got 0"),
    (dict(families=["a", math.nan, "b", "b"]), r"families: prompt 1 is NaN, not an id"),
    (dict(prompts=["x", None, "y", "z"]), r"prompts\[1\] is null; each must be a string"),
])
def test_probe_layers_checks_its_inputs_before_any_forward(tiny_llava, tmp_path, change, message) -> None:
    args = dict(prompts=PROMPTS, labels=[True, False, True, False], families=["a", "a", "b", "b"],
                out=tmp_path / "sweep")
    _one_line(message, lambda: evprobe.probe_layers(tiny_llava, **{**args, **change}))
    assert not (tmp_path / "sweep").exists()  # refused before anything was written


def test_the_choice_rule_is_a_parameter_each_half_chooses_by(tiny_llava) -> None:
    """Each half's chosen dose is the one whose mean of the rule's measure (over that half's items,
    read from the result's per-item table) is furthest toward the goal, ties to the smaller |alpha|."""
    from evprobe.analysis.specificity import split_halves

    chosen = []
    for rule, measure in ((None, "log_odds"), (evprobe.ChoiceRule("chose"), "chose")):
        result = _dose(tiny_llava, alphas=(-2.0, -1.0, 1.0, 2.0, 4.0, 8.0, 16.0), n_random=3,
                       **({} if rule is None else {"choice": rule}))
        chosen.append(tuple(result.crossfit[f"chosen_on_{h}_alpha"].iloc[0] for h in "AB"))
        items = result.items[result.items.direction == "probe"]
        half = split_halves({"all": ["a", "b", "c", "d"]}, 0)
        for h in "AB":
            mine = items[items.family.map(half) == h]
            means = mine.groupby("alpha")[measure].mean()
            best = max(means.items(), key=lambda kv: (round(kv[1], 9), -abs(kv[0])))[0]
            assert result.crossfit[f"chosen_on_{h}_alpha"].iloc[0] == best, (measure, h, means.to_dict())
    assert chosen[0] != chosen[1]  # here the two rules choose apart: the rule is not ignored
