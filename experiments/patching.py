"""`evprobe patching`: where is the difference between the two members of an image pair carried?

An image pair shares every prompt byte and its two sheets have the same size, so both members
tokenize to the same positions. For each pair (both directions: A into B and B into A) we patch
the source member's decoder-layer output into the target's forward pass, one layer and one
position set at a time (the last token, the question text, the image tokens; for the model
organism, which reads facts, "text" is every fact token but the sheet values, and the last token
is its answer prefix `ANSWER:`), and read the five option letters' next-token log-probabilities
(`hooks.patching.patch_pair`; after the model's answer prefix, Handle.answer_prefix).

The measure is the log-odds between the two members' reference options: with a_s the source's
reference letter and a_t the target's (they differ: the construction switches the action within
every image pair), LD = log p(a_s) - log p(a_t). A patch that carries the source's evidence moves
the target's LD toward the source's. We report per layer x position the mean change
LD_patched - LD_target, the share of that change in the full gap (LD_source - LD_target, on
pairs where the gap is at least 0.1 nats), and how often the decoded option (the top letter)
becomes the source's, each with family-bootstrap intervals and n.

Sites (`--site`): the residual stream after each layer (`resid_post`, the default), what a
sublayer adds (`attn_out`, `mlp_out`), the layer's input (`resid_pre`), or each attention head
(`attn_head`: head h of layer l patched alone, its slice of the attention's output projection
input; hooks.sites), which gives a layer x head heatmap per position set
(`patching.png`), the same measures and intervals per cell. On the model organism layer 0's
attention weights are zero by construction, so every head there is exactly inert.

Resumable: one line per (pair, direction) in results.jsonl (whole lines, fsync per line); a rerun
skips finished pairs. The job runs on the one job runner (`core.jobs`): units are the (source,
target) pair jobs, one row each, patched one at a time.

Sharding: `--shard K/N` patches only the pairs of shard K's families (core.shard); each shard
folder is a complete patching job of its own, and `evprobe merge OUT SHARD_DIR...` writes the
results.jsonl (in a single run's order), meta.json and the summary files of the whole job
(`seconds`: the longest shard's).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from evprobe.bench.family import LETTERS as OPTION_LETTERS
from evprobe.bench.items import Item
from evprobe.bench.manifest import META_FILE, load_item_images, read_items
from evprobe.bench.protocols import build_prompt, check_regime, get_protocol, prompt_template_sha256
from evprobe.core.decimals import fixed
from evprobe.core.estimate_text import estimate_text
from evprobe.core.bootstrap import Estimate, FamilyBootstrap
from evprobe.core.capture_schema import row_problem
from evprobe.core.errors import InputError
from evprobe.core.files import atomic_write_bytes, atomic_write_json
from evprobe.core.jobs import Job, JsonlRows, Row, RowKey, Unit, read_meta, run_job
from evprobe.experiments.capture import check_layer_spec, images_sha256, parse_layers, question_marker
from evprobe.core.flags import HELP, setting
from evprobe.experiments.config import (add_experiment_parser, check_loading_keys, check_positive, experiment_config,
                                        resolve_model_flag)

if TYPE_CHECKING:
    from evprobe.hooks.handle import Handle

RESULTS_FILE = "results.jsonl"
# image_first / image_rest split the image span: its first token, and the others (for the organism's
# one-sheet selections, the reading's block and its offset: a partial patch of one sheet's span).
POSITION_SETS = ("last", "text", "image", "image_first", "image_rest")
# What `--site` patches at each layer (hooks.sites.vocabulary): a layer site, or every head.
SITES = ("resid_post", "resid_pre", "attn_out", "mlp_out", "attn_head")
DEFAULT_POSITION_SETS = ("last", "text", "image")
LETTERS = tuple(OPTION_LETTERS)  # the benchmark's option letters (bench.family.LETTERS)
MIN_GAP = 0.1  # nats: pairs whose members the model barely separates give no share
# results.jsonl's schema: every field required, nothing else (core.capture_schema kinds)
ROW_TYPES = {"key": "id", "source": "id", "target": "id", "family_id": "id", "system": "str",
             "target_resolved": "bool?", "ld_source": "number", "ld_target": "number", "ld_patched": "numbers",
             "top_source": "count", "top_target": "count", "top_patched": "ints"}


@dataclass(frozen=True)
class PatchingConfig:
    """`evprobe patching` (configs/experiments/patching*.yaml); every field is also a flag."""

    model: str = setting(help="tiny:<arch>, a registered name (organism), a model config (name or YAML), "
                         "a hub id or a local folder")
    bench: str = setting(help="benchmark folder (evprobe generate)")
    out: str = setting(help="output folder (results.jsonl, patching.json/.md/.png)")
    layers: str = setting("all", "all, or comma-separated decoder layer indices, e.g. 0,2,4")
    positions: tuple[str, ...] = setting(DEFAULT_POSITION_SETS, "comma-separated position sets: last, text, "
                                         "image, image_first (the first image token), image_rest (the others)")
    regime: str = setting("standard", HELP["regime"])
    protocol: str = setting("direct", HELP["protocol"])
    limit_pairs: int | None = setting(None, "only the first N image pairs")
    dtype: str = setting("auto", HELP["dtype"])
    device_map: str | None = setting(None, HELP["device_map"])
    max_memory: str | None = setting(None, HELP["max_memory"])
    offload_folder: str | None = setting(None, HELP["offload_folder"])
    attn_implementation: str | None = setting(None, HELP["attn_implementation"])
    answer_prefix: str | None = setting(None, HELP["answer_prefix"])
    prompt_format: Literal["chat", "raw"] | None = setting(None, HELP["prompt_format"])
    site: str = setting("resid_post", "what is patched at each layer: resid_post (its output), resid_pre (its "
                        "input), attn_out, mlp_out, or attn_head (each attention head alone: a layer x head heatmap)")
    n_boot: int = setting(2000, "family bootstrap resamples")
    seed: int = setting(20260905, "bootstrap seed")
    shard: str | None = setting(None, HELP["shard"])

    def __post_init__(self) -> None:
        # Every setting checked here, when the config is made: before a model file is hashed or
        # loaded and before --out is touched (the model's layer count bounds `layers` later).
        from evprobe.core.shard import Shard

        if self.shard is not None:
            Shard.parse(self.shard)  # a bad K/N fails here, naming the fix
        bad = [p for p in self.positions if p not in POSITION_SETS]
        if bad or not self.positions:
            raise InputError(f"unknown position set {bad[0] if bad else ''!r}; choose from {', '.join(POSITION_SETS)}")
        if len(set(self.positions)) != len(self.positions):
            raise InputError(f"key 'positions' repeats a position set ({', '.join(self.positions)}); give each once")
        if self.site not in SITES:
            raise InputError(f"unknown site {self.site!r}; choose from {', '.join(SITES)}")
        check_layer_spec(self.layers)
        check_regime(self.regime)
        get_protocol(self.protocol)
        check_positive(self, "n_boot")
        check_positive(self, "limit_pairs", optional=True)
        check_loading_keys(self)


def _store(folder: Path) -> JsonlRows:
    return JsonlRows(folder / RESULTS_FILE, lambda row: (row["key"], ""), what="patching row",
                     check=lambda row: row_problem(row, ROW_TYPES, ROW_TYPES, "patching row"))


def read_results(folder: Path) -> list[dict[str, Any]]:
    """A patching folder's finished rows in file order, each checked against the schema (a torn last
    line, a killed run's, is left out with a warning; the file is not changed)."""
    return list(_store(folder).done().values())


