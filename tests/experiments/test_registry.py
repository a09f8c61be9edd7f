"""The experiment registry (evprobe.experiments.registry): a new experiment is one declaration, and the CLI, merge and the report all
see it; a wrong declaration is refused in one line naming what is registered."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from evprobe.core.job_summary import MergeSummary

from evprobe.experiments import registry
from evprobe.experiments.cli import build_parser, main
from evprobe.experiments.registry import Experiment, ReportPart, register, unregister

TOY = "toy-attribution"


def add_toy_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(TOY, help="a toy experiment declared in a test")
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(run=run_toy)
    return p


def run_toy(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "toy.md").write_text("# Toy attribution\n\n| head | effect |\n|---|---|\n| L0.H1 | 0.5 |\n")
    (args.out / "meta.json").write_text(json.dumps({"kind": TOY}))
    return 0


def merge_toy(out: Path, folders: list[Path]) -> MergeSummary[None]:
    out.mkdir(parents=True, exist_ok=True)
    return MergeSummary(kind=TOY, out=out, n_shards=len(folders), n_units=0, n_rows=0)


@pytest.fixture
def toy():
    e = register(Experiment(TOY, parser=f"{__name__}:add_toy_parser", job=f"{__name__}:merge_toy",
                            report=ReportPart("Toy attribution", "toy.md", rank=65)))
    yield e
    unregister(TOY)


def test_one_declaration_reaches_the_cli_merge_and_the_report(toy, tmp_path: Path, capsys) -> None:
    from evprobe.experiments.merge import kind_of, merge
    from evprobe.experiments.report.build import build_report

    assert TOY in build_parser()._subparsers._group_actions[0].choices
    out = tmp_path / "toy"
    assert main([TOY, "--out", str(out)]) == 0 and (out / "toy.md").is_file()
    assert kind_of(out) == TOY and merge(tmp_path / "merged", [out]).kind == TOY
    report = build_report(tmp_path, title="t", html=False)
    pages = {p.name: p.read_text() for p in report.parent.glob("details-*.md")}
    assert "details-toy-attribution.md" in pages and "| L0.H1 | 0.5 |" in pages["details-toy-attribution.md"]
    assert [p.file for p in registry.report_parts()].index("toy.md") == \
        [p.rank for p in registry.report_parts()].index(65)  # in rank order


def test_the_builtin_parts_come_in_the_reports_order_and_gating_is_one() -> None:
    assert [p.file for p in registry.report_parts()] == [
        "known_answer.md", "scores.md", "sweep.md", "geometry.md", "dose_response.md", "gating.md",
        "void_transfer.md", "patching.md", "ladder.md", "judge.md", "confabulation.md"]
    assert set(registry.job_kinds()) == {"run", "capture", "patching", "dose-response", "layer-sweep", "gating"}


@pytest.mark.parametrize(("experiment", "message"), [
    (Experiment("run", parser="x.y:z"), "experiment 'run' is already registered (registered: generate, check, run"),
    (Experiment("Toy", parser="x.y:z"), "use lowercase letters"),
    (Experiment("toy-2", parser="x.y.z"), "parser='x.y.z' is not a 'module:attribute' reference"),
    (Experiment("toy-3", parser="x:y", job="x:y", kind="capture"), "job kind 'capture' is already merged by 'capture'"),
    (Experiment("toy-4", parser="x:y", report=ReportPart("S", "scores.md", 1)),
     "report file 'scores.md' is already gathered"),
])
def test_a_wrong_declaration_is_refused_in_one_line(experiment: Experiment, message: str) -> None:
    before = registry.names()
    with pytest.raises(ValueError) as err:
        register(experiment)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert registry.names() == before  # nothing half-registered


def test_unknown_names() -> None:
    with pytest.raises(ValueError, match="no experiment 'frobnicate'; registered: generate, check, run"):
        registry.get("frobnicate")
    with pytest.raises(ValueError, match="no experiment 'frobnicate'"):
        unregister("frobnicate")
