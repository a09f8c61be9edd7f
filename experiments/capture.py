"""`evprobe capture`: store the residual stream of benchmark prompts at named token positions.

    evprobe capture --model M --bench DIR --out ACTS [--requests select,answer_initial]
                    [--layers all|0,4,8] [--positions last,image_mean,text_mean]
                    [--regime standard|guided|json] [--protocol direct|brief] [--limit N]

Files in ACTS:
- `acts.npy`: a real .npy file, float16, shape (items, layers, positions, d_model), created
  whole (header + sparse zeros) up front, then filled row by row. Row i is the i-th selected
  item (manifest order after `--requests` / `--limit`), so rows never move between sessions.
  Read it with `numpy.load(path, mmap_mode="r")`.
- `index.jsonl`: one line per captured item (its row, ids, pair ids, labels, token counts),
  in capture order (items are batched by image count), so read rows by the `row` field. It
  is the commit log: a batch's rows are written to acts.npy and fsync'ed BEFORE its index
  lines are appended (and fsync'ed), so every indexed row holds finished data; a row that is
  not indexed may hold zeros or a torn write and is recomputed on resume.
- `meta.json`: what the capture is (model, revision, dtype, layers, positions and their rules,
  regime, protocol, selection, the benchmark's items hash, chat-template and image hashes,
  library versions, and what exactly is stored), written atomically before the first item.

What is stored: raw decoder-layer outputs (hooks.capture): layer i == transformers'
`hidden_states[i + 1]` for i < n_layers - 1; the last layer is before the final norm.

Text marker of `text_mean`: the item's question sentence, i.e. the text after "Question: " to
the end of that line (select and answer requests, and the select variants); items without such
a line (read_ruler, recover_property) average over their whole prompt text.

Resumable: rerun the same command to continue after a kill; a rerun with different pinned
settings is refused. Rows are written with `os.pwrite` (not through a writable memmap, whose
written pages would stay resident and make memory grow with the number of items).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bench.argtypes import positive_int, str_list
from bench.items import Item, by_image_count
from bench.manifest import (
    META_FILE,
    BenchError,
    append_log_lines,
    atomic_write_json,
    load_item_images,
    read_items,
    read_log_lines,
    resolve_image,
)
from bench.progress import Progress, progress_label
from bench.protocols import build_prompt, check_regime, get_protocol
from bench.runner import select_items
from bench.shard import Shard, select_shard
from experiments.config import add_placement_arguments, config_from_flags

if TYPE_CHECKING:
    from hooks.handle import Handle

ACTS_FILE = "acts.npy"
INDEX_FILE = "index.jsonl"
CAPTURE_META_FILE = "meta.json"
FORMAT = "evprobe-capture/1"
STORED = (
    "raw decoder-layer outputs (layer i == hidden_states[i+1] for i < n_layers - 1; "
    "the last layer is before the final norm)"
)
TEXT_MARKER_RULE = (
    "text_mean averages the tokens of the item's question sentence (the text after 'Question: ' to the end of "
    "that line); items without a 'Question: ' line (read_ruler, recover_property) use their whole prompt text"
)
QUESTION_PREFIX = "Question: "
FLOAT16_MAX = float(np.finfo(np.float16).max)  # 65504
# Item fields copied into each index.jsonl row (besides row and item_id).
INDEX_FIELDS = (
    "request", "variant", "family_id", "system", "initial_property", "decision_id", "history", "threshold_level",
    "test", "hidden_world", "image_pair_id", "threshold_pair_id", "resolved", "reference_action", "reference_answer",
)
# What a capture is: a rerun into the same folder must agree on these. `shard` ("K/N") is only in the
# meta.json of a sharded capture; `evprobe merge` drops it.
PINNED = ("model", "revision", "dtype", "layers", "positions", "regime", "protocol", "items_sha256",
          "selection_sha256", "n_items", "d_model", "shard")
PINNED_BEFORE_LOAD = ("model", "positions", "regime", "protocol", "items_sha256", "selection_sha256", "n_items",
                      "shard")


@dataclass(frozen=True)
class CaptureConfig:
    model: str  # tiny:<arch>, a hub id or a local folder
    bench: str
    out: str
    requests: tuple[str, ...] | None = ("select", "answer_initial")  # request types / variant names; None = all
    layers: str | tuple[int, ...] = "all"  # "all", "0,4,8" or a tuple of indices
    positions: tuple[str, ...] = ("last",)
    regime: str = "standard"
    protocol: str = "direct"
    limit: int | None = None
    batch_size: int = 8
    dtype: str = "auto"
    device_map: str | None = None
    max_memory: str | None = None  # accelerate's budget per device, e.g. "0=70GiB,cpu=200GiB"
    offload_folder: str | None = None  # where layers that fit nowhere else go (device_map "disk")
    trust_remote_code: bool = False
    attn_implementation: str | None = None  # e.g. "eager" (Pixtral, seed 000 appendix I)
    shard: str | None = None  # "K/N" (0-based): only the families of shard K of N (bench.shard)


def question_marker(prompt: str) -> str | None:
    """The text after 'Question: ' up to the end of its line, or None if no line starts with it."""
    for line in prompt.splitlines():
        if line.startswith(QUESTION_PREFIX):
            text = line[len(QUESTION_PREFIX):].rstrip()
            return text or None
    return None


def parse_layers(spec: str | Sequence[int], n_layers: int) -> list[int]:
    """'all', '0,4,8' or a sequence of ints -> validated layer indices (the order given)."""
    from hooks.capture import check_layers

    if isinstance(spec, str):
        text = spec.strip()
        if text == "all":
            return list(range(n_layers))
        try:
            values = [int(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise ValueError(f"--layers must be 'all' or comma-separated integers, got {spec!r}") from None
    else:
        values = list(spec)
    try:
        return check_layers(values, n_layers)
    except (TypeError, ValueError) as err:
        raise ValueError(f"--layers: {err}") from None


def _check_positions(positions: Sequence[str]) -> list[str]:
    # hooks.capture imports no torch at module level: cheap before any model is loaded.
    from hooks.capture import check_positions

    try:
        return check_positions(positions)
    except (TypeError, ValueError) as err:
        raise ValueError(f"--positions: {err}") from None


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _images_sha256(bench: Path, items: Sequence[Item]) -> tuple[str, int]:
    """sha256 of the sorted 'path sha256' lines of every image the items use, and their count."""
    paths = sorted({rel for it in items for rel in it.images})
    lines = [f"{rel} {_sha256_file(resolve_image(bench, rel))}" for rel in paths]
    return _sha256_text("\n".join(lines)), len(paths)


def _chat_template_sha256(handle: Handle) -> str | None:
    template = getattr(handle.processor, "chat_template", None) or getattr(handle.tokenizer, "chat_template", None)
    if template is None:
        return None
    text = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
    return _sha256_text(text)


def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("torch", "transformers", "nnsight", "numpy", "pillow", "tokenizers"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise BenchError(f"{path}: not valid JSON ({err.msg}); move the folder aside") from None


def _check_pinned(out: Path, old: dict[str, Any] | None, new: dict[str, Any], keys: Sequence[str]) -> None:
    """Refuse to continue a capture in `out` that was made with other settings."""
    if old is None:
        return
    if old.get("format") != FORMAT:
        raise BenchError(f"{out / CAPTURE_META_FILE} is not an evprobe capture ({old.get('format')!r}); "
                         "use another --out")
    for key in keys:
        if old.get(key) != new.get(key):
            raise BenchError(f"{out} holds a capture with {key}={old.get(key)!r}, not {new.get(key)!r}; "
                             "use another --out to start a different capture")


def load_index(path: Path, items: Sequence[Item] | None = None) -> dict[int, dict[str, Any]]:
    """Committed index rows by row number. A torn last line (a kill mid-append) is cut off the
    file; a bad line elsewhere, a duplicate row, or a row whose item id is not the selection's is
    an error naming the line."""
    out: dict[int, dict[str, Any]] = {}
    for number, line in read_log_lines(path):
        try:
            row = json.loads(line)
            index = row["row"]
            item_id = row["item_id"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise BenchError(f"{path}:{number}: not an index row ({err}); move the folder aside") from None
        if not isinstance(index, int) or index in out:
            raise BenchError(f"{path}:{number}: row {index!r} is not a new row number; move the folder aside")
        if items is not None and not (0 <= index < len(items) and items[index].item_id == item_id):
            raise BenchError(f"{path}:{number}: row {index} is {item_id!r}, which is not that row of this "
                             "selection; use another --out")
        out[index] = row
    return out


def _create_acts(path: Path, shape: tuple[int, ...]) -> None:
    """A whole .npy file of zeros (sparse on disk) under its final name, or nothing."""
    from numpy.lib.format import open_memmap

    tmp = path.with_name(f".{path.name}.tmp")
    mm = open_memmap(tmp, mode="w+", dtype=np.float16, shape=shape)
    mm.flush()
    del mm
    with tmp.open("rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _acts_offset(path: Path, shape: tuple[int, ...]) -> int:
    """Byte offset of the data in an existing acts.npy, after checking its shape and dtype."""
    try:
        mm = np.load(path, mmap_mode="r")
    except (ValueError, OSError) as err:
        raise BenchError(f"{path}: not a readable .npy file ({err}); move the folder aside") from None
    if mm.shape != shape or mm.dtype != np.float16 or not mm.flags.c_contiguous:
        raise BenchError(f"{path} has shape {mm.shape} and dtype {mm.dtype}, expected {shape} float16; "
                         "use another --out")
    offset = int(mm.offset)
    del mm
    return offset


def _to_float16(acts: np.ndarray, items: Sequence[Item]) -> tuple[np.ndarray, list[int]]:
    """float32 (rows, ...) -> float16, clipping values beyond float16's range; clipped count per row."""
    if not np.isfinite(acts).all():
        bad = int(np.argwhere(~np.isfinite(acts))[0][0])
        raise ValueError(f"item {items[bad].item_id}: the model produced a non-finite activation")
    over = np.abs(acts) > FLOAT16_MAX
    clipped = over.reshape(len(acts), -1).sum(1).tolist()
    if any(clipped):
        acts = np.clip(acts, -FLOAT16_MAX, FLOAT16_MAX)
    return acts.astype("<f2"), [int(c) for c in clipped]




