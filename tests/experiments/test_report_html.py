"""report.html opened in a real headless browser (Debian's chromium): it renders every page as a
section and every image loads. The check can fail: one image's bytes corrupted in the HTML is
reported as not loaded.

CI installs chromium (.ci/run) and sets CI, where a missing browser fails the test; elsewhere it
is skipped with the command that installs it."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from evprobe.bench.generate import GenerateConfig, generate
from evprobe.bench.runner import RunConfig, run
from evprobe.core.errors import InputError
from evprobe.experiments.report.build import build_report
from evprobe.experiments.scoring_io import score_run
from evprobe.probes.runs import sweep_to_folder
from evprobe.probes.sweep import SweepConfig
from evprobe.probes.synthetic import planted_acts, reference_rows, write_capture

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PROBE = """<script>window.addEventListener("load", () => {
  const imgs = [...document.images];
  document.body.setAttribute("data-check", JSON.stringify({images: imgs.length,
    loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
    sections: [...document.querySelectorAll("section")].map(s => s.id)}));
});</script>"""


def browser() -> str:
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; .ci/run installs it (apt-get install -y chromium)")
        pytest.skip("needs a headless browser: apt-get install -y chromium")
    return CHROMIUM


def open_in_browser(page: Path, tmp: Path) -> dict:
    """Load `page` in headless chromium and return what the page saw once loaded."""
    probe = tmp / "probe.html"
    probe.write_text(page.read_text().replace("</body>", PROBE + "\n</body>"))
    out = subprocess.run([browser(), *FLAGS, f"--user-data-dir={tmp / 'profile'}", "--virtual-time-budget=10000",
                          "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    m = re.search(r'data-check="([^"]*)"', out.stdout)
    assert m, f"the page did not finish loading: {out.stderr[-500:]}"
    return json.loads(html.unescape(m.group(1)))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (small) pipeline folder: a scored run of the reference policy and a probe sweep of a
    planted signal, reported."""
    root = tmp_path_factory.mktemp("pipeline")
    generate(root / "bench", GenerateConfig(families_per_system=1, subset_per_cell=0), progress=False)
    run(RunConfig(model="policy:reference", bench=str(root / "bench"), out=str(root / "run"), requests=("select",)),
        progress=False)
    score_run(root / "run", n_boot=100)
    rows = reference_rows(24)
    y = np.array([r["resolved"] for r in rows], dtype=np.int8)
    acts, _ = planted_acts(y, 3, 1, 16, signal_layers=(2,), strength=3.0)
    cap = write_capture(root / "acts", acts, rows, positions=["last"])
    sweep_to_folder([cap], "resolved", root / "acts" / "probes" / "resolved",
                    SweepConfig(refits=10, n_boot=200, control_tasks=4))
    return build_report(root, title="pipeline").parent


def test_report_html_renders_and_every_image_loads(report: Path, tmp_path: Path) -> None:
    page = report / "report.html"
    seen = open_in_browser(page, tmp_path)
    pages = ["report", *sorted(p.stem for p in report.glob("details-*.md"))]
    assert sorted(seen["sections"]) == sorted(pages) and len(pages) >= 3
    assert seen["images"] == 2 and seen["loaded"] == 2  # summary.png and the sweep's plot
    text = page.read_text()
    assert 'href="#details-behaviour"' in text and "details-behaviour.md" not in text  # links stay in the file
    assert not re.search(r'src="(?!data:)', text)  # nothing outside the file


def test_a_corrupted_image_is_seen_as_not_loaded(report: Path, tmp_path: Path) -> None:
    text = (report / "report.html").read_text()
    broken = tmp_path / "broken.html"
    broken.write_text(re.sub(r'src="data:image/png;base64,[^"]{40}', 'src="data:image/png;base64,' + "A" * 40, text,
                             count=1))
    seen = open_in_browser(broken, tmp_path)
    assert seen["loaded"] == seen["images"] - 1


def test_a_missing_image_is_an_error_naming_it(report: Path, tmp_path: Path) -> None:
    copy = tmp_path / "r"
    shutil.copytree(report, copy)
    (copy / "summary.png").unlink()
    from evprobe.experiments.report.html import write_html

    with pytest.raises(InputError, match="image summary.png not found"):
        write_html(copy, "T", ["report.md"])
