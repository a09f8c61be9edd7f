"""paired_effects and the dose-response cells with few families (issue 52): every interval holds the
cluster t interval, a change of rates with few events is widened, and every number carries the
families its interval was computed on. Known answers on small tables; each check names the mutation
it catches (coverage where the truth is known: benchmarks/coverage_paired_effects.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import evprobe
from evprobe.core import cluster_t
from evprobe.core.bootstrap import FamilyBootstrap, percentile_interval
from evprobe.core.proportion import hull
from evprobe.analysis.effects import FEW_EVENTS, cell_estimates, cells, spans_of
from tests.analysis.test_effects import _frame  # two conditions of clustered log-odds and choices


def _effects(frame: pd.DataFrame, **kw) -> pd.DataFrame:
    args = dict(baseline="base", measures=["log_odds", "chose"], proportions=["chose"], n_boot=400)
    return evprobe.paired_effects(frame, **{**args, **kw}).set_index(["condition", "group", "measure"])


def test_at_eight_families_the_interval_holds_the_t_interval_of_family_means() -> None:
    """Equal families: the cluster t interval is scipy's one-sample t interval of the family means (of
    their paired differences for a change). The printed interval holds it, and here it is wider than
    the percentile interval alone (which covered about 88% at 8 families): dropping the t interval
    from the hull fails both lines."""
    frame = _frame(8)
    got = _effects(frame)
    wide = frame.pivot_table(index="family", columns="condition", values="log_odds", aggfunc="mean")
    for measure, means in (("log_odds", wide["steered"]), ("log_odds_change", wide["steered"] - wide["base"])):
        lo, hi = stats.t.interval(0.95, 7, loc=means.mean(), scale=stats.sem(means))
        row = got.loc[("steered", "all", measure)]
        assert row["lo"] <= lo + 1e-12 and hi - 1e-12 <= row["hi"], measure
        assert (row["lo"], row["hi"]) == pytest.approx((lo, hi)), measure  # t is the wider of the two here


def _rates(base_misses: int, steered_misses: int, families: int = 72) -> tuple:
    """Cells of one 0/1 measure, `families` families of 4 items: the base misses (0) on
    `base_misses` items, the steered condition on `steered_misses`, each in a family of its own."""
    base, steered = np.ones((4 * families, 1)), np.ones((4 * families, 1))
    base[4 * np.arange(base_misses), 0] = 0.0
    steered[4 * np.arange(steered_misses) + 1, 0] = 0.0
    boot = FamilyBootstrap([f"f{i:02d}" for i in range(families)], 400, 3)
    fam = np.repeat(np.arange(families), 4)
    every = {"all": np.ones(4 * families, bool)}
    return cells(steered, every, boot, fam, [True]), cells(base, every, boot, fam, [True])


def test_a_change_of_rates_with_few_events_is_widened() -> None:
    """Fewer than FEW_EVENTS (5) units of a rate's rarer outcome: the change's interval is widened
    beyond the hull of the percentile and t intervals (the normal approximation fails with so few
    events; a rate near 100% at 72 families covered 91.8% without it). With 5 or more it is that hull
    exactly. FEW_EVENTS = 0 fails the first check, a large FEW_EVENTS the second."""
    assert FEW_EVENTS == 5
    for base_misses, steered_misses, widened in ((4, 1, True), (6, 5, False)):
        cur, base = _rates(base_misses, steered_misses)
        _, _, dlo, dhi = spans_of(cur, base)
        plain = hull(percentile_interval(cur.draws - base.draws),
                     cluster_t.change_interval(cur.num, cur.den, base.num, base.den))
        if widened:
            assert dlo[0] <= plain[0][0] and dhi[0] > plain[1][0] + 1e-3, (dlo, dhi, plain)
        else:
            assert (dlo[0], dhi[0]) == (plain[0][0], plain[1][0])


def test_every_number_carries_its_families() -> None:
    """n_families: the families holding a defined value (a group holds its own; a family whose
    log-odds are all undefined leaves the count as it leaves n); a change counts the families holding
    a value in either condition. Printed `(n=... in ... families)`."""
    frame = _frame(12)
    frame.loc[frame.family == "f0", "log_odds"] = np.nan  # no log-odds in family f0, either condition
    frame.loc[(frame.family == "f1") & (frame.condition == "steered"), "log_odds"] = np.nan  # f1: base only
    got = _effects(frame, group="group")
    counts = got["n_families"]
    assert counts[("steered", "all", "chose")] == 12 and counts[("steered", "odd", "chose")] == 6
    assert counts[("base", "all", "log_odds")] == 11 and counts[("steered", "all", "log_odds")] == 10
    assert counts[("steered", "all", "log_odds_change")] == 11  # f1 holds base values: in the change
    assert counts[("steered", "all", "chose_change")] == 12
    assert got.loc[("steered", "all", "log_odds"), "n"] == 40


def test_the_count_prints_and_warns_below_eight_families() -> None:
    boot = FamilyBootstrap([f"f{i}" for i in range(6)], 200, 1)
    fam = np.repeat(np.arange(6), 3)
    values = np.random.default_rng(2).normal(size=(18, 1))
    every = {"all": np.ones(18, bool)}
    base = cells(values, every, boot, fam, [False])
    steered, changes = cell_estimates(cells(values + 0.5 + 0.1 * values**2, every, boot, fam, [False]), base)
    assert steered[0].n_families == 6 and changes[0].n_families == 6
    assert steered[0].text().endswith("(n=18 in only 6 families: the interval may be too narrow)")


def test_rates_and_their_changes_stay_within_their_range() -> None:
    """Near 100% with few families the symmetric t interval reaches past 1 (97.9 [91.6, 100.3] points
    on the quickstart); a rate's interval ends within [0, 1] and a change of rates' within [-1, 1],
    and still has width. Removing the cut fails here: this table's t intervals reach past 1."""
    steered, base = np.ones((32, 1)), np.zeros((32, 1))
    steered[[0, 1, 4, 5], 0] = 0.0  # 28 of 32 chose: two misses in each of families 0 and 1
    base[:8, 0] = 1.0  # 8 of 32 chose before, all of them in families 0 and 1
    boot = FamilyBootstrap([f"f{i}" for i in range(8)], 400, 3)
    fam = np.repeat(np.arange(8), 4)
    every = {"all": np.ones(32, bool)}
    cur, ref = cells(steered, every, boot, fam, [True]), cells(base, every, boot, fam, [True])
    lo, hi, dlo, dhi = spans_of(cur, ref)
    assert cluster_t.ratio_interval(cur.num, cur.den)[1][0] > 1.0  # the t ends leave the range
    assert cluster_t.change_interval(cur.num, cur.den, ref.num, ref.den)[1][0] > 1.0
    assert 0.0 <= lo[0] < hi[0] <= 1.0 and -1.0 <= dlo[0] < dhi[0] <= 1.0
