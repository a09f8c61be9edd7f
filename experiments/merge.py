"""`evprobe merge OUT SHARD_DIR...`: combine the shards of one command into the files a single run writes.

    evprobe run ... --shard 0/2 --out runs/m/shard-0      evprobe capture ... --shard 0/2 --out acts/m/shard-0
    evprobe run ... --shard 1/2 --out runs/m/shard-1      evprobe capture ... --shard 1/2 --out acts/m/shard-1
    evprobe merge runs/m runs/m/shard-*                   evprobe merge acts/m acts/m/shard-*

Run folders (run.json + records.jsonl) give OUT/records.jsonl and OUT/run.json; capture folders
(meta.json + acts.npy + index.jsonl) give OUT/acts.npy, OUT/index.jsonl and OUT/meta.json;
`evprobe patching` folders (meta.json + results.jsonl) give OUT/results.jsonl (a single job's
order), OUT/meta.json and the summary of all rows (patching.json, .md, .png; `seconds` is the
longest shard's); `evprobe layer-sweep --shard` folders give OUT/acts (their captures merged) and
then the sweep's files, computed there as one unsharded layer sweep does; `evprobe dose-response`
folders give OUT/results.jsonl (a single run's order: image-count groups, batches, conditions),
OUT/meta.json and every report of the whole run (dose_response.json, .md, curves). Steered rows were computed in other batches than a single run's,
so their log-probs agree with a single run's within float32 rounding, not bit for bit.

What comes out is what one unsharded, uninterrupted run of the same command writes:
- records.jsonl: the shards' lines, byte for byte, in the single run's order (items grouped by
  their number of images, ascending; selection order within a group). Only the per-item
  `seconds` field (wall time) differs from a single run's file.
- acts.npy: row i is the i-th selected item, as in a single capture; index.jsonl: the shards'
  lines with `row` renumbered, in a single capture's order; meta.json: the single capture's.
- run.json / meta.json: the shards' settings without `shard`; a run's `last_session` sums the
  shards' items and takes the longest shard's seconds.

Refused, with one line naming the fix: folders of different kinds or not written with --shard,
shards of different commands (model, settings, benchmark hash), different N, a missing or
duplicated shard, an incomplete shard (rerun it with the same command to finish it), an item in
two shards, an OUT that holds something else. Merge reads the benchmark (the path in the shards'
run.json / meta.json) to know every shard's items. Shard folders are only read, never changed.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.items import Item, by_image_count
from bench.manifest import META_FILE, BenchError, atomic_write_bytes, atomic_write_json, read_items
from bench.records import RECORDS_FILE, RUN_META_FILE
from bench.runner import PINNED as RUN_PINNED
from bench.runner import select_items
from bench.shard import THROUGHPUT_FILE, Shard, select_shard
from experiments.capture import (
    ACTS_FILE,
    CAPTURE_META_FILE,
    FORMAT,
    INDEX_FILE,
    _create_acts,
    _images_sha256,
    _sha256_text,
)
from hooks.devices import PLACEMENT_KEYS

# Settings that may differ between the shards of one command.
# Where a shard's model sits (its GPUs, memory budget, offload folder) may differ between machines.
_CONFIG_FREE = ("out", "shard", *PLACEMENT_KEYS)
_RUN_FREE = ("shard", "bench", "n_selected", "n_records", "last_session")
_CAPTURE_FREE = ("shard", "bench", "selection_sha256", "n_items", "images_sha256", "n_images", "shape")


@dataclass(frozen=True)
class _Part:
    folder: Path
    shard: Shard
    meta: dict[str, Any]


def _complete_lines(path: Path) -> list[str]:
    """The complete lines of an append-only log, read only (a torn last line is left out, not cut)."""
    if not path.is_file():
        return []
    data = path.read_bytes()
    data = data[: data.rfind(b"\n") + 1]
    return [line for line in data.decode("utf-8").splitlines() if line.strip()]


def _kind(folder: Path) -> str:
    from experiments.dose_response import FORMAT as DOSE_FORMAT

    if (folder / RUN_META_FILE).is_file():
        return "run"
    if (folder / CAPTURE_META_FILE).is_file():  # capture, patching and dose-response folders have a meta.json
        fmt = _read_meta(folder / CAPTURE_META_FILE).get("format")
        return "dose-response" if fmt == DOSE_FORMAT else "capture" if fmt is not None else "patching"
    raise BenchError(f"{folder} is not a run, capture or patching folder (no {RUN_META_FILE} or {CAPTURE_META_FILE}); "
                     "pass the folders that `--shard K/N` wrote")


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise BenchError(f"{path}: not valid JSON ({err.msg}); rerun that shard into a fresh --out") from None


def _parts(folders: Sequence[Path], kind: str) -> list[_Part]:
    """One part per shard 0..N-1, in shard order; refuses mixed N, missing or duplicated shards."""
    name = RUN_META_FILE if kind == "run" else CAPTURE_META_FILE  # patching: meta.json too
    parts = []
    for folder in folders:
        meta = _read_meta(folder / name)
        if "shard" not in meta:
            raise BenchError(f"{folder} was not written with --shard K/N; merge only shard folders")
        parts.append(_Part(folder, Shard.parse(meta["shard"]), meta))
    counts = sorted({p.shard.n for p in parts})
    if len(counts) > 1:
        raise BenchError(f"the shards split the work {' and '.join(f'{n} ways' for n in counts)}; "
                         "merge the shards of one N only")
    n = counts[0]
    by_k: dict[int, _Part] = {}
    for p in parts:
        if p.shard.k in by_k:
            raise BenchError(f"shard {p.shard} is given twice ({by_k[p.shard.k].folder} and {p.folder}); pass each once")
        by_k[p.shard.k] = p
    missing = [k for k in range(n) if k not in by_k]
    if missing:
        raise BenchError(f"shard {missing[0]}/{n} is missing ({len(missing)} of {n} missing); run it with "
                         f"--shard {missing[0]}/{n} and pass its folder too")
    return [by_k[k] for k in range(n)]


def _settings(meta: dict[str, Any], free: Sequence[str]) -> dict[str, Any]:
    out = {k: v for k, v in meta.items() if k not in free}
    if isinstance(out.get("config"), dict):
        out["config"] = {k: v for k, v in out["config"].items() if k not in _CONFIG_FREE}
        if isinstance(out["config"].get("model"), dict):  # an inline model config (dose-response under torchrun)
            out["config"]["model"] = {k: v for k, v in out["config"]["model"].items() if k not in PLACEMENT_KEYS}
    if isinstance(out.get("model_config"), dict):
        out["model_config"] = {k: v for k, v in out["model_config"].items() if k not in PLACEMENT_KEYS}
    return out


def _check_same(parts: list[_Part], free: Sequence[str]) -> None:
    first = _settings(parts[0].meta, free)
    for p in parts[1:]:
        other = _settings(p.meta, free)
        keys = [k for k in first if k != "config"] + [k for k in other if k not in first] + ["config"]
        for key in keys:
            a, b = first.get(key), other.get(key)
            if key == "config" and isinstance(a, dict) and isinstance(b, dict):
                bad = next((k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)), None)
                key, a, b = (f"config.{bad}", a.get(bad), b.get(bad)) if bad else (key, a, a)
            if a != b:
                raise BenchError(f"shard {p.shard} ({p.folder}) differs from shard {parts[0].shard} in {key}: "
                                 f"{b!r} vs {a!r}; merge only the shards of one command")


def _selection(parts: list[_Part]) -> tuple[Path, list[Item], list[list[Item]]]:
    """The benchmark, the command's whole selection, and each shard's items."""
    meta = parts[0].meta
    bench = Path(meta["bench"])
    if not (bench / META_FILE).is_file():
        raise BenchError(f"benchmark {bench} (named by {parts[0].folder}) not found; merge where the benchmark is")
    bench_hash = _read_meta(bench / META_FILE).get("items_sha256")
    if bench_hash != meta.get("items_sha256"):
        raise BenchError(f"benchmark {bench} has items_sha256 {bench_hash!r}, the shards {meta.get('items_sha256')!r}; "
                         "merge against the benchmark the shards ran on")
    config = meta["config"]
    requests = tuple(config["requests"]) if config.get("requests") is not None else None
    all_items = read_items(bench, validate_images=False)
    selected = select_items(all_items, requests, config.get("limit"))
    per_shard = [select_shard(selected, p.shard, all_items) for p in parts]
    return bench, selected, per_shard


def _incomplete(p: _Part, have: int, want: int) -> BenchError:
    return BenchError(f"shard {p.shard} ({p.folder}) is incomplete: {have} of {want} items done; rerun shard "
                      f"{p.shard.k} with the same command to finish it")


def _check_out(out: Path, parts: list[_Part], meta_name: str, pinned: Sequence[str]) -> None:
    for p in parts:
        if p.folder.resolve() == out.resolve():
            raise BenchError(f"OUT {out} is also a shard folder; merge into another folder")
    path = out / meta_name
    if path.is_file():
        old = _read_meta(path)
        new = parts[0].meta
        if "shard" in old or any(old.get(k) != new.get(k) for k in pinned if k != "shard"):
            raise BenchError(f"{out} already holds a different {'run' if meta_name == RUN_META_FILE else 'capture'}; "
                             "merge into another folder")


def merge_runs(out: Path, parts: list[_Part]) -> dict[str, Any]:
    _check_same(parts, _RUN_FREE)
    _check_out(out, parts, RUN_META_FILE, RUN_PINNED)
    _, selected, per_shard = _selection(parts)
    lines: dict[str, str] = {}
    for p, items in zip(parts, per_shard):
        mine = {it.item_id for it in items}
        got: dict[str, str] = {}
        for number, line in enumerate(_complete_lines(p.folder / RECORDS_FILE), start=1):
            try:
                item_id = json.loads(line)["item_id"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise BenchError(f"{p.folder / RECORDS_FILE}:{number}: not a record; rerun shard {p.shard.k} "
                                 "into a fresh --out") from None
            if item_id not in mine:
                raise BenchError(f"{p.folder / RECORDS_FILE}:{number}: {item_id} is not an item of shard {p.shard}; "
                                 "that folder holds another run")
            if item_id in got:
                raise BenchError(f"{p.folder / RECORDS_FILE}:{number}: duplicate record for {item_id}")
            if item_id in lines:
                raise BenchError(f"{item_id} is in two shards (second: {p.folder}); merge the shards of one command")
            got[item_id] = line
        if len(got) != len(mine):
            raise _incomplete(p, len(got), len(mine))
        lines.update(got)
    order = [it.item_id for group in by_image_count(selected) for it in group]
    atomic_write_bytes(out / RECORDS_FILE, "".join(lines[i] + "\n" for i in order).encode("utf-8"))
    meta = {k: v for k, v in parts[0].meta.items() if k not in ("shard", "n_selected", "n_records", "last_session")}
    meta["config"] = {**meta["config"], "out": str(out), "shard": None}
    sessions = [p.meta.get("last_session") or {} for p in parts]
    n_new = sum(s.get("items") or 0 for s in sessions)
    seconds = max((s.get("seconds") or 0.0 for s in sessions), default=0.0)
    summary = {
        **meta,
        "n_selected": len(selected),
        "n_records": len(order),
        "last_session": {"items": n_new, "seconds": seconds,
                         "items_per_second": round(n_new / seconds, 3) if seconds > 0 and n_new else None},
    }
    atomic_write_json(out / RUN_META_FILE, summary)
    return {"kind": "run", "n_shards": len(parts), "n_items": len(order), "files": [RECORDS_FILE, RUN_META_FILE]}


def merge_captures(out: Path, parts: list[_Part]) -> dict[str, Any]:
    for p in parts:
        if p.meta.get("format") != FORMAT:
            raise BenchError(f"{p.folder / CAPTURE_META_FILE} is not an evprobe capture; pass capture shard folders")
    _check_same(parts, _CAPTURE_FREE)
    from experiments.capture import PINNED as CAPTURE_PINNED

    _check_out(out, parts, CAPTURE_META_FILE, [k for k in CAPTURE_PINNED
                                               if k not in ("selection_sha256", "n_items")])
    bench, selected, per_shard = _selection(parts)
    full_row = {it.item_id: row for row, it in enumerate(selected)}
    width = tuple(parts[0].meta["shape"][1:])
    shape = (len(selected), *width)
    row_bytes = int(np.prod(width)) * 2
    index: dict[int, dict[str, Any]] = {}
    sources: list[tuple[np.ndarray, list[tuple[int, int]]]] = []  # (shard acts, [(shard row, full row)])
    for p, items in zip(parts, per_shard):
        if p.meta.get("n_items") != len(items) or p.meta.get("selection_sha256") != _sha256_text(
            "\n".join(it.item_id for it in items)
        ):
            raise BenchError(f"shard {p.shard} ({p.folder}) does not hold this command's items of its shard; "
                             "rerun it into a fresh --out")
        acts_path = p.folder / ACTS_FILE
        if not acts_path.is_file():
            raise _incomplete(p, 0, len(items))
        acts = np.load(acts_path, mmap_mode="r")
        if acts.shape != (len(items), *width) or acts.dtype != np.float16:
            raise BenchError(f"{acts_path} has shape {acts.shape} {acts.dtype}, expected {(len(items), *width)} "
                             "float16; rerun that shard into a fresh --out")
        got: dict[int, dict[str, Any]] = {}
        for number, line in enumerate(_complete_lines(p.folder / INDEX_FILE), start=1):
            try:
                row = json.loads(line)
                r, item_id = row["row"], row["item_id"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise BenchError(f"{p.folder / INDEX_FILE}:{number}: not an index row; rerun shard {p.shard.k} "
                                 "into a fresh --out") from None
            if not (isinstance(r, int) and 0 <= r < len(items) and items[r].item_id == item_id) or r in got:
                raise BenchError(f"{p.folder / INDEX_FILE}:{number}: row {r!r} ({item_id}) is not a new row of shard "
                                 f"{p.shard}; rerun it into a fresh --out")
            if full_row[item_id] in index:
                raise BenchError(f"{item_id} is in two shards (second: {p.folder}); merge the shards of one command")
            got[r] = {**row, "row": full_row[item_id]}
        if len(got) != len(items):
            raise _incomplete(p, len(got), len(items))
        index.update({line["row"]: line for line in got.values()})
        sources.append((acts, [(r, full_row[it.item_id]) for r, it in enumerate(items)]))

    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{ACTS_FILE}.merging.npy"
    _create_acts(tmp, shape)
    offset = int(np.load(tmp, mmap_mode="r").offset)
    fd = os.open(tmp, os.O_WRONLY)
    try:  # pwrite row by row: a writable memmap would keep every written page resident
        for acts, rows in sources:
            for r, full in rows:
                data = np.ascontiguousarray(acts[r]).astype("<f2").tobytes()
                if os.pwrite(fd, data, offset + full * row_bytes) != len(data):
                    raise OSError(f"{tmp}: short write at row {full}")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, out / ACTS_FILE)
    order = [row for group in by_image_count(list(enumerate(selected)), lambda entry: entry[1].images) for row, _ in group]
    atomic_write_bytes(out / INDEX_FILE, "".join(json.dumps(index[r]) + "\n" for r in order).encode("utf-8"))
    meta = {k: v for k, v in parts[0].meta.items() if k != "shard"}
    images_sha256, n_images = _images_sha256(bench, selected)
    meta.update(selection_sha256=_sha256_text("\n".join(it.item_id for it in selected)), n_items=len(selected),
                images_sha256=images_sha256, n_images=n_images, shape=list(shape))
    meta["config"] = {**meta["config"], "out": str(out), "shard": None}
    atomic_write_json(out / CAPTURE_META_FILE, meta)
    return {"kind": "capture", "n_shards": len(parts), "n_items": len(selected),
            "files": [ACTS_FILE, INDEX_FILE, CAPTURE_META_FILE]}


def merge_patching(out: Path, parts: list[_Part]) -> dict[str, Any]:
    from experiments.patching import RESULTS_FILE, PatchingConfig, jobs_of, select_pairs, write_summary

    _check_same(parts, ("shard",))
    path = out / CAPTURE_META_FILE
    if path.is_file():
        old = _read_meta(path)
        new = _settings(parts[0].meta, ("shard",))
        if "shard" in old or _settings(old, ()) != new:
            raise BenchError(f"{out} already holds other patching results; merge into another folder")
    config = PatchingConfig(**{**parts[0].meta["config"], "positions": tuple(parts[0].meta["config"]["positions"])})
    bench = Path(config.bench)
    if not bench.is_dir():
        raise BenchError(f"benchmark {bench} (named by {parts[0].folder}/meta.json) not found; merge from the "
                         "folder the shards were run in")
    items = read_items(bench, validate_images=False)
    everything = jobs_of(select_pairs(items, config.limit_pairs, None))
    lines: dict[str, str] = {}
    seconds = 0.0
    for p in parts:
        mine = {f"{s.item_id}>{t.item_id}" for s, t in jobs_of(select_pairs(items, config.limit_pairs, p.shard))}
        got: dict[str, str] = {}
        for number, line in enumerate(_complete_lines(p.folder / RESULTS_FILE), start=1):
            try:
                key = json.loads(line)["key"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise BenchError(f"{p.folder / RESULTS_FILE}:{number}: not a patching row; rerun shard "
                                 f"{p.shard.k} into a fresh --out") from None
            if key not in mine:
                raise BenchError(f"{p.folder / RESULTS_FILE}:{number}: {key} is not a pair of shard {p.shard}; "
                                 "that folder holds another job")
            if key in lines:
                raise BenchError(f"{key} is in two shards (second: {p.folder}); merge the shards of one command")
            got[key] = line  # a repeated key (a resumed line) keeps the last, as the job's own reader does
        if len(got) != len(mine):
            raise _incomplete(p, len(got), len(mine))
        lines.update(got)
        summary_path = p.folder / "patching.json"
        if summary_path.is_file():
            seconds = max(seconds, float(_read_meta(summary_path).get("seconds") or 0.0))
    order = [f"{s.item_id}>{t.item_id}" for s, t in everything]
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / RESULTS_FILE, "".join(lines[k] + "\n" for k in order).encode("utf-8"))
    meta = {k: v for k, v in parts[0].meta.items() if k != "shard"}
    meta["config"] = {**meta["config"], "out": str(out), "shard": None}
    atomic_write_json(path, meta)
    write_summary(out, [json.loads(lines[k]) for k in order], meta["layers"], config, len(everything) // 2, seconds)
    return {"kind": "patching", "n_shards": len(parts), "n_items": len(order),
            "files": [RESULTS_FILE, CAPTURE_META_FILE, "patching.json", "patching.md", "patching.png"]}


def merge_dose_response(out: Path, parts: list[_Part]) -> dict[str, Any]:
    from dataclasses import replace

    from experiments.config import load_config
    from experiments.dose_response import (
        RESULTS_FILE,
        DoseResponseConfig,
        aggregate,
        make_plan,
        single_run_order,
        write_reports,
    )

    _check_same(parts, ("shard",))
    path = out / CAPTURE_META_FILE
    if path.is_file():
        old = _read_meta(path)
        if old.get("shard") is not None or _settings(old, ("shard",)) != _settings(parts[0].meta, ("shard",)):
            raise BenchError(f"{out} already holds another dose-response run; merge into another folder")
    config = load_config(DoseResponseConfig, {**parts[0].meta["config"], "out": str(out), "shard": None},
                         where=f"{parts[0].folder / CAPTURE_META_FILE}")
    plan = make_plan(config)  # the unsharded plan: items, conditions and batch size of one run
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    lines: dict[tuple[str, str], str] = {}
    for p in parts:
        mine = make_plan(replace(config, shard=str(p.shard), out=str(p.folder)))
        wanted = {(it.item_id, c.key) for it in mine.items for c in mine.conditions}
        got = 0
        for number, line in enumerate(_complete_lines(p.folder / RESULTS_FILE), start=1):
            try:
                row = json.loads(line)
                key = (row["item_id"], row["condition"])
            except (json.JSONDecodeError, KeyError, TypeError):
                raise BenchError(f"{p.folder / RESULTS_FILE}:{number}: not a dose-response row; rerun shard "
                                 f"{p.shard.k} into a fresh --out") from None
            if key not in wanted:
                raise BenchError(f"{p.folder / RESULTS_FILE}:{number}: {key[0]} under {key[1]} is not a row of shard "
                                 f"{p.shard}; that folder holds another run")
            if key in lines:
                raise BenchError(f"{key[0]} under {key[1]} is in two shards (second: {p.folder}); merge the shards "
                                 "of one command")
            rows[key], lines[key] = row, line
            got += 1
        if got != len(wanted):
            raise _incomplete(p, got, len(wanted))
    order = single_run_order(plan)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / RESULTS_FILE, "".join(lines[k] + "\n" for k in order).encode("utf-8"))
    meta = {k: v for k, v in parts[0].meta.items()}
    meta["shard"] = None
    meta["config"] = {**meta["config"], "out": str(out), "shard": None}
    atomic_write_json(path, meta)
    files = write_reports(plan, aggregate(plan, rows))
    return {"kind": "dose-response", "n_shards": len(parts), "n_items": len(plan.items),
            "files": [RESULTS_FILE, CAPTURE_META_FILE, *files]}


def merge(out: str | Path, shard_dirs: Sequence[str | Path]) -> dict[str, Any]:
    """Merge the shard folders of one `evprobe run` or `evprobe capture` into `out`."""
    out, folders = Path(out), [Path(d) for d in shard_dirs]
    if not folders:
        raise BenchError("no shard folders given; pass every SHARD_DIR of the command")
    from experiments.layer_sweep import SHARD_CONFIG_FILE

    sweeps = [(f / SHARD_CONFIG_FILE).is_file() for f in folders]
    if any(sweeps):
        if not all(sweeps):
            raise BenchError("the folders mix layer-sweep shards and other shards; merge one kind at a time")
        return merge_layer_sweeps(out, folders)
    kinds = {_kind(f) for f in folders}
    if len(kinds) > 1:
        raise BenchError(f"the folders mix {' and '.join(sorted(kinds))} shards; merge one kind at a time")
    kind = kinds.pop()
    parts = _parts(folders, kind)
    for p in parts:
        if p.folder.resolve() == out.resolve():
            raise BenchError(f"OUT {out} is also a shard folder; merge into another folder")
    out.mkdir(parents=True, exist_ok=True)
    merger = {"run": merge_runs, "capture": merge_captures, "patching": merge_patching,
              "dose-response": merge_dose_response}[kind]
    result = merger(out, parts)
    throughput = merge_throughput(out, parts)
    if throughput is not None:
        result = {**result, "files": [*result["files"], THROUGHPUT_FILE], "throughput": throughput}
    return result


def merge_layer_sweeps(out: Path, folders: list[Path]) -> dict[str, Any]:
    """`evprobe layer-sweep --shard K/N` folders: their captures merged into OUT/acts, then the sweep
    (steps 2-4, CPU only, no model) run on OUT with the shards' config."""
    from experiments.config import load_config
    from experiments.layer_sweep import ACTS_DIR, SHARD_CONFIG_FILE, LayerSweepConfig, layer_sweep

    configs = [_read_meta(f / SHARD_CONFIG_FILE) for f in folders]

    def settings(config: dict[str, Any]) -> dict[str, Any]:  # without out, shard and the model's placement
        return _settings({"config": config}, ())["config"]

    for folder, config in zip(folders[1:], configs[1:]):
        if settings(config) != settings(configs[0]):
            diff = sorted(k for k in settings(config) if settings(config).get(k) != settings(configs[0]).get(k))
            raise BenchError(f"{folder} is a shard of another layer sweep than {folders[0]} (different "
                             f"{', '.join(diff)}); merge the shards of one command")
    captured = merge(out / ACTS_DIR, [f / ACTS_DIR for f in folders])
    config = load_config(LayerSweepConfig, {**configs[0], "out": str(out), "shard": None},
                         where=str(folders[0] / SHARD_CONFIG_FILE))
    summary = layer_sweep(config, progress=False)
    return {"kind": "layer-sweep", "n_shards": captured["n_shards"], "n_items": summary["n_items"],
            "files": [f"{ACTS_DIR}/{name}" for name in captured["files"]] + summary["files"]}