def _index_row(row: int, item: Item, text_span: str, n_tokens: int, n_image: int, n_text: int,
               n_clipped: int) -> dict[str, Any]:
    out: dict[str, Any] = {"row": row, "item_id": item.item_id}
    out.update({name: getattr(item, name) for name in INDEX_FIELDS})
    out.update(text_span=text_span, n_tokens=n_tokens, n_image_tokens=n_image, n_text_tokens=n_text,
               n_clipped=n_clipped)
    return out


def capture(config: CaptureConfig, progress: bool = True) -> dict[str, Any]:
    """Run the capture job described by `config`; returns meta.json's content plus progress counts."""
    bench, out = Path(config.bench), Path(config.out)
    # Cheap validation first: nothing is loaded or written before the input is known good.
    positions = _check_positions(config.positions)
    get_protocol(config.protocol)
    check_regime(config.regime)
    if config.batch_size <= 0:
        raise BenchError(f"--batch-size must be a positive integer, got {config.batch_size}")
    if not (bench / META_FILE).is_file():
        raise BenchError(f"{bench / META_FILE} not found; generate the benchmark with `evprobe generate --out {bench}`")
    bench_meta = _read_json(bench / META_FILE)
    shard = Shard.parse(config.shard) if config.shard is not None else None
    all_items = read_items(bench)
    selected = select_items(all_items, config.requests, config.limit)
    if not selected:
        raise BenchError(f"no items of {bench} match --requests {','.join(config.requests or ())}; choose others")
    items = select_shard(selected, shard, all_items)
    if not items:
        raise BenchError(f"shard {shard} holds none of the {len(selected)} selected items (too many shards for "
                         "their families); use fewer shards")
    if "image_mean" in positions:
        no_image = next((it for it in items if not it.images), None)
        if no_image is not None:
            raise BenchError(f"item {no_image.item_id} ({no_image.request}) has no image, so it has no image_mean; "
                             "drop image_mean from --positions or that request from --requests")
    images_sha256, n_images = _images_sha256(bench, items)
    meta: dict[str, Any] = {
        "format": FORMAT,
        "model": config.model,
        "positions": positions,
        "regime": config.regime,
        "protocol": config.protocol,
        "requests": list(config.requests) if config.requests is not None else None,
        "limit": config.limit,
        "items_sha256": bench_meta.get("items_sha256"),
        "selection_sha256": _sha256_text("\n".join(it.item_id for it in items)),
        "n_items": len(items),
        "images_sha256": images_sha256,
        "n_images": n_images,
    }
    if shard is not None:
        meta["shard"] = str(shard)
    meta_path, index_path, acts_path = out / CAPTURE_META_FILE, out / INDEX_FILE, out / ACTS_FILE
    old = _read_json(meta_path) if meta_path.is_file() else None
    _check_pinned(out, old, meta, PINNED_BEFORE_LOAD)
    if old is not None:  # resolve the layer spec against the recorded model before loading it
        _check_pinned(out, old, {"layers": parse_layers(config.layers, old["n_model_layers"])}, ("layers",))
    done = load_index(index_path, items)
    todo = [(row, it) for row, it in enumerate(items) if row not in done]
    if not todo:
        return _summary(old or meta, done, 0, 0.0)

    from hooks import load
    from hooks.capture import POSITION_RULES
    from hooks.devices import placement_of

    handle = load(config.model, dtype=config.dtype, **placement_of(config),
                  attn_implementation=config.attn_implementation,
                  trust_remote_code=config.trust_remote_code)
    layers = parse_layers(config.layers, handle.n_layers)
    meta.update(
        arch=handle.arch,
        revision=getattr(handle.model.config, "_commit_hash", None),
        dtype=str(handle.dtype).removeprefix("torch."),
        n_model_layers=handle.n_layers,
        layers=layers,
        d_model=handle.d_model,
        shape=[len(items), len(layers), len(positions), handle.d_model],
        acts_dtype="float16",
        stored=STORED,
        position_rules={p: POSITION_RULES[p] for p in positions},
        text_marker_rule=TEXT_MARKER_RULE,
        chat_template_sha256=_chat_template_sha256(handle),
        versions=_versions(),
        bench=str(bench.resolve()),
        config=asdict(config),
    )
    _check_pinned(out, old, meta, PINNED)
    shape = (len(items), len(layers), len(positions), handle.d_model)

    out.mkdir(parents=True, exist_ok=True)
    if old is None:
        atomic_write_json(meta_path, meta)
    else:
        meta = old
    if not acts_path.is_file():
        if done:
            raise BenchError(f"{acts_path} is missing but {index_path} lists {len(done)} rows; use another --out")
        _create_acts(acts_path, shape)
    offset = _acts_offset(acts_path, shape)
    row_bytes = int(np.prod(shape[1:])) * 2

    started = time.perf_counter()
    bar = Progress(progress_label("capture", shard), len(todo)) if progress else None
    warned = False
    fd = os.open(acts_path, os.O_WRONLY)
    try:
        for group in by_image_count(todo, lambda entry: entry[1].images):
            for start in range(0, len(group), config.batch_size):
                batch = group[start : start + config.batch_size]
                rows, batch_items = [r for r, _ in batch], [it for _, it in batch]
                cap = _capture_items(handle, bench, batch_items, config, layers, positions)
                acts16, clipped = _to_float16(cap.acts, batch_items)  # (batch, layers, positions, d_model)
                for r, row in enumerate(rows):
                    data = acts16[r].tobytes()
                    written = os.pwrite(fd, data, offset + row * row_bytes)
                    if written != len(data):
                        raise OSError(f"{acts_path}: short write at row {row}")
                os.fsync(fd)  # rows on disk before the index says so
                if any(clipped) and not warned:
                    warnings.warn(f"activations beyond float16's range were clipped to +-{FLOAT16_MAX:g} "
                                  "(counted in index.jsonl's n_clipped)", stacklevel=2)
                    warned = True
                lines = [
                    _index_row(row, it, "question" if handle.keeps_prompt_text and question_marker(it.prompt) else "prompt",
                               cap.n_tokens[r], len(cap.spans[r].image), len(cap.spans[r].text), clipped[r])
                    for r, (row, it) in enumerate(batch)
                ]
                append_log_lines(index_path, lines)
                if bar:
                    bar.update(len(batch))
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - started
    return _summary(meta, load_index(index_path), len(todo), elapsed)


