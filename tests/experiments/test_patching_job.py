"""`evprobe patching`: the pair-patching heatmap job."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evprobe.bench.generate import GenerateConfig, generate
from evprobe.experiments.cli import main
from evprobe.experiments.patching.job import aggregate, patching_markdown


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("patch") / "bench"
    generate(out, GenerateConfig(families_per_system=1, subset_per_cell=0), progress=False)
    return out


def test_job_writes_both_directions_and_resumes(bench: Path, tmp_path: Path) -> None:
    out = tmp_path / "patch"
    args = ["patching", "--model", "tiny:qwen2_5_vl", "--bench", str(bench), "--out", str(out),
            "--limit-pairs", "2", "--layers", "0,3", "--n-boot", "200", "--quiet"]
    assert main(args) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and len({r["key"] for r in rows}) == 4  # 2 pairs x 2 directions
    assert all(np.asarray(r["ld_patched"]).shape == (2, 3) for r in rows)
    summary = json.loads((out / "patching.json").read_text())
    assert summary["layers"] == [0, 3] and summary["positions"] == ["last", "text", "image"]
    assert summary["mean_change"][0][0]["n"] == 4
    assert (out / "patching.png").stat().st_size > 0 and "n=4" in (out / "patching.md").read_text()
    before = (out / "results.jsonl").read_bytes()
    lines = before.decode().splitlines(keepends=True)
    (out / "results.jsonl").write_text("".join(lines[:-1]) + lines[-1][:20])  # killed mid-line
    assert main(args) == 0
    after = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(after) == 4 and len({r["key"] for r in after}) == 4


def test_aggregate_measures_the_share_of_the_gap() -> None:
    rows = []
    for k, fam in enumerate(["f1", "f1", "f2", "f3"]):
        # layer 0 patch recovers the whole gap, layer 1 nothing
        rows.append({"family_id": fam, "ld_source": 2.0, "ld_target": -1.0,
                     "ld_patched": [[2.0], [-1.0]], "top_source": 0, "top_target": 1,
                     "top_patched": [[0], [1]], "key": str(k)})
    s = aggregate(rows, [0, 1], ["last"], n_boot=200, seed=1).to_json()  # patching.json's tables
    assert s["share_of_gap"][0][0]["value"] == 1.0 and s["share_of_gap"][1][0]["value"] == 0.0
    assert s["mean_change"][0][0]["value"] == 3.0 and s["decoded_flip"][0][0]["value"] == 1.0
    assert s["decoded_flip"][1][0]["value"] == 0.0 and s["mean_change"][0][0]["n"] == 4
    # every pair moved by exactly 3 (layer 0) and 0 (layer 1): identical units, no [3, 3] interval
    assert s["mean_change"][0][0]["identical_units"] and s["mean_change"][1][0] == {
        "value": 0.0, "ci": [0.0, 0.0], "n": 4, "identical_units": True, "n_families": 3}
    md = patching_markdown({**s, "model": "m"})
    assert "3.000 (identical in all 4 pairs)" in md and "0.000 (identical in all 4 pairs)" in md
    assert "[3.000, 3.000]" not in md and "[0.000, 0.000]" not in md
    rows[1] = {**rows[1], "ld_patched": [[1.0], [-1.0]]}  # one pair moves less: a spread, an interval
    varied = aggregate(rows, [0, 1], ["last"], n_boot=200, seed=1).mean_change[0][0]
    assert not varied.identical and varied.ci[0] < varied.ci[1]


def test_bad_positions_are_refused(bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = main(["patching", "--model", "tiny:llava", "--bench", str(bench), "--out", str(tmp_path / "x"),
                 "--positions", "last,elsewhere"])
    assert code == 2 and "unknown position set 'elsewhere'" in capsys.readouterr().err


def test_config_file_with_flag_overrides(bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = tmp_path / "p.yaml"
    cfg.write_text(f"model: tiny:llava\nbench: {bench}\nout: {tmp_path / 'out'}\nlayers: '0'\nlimit_pairs: 3\n"
                   "n_boot: 100\n")
    assert main(["patching", "--config", str(cfg), "--limit-pairs", "1", "--quiet"]) == 0
    rows = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert len(rows) == 2  # the flag's 1 pair beat the file's 3, both directions
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: tiny:llava\nbench: x\nout: y\nlayer: 3\n")
    assert main(["patching", "--config", str(bad)]) == 2
    assert "unknown key 'layer'" in capsys.readouterr().err
    assert main(["patching", "--model", "tiny:llava"]) == 2
    assert "--config or --bench, --out" in capsys.readouterr().err


def test_a_layer_out_of_range_fails_before_the_model_loads(bench: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    from evprobe import hooks

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(hooks, "load", no_load)
    code = main(["patching", "--model", "tiny:llava", "--bench", str(bench), "--out", str(tmp_path / "x"),
                 "--layers", "0,7"])
    err = capsys.readouterr().err
    assert code == 2 and "layer" in err and "0..3" in err and "loaded" not in err


def test_a_deterministic_share_of_the_gap_is_not_a_point() -> None:
    """The broken output: every pair recovering exactly all of the gap printed 1.00 [1.00, 1.00].
    A cell whose every pair's share lies in [0, 1] gets the cluster interval too; a cell with a
    share outside [0, 1] has no bound to lean on and keeps the percentile interval (left open: a
    deterministic overshoot still prints a point)."""
    rows = [{"family_id": f"f{i // 2}", "ld_source": 2.0, "ld_target": -2.0, "ld_patched": [[2.0, 4.0]],
             "top_source": "A", "top_target": "B", "top_patched": [["A", "A"]]} for i in range(24)]
    out = aggregate(rows, [0], ["image", "text"], n_boot=200, seed=0).to_json()
    full, over = out["share_of_gap"][0]
    assert full["value"] == 1.0 and full["ci"][0] < 1.0 == full["ci"][1]
    assert over["value"] == 1.5 and over["ci"][0] <= 1.5 <= over["ci"][1]
    assert out["decoded_flip"][0][0]["ci"][0] < 1.0


def test_every_measure_says_the_families_its_pairs_lie_in() -> None:
    """Issue 52: a measure's interval rests on the families holding a pair of it, and each measure
    counts other pairs: every pair changes LD (3 families), only pairs with a gap give a share (f1
    and f3), only pairs whose top letters differ a flip (f1). The count is in patching.json, in the
    frame's n_families column and printed beside n; a count of every family, or none, fails."""
    from evprobe.core.estimate_text import count_text
    from evprobe.analysis.effects import estimate_columns

    rows = []
    for k, (fam, gap, flips) in enumerate([("f1", 3.0, True), ("f1", 3.0, True), ("f2", 0.05, False),
                                           ("f3", 3.0, False)]):
        rows.append({"family_id": fam, "ld_source": gap - 1.0, "ld_target": -1.0, "ld_patched": [[0.5 * k]],
                     "top_source": 0, "top_target": 1 if flips else 0, "top_patched": [[0]], "key": str(k)})
    summary = aggregate(rows, [0], ["last"], n_boot=200, seed=1)
    s = summary.to_json()
    md = patching_markdown({**s, "model": "m"})
    for measure, n, families in (("mean_change", 4, 3), ("share_of_gap", 3, 2), ("decoded_flip", 2, 1)):
        e = s[measure][0][0]
        assert (e["n"], e["n_families"]) == (n, families), measure
        assert estimate_columns(summary.grid(measure)[0][0])["n_families"] == families
        assert count_text(n, families) in md, measure


def test_the_heatmap_panels_say_their_families(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each panel's title states n with the families its cells' intervals rest on (a panel's cells
    count the same pairs): the share of the gap in 2 families, the flips in 1."""
    from evprobe.core.estimate_text import count_text
    from evprobe.analysis import patching_figures as figures

    rows = [{"family_id": fam, "ld_source": 2.0, "ld_target": -1.0, "ld_patched": [[0.5 * k]], "top_source": 0,
             "top_target": 1 if fam == "f1" else 0, "top_patched": [[0]]} for k, fam in enumerate(["f1", "f1", "f3"])]
    titles: list[str] = []
    panel = figures._panel
    monkeypatch.setattr(figures, "_panel", lambda *a, **k: (titles.append(a[8]), panel(*a, **k)))
    figures.heatmap_png(aggregate(rows, [0], ["last"], n_boot=100, seed=1).to_json(), tmp_path / "h.png")
    assert titles[0].endswith(count_text(3, 2)) and titles[1].endswith(count_text(2, 1)), titles