def select_pairs(items: Sequence[Item], limit_pairs: int | None) -> list[tuple[Item, Item]]:
    """The job's image pairs: manifest order, the first `limit_pairs`."""
    pairs = image_pairs(items)
    return pairs if limit_pairs is None else pairs[:limit_pairs]


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
            raise InputError(f"image pair {members[0].image_pair_id} has {len(members)} members, not 2")
        a, b = sorted(members, key=lambda it: it.history)
        pairs.append((a, b))
    return pairs


class PatchingJob(Job):
    """`evprobe patching` as a job: one row per (source, target) pair job, patched one at a time."""

    kind = "patching"
    unit_name = "image pairs"

    def __init__(self, config: PatchingConfig) -> None:
        super().__init__(config.out, config.shard)
        self.config, self.bench = config, Path(config.bench)  # its settings are checked (PatchingConfig)
        self.items = read_items(self.bench)
        self.pairs = select_pairs(self.items, config.limit_pairs)
        if not self.pairs:
            raise InputError(f"{self.bench} has no image pairs of base selections to patch")
        bench_meta = read_meta(self.bench / META_FILE)
        if bench_meta is None:
            raise InputError(f"{self.bench / META_FILE} not found; generate the benchmark with "
                             f"`evprobe generate --out {self.bench}`")
        self.items_sha256 = bench_meta.get("items_sha256")
        self.handle: Handle | None = None

    def units(self) -> list[Unit]:
        return [Unit(f"{s.item_id}>{t.item_id}", s.family_id, 0, (s, t)) for s, t in jobs_of(self.pairs)]

    def all_families(self) -> list[str]:
        return [it.family_id for it in self.items]  # the benchmark's families fix the shards

    @property
    def batch_size(self) -> int:
        return 1

    def layers(self) -> list[int] | None:
        """The layer indices, once the layer count is known (the loaded model, or its config alone)."""
        from evprobe.hooks.loading import config_n_layers

        known = self.handle.n_layers if self.handle is not None else config_n_layers(self.config.model)
        return parse_layers(self.config.layers, known) if known is not None else None

    def pinned(self) -> dict[str, Any]:
        c = self.config
        out: dict[str, Any] = {
            "model": c.model, "positions": list(c.positions), "regime": c.regime, "protocol": c.protocol,
            "items_sha256": self.items_sha256, "dtype": c.dtype, "attn_implementation": c.attn_implementation,
            "limit_pairs": c.limit_pairs, **self.input_pins,
        }
        layers = self.layers()  # a layer out of range fails here, before the model loads
        if layers is not None:
            out["layers"] = layers
        if c.site != "resid_post":  # pinned only when asked for: a resid_post folder's meta is as it was
            out["site"] = c.site
        if self.handle is not None:  # after open(): what only the loaded model tells
            from evprobe.hooks.fingerprint import loaded_fingerprint

            out.update(loaded_fingerprint(self.handle))
        return out

    @cached_property
    def input_pins(self) -> dict[str, Any]:
        """Hashed once (pinned() is asked before and after open()): the prompt template text
        (bench.protocols.prompt_template_sha256), the images of the selected pairs (limit_pairs is
        pinned) and the model's files (hooks.fingerprint)."""
        from evprobe.hooks.fingerprint import model_fingerprint

        c = self.config
        return {"prompt_template_sha256": prompt_template_sha256(c.protocol, c.regime),
                "images_sha256": images_sha256(self.bench, [it for pair in self.pairs for it in pair])[0],
                **model_fingerprint(c.model)}

    def meta(self) -> dict[str, Any]:
        config = asdict(self.config)
        if config["site"] == "resid_post":  # written only when asked for: a resid_post folder's meta is as it was
            del config["site"]
        return {"config": config, **self.pinned()}

    def store_at(self, folder: Path) -> JsonlRows:
        return _store(folder)

    def open(self) -> None:
        from evprobe import hooks
        from evprobe.hooks.devices import placement_of

        c = self.config
        self.handle = hooks.load(c.model, dtype=c.dtype, **placement_of(c), attn_implementation=c.attn_implementation,
                                 answer_prefix=c.answer_prefix, prompt_format=c.prompt_format)
        kind = c.site
        try:
            self.handle.sites.all(kind, [0])  # a site this model lacks: one line, before any pair runs
        except ValueError as err:
            raise InputError(f"--site {kind}: {err}") from None
        self.check_readable()

    def check_readable(self) -> None:
        """Every target row of this job (shard) holds a token of each position set, checked in
        open(): after the model loads, before meta.json is written (core.jobs writes it after open),
        so a set the model cannot read leaves no folder pinned to it. Tokenizing only: no forward. A
        folder whose meta.json exists was checked when it was written: a resumed job checks one row."""
        assert self.handle is not None
        c = self.config
        targets = list({u.value[1].item_id: u.value[1] for u in self.my_units()}.values())
        for target in targets[:1] if self.meta_path().is_file() else targets:
            prompt = build_prompt(target, c.protocol, c.regime)
            position_sets(self.handle, target, prompt, load_item_images(self.bench, target.images), c.positions)

    def compute(self, batch: list[Unit], condition: str) -> list[Row]:
        assert self.handle is not None
        source, target = batch[0].value
        return [_patch_one(self.handle, self.bench, source, target, self.layers() or [], self.config)]

    def finish(self, rows: dict[RowKey, Row], summary: dict[str, Any]) -> dict[str, Any]:
        session = summary.get("last_session") or {}
        meta = read_meta(self.meta_path()) or {}
        if meta.get("last_session") != session:  # a merge takes its seconds from the shards' metas
            atomic_write_json(self.meta_path(), {**meta, "last_session": session})
        ordered = [rows[(u.key, "")] for u in self.units() if (u.key, "") in rows]  # the file's order
        return write_summary(self.out, ordered, summary["layers"], self.config, len(ordered) // 2,
                             session.get("seconds") or 0.0, n_heads=self._n_heads(ordered))

    def _n_heads(self, rows: list[Row]) -> int | None:
        """The head count of an attn_head job (from its rows: a merge has no model loaded)."""
        if self.config.site != "attn_head" or not rows:
            return None
        return len(rows[0]["ld_patched"][0]) // len(self.config.positions)

    @classmethod
    def from_meta(cls, meta: dict[str, Any], out: Path) -> PatchingJob:
        c = meta["config"]
        return cls(PatchingConfig(**{**c, "positions": tuple(c["positions"]), "out": str(out), "shard": None}))


