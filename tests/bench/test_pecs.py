"""PECS per dataset (bench.pecs, seed 002 section 3.4 and appendix M): planted per-system behaviour with
known answers, rescored here from the records without the scorer, and the faults each check catches."""

from __future__ import annotations

import numpy as np
import pytest
from evprobe.bench import pecs
from evprobe.bench.generate import GenerateConfig, build
from evprobe.bench.items import Item
from evprobe.bench.records import Record
from evprobe.bench.score_report import scores_markdown
from evprobe.bench.scoring import score

from tests.bench.test_scoring import invalid, record

ANSWERED = ("answer_initial", "answer_after_test")


@pytest.fixture(scope="module")
def items() -> list[Item]:
    return build(GenerateConfig())[1]  # the full main set, in memory


def planted(items: list[Item], rng: np.random.Generator) -> list[Record]:
    """Answer records whose behaviour differs by system, so each dataset's PECS is known:
    sliding: the reference (PECS 1); bouncing: never abstains, answers every control correctly (J = 0,
    at the zero boundary); spring: abstains on 70% of voids and 20% of controls, answers the other
    controls correctly, and one reply in 20 is unreadable (invalid: kept in the denominators)."""
    out = []
    for it in items:
        if it.request not in ANSWERED or it.variant is not None:
            continue
        if it.system == "sliding":
            out.append(record(it, answer=it.reference_answer))
        elif it.system == "bouncing":
            out.append(record(it, answer=it.reference_answer if it.resolved else "yes"))
        elif rng.random() < 0.05:
            out.append(invalid(it))
        elif rng.random() < (0.2 if it.resolved else 0.7):
            out.append(record(it, answer="undetermined"))
        else:
            out.append(record(it, answer=it.reference_answer if it.resolved else "no"))
    return out


def rescored(items: list[Item], records: list[Record], *, pooled: bool = False) -> dict[str, dict[str, float]]:
    """Acc, AbsRec, FalseAbs per system (or pooled, under "all") straight from the records (no
    scoring code)."""
    by_id = {it.item_id: it for it in items}
    out: dict[str, dict[str, list[float]]] = {}
    for r in records:
        it = by_id[r.item_id]
        d = out.setdefault("all" if pooled else it.system, {"acc": [], "abs_rec": [], "false_abs": []})
        answer = r.answer if r.valid else None
        if it.resolved:
            d["acc"].append(answer == it.reference_answer)
            d["false_abs"].append(answer == "undetermined")
        else:
            d["abs_rec"].append(answer == "undetermined")
    return {s: {k: float(np.mean(v)) for k, v in d.items()} for s, d in out.items()}


@pytest.fixture(scope="module")
def planted_run(items: list[Item]) -> tuple[list[Record], dict]:
    records = planted(items, np.random.default_rng(11))
    return records, score(items, records, n_boot=400)


def test_each_dataset_equals_its_rescoring_and_the_planted_rates(items: list[Item], planted_run) -> None:
    records, s = planted_run
    section = s["pecs_datasets"]
    truth = rescored(items, records)
    assert list(section["datasets"]) == list(truth) == ["sliding", "bouncing", "spring"]
    for system, rates in truth.items():
        d = section["datasets"][system]
        for part in pecs.PARTS:
            assert d[part]["value"] == pytest.approx(rates[part], abs=1e-12), (system, part)
        j = rates["abs_rec"] - rates["false_abs"]
        assert d["j"]["value"] == pytest.approx(j, abs=1e-12)
        assert d["pecs"]["value"] == pytest.approx(rates["acc"] * max(0.0, j), abs=1e-12)
        assert d["naive"]["value"] == pytest.approx(rates["acc"] * rates["abs_rec"], abs=1e-12)
    spring = section["datasets"]["spring"]
    assert 0.45 < spring["j"]["value"] < 0.55 and spring["acc"]["value"] < 0.8  # invalid replies count
    assert spring["naive"]["value"] > spring["pecs"]["value"]  # false abstention: what the naive product misses
    # equal-weight mean of the three datasets (seed 002, Table 2), on the same resamples
    mean = section["equal_weight_mean"]
    expected = np.mean([section["datasets"][k]["pecs"]["value"] for k in truth])
    assert mean["pecs"]["value"] == pytest.approx(expected, abs=1e-12)
    assert mean["pecs"]["ci"][0] < mean["pecs"]["value"] < mean["pecs"]["ci"][1]
    assert mean["pecs"]["n"] == s["pecs"]["n"]


