"""The documentation site builds in strict mode: a broken link, anchor or API reference fails it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of `config` into `site` (mkdocs comes with the [docs] extra, in [test];
    CI installs it, so there a missing mkdocs fails instead of skipping)."""
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        pytest.importorskip("mkdocs")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_docs_build_strict(tmp_path: Path) -> None:
    done = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr[-4000:]
    site = tmp_path / "site"
    for page in ("index.html", "getting-started/index.html", "howto/own-data/index.html",
                 "reference/files/index.html", "api/capture/index.html"):
        assert (site / page).is_file(), page
    api = (site / "api" / "capture" / "index.html").read_text()
    assert "capture_layers" in api and "capture_tokens" in api  # generated from the docstrings


def _broken_copy(tmp_path: Path, page: str, text: str) -> Path:
    """mkdocs.yml with docs/ copied to tmp_path and `text` appended to `page`."""
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    with open(docs / page, "a") as f:
        f.write("\n" + text + "\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: {docs}\nhooks:\n  - {ROOT / 'docs/_hooks/api_tree.py'}\n")
    return config


@pytest.mark.parametrize("page,text,why", [
    ("getting-started.md", "See [the missing page](reference/no-such-page.md).", "no-such-page.md"),
    ("howto/add-probe.md", "See [probes](../reference/probes.md#no-such-section).", "no-such-section"),
    ("api/core.md", "::: evprobe.core.no_such_module", "no_such_module"),
])
def test_a_broken_reference_fails_the_build(tmp_path: Path, page: str, text: str, why: str) -> None:
    done = _build(_broken_copy(tmp_path, page, text), tmp_path / "site")
    assert done.returncode != 0 and why in done.stderr, done.stderr[-4000:]
