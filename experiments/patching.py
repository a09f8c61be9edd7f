"""`evprobe patching`: where is the difference between the two members of an image pair carried?

An image pair shares every prompt byte and its two sheets have the same size, so both members
tokenize to the same positions. For each pair (both directions: A into B and B into A) we patch
the source member's decoder-layer output into the target's forward pass, one layer and one
position set at a time (the last prompt token, the question text, the image tokens; for the
model organism, which reads facts, "text" is every fact token but the sheet values), and read
the five option letters' next-token log-probabilities (`hooks.patching.patch_pair`).

The measure is the log-odds between the two members' reference options: with a_s the source's
reference letter and a_t the target's (they differ: the construction switches the action within
every image pair), LD = log p(a_s) - log p(a_t). A patch that carries the source's evidence moves
the target's LD toward the source's. We report per layer x position the mean change
LD_patched - LD_target, the share of that change in the full gap (LD_source - LD_target, on
pairs where the gap is at least 0.1 nats), and how often the decoded option (the top letter)
becomes the source's, each with family-bootstrap intervals and n.

Resumable: one line per (pair, direction) in results.jsonl (whole lines, fsync per line); a rerun
skips finished pairs.

Sharding: `--shard K/N` patches only the pairs of shard K's families (bench.shard); each shard
folder is a complete patching job of its own, and `evprobe merge OUT SHARD_DIR...` writes the
results.jsonl (in a single run's order), meta.json and the summary files of the whole job.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.bootstrap import FamilyBootstrap
from bench.items import Item
from bench.manifest import (
    BenchError,
    append_log_lines,
    atomic_write_bytes,
    atomic_write_json,
    load_item_images,
    read_items,
    read_log_lines,
)
from bench.progress import Progress, progress_label
from bench.protocols import build_prompt, check_regime, get_protocol
from bench.shard import Shard, family_shards
from experiments.config import add_placement_arguments

RESULTS_FILE = "results.jsonl"
POSITION_SETS = ("last", "text", "image")
LETTERS = ("A", "B", "C", "D", "E")
MIN_GAP = 0.1  # nats: pairs whose members the model barely separates give no share


@dataclass(frozen=True)
class PatchingConfig:
    model: str
    bench: str
    out: str
    layers: str = "all"  # "all" or "0,2,4"
    positions: tuple[str, ...] = POSITION_SETS
    regime: str = "standard"
    protocol: str = "direct"
    limit_pairs: int | None = None
    dtype: str = "auto"
    device_map: str | None = None
    max_memory: str | None = None  # accelerate's budget per device, e.g. "0=70GiB,cpu=200GiB"
    offload_folder: str | None = None  # where layers that fit nowhere else go (device_map "disk")
    attn_implementation: str | None = None  # e.g. "eager" (Pixtral)
    n_boot: int = 2000
    seed: int = 20260905
    shard: str | None = None  # "K/N" (0-based): only the pairs of shard K's families (bench.shard)


def select_pairs(items: Sequence[Item], limit_pairs: int | None, shard: Shard | None) -> list[tuple[Item, Item]]:
    """The job's image pairs: manifest order, the first `limit_pairs`, then the shard's families."""
    pairs = image_pairs(items)
    if limit_pairs is not None:
        pairs = pairs[:limit_pairs]
    if shard is None:
        return pairs
    owner = family_shards((it.family_id for it in items), shard.n)
    return [(a, b) for a, b in pairs if owner[a.family_id] == shard.k]


def jobs_of(pairs: Sequence[tuple[Item, Item]]) -> list[tuple[Item, Item]]:
    """(source, target) in the order a run patches them: every pair A into B, then every pair B into A."""
    return [(a, b) for a, b in pairs] + [(b, a) for a, b in pairs]


def image_pairs(items: Sequence[Item]) -> list[tuple[Item, Item]]:
    """The base selection image pairs, in manifest order: (history 0, history 1)."""
    groups: dict[str, list[Item]] = defaultdict(list)
    for it in items:
        if it.request == "select" and it.variant is None and it.image_pair_id:
            groups[it.image_pair_id].append(it)
    pairs = []
    for members in groups.values():
        if len(members) != 2:
            raise BenchError(f"image pair {members[0].image_pair_id} has {len(members)} members, not 2")
        a, b = sorted(members, key=lambda it: it.history)
        pairs.append((a, b))
    return pairs


def _load_done(path: Path) -> dict[str, dict[str, Any]]:
    return {row["key"]: row for row in (json.loads(line) for _, line in read_log_lines(path))}


def run_patching(config: PatchingConfig, *, progress: bool = True) -> dict[str, Any]:
    """Patch every selected image pair both ways; write results.jsonl, patching.json/.md/.png."""
    bench, out = Path(config.bench), Path(config.out)
    check_regime(config.regime)
    get_protocol(config.protocol)
    bad = [p for p in config.positions if p not in POSITION_SETS]
    if bad or not config.positions:
        raise BenchError(f"unknown position set {bad[0] if bad else ''!r}; choose from {', '.join(POSITION_SETS)}")
    shard = Shard.parse(config.shard) if config.shard is not None else None
    items = read_items(bench)
    if not select_pairs(items, config.limit_pairs, None):
        raise BenchError(f"{bench} has no image pairs of base selections to patch")
    pairs = select_pairs(items, config.limit_pairs, shard)
    if not pairs:
        raise BenchError(f"shard {shard} holds none of the image pairs (too many shards for their families); "
                         "use fewer shards")
    import hooks
    from experiments.capture import parse_layers, question_marker
    from hooks.devices import placement_of
    from hooks.handle import config_n_layers

    known = config_n_layers(config.model)
    if known is not None:
        parse_layers(config.layers, known)  # a layer out of range fails before the model loads
    handle = hooks.load(config.model, dtype=config.dtype, **placement_of(config),
                        attn_implementation=config.attn_implementation)
    layers = parse_layers(config.layers, handle.n_layers)
    out.mkdir(parents=True, exist_ok=True)
    meta_path = out / "meta.json"
    meta = {"config": asdict(config), "layers": layers, "model": config.model}
    if shard is not None:
        meta["shard"] = str(shard)
    if meta_path.is_file():
        old = json.loads(meta_path.read_text())
        if (old["model"], old["layers"], old["config"]["positions"], old["config"]["regime"], old.get("shard")) != (
            config.model, layers, list(config.positions), config.regime, meta.get("shard")
        ):
            raise BenchError(f"{out} holds patching results of other settings; use another --out")
    atomic_write_json(meta_path, meta)
    results = out / RESULTS_FILE
    done = _load_done(results)
    jobs = jobs_of(pairs)
    todo = [(s, t) for s, t in jobs if f"{s.item_id}>{t.item_id}" not in done]
    bar = Progress(progress_label("patching", shard), len(todo)) if progress and todo else None
    started = time.perf_counter()
    # A model that reads facts instead of the prompt's words (the organism) has no question text:
    # its "text" set is every fact token except the sheet values (hooks.spans).
    marker_of = question_marker if handle.keeps_prompt_text else (lambda prompt: None)
    for source, target in todo:
        row = _patch_one(handle, bench, source, target, layers, config, marker_of)
        append_log_lines(results, [row])
        if bar:
            bar.update()
    rows = list(_load_done(results).values())
    summary = write_summary(out, rows, layers, config, len(pairs), time.perf_counter() - started)
    return {**summary, "computed": len(todo)}


def write_summary(out: Path, rows: list[dict[str, Any]], layers: list[int], config: PatchingConfig, n_pairs: int,
                  seconds: float) -> dict[str, Any]:
    """Aggregate `rows` and write patching.json, patching.md and patching.png."""
    summary = aggregate(rows, layers, list(config.positions), n_boot=config.n_boot, seed=config.seed)
    summary.update(model=config.model, n_pairs=n_pairs, seconds=round(seconds, 3))
    atomic_write_json(out / "patching.json", summary)
    atomic_write_bytes(out / "patching.md", patching_markdown(summary).encode())
    heatmap_png(summary, out / "patching.png")
    return summary


def _patch_one(handle, bench: Path, source: Item, target: Item, layers, config: PatchingConfig, marker_of) -> dict:
    from hooks.inputs import build_inputs
    from hooks.patching import patch_pair
    from hooks.spans import token_spans

    def inputs(item: Item):
        return build_prompt(item, config.protocol, config.regime), load_item_images(bench, item.images)

    src, tgt = inputs(source), inputs(target)
    enc = build_inputs(handle, [tgt[0]], [tgt[1]])
    spans = token_spans(handle, enc["input_ids"][0], enc["attention_mask"][0], tgt[0],
                        marker_of(target.prompt), n_images=len(tgt[1]))
    sets = {"last": [spans.last], "text": list(spans.text), "image": list(spans.image)}
    chosen = {name: sets[name] for name in config.positions}
    result = patch_pair(handle, src, tgt, layers=layers, position_sets=chosen, candidates=list(LETTERS))
    a_s = LETTERS.index(source.reference_option)
    a_t = LETTERS.index(target.reference_option)

    def ld(logp: np.ndarray) -> np.ndarray:
        return logp[..., a_s] - logp[..., a_t]

    return {
        "key": f"{source.item_id}>{target.item_id}",
        "source": source.item_id,
        "target": target.item_id,
        "family_id": target.family_id,
        "system": target.system,
        "target_resolved": target.resolved,
        "ld_source": float(ld(result.source)),
        "ld_target": float(ld(result.target)),
        "ld_patched": ld(result.patched).tolist(),  # (layers, position sets)
        "top_source": int(result.source.argmax()),
        "top_target": int(result.target.argmax()),
        "top_patched": result.top().tolist(),
    }


def aggregate(rows: list[dict[str, Any]], layers: list[int], positions: list[str], *, n_boot: int, seed: int) -> dict:
    """Per layer x position: mean log-odds change, share of the gap, decoded-option flips."""
    families = sorted({r["family_id"] for r in rows})
    boot = FamilyBootstrap(families, n_boot, seed)
    index = {f: i for i, f in enumerate(families)}
    F, L, P = len(families), len(layers), len(positions)
    change = np.zeros((F, L, P))
    n_rows = np.zeros(F)
    share_num, share_den = np.zeros((F, L, P)), np.zeros(F)
    flip_num, flip_den = np.zeros((F, L, P)), np.zeros(F)
    for r in rows:
        f = index[r["family_id"]]
        patched = np.asarray(r["ld_patched"])  # (L, P)
        delta = patched - r["ld_target"]
        change[f] += delta
        n_rows[f] += 1
        gap = r["ld_source"] - r["ld_target"]
        if abs(gap) >= MIN_GAP:
            share_num[f] += delta / gap
            share_den[f] += 1
        if r["top_source"] != r["top_target"]:
            flip_num[f] += np.asarray(r["top_patched"]) == r["top_source"]
            flip_den[f] += 1

    def grid(num: np.ndarray, den: np.ndarray) -> list[list[dict]]:
        flat = boot.rates(num.reshape(F, -1), np.repeat(den[:, None], L * P, axis=1))
        return [[flat[i * P + j].to_json() for j in range(P)] for i in range(L)]

    return {
        "layers": layers,
        "positions": positions,
        "n_rows": int(n_rows.sum()),
        "n_families": F,
        "mean_change": grid(change, n_rows),
        "share_of_gap": grid(share_num, share_den),
        "decoded_flip": grid(flip_num, flip_den),
        "mean_gap": float(np.mean([r["ld_source"] - r["ld_target"] for r in rows])) if rows else None,
        "interval": f"family bootstrap, {n_boot} resamples, seed {seed}, pointwise 95% percentile",
    }


def patching_markdown(summary: dict[str, Any]) -> str:
    def cell(e: dict) -> str:
        if e["value"] is None:
            return f"NA (n={e['n']})"
        return f"{e['value']:.3f} [{e['ci'][0]:.3f}, {e['ci'][1]:.3f}] (n={e['n']})"

    parts = [
        f"# Pair patching: {summary.get('model', '')}",
        "",
        f"{summary['n_rows']} patched (pair, direction) rows from {summary['n_families']} families; "
        f"intervals: {summary['interval']}. LD = log p(source's reference letter) - log p(target's); "
        f"mean LD gap source - target: {summary['mean_gap']:.3f} nats.",
    ]
    titles = {
        "mean_change": "Mean change in LD (nats) when the source's layer output is patched in",
        "share_of_gap": f"Share of the source-target gap recovered (pairs with |gap| >= {MIN_GAP} nats)",
        "decoded_flip": "Share of pairs whose top letter becomes the source's (pairs whose top letters differ)",
    }
    for key, title in titles.items():
        header = "| layer | " + " | ".join(summary["positions"]) + " |"
        sep = "|---|" + "---|" * len(summary["positions"])
        rows = [f"| {layer} | " + " | ".join(cell(e) for e in summary[key][i]) + " |"
                for i, layer in enumerate(summary["layers"])]
        parts += ["", f"## {title}", "", header, sep, *rows]
    return "\n".join(parts) + "\n"


def heatmap_png(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.array([[e["value"] if e["value"] is not None else np.nan for e in row] for row in summary["mean_change"]])
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(summary["positions"]), 1.2 + 0.35 * len(summary["layers"])))
    bound = np.nanmax(np.abs(grid)) if np.isfinite(grid).any() else 1.0
    im = ax.imshow(grid, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto", origin="lower")
    ax.set_xticks(range(len(summary["positions"])), summary["positions"])
    ax.set_yticks(range(len(summary["layers"])), summary["layers"])
    ax.set_xlabel("patched positions")
    ax.set_ylabel("decoder layer")
    ax.set_title(f"Mean change in log-odds\n(n={summary['n_rows']} patched pairs)", fontsize=10)
    fig.colorbar(im, ax=ax, label="LD_patched - LD_target (nats)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def add_patching_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "patching",
        help="patch image-pair members into each other layer by layer: a layer x position heatmap",
        description="Activation patching between the members of every image pair of the base "
        "selections; writes results.jsonl, patching.json, patching.md and patching.png. Settings "
        "come from --config (a YAML of PatchingConfig), flags override it; without --config, "
        "--model, --bench and --out are required.",
    )
    p.add_argument("--config", default=None, help="YAML file (e.g. configs/experiments/patching_tiny.yaml)")
    p.add_argument("--model", default=None)
    p.add_argument("--bench", default=None)
    p.add_argument("--out", default=None)
    p.add_argument("--layers", default=None, help="all or comma-separated layer numbers (default all)")
    p.add_argument("--positions", default=None, help="comma list of last, text, image (default all three)")
    p.add_argument("--regime", default=None)
    p.add_argument("--protocol", default=None)
    p.add_argument("--limit-pairs", type=int, default=None, help="only the first N image pairs")
    p.add_argument("--dtype", default=None)
    add_placement_arguments(p)
    p.add_argument("--n-boot", type=int, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--shard", default=None, metavar="K/N",
                   help="only shard K of N (0-based, whole families); combine the N folders with `evprobe merge`")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(run=_run)


def config_from_args(args: argparse.Namespace) -> PatchingConfig:
    """--config filled into PatchingConfig, with every given flag applied on top."""
    from experiments.config import load_config

    overrides = {
        "model": args.model, "bench": args.bench, "out": args.out, "layers": args.layers,
        "positions": tuple(p.strip() for p in args.positions.split(",") if p.strip()) if args.positions else None,
        "regime": args.regime, "protocol": args.protocol, "limit_pairs": args.limit_pairs, "dtype": args.dtype,
        "device_map": args.device_map, "max_memory": args.max_memory, "offload_folder": args.offload_folder,
        "n_boot": args.n_boot, "seed": args.seed, "shard": args.shard,
    }
    if args.config is None:
        missing = [f"--{k}" for k in ("model", "bench", "out") if overrides[k] is None]
        if missing:
            raise BenchError(f"patching needs --config or {', '.join(missing)}")
        given = {k: v for k, v in overrides.items() if v is not None}
        config = load_config(PatchingConfig, given, where="command line")
    else:
        config = load_config(PatchingConfig, args.config, overrides)
    if config.limit_pairs is not None and config.limit_pairs <= 0:
        raise BenchError(f"limit_pairs must be a positive integer, got {config.limit_pairs}")
    return config


def _run(args: argparse.Namespace) -> int:
    from experiments.distributed import data_parallel

    config = config_from_args(args)
    # torchrun / accelerate launch: this rank's pairs, then rank 0 merges
    if data_parallel(config, lambda c: run_patching(c, progress=not args.quiet), unit="(pair, direction) rows"):
        return 0
    summary = run_patching(config, progress=not args.quiet)
    print(f"patched {summary['n_rows']} (pair, direction) rows; wrote {config.out}/patching.md and patching.png")
    return 0