def run_patching(config: PatchingConfig, *, progress: bool = True) -> dict[str, Any]:
    """Patch every selected image pair both ways; write results.jsonl, patching.json/.md/.png."""
    return run_job(PatchingJob(config), progress=progress)


def head_columns(n_heads: int, positions: Sequence[str]) -> list[str]:
    """Column labels of an attn_head job's cells, head-major: `H0 last`, `H0 text`, `H1 last`, ..."""
    return [f"H{h} {p}" for h in range(n_heads) for p in positions]


def write_summary(out: Path, rows: list[dict[str, Any]], layers: list[int], config: PatchingConfig, n_pairs: int,
                  seconds: float, *, n_heads: int | None = None) -> dict[str, Any]:
    """Aggregate `rows` and write patching.json, patching.md and patching.png. An attn_head job's
    columns are (head, position set) pairs (`head_columns`), its figure a layer x head heatmap per set."""
    heads = config.site == "attn_head"
    columns = head_columns(n_heads or 0, config.positions) if heads else list(config.positions)
    summary = aggregate(rows, layers, columns, n_boot=config.n_boot, seed=config.seed)
    summary.update(model=config.model, n_pairs=n_pairs, seconds=round(seconds, 3))
    if config.site != "resid_post":
        summary.update(site=config.site)
    if heads:
        summary.update(heads=list(range(n_heads or 0)), position_sets=list(config.positions))
    atomic_write_json(out / "patching.json", summary)
    atomic_write_bytes(out / "patching.md", patching_markdown(summary).encode())
    (head_heatmap_png if heads else heatmap_png)(summary, out / "patching.png")
    return summary


