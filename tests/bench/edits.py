"""Edits of a generated benchmark folder for tests that break it on purpose."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
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