def test_the_zero_boundary_is_counted_and_printed_without_an_interval(planted_run) -> None:
    """Appendix M.3: bouncing never abstains, so J = 0 on every resample and PECS is clamped to 0:
    no interval (it would be [0, 0]) and why; its J keeps its interval only where it varies."""
    _, s = planted_run
    section = s["pecs_datasets"]
    assert section["zero_boundary"] == {"count": 1, "of": 3, "datasets": ["bouncing"]}
    bouncing = section["datasets"]["bouncing"]
    assert bouncing["pecs"] == {"value": 0.0, "ci": [None, None], "n": bouncing["pecs"]["n"],
                                "n_families": 48, "reason": pecs.AT_ZERO}
    sliding = section["datasets"]["sliding"]["pecs"]  # the reference: 1 x (1 - 0) on every resample
    assert sliding["value"] == 1.0 and sliding["ci"] == [None, None] and sliding["reason"] == pecs.SAME
    spring = section["datasets"]["spring"]["pecs"]
    assert spring["ci"][0] < spring["value"] < spring["ci"][1]
    text = scores_markdown(s, "planted")
    assert "| bouncing |" in text and "0.000 (J <= 0 on every family resample, n=" in text
    assert "zero boundary: 1 of 3 datasets (bouncing)" in text
    assert "| equal-weight mean |" in text and "| pooled |" in text


def test_pooled_pecs_is_unchanged_by_the_datasets(items: list[Item], planted_run) -> None:
    """The headline PECS pools the controls and voids of every system (not the mean of datasets)."""
    records, s = planted_run
    acc, rec, false = (rescored(items, records, pooled=True)["all"][k] for k in ("acc", "abs_rec", "false_abs"))
    assert s["pecs"]["value"] == pytest.approx(acc * max(0.0, rec - false), abs=1e-12)
    assert s["pecs_datasets"]["pooled_naive"]["value"] == pytest.approx(acc * rec, abs=1e-12)
    assert s["pecs"]["value"] != pytest.approx(s["pecs_datasets"]["equal_weight_mean"]["pecs"]["value"])


def test_a_run_without_answer_records_has_no_datasets(items: list[Item]) -> None:
    s = score(items, [record(it, action=it.reference_action) for it in items
                      if it.request == "select" and it.variant is None], n_boot=50)
    assert s["pecs"]["value"] is None
    assert s["pecs_datasets"] == {"dataset": pecs.DATASET, "reason": pecs.NO_ANSWERS}
    assert "NA (no answer records)" in scores_markdown(s, "select only")


def test_a_system_that_stops_abstaining_moves_to_the_zero_boundary(items: list[Item], planted_run) -> None:
    """Sliding's voids answered "yes" instead of abstaining: only sliding's AbsRec, J and PECS move
    (to 0, the boundary); the other datasets keep their values on the same resamples."""
    records, s = planted_run
    by_id = {it.item_id: it for it in items}
    swapped = [record(by_id[r.item_id], answer="yes")
               if by_id[r.item_id].system == "sliding" and not by_id[r.item_id].resolved else r for r in records]
    t = score(items, swapped, n_boot=400)
    assert t["pecs_datasets"]["datasets"]["sliding"]["abs_rec"]["value"] == 0.0
    assert t["pecs_datasets"]["datasets"]["sliding"]["abs_rec"]["value"] \
        != s["pecs_datasets"]["datasets"]["sliding"]["abs_rec"]["value"]
    assert t["pecs_datasets"]["zero_boundary"] == {"count": 2, "of": 3, "datasets": ["sliding", "bouncing"]}
    assert t["pecs_datasets"]["datasets"]["spring"] == s["pecs_datasets"]["datasets"]["spring"]