def position_sets(handle: Handle, target: Item, prompt: str, images: list[Any],
                  names: Sequence[str]) -> dict[str, list[int]]:
    """The token indices of each named position set in `target`'s row (its prompt and images);
    a set with no token in the row is one InputError line naming the item and the fix."""
    from evprobe.hooks.inputs import build_inputs
    from evprobe.hooks.spans import token_spans

    enc = build_inputs(handle, [prompt], [images])
    # A model that reads facts instead of the prompt's words (the organism) has no question text:
    # its "text" set is every fact token except the sheet values (hooks.spans).
    marker = question_marker(target.prompt) if handle.keeps_prompt_text else None
    try:
        spans = token_spans(handle, enc["input_ids"][0], enc["attention_mask"][0], prompt, marker,
                            n_images=len(images))
    except ValueError as err:
        raise InputError(f"{target.item_id}: {err}; {handle.model_id} cannot locate its position sets") from None
    sets = {"last": [spans.last], "text": list(spans.text), "image": list(spans.image),
            "image_first": list(spans.image[:1]), "image_rest": list(spans.image[1:])}
    chosen = {name: sets[name] for name in names}
    empty = [name for name, idx in chosen.items() if not idx]
    if empty:
        raise InputError(f"{target.item_id}: position set {empty[0]} has no token in this row (image tokens: "
                         f"{len(spans.image)}); drop it from --positions")
    return chosen


