"""Reading and writing a benchmark folder: families.jsonl, items.jsonl, bench.json, images/.

Readers validate at the edge: a line that is not JSON, a missing field, an image path that leaves
the folder or an image that is not there is a one-line `InputError` naming file, line and field.
Writers are atomic: a file appears whole under its final name or not at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from evprobe.bench.family import Family
from evprobe.bench.items import Item
from evprobe.core.errors import InputError
from evprobe.core.files import iter_jsonl

FAMILIES_FILE = "families.jsonl"
ITEMS_FILE = "items.jsonl"
META_FILE = "bench.json"


def _require(path: Path, number: int, row: dict[str, Any], names: Iterable[str]) -> None:
    for name in names:
        if name not in row:
            raise InputError(f"{path}:{number}: missing field {name!r}")


def read_families(bench_dir: str | Path) -> list[Family]:
    path = Path(bench_dir) / FAMILIES_FILE
    out = []
    for number, row in iter_jsonl(path):
        _require(path, number, row, Family.__dataclass_fields__)
        try:
            out.append(Family.from_json(row))
        except (TypeError, ValueError) as err:
            raise InputError(f"{path}:{number}: {err}") from None
    return out


def read_items(bench_dir: str | Path, *, validate_images: bool = True) -> list[Item]:
    """Every item of a benchmark folder; with `validate_images`, each image path must be a file
    inside the folder (see `resolve_image`)."""
    path = Path(bench_dir) / ITEMS_FILE
    out, seen = [], set()  # many items share an image: check each path once
    for number, row in iter_jsonl(path):
        _require(path, number, row, Item.__dataclass_fields__)
        if not isinstance(row["images"], list):
            raise InputError(f"{path}:{number}: field 'images' must be a list of paths")
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
        raise InputError(f"{prefix}image path {rel!r} is not a non-empty string")
    candidate = Path(rel)
    if candidate.is_absolute() or rel.startswith(("/", "\\")):
        raise InputError(f"{prefix}image path {rel!r} is absolute; paths must be relative to {root}")
    if ".." in candidate.parts:
        raise InputError(f"{prefix}image path {rel!r} escapes the benchmark folder with '..'")
    full = (root / candidate).resolve()
    if root not in full.parents:
        raise InputError(f"{prefix}image path {rel!r} resolves to {full}, outside {root}")
    if not full.is_file():
        raise InputError(f"{prefix}image {rel!r} not found under {root}; regenerate the benchmark")
    return full


def load_item_images(bench_dir: str | Path, rels: Iterable[str]) -> list[Any]:
    """The RGB PIL images of an item's `images` paths (each checked by `resolve_image`)."""
    from PIL import Image

    out = []
    for rel in rels:
        with Image.open(resolve_image(bench_dir, rel)) as im:
            out.append(im.convert("RGB"))
    return out
