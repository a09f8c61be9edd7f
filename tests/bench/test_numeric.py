"""The numeric-estimate block: opt-in (the main set is unchanged), numbers read with their units,
policies at their analytic values, and `evprobe check` rows that fail on a broken block."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from tests.bench.edits import rewrite_items

from evprobe.bench.generate import GenerateConfig, build, generate
from evprobe.bench.items import Item
from evprobe.bench.parse import parse_reply
from evprobe.bench.runner import RunConfig, run
from evprobe.experiments.cli import main
from evprobe.experiments.scoring_io import score_run

# sha256 of the main set's items.jsonl lines (seed 000, 9,216 items) before the blocks existed.
MAIN_ITEMS_SHA256 = "c7bd12fbb19351cfb1fad092fb90fd252c15cfe76e7587a22c3c3462426501eb"


def _sha(items: list[Item]) -> str:
    return hashlib.sha256(b"".join(json.dumps(it.to_json()).encode() + b"\n" for it in items)).hexdigest()


def test_main_set_is_byte_identical_and_blocks_are_appended() -> None:
    _, main_items = build(GenerateConfig())
    assert len(main_items) == 9216 and _sha(main_items) == MAIN_ITEMS_SHA256
    assert all("injection" not in it.to_json() for it in main_items)
    _, both = build(GenerateConfig(numeric=True, injection_levels=(1, 2, 3)))
    assert _sha(both[:9216]) == MAIN_ITEMS_SHA256  # the main items come first, unchanged
    counts = Counter((it.request, it.injection) for it in both[9216:])
    assert counts == {
        ("estimate_property", 0): 576, ("estimate_outcome", 0): 576,
        **{(r, level): n for level in (1, 2, 3) for r, n in
           (("select", 576), ("answer_initial", 576), ("answer_after_test", 4608),
            ("estimate_property", 576), ("estimate_outcome", 576))},
    }
    props = Counter(it.test if it.test == "test_mass" else it.system for it in both
                    if it.request == "estimate_property" and not it.injection)
    assert props == {"test_mass": 288, "sliding": 96, "bouncing": 96, "spring": 96}


@pytest.fixture(scope="module")
def numeric_items() -> dict[str, Item]:
    _, items = build(GenerateConfig(families_per_system=1, subset_per_cell=0, numeric=True))
    return {it.item_id: it for it in items}


def _item(items: dict[str, Item], request: str, system: str, test: str | None = None) -> Item:
    return next(it for it in items.values() if it.request == request and it.system == system
                and (test is None or it.test == test))


@pytest.mark.parametrize(
    ("kind", "system", "test", "reply", "route", "value"),
    [
        ("read_ruler", "sliding", None, "45 cm", "number", 0.45),
        ("read_ruler", "sliding", None, "450 mm", "number", 0.45),
        ("read_ruler", "sliding", None, "0.45 m (45 cm)", "number", 0.45),  # one value, two spellings
        ("read_ruler", "sliding", None, "450", "number", 450.0),  # bare: metres, as asked
        ("read_ruler", "sliding", None, "1.5 m/s", "invalid:wrong_unit", None),
        ("read_ruler", "sliding", None, "0,45", "invalid:ambiguous_comma", None),
        ("read_ruler", "sliding", None, "0.4 m or 45 cm", "invalid:alternatives", None),
        ("estimate_property", "sliding", "test_mass", "1200 g", "number", 1.2),
        ("estimate_property", "sliding", "test_mass", "1.2 kg", "number", 1.2),
        ("estimate_property", "sliding", "test_mass", "1.2 m", "invalid:wrong_unit", None),
        ("estimate_property", "sliding", "test_mass", "F = 3 N and t = 0.8 s, so m = 1.2 kg", "number", 1.2),
        ("estimate_property", "sliding", "test_mass", "4.5 x 10^-1 kg", "number", 0.45),
        ("estimate_property", "sliding", "test_mass", "4.5 × 10⁻¹", "number", 0.45),
        ("estimate_property", "sliding", "test_mass", "1,200 g", "invalid:ambiguous_comma", None),
        ("estimate_property", "sliding", "test_mass", "-1.2 kg", "invalid:out_of_range", None),
        ("estimate_property", "sliding", "test_mass", "0", "number", 0.0),  # a real 0, scored wrong
        ("estimate_property", "sliding", "test_mass", "about a kilogram", "invalid:no_number", None),
        ("estimate_property", "sliding", "test_mass", "1e999 kg", "invalid:non_finite", None),
        ("estimate_property", "sliding", "test_mass", "Working: 2 + 2.\nANSWER: 1.25 kg", "answer_line", 1.25),
        ("estimate_property", "sliding", "test_mass", "ANSWER: kg", "invalid:answer_line_unreadable", None),
        ("estimate_property", "sliding", "test_other", "30%", "number", 0.3),
        ("estimate_property", "spring", "test_other", "0.3 N/cm", "number", 30.0),
        ("estimate_property", "spring", "test_other", "30 N", "invalid:wrong_unit", None),
        ("estimate_outcome", "spring", None, "350 ms", "number", 0.35),
        ("estimate_outcome", "bouncing", None, "2.5 J", "number", 2.5),
        ("estimate_outcome", "bouncing", None, "2500 mJ", "number", 2.5),
        ("estimate_outcome", "sliding", None, "1.2 s", "invalid:wrong_unit", None),
        ("estimate_outcome", "sliding", None, "between 1 and 2 m", "invalid:several_numbers", None),
    ],
)
def test_numbers_are_read_with_their_units(numeric_items, kind, system, test, reply, route, value) -> None:
    parsed = parse_reply(_item(numeric_items, kind, system, test), reply)
    assert parsed.route == route
    assert parsed.valid is (value is not None)
    if value is None:
        assert parsed.value is None  # a misread is invalid, never a stand-in number
    else:
        assert parsed.value == pytest.approx(value, rel=1e-12)


def test_estimate_prompts_name_their_unit_and_hide_the_candidates(numeric_items) -> None:
    for it in numeric_items.values():
        if it.request not in ("estimate_property", "estimate_outcome"):
            continue
        assert "either" not in it.prompt  # the candidate values are not offered
        assert "Reply with the number" in it.prompt


@pytest.fixture(scope="module")
def block_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("blocks") / "bench"
    generate(out, GenerateConfig(families_per_system=2, subset_per_cell=1, numeric=True, injection_levels=(1, 2, 3)),
             progress=False)
    return out


def test_bench_json_records_the_blocks_only_when_present(block_bench: Path, small_bench: Path) -> None:
    meta = json.loads((block_bench / "bench.json").read_text())
    assert meta["numeric"] is True and meta["injection_levels"] == [1, 2, 3]
    plain = json.loads((small_bench / "bench.json").read_text())
    assert "numeric" not in plain and "injection_levels" not in plain


def test_policies_give_their_analytic_numeric_scores(block_bench: Path, tmp_path: Path) -> None:
    """reference: every estimate exact (100% at every delta, log error 0); exact-reader: reads the
    pixels and inverts the calibration, within 5% everywhere; read_ruler's 5% share is Table 34's
    control."""
    for policy in ("reference", "exact-reader"):
        out = tmp_path / policy
        run(RunConfig(model=f"policy:{policy}", bench=str(block_bench), out=str(out)), progress=False)
        scores, _ = score_run(out, n_boot=100)
        for request in ("read_ruler", "recover_property", "estimate_property", "estimate_outcome"):
            block = scores["numeric"][request]
            assert all(block[k]["value"] == 1.0 for k in ("acc_5", "acc_10", "acc_20", "acc_30", "validity"))
            assert block["mean_log_error"]["value"] < (1e-12 if policy == "reference" else 0.01)
        assert scores["numeric"]["read_ruler"]["acc_5"]["value"] == scores["controls"]["read_ruler"]["value"]
        for level in ("1", "2", "3"):  # the estimates across the ladder: the same analytic values
            block = scores["injection"]["levels"][level]["numeric"]
            assert set(block) == {"estimate_property", "estimate_outcome", "counts"}, level
            for request in ("estimate_property", "estimate_outcome"):
                assert all(block[request][k]["value"] == 1.0 for k in ("acc_5", "acc_30", "validity")), (level, request)
                assert block[request]["acc_5"]["n"] == 24  # 6 families x 4 estimates of each kind
        assert "estimate property: within 10%" in (out / "scores.md").read_text()


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "bench"
    shutil.copytree(src, dst)
    (dst / "checks.json").unlink(missing_ok=True)
    return dst


def _failed(bench: Path, capsys: pytest.CaptureFixture) -> set[str]:
    main(["check", str(bench)])
    capsys.readouterr()
    checks = json.loads((bench / "checks.json").read_text())
    return {c["check"] for c in checks["checks"] if not c["passed"]}


def test_check_passes_the_blocks_and_catches_a_leaked_answer(block_bench: Path, tmp_path: Path, capsys) -> None:
    assert _failed(_copy(block_bench, tmp_path / "ok"), capsys) == set()
    bench = _copy(block_bench, tmp_path / "leak")

    def leak(rows: list[dict]) -> None:
        row = next(r for r in rows if r["request"] == "estimate_property")
        row["prompt"] += f" (It is {row['reference_value']:.6g}.)"

    rewrite_items(bench, leak)
    # the leaked level-0 prompt is also no longer the start of its levels' prompts
    assert _failed(bench, capsys) == {"Numeric prompts do not state their answer", "Numeric prompt groups share every byte",
                                      "Level prompts are level 0's plus the level's text"}


def test_check_catches_a_wrong_numeric_reference(block_bench: Path, tmp_path: Path, capsys) -> None:
    bench = _copy(block_bench, tmp_path / "wrong")

    def wrong(rows: list[dict]) -> None:
        row = next(r for r in rows if r["request"] == "estimate_outcome")
        row["reference_value"] *= 1.01

    rewrite_items(bench, wrong)
    assert _failed(bench, capsys) == {"Oracle reference values (ruler reading, property)"}


def test_estimates_climb_the_ladder(numeric_items, block_bench: Path, tmp_path: Path, capsys) -> None:
    """Seed 003 traces threshold accuracy across the injection levels: each estimate's level-L prompt
    is level 0's plus the level's text (level 2 says what the reading determines, never which
    candidate: these prompts print none; level 3 adds the sheets' readings), a level's estimate groups
    share every byte but the sheets (checked), and a wrong level-3 reading is caught."""
    from evprobe.bench.injection import level_prompt
    from evprobe.bench.family import Family

    _, items = build(GenerateConfig(families_per_system=1, subset_per_cell=0, numeric=True, injection_levels=(2, 3)))
    by_id = {it.item_id: it for it in items}
    base = by_id["sliding-000.estimate_outcome.w00"]
    l2, l3 = by_id[base.item_id + ".L2"], by_id[base.item_id + ".L3"]
    assert l2.prompt.startswith(base.prompt.split("\n\nThe block starts")[0])
    assert "this reading determines the mass" in l2.prompt and "candidate" not in l2.prompt
    assert l3.prompt.count("- panel ") == 8 and "Readings from the first sheet (mass test):" in l3.prompt
    assert l2.reference_value == base.reference_value and l2.image_pair_id == base.image_pair_id + ".L2"
    assert _failed(_copy(block_bench, tmp_path / "ok"), capsys) == set()
    bench = _copy(block_bench, tmp_path / "wrong")

    def wrong(rows: list[dict]) -> None:
        row = next(r for r in rows if r["request"] == "estimate_property" and r.get("injection") == 3)
        line = next(x for x in row["prompt"].split("\n") if x.startswith("- panel 4"))
        row["prompt"] = row["prompt"].replace(line, line.replace(" m", "1 m"), 1)

    rewrite_items(bench, wrong)
    assert _failed(bench, capsys) == {"Level 3 readings are the oracle's"}
    bench = _copy(block_bench, tmp_path / "apart")

    def apart(rows: list[dict]) -> None:  # one member of a level-2 group told something else
        row = next(r for r in rows if r["request"] == "estimate_outcome" and r.get("injection") == 2)
        row["prompt"] = row["prompt"].replace("determines the mass", "determines the weight", 1)

    rewrite_items(bench, apart)
    assert _failed(bench, capsys) == {"Level estimate groups share every prompt byte but the sheets"}
