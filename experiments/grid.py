"""The resumable (item x condition) grid of the steering experiments (dose-response, gating).

Rows are computed batch by batch: items grouped by their number of images (some processors cannot
mix counts in one call), `batch_size` items at a time, every missing condition of the batch in
turn; each condition's rows are appended to results.jsonl as soon as they exist, so a killed run
keeps every finished row and a rerun computes only the missing ones. `grid_order` is the order an
uninterrupted run appends rows in (what `evprobe merge` restores).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.items import Item, by_image_count
from bench.manifest import append_log_lines, load_item_images
from bench.progress import Progress

Row = dict[str, Any]


def item_batches(items: Sequence[Item], batch_size: int) -> Iterator[list[Item]]:
    """`items` in batches of at most `batch_size`, each batch of one image count."""
    for group in by_image_count(list(items)):
        for start in range(0, len(group), batch_size):
            yield group[start: start + batch_size]


def grid_order(items: Sequence[Item], conditions: Sequence[Any], batch_size: int,
               key: Callable[[Any], str]) -> list[tuple[str, str]]:
    """(item_id, condition key) of every row, in the order one uninterrupted run appends them."""
    return [(it.item_id, key(cond)) for batch in item_batches(items, batch_size) for cond in conditions for it in batch]


def fill_grid(items: Sequence[Item], conditions: Sequence[Any], todo: dict[str, list[Any]], *, batch_size: int,
              bench: Path, results: Path, done: dict[tuple[str, str], Row],
              rows_for: Callable[[Any, list[Item], list[list[Any]]], list[Row]], bar: Progress | None) -> None:
    """Compute the rows `todo` lists (item_id -> its missing conditions), appending each condition's
    rows to `results` and to `done` (keyed by (item_id, condition))."""
    pending = [it for it in items if todo[it.item_id]]
    for batch in item_batches(pending, batch_size):
        images = {it.item_id: load_item_images(bench, it.images) for it in batch}
        for cond in conditions:
            sub = [it for it in batch if cond in todo[it.item_id]]
            if not sub:
                continue
            rows = rows_for(cond, sub, [images[it.item_id] for it in sub])
            append_log_lines(results, rows)
            done.update({(row["item_id"], row["condition"]): row for row in rows})
            if bar:
                bar.update(len(sub))
