"""mkdocs hook: let mkdocstrings (griffe) find `evprobe.<part>` by reading the source statically.

The repository's top-level folders install as parts of `evprobe` ([tool.setuptools.package-dir] in
pyproject.toml: `hooks/` -> `evprobe.hooks`, ...), a mapping griffe's static finder does not read.
Before the pages are rendered this hook builds `build/docs-api/evprobe/` from symlinks (the
facade's `__init__.py` and one link per mapped folder) and points the Python handler's `paths` at
it, so `::: evprobe.hooks.capture` resolves without importing anything.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / "build" / "docs-api"


def _link(target: Path, link: Path) -> None:
    """`link` -> `target`, replaced atomically (several builds may run at once)."""
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, link)


def build_tree() -> Path:
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    package = TREE / "evprobe"
    package.mkdir(parents=True, exist_ok=True)
    for name in ("__init__.py", "__main__.py"):
        _link(ROOT / mapping["evprobe"] / name, package / name)
    for dotted, folder in mapping.items():
        if dotted.startswith("evprobe.") and dotted.count(".") == 1:
            _link(ROOT / folder, package / dotted.split(".", 1)[1])
    return TREE


@event_priority(100)  # before mkdocstrings reads its handlers' settings
def on_config(config, **kwargs):
    tree = build_tree()
    handlers = config.plugins["mkdocstrings"].config.handlers
    handlers.setdefault("python", {})["paths"] = [str(tree)]
    return config
