"""`evprobe capture` as a job and a command (the files it writes: the subpackage's docstring,
experiments.capture)."""

from __future__ import annotations

import argparse
import json
import warnings
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from evprobe.bench.items import Item, item_units
from evprobe.bench.clips import check_clips_as_video, check_video_path
from evprobe.bench.manifest import META_FILE, check_item_images, load_item_images, read_items
from evprobe.bench.manifest import read_meta as read_bench_meta
from evprobe.bench.model_config import load_model, model_from_record
from evprobe.bench.protocols import build_prompt, check_regime, get_protocol
from evprobe.bench.runner import select_items
from evprobe.core.errors import InputError
from evprobe.core.flags import add_config_arguments
from evprobe.core.job_summary import JobSummary
from evprobe.core.jobs import SHARD_FREE, Job, Unit, batches, read_meta, run_job
from evprobe.core.shard import Shard, select_shard
from evprobe.experiments.capture.config import (
    FORMAT,
    TEXT_MARKER_RULE,
    CaptureConfig,
    check_positions,
    index_row,
    parse_layers,
    question_marker,
    recorded_config,
    stored_text,
)
from evprobe.experiments.capture.store import ACTS_FILE, ACTS_KEY, CaptureRows
from evprobe.experiments.config import config_from_flags
from evprobe.experiments.pins import images_sha256, input_pins, sha256_text
from evprobe.core.json_types import JsonObject

if TYPE_CHECKING:
    from evprobe.experiments.capture.engine import EngineCapture
    from evprobe.hooks.handle import Handle

FLOAT16_MAX = float(np.finfo(np.float16).max)  # 65504


def _chat_template_sha256(handle: Handle) -> str | None:
    template = getattr(handle.processor, "chat_template", None) or getattr(handle.tokenizer, "chat_template", None)
    if template is None:
        return None
    text = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
    return sha256_text(text)