def _patch_one(handle: Handle, bench: Path, source: Item, target: Item, layers: list[int],
               config: PatchingConfig) -> Row:
    from evprobe.hooks import patching

    def inputs(item: Item):
        return build_prompt(item, config.protocol, config.regime), load_item_images(bench, item.images)

    src, tgt = inputs(source), inputs(target)
    chosen = position_sets(handle, target, *tgt, config.positions)
    if config.site == "attn_head":
        # (layers x heads, sets, letters) -> (layers, heads x sets, letters): columns head-major (head_columns)
        found = patching.patch_sites(handle, src, tgt, sites=handle.sites.all("attn_head", layers), position_sets=chosen,
                                     candidates=list(LETTERS))
        result = replace(found, patched=found.patched.reshape(len(layers), -1, len(LETTERS)))
    else:
        result = patching.patch_pair(handle, src, tgt, layers=layers, position_sets=chosen, candidates=list(LETTERS),
                                     kind=config.site)
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
    change_lo, change_hi = np.full((L, P), np.inf), np.full((L, P), -np.inf)  # the units' range per cell
    n_rows = np.zeros(F)
    share_num, share_den = np.zeros((F, L, P)), np.zeros(F)
    share_bounded = np.ones((L, P), bool)  # every pair's share of the gap inside [0, 1] in this cell
    flip_num, flip_den = np.zeros((F, L, P)), np.zeros(F)
    for r in rows:
        f = index[r["family_id"]]
        patched = np.asarray(r["ld_patched"])  # (L, P)
        delta = patched - r["ld_target"]
        change[f] += delta
        change_lo, change_hi = np.minimum(change_lo, delta), np.maximum(change_hi, delta)
        n_rows[f] += 1
        gap = r["ld_source"] - r["ld_target"]
        if abs(gap) >= MIN_GAP:
            share = delta / gap  # (L, P)
            share_num[f] += share
            share_den[f] += 1
            share_bounded &= (share >= 0.0) & (share <= 1.0)
        if r["top_source"] != r["top_target"]:
            flip_num[f] += np.asarray(r["top_patched"]) == r["top_source"]
            flip_den[f] += 1

    def grid(num: np.ndarray, den: np.ndarray, binary: bool | np.ndarray = False) -> list[list[dict]]:
        flags = np.broadcast_to(np.asarray(binary, dtype=bool), (L, P)).reshape(-1)
        flat = boot.rates(num.reshape(F, -1), np.repeat(den[:, None], L * P, axis=1), binary=flags)
        return [[flat[i * P + j].to_json() for j in range(P)] for i in range(L)]

    return {
        "layers": layers,
        "positions": positions,
        "n_rows": int(n_rows.sum()),
        "n_families": F,
        # a cell where every pair moved by exactly the same amount (a position no later computation
        # reads: exactly 0) has nothing to resample: printed as identical, not as [0, 0] (core.bootstrap)
        "mean_change": [[Estimate.identical_units(float(change_lo[i, j]), int(n_rows.sum())).to_json()
                         if rows and change_lo[i, j] == change_hi[i, j] else e for j, e in enumerate(row)]
                        for i, row in enumerate(grid(change, n_rows))],
        # a cell whose every pair recovers between none and all of the gap is a mean of [0, 1] units:
        # its interval is also the cluster Clopper-Pearson one (core.proportion; conservative for
        # bounded units), so a deterministic model's 1.00 is not printed as [1.00, 1.00]
        "share_of_gap": grid(share_num, share_den, binary=share_bounded),
        "decoded_flip": grid(flip_num, flip_den, binary=True),  # a share of rows: never a zero-width interval
        "mean_gap": float(np.mean([r["ld_source"] - r["ld_target"] for r in rows])) if rows else None,
        "interval": (f"family bootstrap, {n_boot} resamples, seed {seed}, pointwise 95% percentile; decoded flips, "
                     "and shares of the gap where every pair's share lies in [0, 1], hulled with the cluster "
                     "Clopper-Pearson interval (never zero width); a mean change equal in every pair is printed as "
                     "identical, with no interval"),
    }


