"""Reading and writing a benchmark folder: families.jsonl, items.jsonl, bench.json, images/.

Readers validate at the edge: a line that is not JSON, a missing field, an image path that leaves
the folder or an image that is not there is a one-line `BenchError` naming file, line and field.
Writers are atomic: a file appears whole under its final name or not at all.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from bench.family import Family
from bench.items import Item


class BenchError(ValueError):
    """Bad benchmark input; the message names the file, line and field, and the fix."""


FAMILIES_FILE = "families.jsonl"
ITEMS_FILE = "items.jsonl"
META_FILE = "bench.json"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; results are for sharing, like the appended logs
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    text = "".join(json.dumps(row, sort_keys=False) + "\n" for row in rows)
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2) + "\n").encode("utf-8"))


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-empty line; a bad line is a BenchError naming it."""
    if not path.is_file():
        raise BenchError(f"{path}: file not found; run `evprobe generate --out {path.parent}` first")
    with path.open("r", encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise BenchError(f"{path}:{number}: not valid JSON ({err.msg})") from None
            if not isinstance(row, dict):
                raise BenchError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
            yield number, row


def _require(path: Path, number: int, row: dict[str, Any], names: Iterable[str]) -> None:
    for name in names:
        if name not in row:
            raise BenchError(f"{path}:{number}: missing field {name!r}")


def read_families(bench_dir: str | Path) -> list[Family]:
    path = Path(bench_dir) / FAMILIES_FILE
    out = []
    for number, row in iter_jsonl(path):
        _require(path, number, row, Family.__dataclass_fields__)
        try:
            out.append(Family.from_json(row))
        except (TypeError, ValueError) as err:
            raise BenchError(f"{path}:{number}: {err}") from None
    return out


def read_items(bench_dir: str | Path, *, validate_images: bool = True) -> list[Item]:
    """Every item of a benchmark folder; with `validate_images`, each image path must be a file
    inside the folder (see `resolve_image`)."""
    path = Path(bench_dir) / ITEMS_FILE
    out, seen = [], set()  # many items share an image: check each path once
    for number, row in iter_jsonl(path):
        _require(path, number, row, Item.__dataclass_fields__)
        if not isinstance(row["images"], list):
            raise BenchError(f"{path}:{number}: field 'images' must be a list of paths")
        if validate_images:
            for rel in row["images"]:
                if not (isinstance(rel, str) and rel in seen):
                    resolve_image(bench_dir, rel, where=f"{path}:{number}: field 'images'")
                    seen.add(rel)
        out.append(Item.from_json(row))
    return out


def resolve_image(bench_dir: str | Path, rel: str, *, where: str = "") -> Path:
    """The real path of an image named in a manifest, refusing any path that leaves the folder.

    Rejected: absolute paths, `..` components, and links whose target lies outside the folder.
    """
    root = Path(bench_dir).resolve()
    prefix = f"{where}: " if where else ""
    if not isinstance(rel, str) or not rel:
        raise BenchError(f"{prefix}image path {rel!r} is not a non-empty string")
    candidate = Path(rel)
    if candidate.is_absolute() or rel.startswith(("/", "\\")):
        raise BenchError(f"{prefix}image path {rel!r} is absolute; paths must be relative to {root}")
    if ".." in candidate.parts:
        raise BenchError(f"{prefix}image path {rel!r} escapes the benchmark folder with '..'")
    full = (root / candidate).resolve()
    if root not in full.parents:
        raise BenchError(f"{prefix}image path {rel!r} resolves to {full}, outside {root}")
    if not full.is_file():
        raise BenchError(f"{prefix}image {rel!r} not found under {root}; regenerate the benchmark")
    return full


def read_log_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every complete line of an append-only JSONL log.

    A torn last line (a writer killed mid-append) is cut off the file, with an fsync, so the next
    append starts on a clean line; nothing else is changed. A missing file has no lines.
    """
    if not path.is_file():
        return []
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1  # keep every complete line
        with path.open("r+b") as fh:
            fh.truncate(cut)
            fh.flush()
            os.fsync(fh.fileno())
        data = data[:cut]
    lines = data.decode("utf-8").splitlines()
    return [(number, line) for number, line in enumerate(lines, start=1) if line.strip()]


def append_log_lines(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Append whole JSON lines with one write and an fsync: a kill leaves at most one torn last
    line, which `read_log_lines` removes."""
    data = "".join(json.dumps(row) + "\n" for row in rows).encode("utf-8")
    if not data:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:  # os.write may write less than asked
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def load_item_images(bench_dir: str | Path, rels: Iterable[str]) -> list[Any]:
    """The RGB PIL images of an item's `images` paths (each checked by `resolve_image`)."""
    from PIL import Image

    out = []
    for rel in rels:
        with Image.open(resolve_image(bench_dir, rel)) as im:
            out.append(im.convert("RGB"))
    return out
