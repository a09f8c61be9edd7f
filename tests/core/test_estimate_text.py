"""evprobe.core.estimate_text: one formatter for every estimate, one spelling of a missing value."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from evprobe.core.bootstrap import Estimate
from evprobe.core.estimate_text import estimate_text, missing_text


@pytest.mark.parametrize(("e", "how", "text"), [
    (Estimate(0.81234, (0.7, 0.9), 144), {}, "0.812 [0.700, 0.900] (n=144)"),
    (Estimate(0.5833, (0.417, 0.75), 24), {"digits": 1, "scale": 100.0}, "58.3 [41.7, 75.0] (n=24)"),
    (Estimate(1.234, (0.4, 2.1), 24), {"digits": 2, "sign": True, "unit": "nats"}, "+1.23 nats [+0.40, +2.10] (n=24)"),
    (Estimate(-0.00001, (-0.00004, 0.00002), 9), {"sign": True, "digits": 3},
     "-0.00001 [-0.00004, +0.00002] (n=9)"),  # never -0.000; ends that would print alike get decimals
    (Estimate(4.3e-05, (2.9e-06, 8.6e-05), 32), {}, "0.0000 [0.0000, 0.0001] (n=32)"),  # not [0.000, 0.000]
    (Estimate(0.5, (0.5, 0.5), 4), {}, "0.500 [0.500, 0.500] (n=4)"),  # a true point stays one (never widened)
    (Estimate(0.812, (0.7, 0.9), 144), {"n": False}, "0.812 [0.700, 0.900]"),
    (Estimate.by_design(1.25, 576), {"digits": 2}, "1.25 (fixed by design, n=576)"),
    (Estimate.identical_units(0.0, 12), {"units": "pairs"}, "0.000 (identical in all 12 pairs)"),
    (Estimate(0.5, (None, None), 3), {}, "0.500 [NA, NA] (n=3)"),
    (Estimate.empty(), {}, "NA (n=0)"),
    (Estimate.empty("one class only"), {}, "NA (one class only)"),
    (None, {}, "NA (not measured)"),
    ({}, {}, "NA (not measured)"),
    ({"value": None, "ci": [None, None], "n": 5}, {}, "NA (n=5)"),
])
def test_every_case_has_one_spelling(e, how, text) -> None:
    assert estimate_text(e, **how) == text
    if isinstance(e, Estimate):
        assert e.text(**how) == text == estimate_text(e.to_json(), **how)  # the JSON reads the same


def test_missing_is_na_with_why() -> None:
    assert missing_text() == "NA (not measured)" and missing_text("no null") == "NA (no null)"


PRINTERS = ("bench", "probes", "experiments")


def test_no_printer_spells_a_missing_value_its_own_way() -> None:
    """No string literal in the printing packages reads "n/a" or "not given" (an f-string's text parts
    included): a missing value is spelled by core.estimate_text. Docstrings and comments may say it."""
    root = Path(__file__).parents[2]
    found = []
    for package in PRINTERS:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            docs = {id(n.body[0].value) for n in ast.walk(tree)
                    if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef) and n.body
                    and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                    text = node.value.lower()
                    if "n/a" in text or text.strip() in ("not given", "na", "na (n=0)"):
                        found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value!r}")
    assert found == []