def patching_markdown(summary: dict[str, Any]) -> str:
    def cell(e: dict) -> str:
        return estimate_text(e, 3, units="pairs")  # identical units: no spread, no interval (core.bootstrap)

    parts = [
        f"# Pair patching: {summary.get('model', '')}",
        "",
        f"{summary['n_rows']} patched (pair, direction) rows from {summary['n_families']} families; "
        f"intervals: {summary['interval']}. LD = log p(source's reference letter) - log p(target's); "
        f"mean LD gap source - target: {fixed(summary['mean_gap'], 3)} nats.",
    ]
    if summary.get("site") == "attn_head":
        parts += ["", "Site: each attention head alone (attn_head: the head's slice of the attention output "
                  "projection's input); columns are head and position set."]
    elif summary.get("site"):
        parts += ["", f"Site: {summary['site']} of each layer."]
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


def _panel(fig: Any, ax: Any, cells: list[list[dict]], cmap: str, scale: tuple[float, float], columns: list,
           layers: list[int], xlabel: str, title: str, *, fontsize: tuple[int, int]) -> None:
    """One heatmap panel: layers up, `columns` across, each cell's value and 95% interval written
    on it (white on the darkest cells). fontsize: (cells, title)."""
    lo, hi = scale
    grid = np.array([[np.nan if e["value"] is None else e["value"] for e in row] for row in cells])
    im = ax.imshow(grid, cmap=cmap, vmin=lo, vmax=hi, aspect="auto", origin="lower")
    for i, row in enumerate(cells):
        for j, e in enumerate(row):
            if e["value"] is None:
                continue
            ci = e.get("ci") or [None, None]
            text = fixed(e["value"], 2) + ("" if ci[0] is None else f"\n[{fixed(ci[0], 2)}, {fixed(ci[1], 2)}]")
            ax.text(j, i, text, ha="center", va="center", fontsize=fontsize[0],
                    color="white" if abs(e["value"]) > 0.6 * max(abs(lo), abs(hi)) else "black")
    ax.set_xticks(range(len(columns)), columns)
    ax.set_yticks(range(len(layers)), layers)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("decoder layer")
    ax.set_title(title, fontsize=fontsize[1])
    fig.colorbar(im, ax=ax, fraction=0.05)


