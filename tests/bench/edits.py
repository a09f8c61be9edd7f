"""Edits of a generated benchmark folder for tests that break it on purpose."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def rewrite_items(bench: Path, edit: Callable[[list[dict[str, Any]]], None]) -> None:
    """Apply `edit` to items.jsonl's rows in place and re-pin bench.json's items_sha256, so the
    edit reaches the check under test instead of being refused as a changed file."""
    rows = [json.loads(line) for line in (bench / "items.jsonl").read_text().splitlines() if line.strip()]
    edit(rows)
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    (bench / "items.jsonl").write_bytes(data)
    meta = json.loads((bench / "bench.json").read_text())
    meta["items_sha256"] = hashlib.sha256(data).hexdigest()
    (bench / "bench.json").write_text(json.dumps(meta, indent=2) + "\n")


def wrong_last_reading(rows: list[dict[str, Any]], line: str) -> None:
    """Both members of a level-3 threshold pair (so the pair rows hold) print a wrong reading on their
    first readings line starting with `line` ("- panel 4" on sheets, "- frame 8" on clips of 8)."""
    did = next(r for r in rows if r.get("injection") == 3 and r["request"] == "select")["decision_id"]
    stem = did.rsplit(".", 2)[0]  # <family>.h<h>
    for r in rows:
        if r.get("injection") == 3 and r["request"] == "select" and r["decision_id"].startswith(stem + "."):
            lines = r["prompt"].split("\n")
            i = next(k for k, x in enumerate(lines) if x.startswith(line))
            lines[i] = lines[i].rsplit(" ", 2)[0] + " 0.123456 m"
            r["prompt"] = "\n".join(lines)


def copy_bench(src: Path, tmp_path: Path) -> Path:
    """A copy of a generated benchmark under tmp_path, without its checks.json, to break on purpose."""
    dst = tmp_path / "bench"
    shutil.copytree(src, dst)
    (dst / "checks.json").unlink(missing_ok=True)
    return dst


def check_passes(source: Path, tmp_path: Path, capsys: Any, rows: Iterable[str]) -> Path:
    """`evprobe check` on a copy of `source` (copy_bench): exit 0, no row failed, and each of `rows`
    printed. Returns the copy (its checks.json holds the numbers)."""
    bench = copy_bench(source, tmp_path)
    code, failed, out = check_rows(bench, capsys)
    assert code == 0 and not failed
    for row in rows:
        assert row in out
    return bench


def check_rows(bench: Path, capsys: Any) -> tuple[int, set[str], str]:
    """`evprobe check BENCH`: its exit code, the rows that failed and what it printed."""
    from evprobe.experiments.cli import main

    code = main(["check", str(bench)])
    out = capsys.readouterr().out
    checks = json.loads((bench / "checks.json").read_text())
    return code, {c["check"] for c in checks["checks"] if not c["passed"]}, out