def _capture_items(handle: Handle, bench: Path, items: list[Item], config: CaptureConfig, layers: list[int],
                   positions: list[str]):
    from hooks.capture import capture_batch

    prompts = [build_prompt(it, config.protocol, config.regime) for it in items]
    images = [load_item_images(bench, it.images) for it in items]
    # A model that reads facts instead of the prompt's words (the organism) has no question text;
    # its text span is every fact token except the sheet values (hooks.spans).
    markers = [question_marker(it.prompt) if handle.keeps_prompt_text else None for it in items]
    try:
        return capture_batch(handle, prompts, images, layers=layers, positions=positions, text_markers=markers)
    except ValueError as err:
        text = str(err)
        if text.startswith("row "):  # name the item rather than the batch row
            head, _, rest = text.partition(":")
            text = f"item {items[int(head.split()[1])].item_id}:{rest}"
        raise ValueError(text) from None


def _summary(meta: dict[str, Any], done: dict[int, Any], n_new: int, seconds: float) -> dict[str, Any]:
    return {
        **meta,
        "n_done": len(done),
        "complete": len(done) == meta["n_items"],
        "last_session": {"items": n_new, "seconds": round(seconds, 3),
                         "items_per_second": round(n_new / seconds, 3) if seconds > 0 and n_new else None},
    }