def merge_throughput(out: Path, parts: list[_Part]) -> dict[str, Any] | None:
    """OUT/throughput.json from the shards' throughput.json (written by data-parallel processes):
    every process's units per second, and the whole job's (all units / the slowest process's
    seconds). None when a shard has none (e.g. --shard jobs, which print and store their own)."""
    paths = [p.folder / THROUGHPUT_FILE for p in parts]
    if not all(path.is_file() for path in paths):
        return None
    processes = [_read_meta(path) for path in paths]
    units = sum(int(p.get("units") or 0) for p in processes)
    seconds = max(float(p.get("seconds") or 0.0) for p in processes)
    summary = {"processes": processes, "units": units, "seconds": seconds,
               "per_second": round(units / seconds, 3) if units and seconds > 0 else None}
    atomic_write_json(out / THROUGHPUT_FILE, summary)
    return summary


# ---------------------------------------------------------------- command line


def add_merge_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "merge",
        help="combine the --shard K/N folders of one run, capture, patching, dose-response or layer-sweep job into "
        "what one run writes",
        description="Combine shard folders (all N shards of one `evprobe run`, `evprobe capture`, "
        "`evprobe patching`, `evprobe dose-response` or `evprobe layer-sweep` command, written with --shard K/N) "
        "into OUT: records.jsonl + run.json; acts.npy + index.jsonl + meta.json; results.jsonl + meta.json + patching.json/.md/.png; or "
        "results.jsonl + meta.json + dose_response.json/.md and curves; or acts/ and the whole layer sweep, "
        "exactly as one unsharded run writes them (except per-item timing). Refuses missing, duplicated, "
        "incomplete or mismatched shards.",
    )
    p.add_argument("out", metavar="OUT", type=Path, help="folder for the merged files")
    p.add_argument("shards", metavar="SHARD_DIR", type=Path, nargs="+", help="the shard folders (any order)")
    p.set_defaults(run=run_merge)
    return p


def run_merge(args: argparse.Namespace) -> int:
    result = merge(args.out, args.shards)
    print(f"merged {result['n_shards']} {result['kind']} shards ({result['n_items']} items) into "
          f"{', '.join(str(args.out / f) for f in result['files'])}")
    return 0
