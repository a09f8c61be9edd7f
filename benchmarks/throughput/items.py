"""The benchmark rows every section reads: a small benchmark generated into a folder, its one-image items."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Rows:
    """The benchmark rows every section reads: one-image items with options A-E."""

    items: tuple[Any, ...]
    images: tuple[tuple[Any, ...], ...]  # PIL images per row

    def prompts(self, protocol: str, n: int) -> list[str]:
        from evprobe.bench.protocols import build_prompt

        return [build_prompt(it, protocol, "standard") for it in self.items[:n]]

    def image_lists(self, n: int) -> list[list[Any]]:
        return [list(imgs) for imgs in self.images[:n]]


def make_bench(folder: Path, n_items: int) -> tuple[Path, Rows]:
    """A small benchmark written by the project's generator: enough families for n one-image items
    (each family has 4 `select` and 4 `answer_initial` items); no variant subset."""
    from evprobe.bench.generate import GenerateConfig, generate
    from evprobe.bench.manifest import load_item_images, read_items
    from evprobe.bench.runner import select_items
    from evprobe.bench.systems import SYSTEM_NAMES

    per_system = max(1, math.ceil(n_items / (8 * len(SYSTEM_NAMES))))
    systems = SYSTEM_NAMES if n_items > 8 else SYSTEM_NAMES[:1]
    bench = folder / "bench"
    generate(bench, GenerateConfig(families_per_system=per_system, systems=systems, subset_per_cell=0), progress=False)
    items = select_items(read_items(bench), ("select", "answer_initial"), n_items)
    images = tuple(tuple(load_item_images(bench, it.images)) for it in items)
    return bench, Rows(tuple(items), images)
