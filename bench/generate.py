"""`evprobe generate`: write a complete benchmark folder, atomically.

Everything is built in a temporary sibling folder, `.OUT.tmp-XXXXXXXX` beside OUT (the name
`tempfile.mkdtemp` gives: 8 characters of a-z, 0-9 and _), and renamed into place at the end, so a
killed run leaves the previous folder (or nothing), never a half-written manifest.

`--force` replaces only what `evprobe generate` itself writes: an empty folder, or a folder that
holds a benchmark (a bench.json with the benchmark's format marks beside families.jsonl and
items.jsonl) and nothing else a benchmark does not hold: at the top, only its files, images/ and
checks.json; under images/, only the sheets of the families its families.jsonl lists (`sheet_paths`),
no other file, folder or link. Any other non-empty folder is refused in one line naming it and the
first things generate did not write, with or without `--force`.

Temporary folders never outlive their run:
- a failing or interrupted run (an exception, Ctrl-C) removes its own (try/finally);
- a run killed outright (SIGKILL, a lost machine) cannot, so each generate first removes the stale
  temporary folders of earlier runs into the same OUT: the folders beside OUT whose names match
  exactly `.OUT.tmp-XXXXXXXX`. It tells a dead run's folder from a live run's without guessing:
  every run holds an exclusive `flock` on its temporary folder (and on the old OUT while it is
  renamed aside, under the same pattern) from creation until it is gone, the kernel drops the lock
  when the process dies, and a folder is removed only when that lock can be taken at once. Where
  `fcntl.flock` does not exist (Windows), only folders older than `STALE_AFTER_S` (one hour) are
  removed: no generate takes that long, so an older one belongs to a dead run.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import string
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evprobe.bench.calibration import SHEETS, sheet_spec
from evprobe.bench.clips import ClipSpec, render_clip
from evprobe.bench.family import Family, sample_families, select_subset
from evprobe.bench.injection import INJECTION_LEVELS, injected_items
from evprobe.bench.items import Item, family_items, image_path
from evprobe.bench.numeric import numeric_items
from evprobe.bench.manifest import FAMILIES_FILE, FORMAT_KEY, FORMAT_VERSION, ITEMS_FILE, META_FILE
from evprobe.core.errors import InputError
from evprobe.core.files import atomic_write_json, atomic_write_jsonl
from evprobe.core.json_files import parse_json
from evprobe.core.json_types import JsonObject
from evprobe.core.lock import LOCK_FILE, folder_lock, same_file
from evprobe.core.progress import Progress
from evprobe.bench.reference import Prices
from evprobe.bench.render import STYLES, render_sheet
from evprobe.bench.systems import SYSTEM_NAMES, get_system
from evprobe.bench.voids import check_voids, occlude, occlude_clip, occluded_path, void_items

try:
    import fcntl
except ImportError:  # Windows: no flock; stale temporary folders are told by their age
    fcntl = None  # type: ignore[assignment]

MAIN_SEED = 20260905
SUBSET_SEED = 20260906
PILOT_SEED = 20260907  # the seed names no pilot seed; we choose the next integer

# What a benchmark folder holds (generate writes the first four; `evprobe check` adds checks.json),
# and the bench.json keys that mark it as one: what `--force` may replace.
# A killed writer's lock file (core.lock) is no foreign entry either: the next writer took it over.
BENCH_ENTRIES = (FAMILIES_FILE, ITEMS_FILE, META_FILE, "images", "checks.json", LOCK_FILE)
FORMAT_MARKS = ("split", "seed", "n_families", "n_items", "families_sha256", "items_sha256")
# The random part of tempfile.mkdtemp / mkstemp names: 8 characters of a-z, 0-9 and _.
_RANDOM = "[a-z0-9_]{8}"
_RANDOM_CHARS = string.ascii_lowercase + string.digits + "_"
STALE_AFTER_S = 3600.0  # without flock: a temporary folder this old belongs to a dead run


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
    # Opt-in blocks, appended after the main items (which stay byte for byte those of a benchmark
    # without them): numeric estimates (`bench.numeric`) and information-injection levels 1-3 of
    # the selections and answers (`bench.injection`). bench.json records them only when present.
    numeric: bool = False
    injection_levels: tuple[int, ...] = ()
    # Void items matched with sufficient twins (seed 002, `bench.voids`): "occluded", "unstated".
    voids: tuple[str, ...] = ()
    # Evidence in motion (seed 002, `bench.clips`): every sheet replaced by a clip cut this way;
    # None (the default) keeps the sheets. bench.json records it only when present.
    clip: ClipSpec | None = None

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
        bad = [x for x in self.injection_levels if x not in INJECTION_LEVELS[1:]]
        if bad or len(set(self.injection_levels)) != len(self.injection_levels):
            raise InputError(
                f"--injection takes distinct levels among 1, 2, 3 and te (-1, the target-exclusive baseline; level 0 "
                f"is the main items), got "
                f"{','.join(map(str, self.injection_levels))}"
            )
        try:
            check_voids(self.voids)
        except ValueError as err:
            raise InputError(str(err)) from None


def build(config: GenerateConfig) -> tuple[list[Family], list[Item]]:
    """Families and items of a configuration (no files)."""
    config.validate()
    prefix = "pilot-" if config.split == "pilot" else ""
    try:
        families = sample_families(config.seed, config.families_per_system, config.systems, prefix)
        families = select_subset(families, config.subset_seed, config.subset_per_cell)
    except ValueError as err:
        raise InputError(str(err)) from None
    clip_frames = None if config.clip is None else config.clip.frames
    per_family = [family_items(f, config.prices, clip_frames) for f in families]
    items = [it for block in per_family for it in block]
    levels = tuple(sorted(config.injection_levels))
    for level in levels:  # one block per level, each in the main items' order
        items += [it for f, block in zip(families, per_family) for it in injected_items(f, block, (level,), clip_frames)]
    if config.numeric:
        numeric = [numeric_items(f, clip_frames) for f in families]
        items += [it for block in numeric for it in block]
        for level in levels:  # the estimates' levels after them (seed 003 traces them across the ladder)
            items += [it for f, block in zip(families, numeric) for it in injected_items(f, block, (level,), clip_frames)]
    if config.voids:  # last: the blocks above keep the places they had without voids
        items += [it for f, block in zip(families, per_family) for it in void_items(f, block, config.voids,
                                                                                      config.prices, clip_frames is not None)]
    return families, items


def _sheets(f: Family) -> list[tuple[str, str]]:
    """(sheet, style) of every sheet of `f`: five, plus the changed-rendering copies of the two
    initial sheets for a subset family."""
    return [(sheet, "a") for sheet in SHEETS] + ([(f"{f.initial}_{h}", "b") for h in (0, 1)] if f.in_subset else [])


def _occluded(f: Family) -> list[str]:
    """The sheets of `f` that the occluded void shows covered (`bench.voids`): its two initial sheets."""
    return [f"{f.initial}_{h}" for h in (0, 1)]


def sheet_paths(families: list[Family]) -> set[str]:
    """The relative path of every image generate may write for `families` (with or without voids, sheets
    or clips): what `--force` may remove."""
    return ({image_path(f.family_id, sheet, style, clip=clip) for f in families for sheet, style in _sheets(f)
             for clip in (False, True)}
            | {occluded_path(f.family_id, sheet, clip) for f in families for sheet in _occluded(f) for clip in (False, True)})


def sheet_jobs(families: list[Family], occluded: bool = False, clip: ClipSpec | None = None) -> list[tuple[str, Any, str]]:
    """(relative path, spec, style) of every sheet (`_sheets`), then, with `occluded`, of the occluded
    sheets (style "occluded": style a's drawing under the occluder). With `clip`, each sheet's clip
    instead (spec: (family, sheet, clip))."""
    if clip is not None:
        jobs = [(image_path(f.family_id, sheet, style, clip=True), (f, sheet, clip), style)
                for f in families for sheet, style in _sheets(f)]
        if occluded:
            jobs += [(occluded_path(f.family_id, sheet, True), (f, sheet, clip), "occluded")
                     for f in families for sheet in _occluded(f)]
        return jobs
    jobs = [(image_path(f.family_id, sheet, style), sheet_spec(f.system, f.candidates, f.calibration, sheet), style)
            for f in families for sheet, style in _sheets(f)]
    if occluded:
        jobs += [(occluded_path(f.family_id, sheet), sheet_spec(f.system, f.candidates, f.calibration, sheet),
                  "occluded") for f in families for sheet in _occluded(f)]
    return jobs


def _render_job(job: tuple[str, Any, str]) -> tuple[str, bytes]:
    rel, spec, style = job
    if isinstance(spec, tuple):  # a clip (sheet_jobs)
        f, sheet, clip = spec
        if style == "occluded":
            return rel, occlude_clip(render_clip(f.system, f.candidates, f.calibration, sheet, clip, "a"), clip)
        return rel, render_clip(f.system, f.candidates, f.calibration, sheet, clip, style)
    if style == "occluded":
        return rel, occlude(render_sheet(spec, STYLES["a"]))
    return rel, render_sheet(spec, STYLES[style])


def generate(
    out_dir: str | Path,
    config: GenerateConfig = GenerateConfig(),
    *,
    force: bool = False,
    workers: int = 1,
    progress: bool = True,
) -> JsonObject:
    """Write families.jsonl, items.jsonl, bench.json and images/ to `out_dir`; return bench.json.

    `force` replaces a benchmark already in `out_dir` (never any other non-empty folder); stale
    temporary folders of killed runs into the same `out_dir` are removed first (module docstring).
    """
    out = Path(out_dir)
    if out.is_symlink():
        raise InputError(f"{out} is a symbolic link; pass the folder it points to, {out.resolve()}, or another --out")
    if out.exists() and not out.is_dir():
        raise InputError(f"{out} exists and is not a folder; choose another --out")
    # One writer per OUT (core.lock): a second generate into it is refused before it renders anything.
    # The lock file sits in the folder that the swap below renames aside, so the new benchmark has none.
    with folder_lock(out, "evprobe generate"):
        return _generate(out, config, force, workers, progress)


def _generate(out: Path, config: GenerateConfig, force: bool, workers: int, progress: bool) -> JsonObject:
    """`generate` once OUT's lock is held."""
    _check_replaceable(out, force)
    started = time.perf_counter()
    families, items = build(config)
    jobs = sheet_jobs(families, occluded="occluded" in config.voids, clip=config.clip)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out)
    tmp, lock = _make_temporary(out)
    committed = False
    try:
        bar = Progress("rendered", len(jobs)) if progress else None
        written = _render_all(tmp, jobs, workers, bar)
        atomic_write_jsonl(tmp / FAMILIES_FILE, (f.to_json() for f in families))
        atomic_write_jsonl(tmp / ITEMS_FILE, (it.to_json() for it in items))
        meta = {
            FORMAT_KEY: FORMAT_VERSION,
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
        if config.numeric:
            meta["numeric"] = True
        if config.injection_levels:
            meta["injection_levels"] = sorted(config.injection_levels)
        if config.voids:
            meta["voids"] = list(check_voids(config.voids))
        if config.clip is not None:
            meta["evidence"] = {"kind": "clip", **config.clip.to_json()}
        atomic_write_json(tmp / META_FILE, meta)
        _check_replaceable(out, force)  # again: something may have been put there meanwhile
        _swap_into_place(tmp, out)
        committed = True
    finally:
        if not committed:
            shutil.rmtree(tmp, ignore_errors=True)
        _unlock(lock)
    return meta


# -- what --force may replace ----------------------------------------------------------------------


def _is_benchmark(folder: Path) -> bool:
    """Whether `folder` holds a benchmark: families.jsonl, items.jsonl and a bench.json object
    with every format mark."""
    if not ((folder / FAMILIES_FILE).is_file() and (folder / ITEMS_FILE).is_file()):
        return False
    try:
        meta = parse_json((folder / META_FILE).read_text(), folder / META_FILE, "")
    except (OSError, ValueError):  # not UTF-8, not JSON, nested too deep
        return False
    return isinstance(meta, dict) and all(key in meta for key in FORMAT_MARKS)


def _foreign_entries(folder: Path) -> list[str]:
    """Paths in a benchmark folder that generate did not write, so `--force` must not remove them: top-level
    names a benchmark does not hold (an atomic-write leftover of one of its files, `.NAME.XXXXXXXX.tmp`, is
    its own), and anything under images/ that is not a sheet of a family in its families.jsonl."""
    own = re.compile("|".join(re.escape(name) for name in BENCH_ENTRIES))
    leftover = re.compile(rf"\.(?:{own.pattern})\.{_RANDOM}\.tmp")
    foreign = sorted(p.name for p in folder.iterdir() if not (own.fullmatch(p.name) or leftover.fullmatch(p.name)))
    images = folder / "images"
    if images.is_symlink() or images.exists() and not images.is_dir():
        return [*foreign, "images (not a folder of its own)"]
    if images.is_dir():
        from evprobe.bench.manifest import read_families

        try:
            sheets = sheet_paths(read_families(folder, verify_hash=False))
        except InputError as err:
            return [*foreign, f"images/ (which of its files generate wrote cannot be told: {err})"]
        folders = {str(Path(rel).parent) for rel in sheets}
        for path in sorted(images.rglob("*")):
            rel = path.relative_to(folder).as_posix()
            if path.is_symlink() or not (rel in sheets and path.is_file() or rel in folders and path.is_dir()):
                foreign.append(rel)
    return foreign


def _check_replaceable(out: Path, force: bool) -> None:
    """Refuse, in one line naming `out` and the fix, to write over anything but nothing, an empty
    folder or (with `force`) a benchmark folder."""
    if not out.is_dir() or all(p.name == LOCK_FILE for p in out.iterdir()):  # our own lock is no content
        return
    if not _is_benchmark(out):
        raise InputError(
            f"{out} is not empty and holds no benchmark (no {META_FILE} with its format marks beside "
            f"{FAMILIES_FILE} and {ITEMS_FILE}); --force replaces only a benchmark or an empty folder: "
            "choose another --out"
        )
    foreign = _foreign_entries(out)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise InputError(
            f"{out} holds a benchmark but also {shown}, which `evprobe generate` did not write; "
            f"move them out of {out} or choose another --out"
        )
    if not force:
        raise InputError(f"{out} is not empty; pass --force to replace it or choose another --out")


# -- temporary folders -----------------------------------------------------------------------------


def _temporary_pattern(out: Path) -> re.Pattern[str]:
    return re.compile(re.escape(f".{out.name}.tmp-") + _RANDOM)


def _lock(folder: Path, *, wait: bool) -> int | None:
    """An fd holding an exclusive flock on `folder` (None without flock, or when `wait` is false
    and another process holds it). Raises OSError when `folder` cannot be opened."""
    if fcntl is None:
        return None
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _unlock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing the last copy of the fd drops the flock


def _make_temporary(out: Path) -> tuple[Path, int | None]:
    """A new, locked temporary folder `.OUT.tmp-XXXXXXXX` beside `out`, and its lock."""
    while True:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        fd = None
        if fcntl is not None:
            try:
                # Waits only while a concurrent generate that saw the folder before it was locked
                # removes it as stale; then it is gone and we make another.
                fd = _lock(tmp, wait=True)
            except FileNotFoundError:
                continue
            if not same_file(fd, tmp):
                _unlock(fd)
                continue
        os.chmod(tmp, 0o755)  # mkdtemp makes 0700; a benchmark is for sharing, like its 0644 files
        return tmp, fd


def remove_stale_temporaries(out: str | Path) -> list[Path]:
    """Remove the temporary folders of killed generate runs into `out`: folders beside it named
    exactly `.OUT.tmp-XXXXXXXX` that no running generate holds (see the module docstring).
    Returns the folders removed."""
    out = Path(out)
    pattern = _temporary_pattern(out)
    try:
        candidates = [p for p in out.parent.iterdir() if pattern.fullmatch(p.name)]
    except FileNotFoundError:
        return []
    removed = []
    for path in candidates:
        if path.is_symlink() or not path.is_dir():
            continue
        if fcntl is None:
            try:
                if time.time() - path.stat().st_mtime < STALE_AFTER_S:
                    continue
            except FileNotFoundError:
                continue
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                fd = _lock(path, wait=False)
            except OSError:
                continue  # gone meanwhile, or not ours to open
            if fd is None:
                continue  # a running generate holds it
            try:
                if not same_file(fd, path):
                    continue
                shutil.rmtree(path, ignore_errors=True)
            finally:
                _unlock(fd)
        if not path.exists():
            removed.append(path)
    return removed


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
    """Replace `out` by `tmp` with renames only; the old folder is removed after the swap.

    The old folder is renamed aside under the temporary-folder pattern while locked, so a kill
    before its removal leaves it for the next generate's clean-up, and no clean-up takes it sooner.
    """
    old, old_lock = None, None
    if out.exists():
        while True:
            old_lock = _lock(out, wait=True)
            if old_lock is None or same_file(old_lock, out):
                break
            _unlock(old_lock)  # another generate swapped `out` meanwhile: lock the new one
        old = _unused_temporary_name(out)
        os.replace(out, old)
    try:
        try:
            os.replace(tmp, out)
        except BaseException:
            if old is not None:
                os.replace(old, out)  # put the previous benchmark back
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        _unlock(old_lock)


def _unused_temporary_name(out: Path) -> Path:
    """A free `.OUT.tmp-XXXXXXXX` path beside `out` (not created: the rename creates it)."""
    while True:
        random_part = "".join(secrets.choice(_RANDOM_CHARS) for _ in range(8))
        path = out.parent / f".{out.name}.tmp-{random_part}"
        if not os.path.lexists(path):
            return path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main_summary(meta: JsonObject, out: Path) -> str:
    return (
        f"wrote {meta['n_families']} families, {meta['n_items']} items and "
        f"{meta['n_images']} images to {out} in {meta['seconds']} s"
    )


