"""`evprobe quickstart` and `evprobe report`: input errors come first and in one line.

The full quickstart runs in tests/test_readme.py (the README's main command)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evprobe.experiments.cli import main


@pytest.mark.parametrize("model, message", [("tiny:nope", "unknown tiny architecture 'nope'"),
                                            ("nosuch_model", "unknown model 'nosuch_model'")])
def test_quickstart_rejects_a_bad_model_before_doing_anything(tmp_path: Path, capsys, model: str, message: str) -> None:
    out = tmp_path / "qs"
    assert main(["quickstart", "--out", str(out), "--model", model]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()


def test_report_needs_something_to_report(tmp_path: Path, capsys) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert "found no scores.md" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 2


def test_report_gathers_parts_and_plots(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "scores.md").write_text("# model\n\n## Choice\n\n| a | 1.0 [1.0, 1.0] (n=4) |\n")
    (tmp_path / "run" / "plot.png").write_bytes(b"\x89PNG")
    assert main(["report", str(tmp_path), "--title", "T"]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    assert text.startswith("# T") and "## Behaviour" in text and "### model" in text and "#### Choice" in text
    assert "(run__plot.png)" in text and (tmp_path / "report" / "run__plot.png").is_file()


def test_report_over_several_models(tmp_path: Path) -> None:
    for model in ("qwen", "smol"):
        (tmp_path / model / "run").mkdir(parents=True)
        (tmp_path / model / "run" / "scores.md").write_text(f"# {model}\n\n| a | 0.5 [0.4, 0.6] (n=8) |\n")
    out = tmp_path / "both"
    assert main(["report", str(tmp_path / "qwen"), str(tmp_path / "smol"), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "### qwen" in text and "### smol" in text and "`qwen/run/scores.md`" in text