def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("torch", "transformers", "nnsight", "numpy", "pillow", "tokenizers"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


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


class CaptureJob(Job):
    """`evprobe capture` as a job: one acts.npy row (and index line) per selected item."""

    kind = "capture"
    unit_name = "rows"

    def __init__(self, config: CaptureConfig) -> None:
        super().__init__(config.out, config.shard)
        self.config, self.bench = config, Path(config.bench)
        # Cheap validation first: nothing is loaded or written before the input is known good.
        self.positions = check_positions(config.positions)
        from evprobe.hooks.capture import check_components  # cheap: no torch at module level

        try:
            check_components([config.component])
        except ValueError as err:
            raise InputError(f"--component: {err}") from None
        get_protocol(config.protocol)
        check_regime(config.regime)
        if config.batch_size <= 0:
            raise InputError(f"--batch-size must be a positive integer, got {config.batch_size}")
        if not (self.bench / META_FILE).is_file():
            raise InputError(f"{self.bench / META_FILE} not found; generate the benchmark with "
                             f"`evprobe generate --out {self.bench}`")
        self.bench_meta = read_bench_meta(self.bench)
        self.as_video = config.video_input == "native"
        if self.as_video:  # before the model loads
            check_clips_as_video(self.bench, self.bench_meta)
        self.all_items = read_items(self.bench)
        self.selected = select_items(self.all_items, config.requests, config.limit, config.injection)
        if not self.selected:
            raise InputError(f"no items of {self.bench} match --requests {','.join(config.requests or ())} at "
                             f"--injection {','.join(map(str, config.injection))}; choose others")
        # Row i of this folder's acts.npy is the i-th item of its (shard's) selection.
        self.items = select_shard(self.selected, self.shard, self.all_items)
        if not self.items:
            raise InputError(f"shard {self.shard} holds none of the {len(self.selected)} selected items (too many "
                             "shards for their families); use fewer shards")
        from evprobe.hooks.positions import parse_position, uses_images

        imaged = next((p for p in self.positions if uses_images(parse_position(p))), None)  # image, image_mean, frame:K
        if imaged is not None:
            no_image = next((it for it in self.items if not it.images), None)
            if no_image is not None:
                raise InputError(f"item {no_image.item_id} ({no_image.request}) has no image, so it has no "
                                 f"{imaged}; drop {imaged} from --positions or that request from --requests")
        if config.backend == "vllm":  # what the engine cannot read: one line, before any engine or model
            from evprobe.experiments.capture.engine import check_engine_capture

            check_engine_capture(config, self.items)
        self.images_sha256, self.n_images = images_sha256(self.bench, self.items)
        self.row_of = {it.item_id: r for r, it in enumerate(self.items)}
        self.check_markers()
        self.old = read_meta(self.meta_path())  # None, or an object: a bad one is one line
        if self.old is not None and self.old.get("backend", "hf") != config.backend:  # pinned only when vllm
            raise InputError(f"{self.out} was written with --backend {self.old.get('backend', 'hf')}, this run has "
                             f"--backend {config.backend}; use another --out, or the same backend to resume")
        self.handle: Handle | None = None
        self.engine: EngineCapture | None = None  # --backend vllm, from open() to close()
        self.warned = False

    def units(self) -> list[Unit]:
        return item_units(self.selected)

    def all_families(self) -> list[str]:
        return [it.family_id for it in self.all_items]

    @property
    def batch_size(self) -> int:
        return self.config.batch_size

    def _layers(self) -> list[int] | None:
        """The layer indices, once the layer count is known (the model, its config, or this folder's meta)."""
        if self.handle is not None:
            return parse_layers(self.config.layers, self.handle.n_layers)
        from evprobe.hooks.loading import config_n_layers

        m = self.config.model
        known = (self.old or {}).get("n_model_layers") or config_n_layers(m.source, trust_remote_code=m.trust_remote_code)
        return parse_layers(self.config.layers, known) if known is not None else None

    def pinned(self) -> JsonObject:
        c = self.config
        out: JsonObject = {
            "format": FORMAT, "model": c.model.source, "positions": self.positions, "regime": c.regime,
            "protocol": c.protocol, "items_sha256": self.bench_meta.get("items_sha256"),
            "selection_sha256": sha256_text("\n".join(it.item_id for it in self.items)),
            "n_items": len(self.items), "images_sha256": self.images_sha256,
            "attn_implementation": c.model.attn_implementation, "requested_dtype": c.model.dtype, **self.input_pins,
            "answer_prefix": c.model.answer_prefix,
            "thinking": c.model.thinking,  # None when unset: a folder written before the setting resumes
            # resid_post pinned as None: a folder written before components existed resumes as it was
            "component": None if c.component == "resid_post" else c.component,
            "video_input": None if c.video_input == "frames" else c.video_input,  # likewise
        }
        if c.backend != "hf":  # absent for hf: an hf folder's meta.json is what it was before backends
            out["backend"] = c.backend
        layers = self._layers()  # a layer out of range fails here, before the model loads
        if layers is not None:
            out["layers"] = layers
        if self.handle is not None:
            h = self.handle
            out.update(revision=getattr(h.model.config, "_commit_hash", None),
                       dtype=str(h.dtype).removeprefix("torch."), n_model_layers=h.n_layers, d_model=h.d_model,
                       chat_template_sha256=_chat_template_sha256(h))
            if h.prompt_format != "chat":  # absent for chat: a folder written before the setting resumes
                out["prompt_format"] = h.prompt_format
            if self.engine is not None:  # what read the rows: the engine's dtype, version, parallel sizes
                out.update(self.engine.pins())
        return out

    @cached_property
    def input_pins(self) -> JsonObject:
        """Hashed once (pinned() is asked before and after open()): the prompt template text and the
        model's files (experiments.pins; the images are pinned in __init__, with their count)."""
        c = self.config
        return input_pins(c.model.source, templates=(c.protocol, c.regime))

    def meta(self) -> JsonObject:
        from evprobe.hooks.capture import POSITION_RULES
        from evprobe.hooks.positions import position_rule

        assert self.handle is not None
        layers = self._layers() or []
        return {
            **self.pinned(),
            "requests": list(self.config.requests) if self.config.requests is not None else None,
            "injection": list(self.config.injection),
            "limit": self.config.limit, "n_images": self.n_images, "arch": self.handle.arch,
            "shape": [len(self.items), len(layers), len(self.positions), self.handle.d_model],
            "acts_dtype": "float16",
            "stored": stored_text(self.config.component),
            "position_rules": {p: POSITION_RULES.get(p) or position_rule(p) for p in self.positions},
            "stored_component": self.config.component,
            "text_marker_rule": TEXT_MARKER_RULE, "versions": _versions(), "bench": str(self.bench.resolve()),
            "config": recorded_config(self.config),
        }

    def store_at(self, folder: Path) -> CaptureRows:
        own = folder.resolve() == self.out.resolve()

        def selection_of(shard: Shard | None) -> list[str]:
            return [it.item_id for it in select_shard(self.selected, shard, self.all_items)]

        return CaptureRows(folder, [it.item_id for it in self.items] if own else None, selection_of)

    def open(self) -> None:
        check_item_images(self.bench, self.items, self.bench_meta)  # before the model loads
        if self.config.backend == "vllm":
            from evprobe.experiments.capture.engine import EngineCapture

            self.engine = EngineCapture(self.config, max(len(it.images) for it in self.items))
            self.handle = self.engine.handle  # renders, tokenizes and places positions; no weights
            self.check_readable()
            return
        self.handle = load_model(self.config.model)
        if self.as_video:
            check_video_path(self.handle.processor, self.config.model.source)
        self.check_readable()

    def check_markers(self) -> None:
        """A `marker:TEXT` position whose text is missing from a selected item's prompt, refused
        before the model loads (the marker is searched in the prompt: hooks.positions)."""
        from evprobe.hooks.positions import Marker, parse_position

        for spec in self.positions:
            p = parse_position(spec)
            if not isinstance(p, Marker) or p.text is None:
                continue
            for it in self.items:
                if p.text not in build_prompt(it, self.config.protocol, self.config.regime):
                    raise InputError(f"item {it.item_id}: position {spec!r}: text {p.text[:60]!r} does not occur "
                                     "in its prompt; choose a marker every selected item's prompt holds, or other "
                                     "--requests")

    def check_readable(self) -> None:
        """What only the loaded model tells, checked in open(), so before meta.json is written (core.jobs
        writes it after open): the component at every layer, and every position of the items to
        capture (each item's tokens located, no forward pass). A folder whose meta.json exists was
        checked when it was written, so a resumed capture checks one batch per image count only, as
        do positions that hold in every row whatever its length (last, image_mean, text_mean: the
        spans of hooks.spans); token:I and marker:TEXT are checked on every item."""
        from evprobe.hooks.capture import sites
        from evprobe.hooks.inputs import encode_inputs
        from evprobe.hooks.positions import Marker, Token, parse_position, row_indices
        from evprobe.hooks.spans import batch_spans

        assert self.handle is not None
        handle, c = self.handle, self.config
        layers = self._layers() or []
        try:
            sites(handle, layers, [c.component])
        except ValueError as err:
            raise InputError(f"--component {c.component}: {err}; choose another --component") from None
        positions = [parse_position(p) for p in self.positions]
        per_row = any(isinstance(p, Token) or isinstance(p, Marker) and p.text is not None for p in positions)
        every = per_row and self.old is None
        seen: set[int] = set()
        for units in batches(self.my_units(), c.batch_size):  # as compute() batches: one image count a batch
            if not every and units[0].group in seen:
                continue
            seen.add(units[0].group)
            batch = [u.value for u in units]
            prompts = [build_prompt(it, c.protocol, c.regime) for it in batch]
            images = [load_item_images(self.bench, it.images, clips_as_video=self.as_video) for it in batch]
            markers = [question_marker(it.prompt) if handle.keeps_prompt_text else None for it in batch]
            try:
                enc = encode_inputs(handle, prompts, images)  # the tokens, on the CPU (an engine's handle has no weights)
                n_images = [len(i) for i in images]
                spans = batch_spans(handle, enc, prompts, n_images, markers)
                row_indices(handle, enc, prompts, n_images, spans, positions,
                            image_sizes=[[im.size for im in row] for row in images])
            except ValueError as err:
                text = str(err)
                if text.startswith("row "):  # name the item rather than the batch row
                    head, _, rest = text.partition(":")
                    text = f"item {batch[int(head.split()[1])].item_id}:{rest}"
                raise InputError(f"{text}; {handle.model_id} cannot read that position of every selected item: "
                                 "drop it from --positions or choose other --requests") from None

    def compute(self, batch: list[Unit], condition: str) -> list[JsonObject]:
        assert self.handle is not None
        items = [u.value for u in batch]
        reader = _capture_items if self.engine is None else self.engine.capture_items
        cap = reader(self.handle, self.bench, items, self.config, self._layers() or [], self.positions)
        acts16, clipped = _to_float16(cap.acts, items)  # (batch, layers, positions, d_model)
        if any(clipped) and not self.warned:
            warnings.warn(f"activations beyond float16's range were clipped to +-{FLOAT16_MAX:g} "
                          "(counted in index.jsonl's n_clipped)", stacklevel=2)
            self.warned = True
        keeps_text = self.handle.keeps_prompt_text
        return [
            {**index_row(self.row_of[it.item_id], it,
                          "question" if keeps_text and question_marker(it.prompt) else "prompt",
                          cap.n_tokens[r], len(cap.spans[r].image), len(cap.spans[r].text), clipped[r]),
             ACTS_KEY: acts16[r]}
            for r, it in enumerate(items)
        ]

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None

    @classmethod
    def from_meta(cls, meta: JsonObject, out: Path) -> CaptureJob:
        c = model_from_record(meta["config"])
        for key in ("requests", "positions", "layers", "injection"):
            if isinstance(c.get(key), list):
                c[key] = tuple(c[key])
        return cls(CaptureConfig(**{**c, "out": str(out), "shard": None}))

    def shard_free(self) -> tuple[str, ...]:
        return (*SHARD_FREE, "selection_sha256", "n_items", "images_sha256", "n_images", "shape")


    def merged_meta(self, metas: Sequence[JsonObject]) -> JsonObject:
        selection = sha256_text("\n".join(it.item_id for it in self.items))
        return {**super().merged_meta(metas), "selection_sha256": selection, "n_items": len(self.items),
                "images_sha256": self.images_sha256, "n_images": self.n_images,
                "shape": [len(self.items), *metas[0]["shape"][1:]]}


def capture(config: CaptureConfig, progress: bool = True) -> JobSummary[None]:
    """Run the capture job described by `config`; returns its counts, with meta.json's content as `meta`."""
    return run_job(CaptureJob(config), progress=progress)


def _capture_items(handle: Handle, bench: Path, items: list[Item], config: CaptureConfig, layers: list[int],
                   positions: list[str]):
    from evprobe.hooks.capture import capture_batch
    from evprobe.hooks.positions import parse_position

    prompts = [build_prompt(it, config.protocol, config.regime) for it in items]
    images = [load_item_images(bench, it.images, clips_as_video=config.video_input == "native") for it in items]
    # A model that reads facts instead of the prompt's words (the organism) has no question text;
    # its text span is every fact token except the sheet values (hooks.spans).
    markers = [question_marker(it.prompt) if handle.keeps_prompt_text else None for it in items]
    try:
        return capture_batch(handle, prompts, images, layers=layers, positions=[parse_position(p) for p in positions],
                             text_markers=markers, component=config.component)
    except ValueError as err:
        text = str(err)
        if text.startswith("row "):  # name the item rather than the batch row
            head, _, rest = text.partition(":")
            text = f"item {items[int(head.split()[1])].item_id}:{rest}"
        raise ValueError(text) from None


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
    add_config_arguments(p, CaptureConfig)
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(run=run_capture)
    return p


def run_capture(args: argparse.Namespace) -> int:
    config = config_from_flags(CaptureConfig, args)
    from evprobe.experiments.distributed import data_parallel

    # torchrun / accelerate launch: this rank's shard, then rank 0 merges
    if data_parallel(config, lambda c: capture(c, progress=not args.quiet), unit="rows", job=CaptureJob):
        return 0
    summary = capture(config, progress=not args.quiet)
    session = summary.last_session
    print(
        f"{summary.n_done}/{summary.meta['n_items']} rows in {Path(args.out) / ACTS_FILE} "
        f"({session.items} new in {session.seconds} s)"
    )
    return 0
