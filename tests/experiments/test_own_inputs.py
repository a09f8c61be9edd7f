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
from evprobe.experiments.own_data.inputs import MAX_VALUE


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
