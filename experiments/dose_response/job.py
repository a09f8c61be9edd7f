"""`evprobe dose-response` as a job and a command: one row per target item x steering condition, the
aggregates and reports at the end (the conventions: the subpackage's docstring, experiments.dose_response)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from evprobe.core.json_types import JsonObject
from evprobe.bench.items import Item, item_units
from evprobe.bench.manifest import load_item_images
from evprobe.core.capture_schema import row_problem
from evprobe.core.files import atomic_write_json
from evprobe.core.jobs import FORMAT_KEY, Job, JsonlRows, RowKey, Unit, check_pinned, read_meta, run_job
from evprobe.core.job_summary import JobSummary
from evprobe.experiments.config import (
    ConfigError,
    add_experiment_parser,
    experiment_config,
    load_config,
)
from evprobe.experiments.dose_response.config import (
    RESULTS_FILE,
    RUN_META_FILE,
    DoseResponseConfig,
    alpha_key,
)
from evprobe.experiments.dose_response.forward import EngineForward, HFForward, check_engine_items
from evprobe.experiments.dose_response.plan import Plan, check_layers, make_plan, run_meta
from evprobe.experiments.dose_response.readouts import rows_for
from evprobe.experiments.dose_response.report import fmt_estimate, write_reports
from evprobe.experiments.dose_response.results import Headline
from evprobe.analysis.specificity import NULL_SETS
from evprobe.experiments.dose_response.stats import aggregate
from evprobe.experiments.dose_response.units import AlphaUnits, read_units, units_for, units_json

@dataclass(frozen=True)
class DoseResponseReport:
    """What a finished dose-response wrote: its target items, its files (in `out`) and the
    cross-fitted headline (one per readout x goal, as in dose_response.json: the chosen settings,
    the steered stop rate and log-odds with intervals, the probe's place among each null)."""

    n_items: int
    files: tuple[str, ...]
    headline: tuple[Headline, ...]


# results.jsonl's schema (core.capture_schema kinds): the steering condition and the item, then the
# readouts that the run's `readout` asked for (lp: logprob_readout, gen: generate_readout).
ROW_TYPES = {"item_id": "id", "family_id": "id", "system": "str", "resolved": "bool?", "variant": "str?",
             "condition": "str", "kind": "str", "layer": "int?", "alpha": "number?", "direction_index": "int?",
             "logprobs": "scores", "lp": "object", "gen": "object", "lp_set": "object", "gen_set": "object"}
ROW_REQUIRED = ("item_id", "family_id", "condition", "kind")


def _row_problem(row: Any) -> str | None:
    return row_problem(row, ROW_TYPES, ROW_REQUIRED, "dose-response row")


def _row_key(row: JsonObject) -> RowKey:
    return row["item_id"], row["condition"]


def load_results(path: Path) -> dict[RowKey, JsonObject]:
    """Finished rows of a results.jsonl by (item_id, condition); read only (a torn last line is left
    out, not cut); a bad line elsewhere or a duplicate is an error naming the line."""
    return JsonlRows(path, _row_key, what="dose-response row", check=_row_problem).done()


def _load_handle(plan: Plan) -> Any:
    """The hf model (HFForward), or a started vLLM engine (EngineForward's), checked against the plan."""
    if plan.config.backend == "vllm":
        from evprobe.analysis.engine_model import open_engine

        m = plan.model
        handle = open_engine(m.model, dtype=m.dtype, answer_prefix=m.answer_prefix, prompt_format=m.prompt_format,
                             thinking=m.thinking, trust_remote_code=m.trust_remote_code)
    else:
        from evprobe.experiments.config import load_model

        handle = load_model(plan.model)
    bad = [layer for layer in plan.layers if layer >= handle.n_layers]
    if bad:
        raise ConfigError(f"layer {bad[0]} is out of range: {plan.model.model} has {handle.n_layers} decoder "
                          f"layers; use 0 .. {handle.n_layers - 1}")
    if handle.d_model != plan.d_model:
        raise ConfigError(f"direction {plan.name} has width {plan.d_model} but {plan.model.model}'s residual "
                          f"width is {handle.d_model}; fit directions on this model's capture")
    return handle


class DoseResponseJob(Job):
    """`evprobe dose-response` as a job: one row per target item x steering condition (plan order)."""

    kind = "dose-response"
    meta_file = RUN_META_FILE

    def __init__(self, config: DoseResponseConfig) -> None:
        super().__init__(config.out, config.shard)
        self.config = config
        self.plan = make_plan(replace(config, shard=None))  # the whole selection; the runner takes the shard
        if config.backend == "vllm":  # what the engine cannot honour: one line before any model call
            check_engine_items(self.plan.items)
        self.by_key = {c.key: c for c in self.plan.conditions}
        self.old = read_meta(self.meta_path())
        self.recorded = (self.old or {}).get("layer_directions") or {}  # the layers this folder steered so far
        self.handle: Any = None
        self.forward: Any = None  # experiments.dose_response.forward: HFForward or EngineForward, once open
        self.alpha_units: AlphaUnits = read_units((self.old or {}).get("alpha_units"))  # experiments.dose_response.units
        self.images: dict[str, list[Any]] = {}  # the current batch's images by item id

    def units(self) -> list[Unit]:
        return item_units(self.plan.items)

    def all_families(self) -> Sequence[str]:
        return self.plan.bench_families

    def conditions(self) -> list[str]:
        return list(self.by_key)

    @property
    def batch_size(self) -> int:
        return self.plan.batch_size

    def pinned(self) -> JsonObject:
        # Each layer's vector (sha256, mean norm) is pinned layer by layer, not as one value: another vector
        # at a layer steered here is refused, a new layer only adds rows (as README says). The settings
        # first: a changed seed or n_relabel is named as such, not as the relabelled vectors it changes.
        check_pinned(self, self.old, self.plan.pinned)
        check_layers(self.plan, self.recorded)
        out = dict(self.plan.pinned)
        if self.handle is not None:  # after open(): what only the loaded model (or the engine) tells
            from evprobe.experiments.pins import loaded_pins

            out.update(self.handle.pins() if self.config.backend == "vllm" else loaded_pins(self.handle))
        return out

    def meta(self) -> JsonObject:
        return {**run_meta(self.plan, self.recorded), "alpha_units": units_json(self.alpha_units), **self.pinned()}

    def store_at(self, folder: Path) -> JsonlRows:
        return JsonlRows(folder / RESULTS_FILE, _row_key, what="dose-response row", check=_row_problem)

    def open(self) -> None:
        self.handle = _load_handle(self.plan)
        if self.config.backend == "vllm":
            done = self.store().done(warn=False)
            self.forward = EngineForward(self.handle, lambda item, cond: (item, cond) not in done)
        else:
            self.forward = HFForward(self.handle)
        self.alpha_units = units_for(self.forward, self.plan, self.alpha_units)  # measured where the vector is added
        if self.old is not None:  # a later session: record its config and the layers it adds (the runner writes once)
            check_pinned(self, self.old, self.pinned())  # what only the loaded model tells, before the rewrite
            atomic_write_json(self.meta_path(), {FORMAT_KEY: self.kind, **self.meta(), "shard": self.old.get("shard")})

    def _images(self, items: list[Item]) -> list[list[Any]]:
        """The items' images, loaded once per batch for all its conditions."""
        if any(it.item_id not in self.images for it in items):
            self.images = {it.item_id: load_item_images(self.plan.bench, it.images) for it in items}
        return [self.images[it.item_id] for it in items]

    def compute(self, batch: list[Unit], condition: str) -> list[JsonObject]:
        items = [u.value for u in batch]
        return rows_for(self.forward, self.plan, self.by_key[condition], items, self._images(items), self.alpha_units)

    def close(self) -> None:
        if self.forward is not None:  # an engine's processes end here
            self.forward.close()

    def finish(self, rows: dict[RowKey, JsonObject], summary: JobSummary[Any]) -> DoseResponseReport:
        plan = replace(self.plan, items=[u.value for u in self.my_units()], out=self.out)
        result = aggregate(plan, rows, self.alpha_units)
        return DoseResponseReport(n_items=len(plan.items), files=tuple(write_reports(plan, result)),
                                  headline=result.headline)

    @classmethod
    def from_meta(cls, meta: JsonObject, out: Path) -> DoseResponseJob:
        return cls(load_config(DoseResponseConfig, {**meta["config"], "out": str(out), "shard": None},
                               where=f"the shards' {RUN_META_FILE}"))


def dose_response(config: DoseResponseConfig, *, progress: bool = True) -> JobSummary[DoseResponseReport]:
    """Run (or finish) the experiment and write its reports; returns its counts (rows computed in
    this session, reused from results.jsonl) and, once every row is there, its report."""
    return run_job(DoseResponseJob(config), progress=progress)


# ---------------------------------------------------------------- command line


def add_dose_response_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    return add_experiment_parser(
        sub, "dose-response", DoseResponseConfig, run_dose_response, example="dose_response_tiny",
        help="steer along a probe direction on held-out families: layers x doses, random null band, ablation",
        description="Add a direction from `evprobe directions` at chosen decoder layers and doses (multiples of "
        "the layer's mean residual norm; + = toward measuring) to the select prompts of the families it was not "
        "fitted on, beside random directions and ablation; write results.jsonl, dose_response.json/.md and "
        "PNG curves of stop rate, missing-property test rate, minimum-cost accuracy and log-odds with "
        "family-bootstrap intervals. Flags override the config. Resumable: rerun to continue or to reuse.",
    )


def config_from_args(args: argparse.Namespace) -> DoseResponseConfig:
    """The config file named by --config with every given flag applied."""
    return experiment_config(DoseResponseConfig, args)


def run_dose_response(args: argparse.Namespace) -> int:
    from evprobe.experiments.distributed import data_parallel

    config = config_from_args(args)
    # torchrun / accelerate launch: this rank's items, then rank 0 merges
    if data_parallel(config, lambda c: dose_response(c, progress=not args.quiet), unit="rows", job=DoseResponseJob):
        return 0
    summary = dose_response(config, progress=not args.quiet)
    report = summary.report
    assert report is not None  # one run computes every row it selects
    print(summary.counts_text(report.n_items))
    for h in report.headline:
        t = h.target
        chosen = ", ".join(f"half {c.chosen_on} chose L{c.layer} {alpha_key(c.alpha)}" for c in h.choices)
        places = []
        for kind in NULL_SETS:
            null = t.null(kind, "log_odds") or t.null(kind, "stop_rate")
            if null is not None and null.goal is not None and null.goal.p_goal is not None:
                places.append(f"beyond {null.goal.beaten} of {null.n_directions} {kind} (p {null.goal.p_goal:.3f})")
        print(f"  {h.readout} {h.goal} ({h.group} items; cross-fitted: {chosen}): stop rate "
              f"{fmt_estimate(t.stop_rate_at_0, 'stop_rate')} -> {fmt_estimate(t.stop_rate, 'stop_rate')}"
              + (f"; {', '.join(places)}" if places else ""))
    print(f"wrote {', '.join(report.files[:3])} ... ({len(report.files)} files) in {summary.out}")
    return 0


__all__ = [
    "DoseResponseJob",
    "DoseResponseReport",
    "add_dose_response_parser",
    "config_from_args",
    "dose_response",
    "load_results",
    "run_dose_response",
]
