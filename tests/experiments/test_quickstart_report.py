"""`evprobe quickstart` and `evprobe report`: input errors come first and in one line.

The full quickstart runs in tests/test_readme.py (the README's main command)."""

from __future__ import annotations

import json
import re
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


@pytest.mark.parametrize("voids, message", [("sensitivity", "not built for these worlds"),
                                             ("occluded,occluded", "names a void type twice"),
                                             ("hidden", "takes void types among occluded, unstated")])
def test_quickstart_refuses_a_bad_void_list_before_doing_anything(tmp_path: Path, capsys, voids: str,
                                                                  message: str) -> None:
    out = tmp_path / "qs"
    assert main(["quickstart", "--out", str(out), "--voids", voids]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not out.exists()


def test_quickstart_voids_reach_the_benchmark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--voids is generated with the benchmark (the organism's known-answer rows then read them:
    tests/experiments/test_known_answer_voids.py); stopped after the benchmark is written."""
    from evprobe.bench.manifest import read_meta
    from evprobe.experiments import quickstart as qs

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(qs, "run", stop)
    with pytest.raises(Stop):
        qs.quickstart(tmp_path / "qs", model="tiny:llava", families_per_system=2, progress=False,
                      voids=("occluded", "unstated"))
    assert read_meta(tmp_path / "qs" / "bench")["voids"] == ["occluded", "unstated"]


def test_report_needs_something_to_report(tmp_path: Path, capsys) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert "found none of known_answer.md, scores.md, sweep.md" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 2


def _pages(report: Path) -> str:
    """Every detail page of a report folder, in the order page one links them."""
    links = re.findall(r"^- \[[^\]]+\]\((details-[^)]+\.md)\)$", (report / "report.md").read_text(), flags=re.M)
    return "\n".join((report / link).read_text() for link in links)


def test_report_gathers_parts_and_plots(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "scores.md").write_text("# model\n\n## Choice\n\n| a | 1.0 [1.0, 1.0] (n=4) |\n")
    (tmp_path / "run" / "plot.png").write_bytes(b"\x89PNG")
    assert main(["report", str(tmp_path), "--title", "T"]) == 0
    page_one = (tmp_path / "report" / "report.md").read_text()
    assert page_one.startswith("# T") and "- [Behaviour](details-behaviour.md)" in page_one
    text = (tmp_path / "report" / "details-behaviour.md").read_text()
    assert text.startswith("# T") and "## Behaviour" in text and "### model" in text and "#### Choice" in text
    assert "(run__plot.png)" in text and (tmp_path / "report" / "run__plot.png").is_file()
    assert "[Back to the summary](report.md)" in text


def test_report_over_several_models(tmp_path: Path) -> None:
    for model in ("qwen", "smol"):
        (tmp_path / model / "run").mkdir(parents=True)
        (tmp_path / model / "run" / "scores.md").write_text(f"# {model}\n\n| a | 0.5 [0.4, 0.6] (n=8) |\n")
    out = tmp_path / "both"
    assert main(["report", str(tmp_path / "qwen"), str(tmp_path / "smol"), "--out", str(out)]) == 0
    text = _pages(out)
    assert "### qwen" in text and "### smol" in text and "`qwen/run/scores.md`" in text


def _links(section: str) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)]+)\)", section)


def test_report_keeps_same_named_folders_apart(tmp_path: Path) -> None:
    """The broken input: two folders named `out` (runs/a/out, runs/b/out); the second's plot
    replaced the first's in the report folder and both sections linked the same file."""
    plots = {}
    for run in ("a", "b"):
        root = tmp_path / "runs" / run / "out"
        (root / "run").mkdir(parents=True)
        (root / "run" / "scores.md").write_text(f"# model {run}\n\n| a | 0.5 [0.4, 0.6] (n=8) |\n")
        plots[run] = b"\x89PNG plot of " + run.encode()
        (root / "run" / "plot.png").write_bytes(plots[run])
        (root / "sweep.md").write_text(f"# sweep {run}\n")  # a part at the folder's top, too
        (root / "curve.png").write_bytes(b"\x89PNG curve of " + run.encode())
    report = tmp_path / "report"
    roots = [str(tmp_path / "runs" / run / "out") for run in ("a", "b")]
    assert main(["report", *roots, "--out", str(report)]) == 0
    text = _pages(report)
    sections = re.split(r"\*From `", text)[1:]
    assert [s.split("`", 1)[0] for s in sections] == [
        "a/out/run/scores.md", "b/out/run/scores.md", "a/out/sweep.md", "b/out/sweep.md"]
    linked = [_links(s) for s in sections]
    assert all(len(links) == 1 for links in linked)
    names = [links[0] for links in linked]
    assert len(set(names)) == 4  # every plot its own file
    for (run, png), name in zip([("a", "plot"), ("b", "plot"), ("a", "curve"), ("b", "curve")], names):
        source = tmp_path / "runs" / run / "out" / ("run" if png == "plot" else "") / f"{png}.png"
        assert (report / name).read_bytes() == source.read_bytes()  # each links its own plot
    assert sorted(p.name for p in report.glob("*.png")) == sorted(names)
    assert (report / names[0]).read_bytes() == plots["a"] and (report / names[1]).read_bytes() == plots["b"]


def _rows(markdown: str) -> set[str]:
    return {line for line in markdown.splitlines() if line.startswith("|")}


def test_report_rescores_a_run_whose_records_changed(small_bench: Path, tmp_path: Path) -> None:
    """A run scored at 2 records, then continued to 40: the report shows the scores of all 40,
    not the stale scores.md."""
    run_dir = tmp_path / "model" / "run"
    run = ["run", "--model", "policy:reference", "--bench", str(small_bench), "--out", str(run_dir), "--quiet"]
    assert main([*run, "--limit", "2"]) == 0
    assert main(["score", str(run_dir), "--quiet", "--n-boot", "50"]) == 0
    stale = (run_dir / "scores.md").read_text()
    assert main([*run, "--limit", "40"]) == 0
    assert main(["report", str(tmp_path / "model"), "--title", "T"]) == 0
    fresh = (run_dir / "scores.md").read_text()
    assert fresh != stale
    assert json.loads((run_dir / "scores.json").read_text())["records"]["n_records"] == 40
    text = _pages(tmp_path / "model" / "report")
    assert _rows(fresh) <= set(text.splitlines())  # every table row of the fresh scores
    stale_only = _rows(stale) - _rows(fresh)
    assert stale_only and not stale_only & set(text.splitlines())  # none of the stale ones


def test_plot_captions_say_what_to_look_for_and_name_the_scope() -> None:
    from evprobe.experiments.report.build import caption

    assert caption("stop_rate").startswith("Stop rate against the dose")
    assert caption("stop_rate.bouncing").endswith("(bouncing only.)")
    assert caption("generate.log_odds").endswith("Readout: the generated reply.")
    assert caption("something_else") == ""  # an unknown plot gets no invented caption


def test_the_headline_lines_print_the_families_their_files_give(tmp_path: Path) -> None:
    """The console's headline numbers say the families each interval rests on where the file gives
    them (issue 52): the behaviour's from scores.json, the probe's nested estimate from sweep.json's
    best where the sweep writes it, and n alone where it does not."""
    from evprobe.experiments.quickstart import headline_lines

    (tmp_path / "run").mkdir()
    (tmp_path / "acts" / "probes" / "resolved").mkdir(parents=True)
    (tmp_path / "run" / "scores.json").write_text(json.dumps(
        {"min_cost_choice": {"value": 0.9, "ci": [0.8, 0.95], "n": 576, "n_families": 144}}))
    best = {"layer": 3, "position": "last", "auroc": 0.96, "ci": [0.94, 0.98], "n": 800}
    sweep = tmp_path / "acts" / "probes" / "resolved" / "sweep.json"
    sweep.write_text(json.dumps({"best": best}))
    behaviour, probe = headline_lines(tmp_path)
    assert behaviour.endswith("90.0 [80.0, 95.0] (n=576 in 144 families)")
    assert "0.960 [0.940, 0.980] (n=800)," in probe
    sweep.write_text(json.dumps({"best": {**best, "n_families": 100}}))
    assert "0.960 [0.940, 0.980] (n=800 in 100 families)," in headline_lines(tmp_path)[1]
