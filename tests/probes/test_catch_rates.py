"""Catch rates per sub-scenario (seed 002, appendix H.2) on a planted capture whose answer is known:
voids of one sub-scenario move far from their twins, those of another not at all."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from evprobe.probes.captures import CaptureError, load_captures
from evprobe.probes.catch_rates import catch_markdown, catch_rates
from evprobe.probes.cli import add_sweep_parser
from evprobe.probes.label_sets import labels
from evprobe.probes.sweep import SweepConfig
from evprobe.probes.synthetic import write_capture

SHIFT = {("sliding", "mass"): 4.0, ("sliding", "friction"): 1.0, ("bouncing", "mass"): 0.0}


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 families, 20 per sub-scenario, each 2 twins and their 2 voids; a void moves by SHIFT along u."""
    rng = np.random.default_rng(5)
    u = rng.standard_normal(16)
    u /= np.linalg.norm(u)
    rows, shift = [], []
    for f in range(60):
        system, initial = list(SHIFT)[f % 3]
        fam = f"{system}-{f:03d}"
        for h in (0, 1):
            twin = f"{fam}.answer_initial.h{h}.low"
            common = {"family_id": fam, "system": system, "initial_property": initial}
            rows.append({"item_id": twin, **common, "resolved": True})
            rows.append({"item_id": twin + ".void-occluded", **common, "resolved": False, "void": "occluded",
                         "twin_id": twin})
            shift += [np.zeros(16), SHIFT[(system, initial)] * u]
    acts = rng.standard_normal((len(rows), 2, 1, 16)).astype(np.float32)
    acts[:, 1, 0] += np.array(shift)
    return write_capture(tmp_path_factory.mktemp("catch") / "acts", acts.astype(np.float16), rows,
                         layers=[8, 32], positions=["last"])


def test_catch_rates_follow_the_planted_salience(capture: Path) -> None:
    cs = load_captures([capture])
    ls = labels(cs, "resolved")
    res = catch_rates(cs, ls, ["system", "initial_property"], 32, "last", SweepConfig(probe="centroid", n_boot=500))
    voids = {r.group: r.rate for r in res.rates if r.caught == "False"}
    assert list(voids) == ["sliding, mass", "sliding, friction", "bouncing, mass"]
    assert all(e.n == 40 and e.n_families == 20 for e in voids.values())
    strong, middle, none = voids.values()
    assert strong.value == 1.0 and strong.ci[0] < 0.9  # all caught, and an interval with width
    assert strong.value > middle.value > none.value and strong.ci[0] > none.ci[1]  # the planted order
    assert none.value < 0.5  # an undisplaced void sits with its twins: rarely caught
    twins = {r.group: r.rate for r in res.rates if r.caught == "True"}
    assert all(e.value > 0.5 for e in twins.values())
    # at the layer with no signal every group is near chance
    flat = catch_rates(cs, ls, ["system", "initial_property"], 8, "last", SweepConfig(probe="centroid", n_boot=500))
    assert all(abs(r.rate.value - 0.5) < 0.3 and r.rate.ci[0] < 0.5 < r.rate.ci[1] + 0.15 for r in flat.rates)
    data = res.to_json()
    assert data["by"] == ["system", "initial_property"] and data["rates"][0]["unscored"] == 0
    assert "| sliding, mass | False |" in catch_markdown(res)


def test_bad_fields_are_refused_in_one_line(capture: Path) -> None:
    cs = load_captures([capture])
    with pytest.raises(CaptureError, match="--catch-by nonsense: nonsense is not an index field"):
        catch_rates(cs, labels(cs, "resolved"), ["nonsense"], 32, "last")
    with pytest.raises(CaptureError, match="layer 7 was not captured"):
        catch_rates(cs, labels(cs, "resolved"), ["system"], 7, "last")


def _run(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="evprobe")
    add_sweep_parser(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(argv)
    return args.run(args)


def test_the_sweep_writes_catch_rates(capture: Path, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    fast = ["--n-boot", "100", "--no-nested", "--no-controls", "--refits", "0", "--chance-permutations", "0", "--quiet"]
    assert _run(["sweep", str(capture), "--probe", "centroid", "--catch-by", "system,initial_property",
                 "--catch-layer", "32", "--out", str(out), *fast]) == 0
    data = json.loads((out / "catch-rates.json").read_text())
    assert data["layer"] == 32 and data["position"] == "last" and len(data["rates"]) == 6
    assert (out / "catch-rates.md").read_text().startswith("# Catch rates by system, initial_property")
    with pytest.raises(ValueError, match="--catch-by and --catch-layer go together"):
        _run(["sweep", str(capture), "--catch-by", "system", "--out", str(tmp_path / "x"), *fast])
    with pytest.raises(ValueError, match="layer 5 was not captured"):
        _run(["sweep", str(capture), "--catch-by", "system", "--catch-layer", "5", "--out", str(tmp_path / "y"), *fast])
    assert not (tmp_path / "y").exists()  # refused before any work