def heatmap_png(summary: dict[str, Any], path: Path) -> None:
    """Two panels, layer x patched positions: the share of the source-target gap the patch recovers
    and the interchange-intervention accuracy (decoded flips), each cell with its value and 95%
    interval, the same measures as patching.md."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers, positions = summary["layers"], summary["positions"]
    panels = (("share_of_gap", f"Share of the gap recovered (|gap| >= {MIN_GAP} nats)", "RdBu_r", (-1.0, 1.0)),
              ("decoded_flip", "Top letter becomes the source's (IIA)", "Greens", (0.0, 1.0)))
    fig, axes = plt.subplots(1, 2, figsize=(2.0 + 2.6 * len(positions), 1.4 + 0.55 * len(layers)), squeeze=False)
    for ax, (key, title, cmap, (lo, hi)) in zip(axes[0], panels):
        cells = summary[key]  # (layers, positions) of estimates
        n = cells[0][0].get("n") if cells and cells[0] else None
        _panel(fig, ax, cells, cmap, (lo, hi), positions, layers, "patched positions", f"{title}\n(n={n})",
               fontsize=(7, 9))
    fig.suptitle(f"Pair patching, {summary['n_rows']} patched pair directions; 95% family-bootstrap intervals",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def head_heatmap_png(summary: dict[str, Any], path: Path) -> None:
    """An attn_head job's figure: per position set, two layer x head panels (the share of the gap
    recovered, and decoded flips), each cell with its value and 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers, heads, sets = summary["layers"], summary["heads"], summary["position_sets"]
    panels = (("share_of_gap", "share of the gap recovered", "RdBu_r", (-1.0, 1.0)),
              ("decoded_flip", "top letter becomes the source's (IIA)", "Greens", (0.0, 1.0)))
    fig, axes = plt.subplots(len(sets), 2, figsize=(2.6 + 1.1 * len(heads) * 2, 1.2 + 0.6 * len(layers) * len(sets)),
                             squeeze=False)
    for si, name in enumerate(sets):
        for ax, (key, title, cmap, (lo, hi)) in zip(axes[si], panels):
            cells = [[summary[key][i][h * len(sets) + si] for h in range(len(heads))] for i in range(len(layers))]
            n = cells[0][0].get("n") if cells and cells[0] else None
            _panel(fig, ax, cells, cmap, (lo, hi), [f"H{h}" for h in heads], layers, "attention head",
                   f"{name}: {title} (n={n})", fontsize=(6, 8))
    fig.suptitle(f"Head patching, {summary['n_rows']} patched pair directions; 95% family-bootstrap intervals",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def add_patching_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    return add_experiment_parser(
        sub, "patching", PatchingConfig, _run, example="patching_tiny", config_required=False, model_config=False,
        help="patch image-pair members into each other layer by layer: a layer x position heatmap",
        description="Activation patching between the members of every image pair of the base "
        "selections; writes results.jsonl, patching.json, patching.md and patching.png. Settings "
        "come from --config (a YAML of PatchingConfig), flags override it; without --config, "
        "--model, --bench and --out are required.",
    )


def config_from_args(args: argparse.Namespace) -> PatchingConfig:
    """--config filled into PatchingConfig, with every given flag applied on top."""
    return resolve_model_flag(experiment_config(PatchingConfig, args), args)  # checked: PatchingConfig


def _run(args: argparse.Namespace) -> int:
    from evprobe.experiments.distributed import data_parallel

    config = config_from_args(args)
    # torchrun / accelerate launch: this rank's pairs, then rank 0 merges
    if data_parallel(config, lambda c: run_patching(c, progress=not args.quiet), unit="(pair, direction) rows", job=PatchingJob):
        return 0
    summary = run_patching(config, progress=not args.quiet)
    print(f"patched {summary['n_rows']} (pair, direction) rows; wrote {config.out}/patching.md and patching.png")
    return 0