# ---------------------------------------------------------------- command line


def add_capture_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `evprobe capture` on the CLI's subparsers; its handler is `run_capture`."""
    p = sub.add_parser(
        "capture",
        help="store residual-stream activations of benchmark prompts: ACTS/acts.npy, index.jsonl, meta.json",
        description="Run the prompts of the chosen requests through a model and store each decoder layer's raw "
        "output (before the final norm for the last layer) at the named token positions, as float16 "
        "(items x layers x positions x d_model). Resumable: rerun the same command to continue.",
    )
    p.add_argument("--model", required=True, help="tiny:<arch>, hub id or local folder")
    p.add_argument("--bench", required=True, type=Path, help="benchmark folder (evprobe generate)")
    p.add_argument("--out", required=True, type=Path, help="capture folder (acts.npy, index.jsonl, meta.json)")
    p.add_argument("--requests", default="select,answer_initial",
                   help="comma-separated request types and variant names (default: select,answer_initial)")
    p.add_argument("--layers", default="all", help="all, or comma-separated decoder layer indices, e.g. 0,4,8")
    p.add_argument("--positions", default="last", help="comma-separated: last, image_mean, text_mean")
    p.add_argument("--regime", default="standard", help="standard, guided or json")
    p.add_argument("--protocol", default="direct", help="direct or brief (the text appended to each prompt)")
    p.add_argument("--limit", type=positive_int, default=None, help="only the first N selected items")
    p.add_argument("--batch-size", type=positive_int, default=8)
    p.add_argument("--dtype", default="auto", help="auto (float32 on CPU), float32, bfloat16, float16")
    add_placement_arguments(p)
    p.add_argument("--trust-remote-code", action="store_true", help="allow a model's own code (off by default)")
    p.add_argument("--attn-implementation", default=None, help="e.g. eager (Pixtral) or sdpa")
    p.add_argument("--shard", default=None, metavar="K/N",
                   help="only shard K of N (0-based; whole families, sorted ids round robin); combine the N "
                   "folders with `evprobe merge`. Under torchrun the rank picks the shard")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(run=run_capture)
    return p


def run_capture(args: argparse.Namespace) -> int:
    requests = str_list(args.requests) if args.requests else None
    config = config_from_flags(CaptureConfig, args, bench=str(args.bench), out=str(args.out),
                               requests=requests or None, positions=tuple(str_list(args.positions)))
    from experiments.distributed import data_parallel

    # torchrun / accelerate launch: this rank's shard, then rank 0 merges
    if data_parallel(config, lambda c: capture(c, progress=not args.quiet), unit="rows"):
        return 0
    summary = capture(config, progress=not args.quiet)
    session = summary["last_session"]
    print(
        f"{summary['n_done']}/{summary['n_items']} rows in {Path(args.out) / ACTS_FILE} "
        f"({session['items']} new in {session['seconds']} s)"
    )
    return 0
