"""`evprobe generate`: write a complete benchmark folder, atomically.

Everything is built in a temporary sibling folder and renamed into place at the end, so a killed
run leaves the previous folder (or nothing), never a half-written manifest.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evprobe.bench.calibration import SHEETS, sheet_spec
from evprobe.bench.family import Family, sample_families, select_subset
from evprobe.bench.items import Item, family_items, image_path
from evprobe.bench.manifest import FAMILIES_FILE, ITEMS_FILE, META_FILE
from evprobe.core.errors import InputError
from evprobe.core.files import atomic_write_json, atomic_write_jsonl
from evprobe.core.progress import Progress
from evprobe.bench.reference import Prices
from evprobe.bench.render import STYLES, render_sheet
from evprobe.bench.systems import SYSTEM_NAMES, get_system

MAIN_SEED = 20260905
SUBSET_SEED = 20260906
PILOT_SEED = 20260907  # the seed names no pilot seed; we choose the next integer


@dataclass(frozen=True)
class GenerateConfig:
    """What to generate. Defaults are the seed's main set (144 families, 72-family subset)."""

    seed: int = MAIN_SEED
    families_per_system: int = 48
    systems: tuple[str, ...] = SYSTEM_NAMES
    subset_seed: int = SUBSET_SEED
    subset_per_cell: int = 12
    prices: Prices = field(default_factory=Prices)
    split: str = "main"  # main | pilot (pilot family ids start with "pilot-")

    @classmethod
    def pilot(cls, **overrides: Any) -> GenerateConfig:
        """The separate pilot set: 12 families (4 per system), no variant subset."""
        base = dict(seed=PILOT_SEED, families_per_system=4, subset_per_cell=0, split="pilot")
        base.update(overrides)
        return cls(**base)

    def validate(self) -> None:
        for name in self.systems:
            get_system(name)
        if self.families_per_system <= 0:
            raise InputError(
                f"--families-per-system must be a positive integer, got {self.families_per_system}"
            )
        if self.subset_per_cell < 0:
            raise InputError(f"--subset-per-cell must be 0 or more, got {self.subset_per_cell}")
        if self.split not in ("main", "pilot"):
            raise InputError(f"unknown split {self.split!r}; use main or pilot")


def build(config: GenerateConfig) -> tuple[list[Family], list[Item]]:
    """Families and items of a configuration (no files)."""
    config.validate()
    prefix = "pilot-" if config.split == "pilot" else ""
    try:
        families = sample_families(config.seed, config.families_per_system, config.systems, prefix)
        families = select_subset(families, config.subset_seed, config.subset_per_cell)
    except ValueError as err:
        raise InputError(str(err)) from None
    items = [it for f in families for it in family_items(f, config.prices)]
    return families, items


def sheet_jobs(families: list[Family]) -> list[tuple[str, Any, str]]:
    """(relative path, spec, style) of every sheet: five per family, plus the changed-rendering
    copies of the two initial sheets for subset families."""
    jobs = []
    for f in families:
        for sheet in SHEETS:
            jobs.append((image_path(f.family_id, sheet), sheet_spec(f.system, f.candidates, f.calibration, sheet), "a"))
        if f.in_subset:
            for h in (0, 1):
                sheet = f"{f.initial}_{h}"
                spec = sheet_spec(f.system, f.candidates, f.calibration, sheet)
                jobs.append((image_path(f.family_id, sheet, "b"), spec, "b"))
    return jobs


def _render_job(job: tuple[str, Any, str]) -> tuple[str, bytes]:
    rel, spec, style = job
    return rel, render_sheet(spec, STYLES[style])


def generate(
    out_dir: str | Path,
    config: GenerateConfig = GenerateConfig(),
    *,
    force: bool = False,
    workers: int = 1,
    progress: bool = True,
) -> dict[str, Any]:
    """Write families.jsonl, items.jsonl, bench.json and images/ to `out_dir`; return bench.json."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out} exists and is not a folder; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise InputError(f"{out} is not empty; pass --force to replace it or choose another --out")
    started = time.perf_counter()
    families, items = build(config)
    jobs = sheet_jobs(families)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        bar = Progress("rendered", len(jobs)) if progress else None
        written = _render_all(tmp, jobs, workers, bar)
        atomic_write_jsonl(tmp / FAMILIES_FILE, (f.to_json() for f in families))
        atomic_write_jsonl(tmp / ITEMS_FILE, (it.to_json() for it in items))
        meta = {
            "split": config.split,
            "seed": config.seed,
            "families_per_system": config.families_per_system,
            "systems": list(config.systems),
            "subset_seed": config.subset_seed,
            "subset_per_cell": config.subset_per_cell,
            "prices": config.prices.as_dict(),
            "n_families": len(families),
            "n_items": len(items),
            "n_images": written,
            "families_sha256": _sha256(tmp / FAMILIES_FILE),
            "items_sha256": _sha256(tmp / ITEMS_FILE),
            "seconds": round(time.perf_counter() - started, 3),
        }
        atomic_write_json(tmp / META_FILE, meta)
        _swap_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta


def _render_all(tmp: Path, jobs: list[tuple[str, Any, str]], workers: int, bar: Progress | None) -> int:
    def write(rel: str, png: bytes) -> None:
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)  # inside the temporary folder: the folder rename is the commit
        if bar:
            bar.update()

    if workers <= 1:
        for job in jobs:
            write(*_render_job(job))
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for rel, png in pool.map(_render_job, jobs, chunksize=16):
                write(rel, png)
    return len(jobs)


def _swap_into_place(tmp: Path, out: Path) -> None:
    """Replace `out` by `tmp` with renames only; the old folder is removed after the swap."""
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.rmdir(old)
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main_summary(meta: dict[str, Any], out: Path) -> str:
    return (
        f"wrote {meta['n_families']} families, {meta['n_items']} items and "
        f"{meta['n_images']} images to {out} in {meta['seconds']} s"
    )


