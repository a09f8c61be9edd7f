"""`evprobe sweep` and `evprobe directions` through their parsers and run functions."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evprobe.probes.cli import add_directions_parser, add_sweep_parser
from evprobe.probes.synthetic import write_records


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="evprobe")
    sub = p.add_subparsers(dest="command", required=True)
    add_sweep_parser(sub)
    add_directions_parser(sub)
    return p


def _run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    return args.run(args)


def test_sweep_writes_json_markdown_and_png(planted, tmp_path: Path, capsys) -> None:
    out = tmp_path / "sweep"
    rc = _run(["sweep", str(planted[0]), "--label", "resolved", "--probe", "massmean", "--n-boot", "200",
               "--out", str(out), "--transfer", "system", "--quiet"])
    assert rc == 0
    data = json.loads((out / "sweep.json").read_text())
    assert data["label"] == "resolved" and data["probe"] == "massmean" and len(data["rows"]) == 10
    assert {"layer", "position", "auroc", "ci", "control_tasks", "selectivity", "leakage_auroc", "n"} <= set(data["rows"][0])
    assert "control_auroc" not in data["rows"][0] and data["config"]["control_tasks"] == 39
    assert data["best"]["layer"] == 8
    assert (out / "sweep.md").read_text().startswith("# Probe sweep: resolved=True, massmean probe")
    assert (out / "sweep.png").stat().st_size > 1000
    assert json.loads((out / "transfer-system.json").read_text())["kind"] == "system"
    assert "nested best L8/" in capsys.readouterr().out


def test_sweep_defaults_and_behavioural_labels(planted, rows, tmp_path: Path) -> None:
    actions = ["stop" if r["resolved"] or i % 2 else r["reference_action"] for i, r in enumerate(rows)]
    run = write_records(tmp_path / "run", rows, actions)
    rc = _run(["sweep", str(planted[0]), "--label", "stopped", "--records", str(run), "--n-boot", "100",
               "--layers", "8", "--positions", "last", "--quiet", "--out", str(tmp_path / "s"), "--control-tasks", "5",
               "--cell-fields", "system,history"])
    assert rc == 0
    data = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert data["label"] == "stopped" and [r["layer"] for r in data["rows"]] == [8]
    assert data["control_tasks"]["cell_fields"] == ["system", "history"] and data["control_tasks"]["n_cells"] == 6
    assert data["rows"][0]["control_tasks"]["k"] == 5
    rc = _run(["sweep", str(planted[0]), "--records", str(run), "--restrict", "confabulated", "--n-boot", "100",
               "--no-nested", "--quiet", "--out", str(tmp_path / "cf")])
    assert rc == 0
    assert json.loads((tmp_path / "cf" / "sweep.json").read_text())["restriction"].startswith("confabulated")


def test_bad_input_is_a_one_line_error_naming_the_fix(planted) -> None:
    with pytest.raises(ValueError, match="--records"):
        _run(["sweep", str(planted[0]), "--label", "stopped"])
    with pytest.raises(ValueError, match="--label system="):
        _run(["sweep", str(planted[0]), "--label", "system"])
    with pytest.raises(ValueError, match="captured: 0, 4, 8, 12, 16"):
        _run(["sweep", str(planted[0]), "--layers", "7"])
    with pytest.raises(ValueError, match="--restrict needs"):
        _run(["sweep", str(planted[0]), "--restrict", "confabulated"])


def test_directions_command(planted, tmp_path: Path, capsys) -> None:
    out = tmp_path / "dirs"
    assert _run(["directions", str(planted[0]), "--layer", "8", "--out", str(out)]) == 0
    index = json.loads((out / "directions.json").read_text())
    assert [d["name"] for d in index["directions"]] == ["resolved.massmean.L8.last"]
    assert (out / "resolved.massmean.L8.last.safetensors").is_file() and not list(out.glob("*.npy"))
    assert not (out / "geometry.json").exists()  # one direction: nothing to compare
    assert _run(["directions", str(planted[0]), "--layer", "8,16", "--by", "system", "--position", "image_mean",
                 "--out", str(out)]) == 0
    geo = json.loads((out / "geometry.json").read_text())
    assert len(geo["names"]) == 7 and np.allclose(np.diag(geo["cosine"]), 1)
    assert (out / "geometry.png").stat().st_size > 1000 and "mean residual norm" in capsys.readouterr().out


def test_probes_never_import_torch() -> None:
    code = ("import sys, evprobe.probes.cli, evprobe.probes.sweep, evprobe.probes.transfer, evprobe.probes.directions, "
            "evprobe.probes.report, evprobe.probes.geometry, evprobe.probes.synthetic; import argparse; "
            "assert 'torch' not in sys.modules, 'torch imported'; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr
