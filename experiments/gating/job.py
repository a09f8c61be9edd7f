"""`evprobe gating` as a job and a command: the steered readout per item x condition, the summary,
the parser."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from evprobe.core.capture_schema import row_problem
from evprobe.bench.family import LETTERS  # the option letters, one home
from evprobe.bench.items import Item, item_units
from evprobe.core.files import atomic_write_bytes
from evprobe.bench.manifest import load_item_images, read_meta
from evprobe.core.jobs import Job, JsonlRows, Unit, run_job
from evprobe.core.job_summary import JobSummary
from evprobe.core.lock import folder_lock
from evprobe.bench.parse import FREE_RUBRIC
from evprobe.bench.protocols import GUIDED, build_prompt
from evprobe.experiments.config import add_experiment_parser, as_dict, experiment_config, load_config
from evprobe.experiments.steering_conventions import alpha_key, free_readout
from evprobe.experiments.gating.config import (
    FORMAT,
    GatingConfig,
    JSON_FILE,
    MD_FILE,
    PNG_FILE,
    REGIMES,
    REQUEST_KINDS,
    RESULTS_FILE,
    FREE_ROW_TYPES,
    ROW_TYPES,
    RUN_META_FILE,
)
from evprobe.experiments.gating.plan import GateDirection, Plan, make_plan, prepare
from evprobe.experiments.gating.report import GateTable, aggregate, markdown, pct, pct_value, plot
from evprobe.core.json_types import JsonObject

# ---------------------------------------------------------------- steering and readout


@dataclass(frozen=True)
class GateReadout:
    """An item's readout: the top option letter, its option, and whether it abstains (answer:
    undetermined) or measures (select: a test)."""

    choice: str
    option: str
    abstain: bool

    def to_json(self) -> JsonObject:
        return {"choice": self.choice, "option": self.option, "abstain": self.abstain}


def readout(item: Item, logp: np.ndarray) -> GateReadout:
    """Top option letter and whether it abstains (answer: undetermined) or measures (select: a test)."""
    assert item.options is not None
    letters = sorted(item.options)
    values = [float(logp[LETTERS.index(x)]) for x in letters]
    choice = letters[int(np.argmax(values))]  # first maximum: ties go to the earlier letter
    option = item.options[choice]
    abstain = option == "undetermined" if REQUEST_KINDS[item.request] == "answer" else option != "stop"
    return GateReadout(choice, option, abstain)


class GatingJob(Job):
    """Step 5 on the job runner: one row per held-out item x condition (`conditions_for`'s keys, in
    order); `finish` is step 6. `from_meta` rebuilds it from a shard's meta alone (`evprobe merge`)."""

    kind = "gating"
    meta_file = RUN_META_FILE

    def __init__(self, plan: Plan, layer: int, directions: dict[str, GateDirection],
                 best: JsonObject | None = None, cosine: float | None = None) -> None:
        super().__init__(plan.out, plan.config.shard)
        self.plan, self.layer, self.directions, self.best = plan, layer, directions, best
        self.cosine = (float(directions["standard"].vector @ directions["guided"].vector)  # type: ignore[operator]
                       if cosine is None else cosine)
        self.by_key = {c[0]: c for c in plan.conditions}
        self.handle: Any = None

    def units(self) -> list[Unit]:
        return item_units(self.plan.targets)

    def all_families(self) -> list[str]:
        return self.plan.heldout_families  # balanced over the steered families, whatever the limit

    def conditions(self) -> list[str]:
        return list(self.by_key)

    @property
    def batch_size(self) -> int:
        return self.plan.batch_size

    def pinned(self) -> JsonObject:
        plan = self.plan
        bench_meta = read_meta(plan.bench)
        out = {"format": FORMAT, "model": plan.model.model, "revision": plan.model.revision,
               "dtype": plan.model.dtype, "items_sha256": bench_meta.get("items_sha256"), "layer": self.layer,
               "split_seed": plan.config.split_seed,
               "directions": {r: {"name": d.name, "sha256": d.sha256, "mean_norm": d.mean_norm}
                              for r, d in self.directions.items()},
               "guided_text": GUIDED, "positions": "all", "protocol": self.protocol,
               # a free readout's reading and budget; None for letters, so older folders resume
               "readout": None if plan.config.readout == "letters" else plan.config.readout,
               "rubric": FREE_RUBRIC if plan.config.readout == "free" else None,
               "max_new_tokens": self.max_new_tokens if plan.config.readout == "free" else None,
               "raw_alpha": True if plan.config.alpha_units == "raw" else None,  # None: older folders resume
               "attn_implementation": plan.model.attn_implementation, **self.input_pins}
        if self.handle is not None:  # after open(): what only the loaded model tells
            from evprobe.experiments.pins import loaded_pins

            out.update(loaded_pins(self.handle))
        return out

    @cached_property
    def input_pins(self) -> JsonObject:
        """Hashed once (pinned() is asked before and after open()): the direct protocol's prompt text
        under both regimes, the images of the captured items (the captures pin that selection) and
        the model's files (experiments.pins)."""
        from evprobe.experiments.pins import input_pins

        return input_pins(self.plan.model.model, templates={r: (self.protocol, r) for r in REGIMES},
                          images=(self.plan.bench, self.plan.captured))

    def meta(self) -> JsonObject:
        return {**self.pinned(), "layer_choice": self.best,
                "n_fit_items": {r: d.n_items for r, d in self.directions.items()},
                "cosine_standard_guided": self.cosine,
                "config": as_dict(self.plan.config), "model_config": as_dict(self.plan.model)}

    def store_at(self, folder: Path) -> JsonlRows:
        types = FREE_ROW_TYPES if self.plan.config.readout == "free" else ROW_TYPES
        return JsonlRows(folder / RESULTS_FILE, lambda row: (row["item_id"], row["condition"]), what="gating row",
                         check=lambda row: row_problem(row, types, types, "gating row"))

    def open(self) -> None:
        from evprobe.experiments.config import load_model

        self.handle = load_model(self.plan.model)

    def compute(self, batch: list[Unit], condition: str) -> list[JsonObject]:
        from evprobe import hooks
        from evprobe.hooks.steering import Steering, steer

        key, inference, direction, alpha = self.by_key[condition]
        items: list[Item] = [u.value for u in batch]
        free = self.plan.config.readout == "free"
        prompts = [build_prompt(it, self.protocol, inference) for it in items]
        images = [load_item_images(self.plan.bench, it.images) for it in items]

        def read() -> Any:  # (items, letters) log-probs, or the generated replies (free)
            if free:
                return hooks.generate(self.handle, prompts, images, max_new_tokens=self.max_new_tokens,
                                      batch_size=len(items))
            return hooks.next_token_logprobs(self.handle, prompts, images, list(LETTERS), batch_size=len(items))

        if direction is None:  # alpha = 0: no hooks at all
            got = read()
        else:
            d = self.directions[direction]
            # raw units: alpha x the unit direction (a "mean norm" of 1), else alpha x its mean norm
            unit = 1.0 if self.plan.config.alpha_units == "raw" else d.mean_norm
            spec = Steering.from_norm_units(d.vector, self.layer, alpha, unit, positions="all", schedule="every-step")
            with steer(self.handle, spec):  # every prompt position and every generated token
                got = read()
        common = [{"item_id": it.item_id, "family_id": it.family_id, "system": it.system, "request": it.request,
                   "resolved": bool(it.resolved), "condition": key, "inference": inference, "direction": direction,
                   "alpha": alpha} for it in items]
        if free:
            return [{**row, **free_readout(it, g.text, inference).to_json()} for row, it, g in zip(common, items, got)]
        return [{**row, "logprobs": {x: float(got[r, i]) for i, x in enumerate(LETTERS)},
                 **readout(it, got[r]).to_json()} for r, (row, it) in enumerate(zip(common, items))]

    @property
    def protocol(self) -> str:
        return "free" if self.plan.config.readout == "free" else "direct"

    @property
    def max_new_tokens(self) -> int:
        """A free reply's budget: the model config's (bench.budgets)."""
        return self.plan.model.max_new_tokens_free

    def finish(self, rows: dict[tuple[str, str], JsonObject], summary: JobSummary[Any]) -> GatingReport:
        plan = replace(self.plan, targets=[u.value for u in self.my_units()])  # a shard reports its own items
        result = aggregate(plan, rows, self.layer, self.best, self.directions, self.cosine)
        atomic_write_bytes(self.out / JSON_FILE, (json.dumps(result.to_json(), indent=1) + "\n").encode("utf-8"))
        atomic_write_bytes(self.out / MD_FILE, markdown(result).encode("utf-8"))
        plot(result, self.out / PNG_FILE)
        return GatingReport(layer=self.layer, n_items=len(plan.targets), tables=result.tables,
                            files=(JSON_FILE, MD_FILE, PNG_FILE, RESULTS_FILE))

    @classmethod
    def from_meta(cls, meta: JsonObject, out: Path) -> GatingJob:
        config = load_config(GatingConfig, {**meta["config"], "out": str(out), "shard": None},
                             where=f"the shard's {RUN_META_FILE}")
        directions = {r: GateDirection(r, d["name"], None, d["mean_norm"], meta["n_fit_items"][r], d["sha256"])
                      for r, d in meta["directions"].items()}
        return cls(make_plan(config), meta["layer"], directions, meta["layer_choice"], meta["cosine_standard_guided"])


@dataclass(frozen=True)
class GatingReport:
    """What a finished gating job wrote: the steered layer, its held-out items, gating.json's tables
    (per kind, group and dose: the stop rate of each direction x inference cell, base and steered)
    and its files."""

    layer: int
    n_items: int
    tables: tuple[GateTable, ...]
    files: tuple[str, ...]


def gating(config: GatingConfig, *, progress: bool = True) -> JobSummary[GatingReport]:
    """Run (or finish) the experiment (or its shard) and write gating.json / .md / .png; returns its
    counts, its meta (the chosen layer and directions) and, once complete, its report."""
    plan = make_plan(config)
    with folder_lock(plan.out, "evprobe gating"):  # steps 1-4 write into OUT before the job runner's own lock
        layer, best, directions = prepare(plan, progress)
        return run_job(GatingJob(plan, layer, directions, best), progress=progress)


# ---------------------------------------------------------------- command line


def add_gating_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = add_experiment_parser(
        sub, "gating", GatingConfig, run_gating, example="gating_tiny", config_required=False,
        help="TRAPS prompt gating: standard/guided directions x standard/guided inference, +alpha on controls, "
             "-alpha on voids",
        description="Capture the answer (and/or select) prompts under the standard and guided regimes, fit a "
        "mass-mean resolved direction from each on half the families, steer the other half under each regime and "
        "report abstention (answer) or measure rate (select) in Table-4-style 2x2 tables with family-bootstrap "
        "intervals: gating.json, gating.md, gating.png. Flags override the config. Resumable. With --judged "
        "OUT/judged alone: a finished --readout free run re-scored from the LLM panel's decisions (evprobe judge OUT).",
    )
    p.add_argument("--judged", type=Path, default=None, metavar="OUT/judged",
                   help="re-score the finished --readout free run OUT from the panel's decisions that `evprobe judge "
                        "OUT` wrote in OUT/judged (no model; the same tables and intervals), into OUT/judged")
    return p


def config_from_args(args: argparse.Namespace) -> GatingConfig:
    return experiment_config(GatingConfig, args)


def run_gating(args: argparse.Namespace) -> int:
    from evprobe.experiments.distributed import data_parallel

    if args.judged is not None:
        return _run_judged(args)
    config = config_from_args(args)
    # torchrun / accelerate launch: this rank's shard, then rank 0 merges
    if data_parallel(config, lambda c: gating(c, progress=not args.quiet), unit="rows", job=GatingJob):
        return 0
    s = gating(config, progress=not args.quiet)
    report = s.report
    assert report is not None  # one run computes every row it selects
    print(f"layer {report.layer}: {s.counts_text(report.n_items, 'held-out items')}")
    _print_tables(report.tables)
    print(f"wrote {', '.join(report.files)} in {s.out}")
    return 0


def _run_judged(args: argparse.Namespace) -> int:
    """`--judged OUT/judged` (experiments.gating.judged): alone, the run's own config is in OUT."""
    from evprobe.core.errors import InputError
    from evprobe.core.flags import config_overrides
    from evprobe.experiments.gating.judged import rescore

    given = [f"--{k.replace('_', '-')}" for k in config_overrides(args, GatingConfig)]
    if args.config is not None or given:
        raise InputError(f"--judged re-scores the run as it was run (its config is in OUT/meta.json): give it alone, "
                         f"without {', '.join(['--config'] if args.config is not None else given)}")
    result, files = rescore(args.judged, GatingJob.from_meta)
    _print_tables(result.tables)
    print(f"read by the panel; wrote {', '.join(files)} in {args.judged}")
    return 0


def _print_tables(tables: tuple[GateTable, ...]) -> None:
    for t in tables:
        cells = "; ".join(f"dir {k.split('|')[0]}/inf {k.split('|')[1]}: {pct_value(c.base)} -> "
                          f"{pct(c.steered)}" for k, c in t.cells.items())
        print(f"  {t.kind} {t.group} alpha {alpha_key(t.alpha)}: {cells}")
