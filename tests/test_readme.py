"""The README is the front door: its documented commands must keep working."""

from __future__ import annotations

import json

import re
import shlex
from pathlib import Path

import pytest

from evprobe.experiments.cli import build_parser, main
from tests.intervals import NEGATIVE_ZERO, POINT, zero_width

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
# the documentation's pages (mkdocs, tests/test_docs.py): their usage blocks are checked like the README's
PAGES = {"README.md": README} | {str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "docs").rglob("*.md"))}
DOC_BLOCKS = [(page, block) for page, text in PAGES.items() for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def _commands(block: str) -> list[str]:
    lines = [l for l in block.splitlines() if l.strip() and not l.lstrip().startswith("#")]
    return [c.strip() for line in lines for c in line.split("&&")]


def test_top_shows_exactly_the_two_commands() -> None:
    assert len(_commands(BLOCKS[0])) >= 5 and "pip install torch==2.13.0" in BLOCKS[0]
    assert _commands(BLOCKS[1])[-1] == "HF_HUB_OFFLINE=1 python -m pytest -q"


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q torch==2.13.0" in ci and 'pip install -q -e ".[test]"' in ci
    assert "HF_HUB_OFFLINE=1" in ci and "python -m pytest -q" in ci


def test_the_main_job_runs_as_documented(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """The evprobe part of the first command (the quickstart), in a scratch folder; the console ends
    with the headline numbers (each with its interval and n) and the report's path."""
    monkeypatch.chdir(tmp_path)
    evprobe = [c for c in _commands(BLOCKS[0]) if c.startswith("evprobe ")]
    assert evprobe == ["evprobe quickstart"]
    assert main(shlex.split(evprobe[0])[1:]) == 0
    tail = capsys.readouterr().out.strip().splitlines()[-5:]
    assert tail[0].startswith("behaviour: minimum-cost choice") and "(n=576 in 144 families)" in tail[0]
    assert tail[1].startswith("probe: sufficiency decoded at AUROC") and "nested estimate" in tail[1]
    assert tail[2].startswith("steering (induce measuring") and tail[3].startswith("steering (induce stopping")
    assert tail[4] == "report: out/quickstart/report/report.md"
    folder = tmp_path / "out" / "quickstart" / "report"
    page_one = (folder / "report.md").read_text()
    # page one reads in two minutes: the figure, the headline table with intervals and n, sentences
    assert len(page_one.splitlines()) < 60 and "](summary.png)" in page_one and (folder / "summary.png").is_file()
    checks = json.loads((tmp_path / "out" / "quickstart" / "known_answer.json").read_text())["checks"]
    assert len(checks) == 10 and all(c["passed"] for c in checks)
    assert "| minimum-cost choice (%) | 100.0 [" in page_one and "| known-answer checks passed | 10 of 10 |" in page_one
    assert "model organism" in page_one and "Known-answer checks: all passed" in page_one
    details = "\n".join(p.read_text() for p in sorted(folder.glob("details-*.md")))
    for part in ("## Known-answer checks", "## Behaviour", "## Probe sweeps", "## Dose-response", "## Pair patching"):
        assert part in details
    assert "(n=" in details and list(folder.glob("*.png"))
    html = (folder / "report.html").read_text()
    assert html.count("<img ") == html.count('<img src="data:image/png;base64,') > 20  # every figure inline
    # taken in at a glance (issue 28): under 5 MB, every image in the file once, detail pages folded
    # behind one figure and one table, the layer the headline panel cannot score named on page one
    assert len(html.encode("utf-8")) < 5_000_000 and html.count("<details>") > 10
    images = re.findall(r'<img src="(data:[^"]+)"', html)
    assert len(images) == len(set(images))
    assert "Not scored in the left panel (drawn as x at chance): L0 at last" in page_one
    # no interval anywhere in the main job's outputs is a point (unless marked: fixed by design, or
    # identical in every unit; core.bootstrap)
    outputs = tmp_path / "out" / "quickstart"
    for path in sorted(outputs.rglob("*.json")):
        if path.parent.name != "bench":  # the benchmark's own files hold no estimates
            assert zero_width(json.loads(path.read_text())) == [], path
    for path in sorted(outputs.rglob("*.md")):
        text = path.read_text()
        assert re.search(POINT, text) is None, path
        assert re.search(NEGATIVE_ZERO, text) is None, (path, re.search(NEGATIVE_ZERO, text))
    # what the main job writes stays what it wrote before a refactor (issue 27): every file, modulo
    # its own path and wall-clock fields (tests/quickstart_digest.py says how to refresh it)
    from tests.quickstart_digest import DIGEST_FILE, check

    changed, not_compared, kind = check(outputs, "out/quickstart")
    assert changed == [], f"{len(changed)} quickstart outputs differ from {DIGEST_FILE.name}: {changed[:10]}"
    if not_compared:  # a kind of CPU with no recorded values for them: compared on no value measured elsewhere
        print(f"{len(not_compared)} per-kind quickstart outputs not compared on this kind of CPU ({kind.key}: "
              f"{kind.label}); record them with `python -m tests.quickstart_digest out/quickstart --add-machine`")


def test_every_documented_flag_exists() -> None:
    """Each usage block (a ```bash block whose lines start with `evprobe <command>`) of the README
    and of every docs/ page names only flags that its subcommand accepts."""
    # the how-to's toy backend (docs/howto/add-backend.md) adds its flag (--letter) once its page's code ran;
    # tests/bench/test_backend_registry.py runs that page and the flag through evprobe run
    toy = {"docs/howto/add-backend.md": {"--letter"}}
    sub = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    checked = set()
    for page, block in DOC_BLOCKS:
        for line in block.splitlines():
            m = re.match(r"evprobe (\w[\w-]*)(?: (\w[\w-]*))?", line.strip())
            if m and m.group(1) in sub and line.strip() == line.lstrip():
                parser = sub[m.group(1)]
                nested = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
                if nested:  # `evprobe organism train ...`: the flags belong to the action's parser
                    parser = nested[0].choices[m.group(2)]
                known = {opt for a in parser._actions for opt in a.option_strings}
                # continuation lines of a usage block belong to the same command
                text = block[block.index(line):].split("\nevprobe ")[0]
                flags = set(re.findall(r"--[a-z][a-z-]*", text))
                assert flags <= known | toy.get(page, set()), (page, m.group(1), flags - known)
                checked.add(m.group(1))
    assert {"generate", "check", "run", "score", "compare", "capture", "patching", "sweep", "directions",
            "quickstart", "dose-response", "report", "layer-sweep", "gating", "merge", "organism"} <= checked


def test_docs_pages_are_scanned() -> None:
    """The flag check reads the docs pages too: the reference pages hold the usage blocks."""
    pages = {page for page, _ in DOC_BLOCKS}
    assert {"docs/getting-started.md", "docs/reference/running.md", "docs/reference/probes.md"} <= pages


def test_every_documented_command_exists() -> None:
    """Every `evprobe NAME` at the start of a command line in a ```bash block (README or docs) is a
    subcommand, and `python -m evprobe` / `torchrun ... -m evprobe NAME` lines name one too."""
    sub = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for page, block in DOC_BLOCKS:
        for command in _commands(block):
            m = re.match(r"(?:.*-m )?evprobe (\w[\w-]*)", command)
            if m and (command.startswith("evprobe ") or " -m evprobe " in command):
                assert m.group(1) in sub, (page, command)


def test_no_build_machine_notes() -> None:
    """README and docs describe the toolkit, not the machine it was built on."""
    banned = ("this workplace", "this machine", "no weights can be downloaded", "2-core machine",
              "not exercised here", "untested here", "not run here", "GPU-less")
    for page, text in PAGES.items():
        for phrase in banned:
            assert phrase not in text, (page, phrase)
