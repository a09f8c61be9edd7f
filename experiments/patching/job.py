"""`evprobe patching`: where is the difference between the two members of an image pair carried?

An image pair shares every prompt byte and its two sheets have the same size, so both members
tokenize to the same positions. For each pair (both directions: A into B and B into A) we patch
the source member's decoder-layer output into the target's forward pass, one layer and one
position set at a time (the last token, the question text, the image tokens; for the model
organism, which reads facts, "text" is every fact token but the sheet values, and the last token
is its answer prefix `ANSWER:`), and read the five option letters' next-token log-probabilities
(analysis.patching.patch_row, the own-data row; after the model's answer prefix,
Handle.answer_prefix).

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
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any


from evprobe.bench.family import LETTERS as OPTION_LETTERS
from evprobe.bench.items import Item
from evprobe.bench.manifest import META_FILE, load_item_images, read_items
from evprobe.bench.protocols import build_prompt, check_regime, get_protocol
from evprobe.core.decimals import fixed
from evprobe.core.estimate_text import estimate_text
from evprobe.core.capture_schema import row_problem
from evprobe.core.errors import InputError
from evprobe.core.files import atomic_write_bytes, atomic_write_json
from evprobe.core.jobs import Job, JsonlRows, RowKey, Unit, read_meta, run_job
from evprobe.core.job_summary import JobSummary
from evprobe.experiments.capture.config import check_layer_spec, parse_layers, question_marker
from evprobe.experiments.pins import input_pins, loaded_pins
from evprobe.core.flags import HELP, setting
from evprobe.analysis.patching import MIN_GAP, aggregate, patch_row
from evprobe.analysis.patching_figures import head_heatmap_png, heatmap_png
from evprobe.bench.model_config import ModelConfig, as_model_config, load_model, model_from_record
from evprobe.experiments.config import add_experiment_parser, check_positive, experiment_config
from evprobe.core.json_types import JsonObject

if TYPE_CHECKING:
    from evprobe.hooks.handle import Handle

RESULTS_FILE = "results.jsonl"
# last, text, image: the shared position vocabulary's (hooks.positions; "text" is the question's
# tokens, the job's text marker). image_first / image_rest split the image span: its first token,
# and the others (for the organism's one-sheet selections, the reading's block and its offset: a
# partial patch of one sheet's span).
POSITION_SETS = ("last", "text", "image", "image_first", "image_rest")
# What `--site` patches at each layer (hooks.sites.vocabulary): a layer site, or every head.
SITES = ("resid_post", "resid_pre", "attn_out", "mlp_out", "attn_head")
DEFAULT_POSITION_SETS = ("last", "text", "image")
LETTERS = tuple(OPTION_LETTERS)  # the benchmark's option letters (bench.family.LETTERS)
# results.jsonl's schema: every field required, nothing else (core.capture_schema kinds)
ROW_TYPES = {"key": "id", "source": "id", "target": "id", "family_id": "id", "system": "str",
             "target_resolved": "bool?", "ld_source": "number", "ld_target": "number", "ld_patched": "numbers",
             "top_source": "count", "top_target": "count", "top_patched": "ints"}


@dataclass(frozen=True)
class PatchingConfig:
    """`evprobe patching` (configs/experiments/patching*.yaml); every field is also a flag."""

    model: ModelConfig = setting(help="tiny:<arch>, a registered name (organism), a model config (a name in "
                                      "configs/models or a YAML), a hub id or a local folder; the model flags "
                                      "override its keys")
    bench: str = setting(help="benchmark folder (evprobe generate)")
    out: str = setting(help="output folder (results.jsonl, patching.json/.md/.png)")
    layers: str = setting("all", "all, or comma-separated decoder layer indices, e.g. 0,2,4")
    positions: tuple[str, ...] = setting(DEFAULT_POSITION_SETS, "comma-separated position sets: last, text, "
                                         "image, image_first (the first image token), image_rest (the others)")
    regime: str = setting("standard", HELP["regime"])
    protocol: str = setting("direct", HELP["protocol"])
    limit_pairs: int | None = setting(None, "only the first N image pairs")
    site: str = setting("resid_post", "what is patched at each layer: resid_post (its output), resid_pre (its "
                        "input), attn_out, mlp_out, or attn_head (each attention head alone: a layer x head heatmap)")
    n_boot: int = setting(2000, "family bootstrap resamples")
    seed: int = setting(20260905, "bootstrap seed")
    shard: str | None = setting(None, HELP["shard"])

    def __post_init__(self) -> None:
        # Every setting checked here, when the config is made: before a model file is hashed or
        # loaded and before --out is touched (the model's layer count bounds `layers` later).
        from evprobe.core.shard import Shard

        object.__setattr__(self, "model", as_model_config(self.model))  # a bare model string: its defaults
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


def _store(folder: Path) -> JsonlRows:
    return JsonlRows(folder / RESULTS_FILE, lambda row: (row["key"], ""), what="patching row",
                     check=lambda row: row_problem(row, ROW_TYPES, ROW_TYPES, "patching row"))


def read_results(folder: Path) -> list[JsonObject]:
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

        m = self.config.model
        known = self.handle.n_layers if self.handle is not None else config_n_layers(
            m.source, trust_remote_code=m.trust_remote_code)
        return parse_layers(self.config.layers, known) if known is not None else None

    def pinned(self) -> JsonObject:
        c = self.config
        out: JsonObject = {
            "model": c.model.source, "positions": list(c.positions), "regime": c.regime, "protocol": c.protocol,
            "items_sha256": self.items_sha256, "dtype": c.model.dtype, "attn_implementation": c.model.attn_implementation,
            "limit_pairs": c.limit_pairs, **self.input_pins,
        }
        layers = self.layers()  # a layer out of range fails here, before the model loads
        if layers is not None:
            out["layers"] = layers
        if c.site != "resid_post":  # pinned only when asked for: a resid_post folder's meta is as it was
            out["site"] = c.site
        if self.handle is not None:  # after open(): what only the loaded model tells
            out.update(loaded_pins(self.handle))
        return out

    @cached_property
    def input_pins(self) -> JsonObject:
        """Hashed once (pinned() is asked before and after open()): the prompt template text, the
        images of the selected pairs (limit_pairs is pinned) and the model's files (experiments.pins)."""
        c = self.config
        return input_pins(c.model.source, templates=(c.protocol, c.regime),
                          images=(self.bench, [it for pair in self.pairs for it in pair]))

    def meta(self) -> JsonObject:
        config = asdict(self.config)
        if config["site"] == "resid_post":  # written only when asked for: a resid_post folder's meta is as it was
            del config["site"]
        return {"config": config, **self.pinned()}

    def store_at(self, folder: Path) -> JsonlRows:
        return _store(folder)

    def open(self) -> None:
        c = self.config
        self.handle = load_model(c.model)
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

    def compute(self, batch: list[Unit], condition: str) -> list[JsonObject]:
        assert self.handle is not None
        source, target = batch[0].value
        return [_patch_one(self.handle, self.bench, source, target, self.layers() or [], self.config)]

    def finish(self, rows: dict[RowKey, JsonObject], summary: JobSummary[Any]) -> PatchingReport:
        session = summary.last_session.to_json() if summary.last_session is not None else {}
        meta = read_meta(self.meta_path()) or {}
        if meta.get("last_session") != session:  # a merge takes its seconds from the shards' metas
            atomic_write_json(self.meta_path(), {**meta, "last_session": session})
        ordered = [rows[(u.key, "")] for u in self.units() if (u.key, "") in rows]  # the file's order
        table = write_summary(self.out, ordered, summary.meta["layers"], self.config, len(ordered) // 2,
                              session.get("seconds") or 0.0, n_heads=self._n_heads(ordered))
        return PatchingReport(n_pairs=len(ordered) // 2, files=PATCHING_FILES, summary=table)

    def _n_heads(self, rows: list[JsonObject]) -> int | None:
        """The head count of an attn_head job (from its rows: a merge has no model loaded)."""
        if self.config.site != "attn_head" or not rows:
            return None
        return len(rows[0]["ld_patched"][0]) // len(self.config.positions)

    @classmethod
    def from_meta(cls, meta: JsonObject, out: Path) -> PatchingJob:
        c = model_from_record(meta["config"])
        return cls(PatchingConfig(**{**c, "positions": tuple(c["positions"]), "out": str(out), "shard": None}))


@dataclass(frozen=True)
class PatchingReport:
    """What a finished patching job wrote: its pairs, its files, and patching.json's content
    (`summary`: per layer x column the patched effect with its interval; write_summary)."""

    n_pairs: int
    files: tuple[str, ...]
    summary: JsonObject


PATCHING_FILES = ("results.jsonl", "patching.json", "patching.md", "patching.png")


def run_patching(config: PatchingConfig, *, progress: bool = True) -> JobSummary[PatchingReport]:
    """Patch every selected image pair both ways; write results.jsonl, patching.json/.md/.png."""
    return run_job(PatchingJob(config), progress=progress)


def head_columns(n_heads: int, positions: Sequence[str]) -> list[str]:
    """Column labels of an attn_head job's cells, head-major: `H0 last`, `H0 text`, `H1 last`, ..."""
    return [f"H{h} {p}" for h in range(n_heads) for p in positions]


def write_summary(out: Path, rows: list[JsonObject], layers: list[int], config: PatchingConfig, n_pairs: int,
                  seconds: float, *, n_heads: int | None = None) -> JsonObject:
    """Aggregate `rows` and write patching.json, patching.md and patching.png. An attn_head job's
    columns are (head, position set) pairs (`head_columns`), its figure a layer x head heatmap per set."""
    heads = config.site == "attn_head"
    columns = head_columns(n_heads or 0, config.positions) if heads else list(config.positions)
    summary = aggregate(rows, layers, columns, n_boot=config.n_boot, seed=config.seed).to_json()
    summary.update(model=config.model.source, n_pairs=n_pairs, seconds=round(seconds, 3))
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
    from evprobe.hooks.positions import span_indices
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
    image = span_indices(spans, "image")  # the shared vocabulary's (hooks.positions), as capture and steering
    sets = {**{name: list(span_indices(spans, name)) for name in ("last", "text", "image")},
            "image_first": list(image[:1]), "image_rest": list(image[1:])}
    chosen = {name: sets[name] for name in names}
    empty = [name for name, idx in chosen.items() if not idx]
    if empty:
        raise InputError(f"{target.item_id}: position set {empty[0]} has no token in this row (image tokens: "
                         f"{len(spans.image)}); drop it from --positions")
    return chosen


def _patch_one(handle: Handle, bench: Path, source: Item, target: Item, layers: list[int],
               config: PatchingConfig) -> JsonObject:
    """One pair direction through the own-data row (analysis.patching.patch_row): the
    reference options are the answers (the construction switches the action within every image pair)."""
    from evprobe.hooks.sites.vocabulary import Site

    def inputs(item: Item):
        return build_prompt(item, config.protocol, config.regime), load_item_images(bench, item.images)

    src, tgt = inputs(source), inputs(target)
    chosen = position_sets(handle, target, *tgt, config.positions)
    if config.site == "attn_head":  # (layers x heads, sets) laid out (layers, heads x sets): head_columns
        sites = handle.sites.all("attn_head", layers)
        shape = (len(layers), handle.sites.n_heads * len(chosen))
    else:
        sites, shape = [Site(config.site, int(layer)) for layer in layers], None
    answers = (LETTERS.index(source.reference_option), LETTERS.index(target.reference_option))
    row = patch_row(handle, src, tgt, answers=answers, sites=sites, position_sets=chosen, candidates=list(LETTERS),
                    shape=shape)
    return {
        "key": f"{source.item_id}>{target.item_id}",
        "source": source.item_id,
        "target": target.item_id,
        "family_id": target.family_id,
        "system": target.system,
        "target_resolved": target.resolved,
        **row,
    }


def patching_markdown(summary: JsonObject) -> str:
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


def add_patching_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    return add_experiment_parser(
        sub, "patching", PatchingConfig, _run, example="patching_tiny", config_required=False,
        help="patch image-pair members into each other layer by layer: a layer x position heatmap",
        description="Activation patching between the members of every image pair of the base "
        "selections; writes results.jsonl, patching.json, patching.md and patching.png. Settings "
        "come from --config (a YAML of PatchingConfig), flags override it; without --config, "
        "--model, --bench and --out are required.",
    )


def config_from_args(args: argparse.Namespace) -> PatchingConfig:
    """--config filled into PatchingConfig, with every given flag applied on top."""
    return experiment_config(PatchingConfig, args)  # checked: PatchingConfig


def _run(args: argparse.Namespace) -> int:
    from evprobe.experiments.distributed import data_parallel

    config = config_from_args(args)
    # torchrun / accelerate launch: this rank's pairs, then rank 0 merges
    if data_parallel(config, lambda c: run_patching(c, progress=not args.quiet), unit="(pair, direction) rows", job=PatchingJob):
        return 0
    summary = run_patching(config, progress=not args.quiet)
    print(f"patched {summary.n_rows} (pair, direction) rows; wrote {config.out}/patching.md and patching.png")
    return 0
