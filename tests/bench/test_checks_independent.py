"""`evprobe check` against an independent oracle: every check can fail, and says where.

Each test copies a generated benchmark, corrupts one thing (a label, a threshold, a mass, a sheet,
the prices) and asserts the exact rows that fail, with the item or family named; the unmodified
copies pass. The oracle itself is checked on hand-computed families and for its imports.
"""

from __future__ import annotations

import ast
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from evprobe.bench import oracle, oracle_items
from evprobe.experiments.cli import main

MARGIN = "Smallest relative threshold margin"
THRESHOLDS = "Thresholds at eq. (2) midpoints"
ITEM_THRESHOLDS = "Oracle thresholds in items (eq. 2)"
RESOLVED = "Oracle sufficiency R(H, q) (resolved)"
ACTIONS = "Oracle reference actions (eq. 4, brute force)"
ANSWERS = "Oracle answers (reference_answer, reference_option)"
VALUES = "Oracle reference values (ruler reading, property)"
OUTCOMES = "Outcomes recovered from the sheets"
SEPARATION = "Smallest informative feature separation"
REQUIRED = "Required separation in implementation"
ANALYTIC_MARGIN_PCT = 100 * (math.sqrt(2) - 1) / (math.sqrt(2) + 1)  # the spring's, 17.157%


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "bench"
    shutil.copytree(src, dst)
    (dst / "checks.json").unlink(missing_ok=True)
    return dst


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    """Rewrite a manifest and its hash in bench.json, as a buggy generator would: a consistent
    benchmark with a wrong label, which only the oracle can catch (the hash row cannot)."""
    import hashlib

    data = "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8")
    path.write_bytes(data)
    meta_path = path.parent / "bench.json"
    meta = json.loads(meta_path.read_text())
    meta[{"items.jsonl": "items_sha256", "families.jsonl": "families_sha256"}[path.name]] = hashlib.sha256(data).hexdigest()
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")


def _check(bench: Path, capsys: pytest.CaptureFixture) -> tuple[int, str, set[str], dict[str, Any]]:
    """(exit status, printed table, names of the failed rows, checks.json)."""
    code = main(["check", str(bench)])
    out = capsys.readouterr().out
    checks = json.loads((bench / "checks.json").read_text())
    failed = {c["check"] for c in checks["checks"] if not c["passed"]}
    return code, out, failed, checks


def _edit_item(bench: Path, pick, **changes: Any) -> dict[str, Any]:
    rows = _rows(bench / "items.jsonl")
    row = next(r for r in rows if pick(r))
    row.update(changes)
    _write(bench / "items.jsonl", rows)
    return row


def _six(x: float) -> float:
    return float(f"{x:.5e}")


# --- the unmodified benchmarks pass, with measured numbers -------------------------------------


