"""`evprobe run`: run a model or a scripted policy on benchmark items and append records.

Resumable: RUN/run.json pins what the run is (model, protocol, regime, benchmark hash); a rerun
with the same settings skips finished item ids and continues; different settings are refused.
Records are appended as whole lines with an fsync after each batch (see `bench.records`), so a
run killed at any moment loses no finished record and never duplicates one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.items import REQUESTS, VARIANTS, Item, by_image_count
from bench.manifest import (
    META_FILE,
    BenchError,
    atomic_write_json,
    load_item_images,
    read_families,
    read_items,
)
from bench.parse import parse_reply
from bench.policies import POLICIES, make_policy
from bench.progress import Progress, progress_label
from bench.protocols import build_prompt, check_regime, get_protocol, max_new_tokens
from bench.records import RECORDS_FILE, RUN_META_FILE, Record, append_records, load_records
from bench.reference import Prices
from bench.shard import Shard, select_shard

POLICY_PREFIX = "policy:"
# What a run is: a rerun into the same folder must agree on these. `shard` is only in the run.json
# of a sharded run ("K/N"); `evprobe merge` drops it.
PINNED = ("model", "protocol", "regime", "items_sha256", "shard")


@dataclass(frozen=True)
class RunConfig:
    model: str  # policy:<name>, tiny:<arch>, a hub id or a local folder
    bench: str
    out: str
    protocol: str = "direct"
    regime: str = "standard"
    requests: tuple[str, ...] | None = None  # request types and variant names; None = all
    limit: int | None = None
    batch_size: int = 8
    dtype: str = "auto"
    device_map: str | None = None
    max_memory: str | None = None  # accelerate's budget per device, e.g. "0=70GiB,cpu=200GiB"
    offload_folder: str | None = None  # where layers that fit nowhere else go (device_map "disk")
    trust_remote_code: bool = False
    attn_implementation: str | None = None  # e.g. "eager" (Pixtral, seed 000 appendix I)
    seed: int = 0  # the random policy's seed
    shard: str | None = None  # "K/N" (0-based): only the families of shard K of N (bench.shard)


def select_items(items: Sequence[Item], requests: Sequence[str] | None, limit: int | None) -> list[Item]:
    """Items whose request type (base items) or variant name is in `requests`, in manifest order.

    `select` means the base selections; name a variant (or `variants`) to include variants.
    """
    if requests is not None:
        known = set(REQUESTS) | set(VARIANTS) | {"variants"}
        bad = [r for r in requests if r not in known]
        if bad:
            raise BenchError(f"unknown request type {bad[0]!r}; choose from {', '.join(sorted(known))}")
        wanted = set(requests) | (set(VARIANTS) if "variants" in requests else set())
        items = [it for it in items if (it.variant or it.request) in wanted]
    if limit is not None:
        if limit <= 0:
            raise BenchError(f"--limit must be a positive integer, got {limit}")
        items = list(items)[:limit]
    return list(items)


def _bench_meta(bench: Path) -> dict[str, Any]:
    path = bench / META_FILE
    if not path.is_file():
        raise BenchError(f"{path} not found; generate the benchmark with `evprobe generate --out {bench}`")
    return json.loads(path.read_text())


def _check_pinned(out: Path, meta: dict[str, Any]) -> None:
    """Refuse to continue a run in `out` that was made with other settings."""
    path = out / RUN_META_FILE
    if not path.is_file():
        return
    old = json.loads(path.read_text())
    for key in PINNED:
        if old.get(key) != meta.get(key):
            raise BenchError(
                f"{out} holds a run with {key}={old.get(key)!r}, not {meta.get(key)!r}; "
                "use another --out to start a different run"
            )


def run(config: RunConfig, *, progress: bool = True) -> dict[str, Any]:
    """Run `config`; returns the run summary that is also stored in RUN/run.json."""
    bench, out = Path(config.bench), Path(config.out)
    get_protocol(config.protocol)
    check_regime(config.regime)
    if config.batch_size <= 0:
        raise BenchError(f"--batch-size must be a positive integer, got {config.batch_size}")
    bench_meta = _bench_meta(bench)
    shard = Shard.parse(config.shard) if config.shard is not None else None
    all_items = read_items(bench)
    items = select_shard(select_items(all_items, config.requests, config.limit), shard, all_items)
    if config.model.startswith(POLICY_PREFIX):
        name = config.model[len(POLICY_PREFIX):]
        if name not in POLICIES:
            raise BenchError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    meta = {
        "model": config.model,
        "protocol": config.protocol,
        "regime": config.regime,
        "items_sha256": bench_meta["items_sha256"],
        "bench": str(bench.resolve()),
        "max_new_tokens": max_new_tokens(config.protocol, config.regime),
        "config": asdict(config),
    }
    if shard is not None:
        meta["shard"] = str(shard)
    _check_pinned(out, meta)
    records_path = out / RECORDS_FILE
    done = load_records(records_path)
    todo = [it for it in items if it.item_id not in done]
    # Load the model (the slow, failure-prone step) before writing anything, and only if needed.
    reply_batch = _replier(config, bench, bench_meta) if todo else None
    out.mkdir(parents=True, exist_ok=True)
    if not (out / RUN_META_FILE).is_file():
        atomic_write_json(out / RUN_META_FILE, meta)
    started = time.perf_counter()
    bar = Progress(progress_label("run", shard), len(todo)) if progress and todo else None
    # Batch rows with the same number of images: some processors cannot mix them in one call.
    for group in by_image_count(todo):
        for start in range(0, len(group), config.batch_size):
            batch = group[start : start + config.batch_size]
            t = time.perf_counter()
            replies = reply_batch(batch)  # type: ignore[misc]
            per_item = (time.perf_counter() - t) / len(batch)
            records = [_record(config, it, reply, per_item) for it, reply in zip(batch, replies)]
            append_records(records_path, records)
            if bar:
                bar.update(len(batch))
    elapsed = time.perf_counter() - started
    all_done = load_records(records_path)
    summary = {
        **json.loads((out / RUN_META_FILE).read_text()),
        "n_selected": len(items),
        "n_records": len(all_done),
        "last_session": {"items": len(todo), "seconds": round(elapsed, 3),
                         "items_per_second": round(len(todo) / elapsed, 3) if elapsed > 0 and todo else None},
    }
    atomic_write_json(out / RUN_META_FILE, summary)
    return summary




Reply = tuple[str, int | None, int | None]  # (text, prompt tokens, new tokens)


def _replier(config: RunConfig, bench: Path, bench_meta: dict[str, Any]) -> Callable[[list[Item]], list[Reply]]:
    if config.model.startswith(POLICY_PREFIX):
        families = {f.family_id: f for f in read_families(bench)}
        policy = make_policy(
            config.model[len(POLICY_PREFIX):], bench, families, Prices(**bench_meta["prices"]), config.seed
        )
        return lambda batch: [(policy(it), None, None) for it in batch]
    return _model_replier(config, bench)


def _model_replier(config: RunConfig, bench: Path) -> Callable[[list[Item]], list[Reply]]:
    import hooks
    from hooks.devices import placement_of

    handle = hooks.load(
        config.model,
        dtype=config.dtype,
        **placement_of(config),
        trust_remote_code=config.trust_remote_code,
        attn_implementation=config.attn_implementation,
    )
    limit = max_new_tokens(config.protocol, config.regime)

    def reply(batch: list[Item]) -> list[Reply]:
        prompts = [build_prompt(it, config.protocol, config.regime) for it in batch]
        images = [load_item_images(bench, it.images) for it in batch]
        gens = hooks.generate(handle, prompts, images, max_new_tokens=limit, batch_size=len(batch))
        return [(g.text, g.n_prompt_tokens, g.n_new_tokens) for g in gens]

    return reply


def _record(config: RunConfig, item: Item, reply: Reply, seconds: float) -> Record:
    text, n_prompt, n_new = reply
    parsed = parse_reply(item, text, config.regime)
    return Record(
        item_id=item.item_id,
        model=config.model,
        protocol=config.protocol,
        regime=config.regime,
        request=item.request,
        variant=item.variant,
        family_id=item.family_id,
        reply=text,
        valid=parsed.valid,
        route=parsed.route,
        choice=parsed.choice,
        action=parsed.action,
        answer=parsed.answer,
        value=parsed.value,
        n_prompt_tokens=n_prompt,
        n_new_tokens=n_new,
        seconds=round(seconds, 6),
    )
