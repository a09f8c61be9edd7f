"""The one estimator of dose-response numbers (evprobe.analysis.effects) and
evprobe.paired_effects on readouts a user brings: known answers on small tables, each check shown
catching a bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import evprobe
from evprobe.core.bootstrap import FamilyBootstrap
from evprobe.core.errors import InputError
from evprobe.analysis.effects import cell_estimates, cells


def _frame(n_families: int = 12, per: int = 4, shift: float = 1.0, seed: int = 0) -> pd.DataFrame:
    """Two conditions of the same items: a log-odds moved by `shift` plus noise, and the choice it implies."""
    rng = np.random.default_rng(seed)
    rows = []
    for f in range(n_families):
        u = rng.normal()
        for k in range(per):
            y0 = u + rng.normal()
            y1 = y0 + shift + 0.5 * rng.normal()
            for cond, y in (("base", y0), ("steered", y1)):
                rows.append({"condition": cond, "item": f"f{f}-{k}", "family": f"f{f}",
                             "group": "odd" if f % 2 else "even", "log_odds": y, "chose": float(y > 0)})
    return pd.DataFrame(rows)


def _effects(frame: pd.DataFrame, **kw) -> pd.DataFrame:
    args = dict(baseline="base", measures=["log_odds", "chose"], proportions=["chose"], group="group", n_boot=400)
    return evprobe.paired_effects(frame, **{**args, **kw})


def test_estimates_and_paired_changes_of_a_known_table() -> None:
    frame = _frame()
    got = _effects(frame).set_index(["condition", "group", "measure"])
    base, steered = (frame[frame.condition == c].set_index("item") for c in ("base", "steered"))
    change = (steered.log_odds - base.log_odds).mean()
    row = got.loc[("steered", "all", "log_odds_change")]
    assert row["value"] == pytest.approx(change) and row["lo"] < change < row["hi"] and row["n"] == 48
    odd = got.loc[("steered", "odd", "chose")]
    assert odd["value"] == pytest.approx(steered[steered.group == "odd"].chose.mean()) and odd["n"] == 24
    assert ("base", "all", "log_odds_change") not in got.index  # the baseline against itself is no estimate
    # every interval has width: the table's units differ
    assert ((got["hi"] - got["lo"]) > 0).all() and not got["identical"].any()


def test_no_point_intervals_identical_units_are_marked_and_rates_are_never_points() -> None:
    frame = _frame()
    frame["log_odds"] = np.round(frame["log_odds"] * 4) / 4  # quarters: a shift of 2 is exact in floats
    frame.loc[frame.condition == "steered", "log_odds"] = frame.loc[frame.condition == "base", "log_odds"].values + 2.0
    frame["chose"] = 1.0  # every item chooses alike in both conditions: a rate of 100% and a change of 0
    got = _effects(frame).set_index(["condition", "group", "measure"])
    moved = got.loc[("steered", "all", "log_odds_change")]
    assert moved["identical"] and moved["value"] == 2.0 and pd.isna(moved["lo"]) and pd.isna(moved["hi"])
    rate = got.loc[("steered", "all", "chose")]
    assert rate["value"] == 1.0 and rate["lo"] < 0.95 and rate["hi"] == 1.0 and not rate["identical"]
    still = got.loc[("steered", "all", "chose_change")]
    assert still["value"] == 0.0 and still["lo"] < 0 < still["hi"]  # widened (MOVER), never [0, 0]


def test_undefined_values_leave_the_denominator() -> None:
    frame = _frame()
    frame.loc[frame.item.str.endswith("-0"), "log_odds"] = np.nan  # one item a family has no value
    got = _effects(frame).set_index(["condition", "group", "measure"])
    assert got.loc[("steered", "all", "log_odds"), "n"] == 36 and got.loc[("steered", "all", "chose"), "n"] == 48
    kept = frame[~frame.item.str.endswith("-0")]
    assert got.loc[("steered", "all", "log_odds"), "value"] == pytest.approx(
        kept[kept.condition == "steered"].log_odds.mean())


def test_the_changes_are_paired() -> None:
    """A shift shared by the two conditions' items cancels: the paired interval is far narrower than
    either condition's own interval (unpaired resampling would add the two widths)."""
    got = _effects(_frame(shift=0.3)).set_index(["condition", "group", "measure"])
    change = got.loc[("steered", "all", "log_odds_change")]
    own = got.loc[("steered", "all", "log_odds")]
    assert change["hi"] - change["lo"] < 0.5 * (own["hi"] - own["lo"])


def test_cells_refuse_unpaired_conditions() -> None:
    boot = FamilyBootstrap(["a", "b"], 50, 0)
    fam = boot.family_index(["a", "a", "b"])
    masks = {"all": np.ones(3, bool)}
    base = cells(np.zeros((3, 1)), masks, boot, fam, [False])
    other = cells(np.zeros((2, 1)), {"all": np.ones(2, bool)}, boot, fam[:2], [False])
    with pytest.raises(ValueError, match="the same items and measures"):
        cell_estimates(other, base)
    with pytest.raises(ValueError, match="proportion"):  # a share of 2 is no proportion
        cells(np.array([[2.0], [1.0], [1.0]]), masks, boot, fam, [True])


def test_bad_tables_are_one_line_naming_what_to_fix() -> None:
    frame = _frame()
    cases = [
        (frame.drop(columns="family"), {}, "no column 'family' in the frame"),
        (frame, dict(baseline="none"), "baseline 'none' is not a condition"),
        (frame[~((frame.condition == "steered") & (frame.item == "f3-1"))], {},
         "condition 'steered': item 'f3-1' is missing"),
        (pd.concat([frame, frame.iloc[[1]]]), {}, "condition 'steered': an item appears twice"),
        (pd.concat([frame, frame.iloc[[0]]]), {}, "condition 'base': an item appears twice"),
        (frame.assign(chose=frame.chose * 0.5), {}, "proportion 'chose' is 0.5"),
        (frame.assign(family=np.where(frame.condition == "base", frame.family, "x")), {},
         "item 'f0-0' has family 'f0' in one row and 'x' in another"),
        (frame.assign(family="one"), {}, "at least 2 families"),
        (frame, dict(proportions=["stop"]), "proportion 'stop' is not one of the measures"),
        (frame.assign(log_odds="high"), {}, "the measures .* must be numbers"),
        (frame, dict(measures="log_odds"), "measures must be a list of column names, e.g. measures=\\['log_odds'\\]"),
        (frame, dict(proportions="chose"), "proportions must be a list of column names"),
    ]
    for table, change, message in cases:
        with pytest.raises(InputError, match=message) as err:
            _effects(table, **change)
        assert "\n" not in str(err.value)
