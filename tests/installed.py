"""A real installed distribution for plugin tests: a dist-info folder with METADATA and entry_points.txt
beside its modules, on sys.path (what `pip install` leaves), so importlib.metadata finds its entry points."""

from __future__ import annotations

from pathlib import Path

import pytest


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, group: str, entries: dict[str, str],
            modules: dict[str, str]) -> None:
    """Write `modules` (relative path -> source) and distribution `name` 0.1 declaring `entries` (entry
    name -> "module[:object]") in `group` under tmp_path, and put tmp_path first on sys.path."""
    for rel, source in modules.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(source)
    dist = tmp_path / f"{name}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()))
    monkeypatch.syspath_prepend(str(tmp_path))