def test_the_unmodified_small_benchmark_passes_with_measured_rows(small_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bench = _copy(small_bench, tmp_path)
    code, out, failed, checks = _check(bench, capsys)
    assert code == 0 and not failed and "FAILED" not in out
    assert checks["n_failures"] == 0 and checks["items"] == 312
    # the margin is measured, and it is the construction's: (sqrt 2 - 1) / (sqrt 2 + 1) for springs
    assert abs(checks["min_threshold_margin_pct"] - ANALYTIC_MARGIN_PCT) < 0.002
    assert checks["min_threshold_margin_at"].startswith("spring-")
    assert checks["threshold_margin_pct_by_system"]["bouncing"] == pytest.approx(100 / 3, abs=0.002)
    assert checks["threshold_margin_pct_by_system"]["sliding"] == pytest.approx(50.0, abs=0.002)
    assert checks["expected_threshold_margin_pct"] == 17.2 and checks["min_threshold_margin_bound_pct"] == 17.1
    # the separations are measured from the pixels, not stated
    assert checks["min_separation_along_ruler_px"] >= 8 and checks["min_separation_px"] >= 8
    required = next(c["result"] for c in checks["checks"] if c["check"] == REQUIRED)
    assert f"measured along the ruler: {checks['min_separation_along_ruler_px']:.0f}" in required
    assert checks["max_outcome_deviation_pct"] < 1.0
    assert all(n == 0 for n in checks["oracle_mismatches"].values())


# --- labels: each field the oracle recomputes can fail on its own ------------------------------


LABEL_EDITS = [
    # (which item, field, new value, the one row that must fail)
    (lambda r: r["request"] == "select" and r["resolved"] is True, "resolved", False, RESOLVED),
    (lambda r: r["request"] == "answer_after_test" and r["resolved"] is False, "resolved", True, RESOLVED),
    # stop -> free fall keeps every image and threshold pair switching, so only the oracle row fails
    (lambda r: r["request"] == "select" and r["reference_action"] == "stop", "reference_action", "free_fall", ACTIONS),
    (lambda r: r["request"] == "answer_initial" and r["reference_action"] == "test_other", "reference_action", "test_mass", ACTIONS),
    (lambda r: r["request"] == "both_given" and r["reference_answer"] == "yes", "reference_answer", "no", ANSWERS),
    (lambda r: r["request"] == "read_ruler", "reference_value", None, VALUES),
]


@pytest.mark.parametrize("pick, name, value, row", LABEL_EDITS)
def test_a_corrupted_label_fails_its_oracle_row_naming_item_and_field(small_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture, pick, name: str, value: Any, row: str) -> None:
    bench = _copy(small_bench, tmp_path)
    original = dict(next(r for r in _rows(bench / "items.jsonl") if pick(r)))
    if name == "reference_value":
        value = round(original[name] * 1.01, 6)  # a 1% wrong ruler reading
    edited = _edit_item(bench, lambda r: r["item_id"] == original["item_id"], **{name: value})
    code, out, failed, checks = _check(bench, capsys)
    assert code == 1 and failed == {row}
    assert f"{edited['item_id']} {name}: items.jsonl" in out
    assert checks["oracle_mismatches"][name] == 1


# --- the margin is measured: a threshold moved towards an outcome fails it ---------------------


def test_a_threshold_shifted_towards_an_outcome_fails_the_margin(small_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bench = _copy(small_bench, tmp_path)
    families = _rows(bench / "families.jsonl")
    fam = next(f for f in families if f["system"] == "spring")
    masses, ks = fam["candidates"]["mass"], fam["candidates"]["stiffness"]
    ys = [2 * math.pi * math.sqrt(m / k) for m in masses for k in ks]  # T = 2 pi sqrt(m / k)
    old = fam["thresholds"]["low"]
    y = min(ys, key=lambda v: abs(v - old))
    new = _six(y / 0.9 if y < old else y / 1.1)  # now |q - y| / q = 10%, same side of y: no label moves
    assert all((v > old) == (v > new) for v in ys)
    fam["thresholds"]["low"] = new
    _write(bench / "families.jsonl", families)
    items = _rows(bench / "items.jsonl")
    for it in items:
        if it["family_id"] == fam["family_id"] and it["threshold_level"] == "low":
            it["threshold"] = new
            it["prompt"] = it["prompt"].replace(f"{old:.6g}", f"{new:.6g}")
    _write(bench / "items.jsonl", items)
    code, out, failed, checks = _check(bench, capsys)
    assert code == 1 and failed == {MARGIN, THRESHOLDS, ITEM_THRESHOLDS}
    assert checks["min_threshold_margin_pct"] == pytest.approx(10.0, abs=0.01)
    assert checks["min_threshold_margin_at"].startswith(f"{fam['family_id']}.select.")
    assert "10.0% (seed 17.2%, fails below 17.1%)   FAILED" in out
    assert f"at {checks['min_threshold_margin_at']} is below 17.1%" in out
    assert f"{fam['family_id']} (low: stored {new!r}" in out


# --- a family's mass edited: its outcomes no longer match what the sheets show -----------------


def test_an_edited_mass_fails_outcomes_thresholds_and_calibration(small_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bench = _copy(small_bench, tmp_path)
    families = _rows(bench / "families.jsonl")
    fam = next(f for f in families if f["system"] == "spring")
    fam["candidates"]["mass"] = [_six(1.25 * m) for m in fam["candidates"]["mass"]]
    _write(bench / "families.jsonl", families)
    code, out, failed, checks = _check(bench, capsys)
    assert code == 1
    assert {OUTCOMES, THRESHOLDS, ITEM_THRESHOLDS, "Calibration recomputed from candidates",
            "Largest error in extracting the marked position"} <= failed
    # the sheets still show the old masses: T off by 1 - 1 / sqrt(1.25) in every world
    assert checks["max_outcome_deviation_pct"] == pytest.approx(100 * (1 - 1 / math.sqrt(1.25)), abs=0.5)
    assert f"at {fam['family_id']} w" in out and "the sheets show another world" in out
    assert f"{fam['family_id']} (low: stored" in out
    assert f"{fam['family_id']}.select.h0.low threshold: items.jsonl" in out


# --- separation is measured from the pixels: a sheet 5 px from its partner fails ---------------


def test_sheets_closer_than_8_pixels_fail_the_required_separation(small_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bench = _copy(small_bench, tmp_path)
    fid = "sliding-000"
    with Image.open(bench / "images" / fid / "mass_0.png") as im:
        pixels = np.array(im.convert("RGB"))
    magenta = np.all(pixels == (255, 0, 255), axis=-1)
    moved = pixels.copy()
    moved[magenta] = (255, 255, 255)
    ys, xs = np.nonzero(magenta)
    moved[ys, xs + 5] = (255, 0, 255)  # the mass ruler is horizontal: 5 px along it
    Image.fromarray(moved).save(bench / "images" / fid / "mass_1.png")
    code, out, failed, checks = _check(bench, capsys)
    assert code == 1 and {REQUIRED, SEPARATION} <= failed
    assert checks["min_separation_along_ruler_px"] == pytest.approx(5.0)
    assert checks["min_separation_px"] == pytest.approx(5.0)
    assert f"5.0 px along the ruler at {fid} mass style a is under 8 px" in out
    assert "8 pixels (measured along the ruler: 5)   FAILED" in out


# --- the oracle on hand-computed families --------------------------------------------------------


def _family_row(system: str, initial: str, masses: list[float], others: list[float], constants: dict[str, float]) -> dict[str, Any]:
    other = oracle.OTHER[system]
    return {
        "family_id": f"{system}-900",
        "system": system,
        "initial_property": initial,
        "candidates": {"mass": masses, other: others},
        "constants": {"g": 9.81, **constants},
        "calibration": oracle.calibration(system, masses, others),
        "options": {"A": "stop", "B": "test_mass", "C": "test_other", "D": "free_fall", "E": "combined_report"},
        "answer_options": {"A": "yes", "B": "no", "C": "undetermined"},
        "reworded_options": {"A": "combined_report", "B": "stop", "C": "test_mass", "D": "test_other", "E": "free_fall"},
        "recover_options": {"A": 1, "B": 0},
        "in_subset": True,
    }


def test_the_oracle_reproduces_a_hand_computed_spring_family() -> None:
    fam = oracle.oracle_family(_family_row("spring", "mass", [1.0, 2.0], [20.0, 80.0], {}))
    two_pi = 2 * math.pi
    assert fam.outcomes == pytest.approx({
        (0, 0): two_pi * math.sqrt(1 / 20), (0, 1): two_pi * math.sqrt(1 / 80),
        (1, 0): two_pi * math.sqrt(2 / 20), (1, 1): two_pi * math.sqrt(2 / 80),
    })
    # histories m = 1: [0.7025, 1.4050]; m = 2: [0.9935, 1.9869]; eq. (2) midpoints
    assert fam.thresholds["low"] == pytest.approx((two_pi * math.sqrt(1 / 80) + two_pi * math.sqrt(2 / 80)) / 2)
    assert fam.thresholds["high"] == pytest.approx((two_pi * math.sqrt(1 / 20) + two_pi * math.sqrt(2 / 20)) / 2)
    margin = min(abs(q - y) / q for q in fam.thresholds.values() for y in fam.outcomes.values())
    assert 100 * margin == pytest.approx(ANALYTIC_MARGIN_PCT)
    low, high = fam.thresholds["low"], fam.thresholds["high"]
    h0_low = oracle.decide(fam.outcomes, {0: 0}, low)
    assert (h0_low.resolved, h0_low.answer, h0_low.action) == (False, "undetermined", "test_other")
    assert oracle.decide(fam.outcomes, {0: 1}, low).action == "stop"
    assert oracle.decide(fam.outcomes, {0: 1}, low).answer == "yes"
    assert oracle.decide(fam.outcomes, {0: 0}, high).answer == "no"
    assert oracle.decide(fam.outcomes, {0: 1}, high).action == "test_other"
    assert oracle.decide(fam.outcomes, {}, low).action == "combined_report"  # no initial test
    # repricing (appendix F.1): a cheap combined report wins; equal prices tie (no unique action)
    cheap = {**oracle.DEFAULT_PRICES, "combined_report": 0.5}
    assert oracle.decide(fam.outcomes, {0: 0}, low, cheap).action == "combined_report"
    tie = oracle.decide(fam.outcomes, {0: 0}, low, {**oracle.DEFAULT_PRICES, "combined_report": 1.0})
    assert tie.actions == {"test_other", "combined_report"} and tie.action is None
    items = oracle_items.expected_items(fam)
    assert len(items) == 52 + 24  # Table 10 per family, with the six variants
    assert items["spring-900.select.h0.low.reworded"]["reference_option"] == "D"
    assert items["spring-900.recover_property.h1"]["reference_option"] == "A"
    after = items["spring-900.answer_after_test.h0.low.test_other.w01"]
    assert after["images"] == ["images/spring-900/mass_0.png", "images/spring-900/other_1.png"]
    assert (after["resolved"], after["reference_answer"]) == (True, "no")


def test_the_oracle_outcomes_follow_eq_1_for_every_system() -> None:
    consts = {"g": 9.81, "J": 2.0, "h": 1.0}
    assert oracle.outcome("sliding", 1.0, 0.1, consts) == pytest.approx(4.0 / (2 * 0.1 * 9.81))
    assert oracle.outcome("sliding", 2.0, 0.3, consts) == pytest.approx(4.0 / (2 * 0.3 * 9.81 * 4))
    assert oracle.outcome("bouncing", 1.5, 0.4, consts) == pytest.approx(1.5 * 9.81 * 0.16 * 1.0)
    for system, others in (("sliding", [0.1, 0.3]), ("bouncing", [0.3, 0.6]), ("spring", [25.0, 100.0])):
        row = _family_row(system, oracle.OTHER[system], [1.0, 2.0], others, {"J": 2.0, "h": 1.0})
        fam = oracle.oracle_family(row)
        for sheet, _, value in oracle.sheets(fam):  # the inverse physics undoes the readings
            if value is not None:
                marks = oracle.readings(system, row["calibration"], sheet, value)
                assert oracle.property_from_readings(system, row["calibration"], sheet, marks) == pytest.approx(value)


def _imports(module) -> set[str]:
    imported = set()
    for node in ast.walk(ast.parse(Path(module.__file__).read_text())):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    return imported


def test_the_oracle_imports_nothing_from_the_generator() -> None:
    stdlib = {"__future__", "math", "collections.abc", "dataclasses", "typing"}
    assert _imports(oracle) <= stdlib
    assert _imports(oracle_items) <= stdlib | {"evprobe.bench.oracle"}  # its expected items: the oracle alone


# --- variants and prices: a subset benchmark with a repriced combined report --------------------


@pytest.fixture(scope="module")
def subset_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("subset") / "bench"
    assert main(["generate", "--out", str(out), "--families-per-system", "2", "--subset-per-cell", "1",
                 "--price", "combined_report=0.5", "--quiet"]) == 0
    return out


def test_a_repriced_subset_benchmark_passes_and_its_variants_are_checked(subset_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bench = _copy(subset_bench, tmp_path)
    code, out, failed, checks = _check(bench, capsys)
    assert code == 0 and not failed, out
    assert checks["items"] > 312 and checks["items_by_request"]["no_initial_test"] > 0
    edited = _edit_item(bench, lambda r: r["variant"] == "no_initial_test", reference_action="test_mass")
    code, out, failed, _ = _check(bench, capsys)
    assert code == 1 and failed == {ACTIONS}
    assert f"{edited['item_id']} reference_action: items.jsonl 'test_mass', oracle 'combined_report'" in out


def test_prices_are_read_from_bench_json(subset_bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bench = _copy(subset_bench, tmp_path)
    meta = json.loads((bench / "bench.json").read_text())
    meta["prices"]["combined_report"] = 2.0  # the labels were made at 0.5
    (bench / "bench.json").write_text(json.dumps(meta))
    code, out, failed, _ = _check(bench, capsys)
    assert code == 1 and failed == {ACTIONS, ANSWERS}  # the action, and the letter of the action
    assert "reference_action: items.jsonl 'combined_report', oracle 'test_" in out


def test_a_manifest_edited_after_generation_fails_the_hash_row(tmp_path: Path, small_bench: Path) -> None:
    """check reads the manifests unverified (to compare every field), so the hash row is what
    catches an edit that changes no checked field (here: a trailing space in one prompt)."""
    import json
    import shutil

    from evprobe.bench.checks import run_checks

    bench = tmp_path / "bench"
    shutil.copytree(small_bench, bench)
    assert next(r for r in run_checks(bench).rows if r[0].startswith("Manifests match"))[2]
    path = bench / "items.jsonl"
    lines = path.read_text().splitlines()
    row = json.loads(lines[0])
    row["prompt"] += " "
    lines[0] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")
    name, result, passed = next(r for r in run_checks(bench).rows if r[0].startswith("Manifests match"))
    assert not passed and result == "1/2"