def _parts(rates: list[tuple[float, float, float]], families: int = 48, seed: int = 0):
    """pecs.estimates' inputs for three datasets whose per-family counts are exactly the given shares
    (26 controls and 10 voids a family; no sampling: the observed rates are the truths)."""
    from evprobe.core.bootstrap import FamilyBootstrap

    n = 3 * families
    counts: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
    for s, (acc, abs_rec, false_abs) in enumerate(rates):
        rng = np.random.default_rng(seed + s)
        rows = slice(s * families, (s + 1) * families)
        for part, share, units in (("acc", acc, 26), ("false_abs", false_abs, 26), ("abs_rec", abs_rec, 10)):
            num, den = np.zeros(n), np.zeros(n)
            hits = rng.permutation(np.arange(families * units) < round(share * families * units))
            num[rows], den[rows] = hits.reshape(families, units).sum(axis=1), units
            counts[(pecs.SECTION, "datasets", f"d{s}", part)] = (num, den)
    for part in pecs.PARTS:  # pooled over the datasets
        counts[(pecs.POOLED[part],)] = tuple(sum(counts[(pecs.SECTION, "datasets", f"d{s}", part)][i]
                                                 for s in range(3)) for i in (0, 1))
    keys = list(counts)
    nums, dens = [counts[k][0] for k in keys], [counts[k][1] for k in keys]
    boot = FamilyBootstrap([f"f{i}" for i in range(n)], 1000, seed=7)
    resampled = boot.resample_many(np.stack(nums, axis=1), np.stack(dens, axis=1), True)
    return dict(zip(keys, resampled)), dict(zip(keys, boot.estimates(resampled)))


def test_the_mean_reaches_zero_where_every_dataset_may_sit_on_the_clamp() -> None:
    """Every dataset's J a hair above 0 (AbsRec 12%, FalseAbs 10%): each J interval reaches 0, so the
    equal-weight mean's lower end is the projection's, 0 here; the plain percentile interval of the
    mean of clamped values stays above 0 (what benchmarks/coverage_pecs.py measured missing a zero truth)."""
    from evprobe.core.bootstrap import FamilyBootstrap

    resampled, est = _parts([(0.9, 0.12, 0.10)] * 3)
    mean = pecs.estimates(resampled, est)[pecs.SECTION]["equal_weight_mean"]["pecs"]
    parts = [resampled[(pecs.SECTION, "datasets", f"d{s}", p)] for s in range(3) for p in pecs.PARTS]
    plain = FamilyBootstrap.combine(lambda *x: sum(pecs.pecs_value(*x[3 * i:3 * i + 3]) for i in range(3)) / 3,
                                    parts, mean.n)
    assert plain.ci[0] > 0.0 and mean.ci[0] == 0.0 and mean.ci[1] == plain.ci[1] and mean.value == plain.value


def test_away_from_the_clamp_the_mean_keeps_its_percentile_interval() -> None:
    from evprobe.core.bootstrap import FamilyBootstrap

    resampled, est = _parts([(0.9, 0.5, 0.05), (0.8, 0.3, 0.1), (0.95, 0.7, 0.02)])
    section = pecs.estimates(resampled, est)[pecs.SECTION]
    parts = [resampled[(pecs.SECTION, "datasets", f"d{s}", p)] for s in range(3) for p in pecs.PARTS]
    plain = FamilyBootstrap.combine(lambda *x: sum(pecs.pecs_value(*x[3 * i:3 * i + 3]) for i in range(3)) / 3,
                                    parts, section["equal_weight_mean"]["pecs"].n)
    assert section["equal_weight_mean"]["pecs"] == plain.in_families(144) and plain.ci[0] > 0.3
    assert section["zero_boundary"] == {"count": 0, "of": 3, "datasets": []}
