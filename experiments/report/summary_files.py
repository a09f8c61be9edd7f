"""Schemas of the summary JSON files that later commands read back (sweep.json, patching.json,
dose_response.json): the keys each reader indexes, typed; every other key is allowed.

Read through `read_summary(path, Model, fix)` (`bench.json_schema.read_model`): a missing file,
bad JSON, a value that is not an object, a missing or mistyped field is one `InputError` line
naming FILE:LINE, the field and the fix; the object is returned as written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from evprobe.bench.json_schema import OPEN, Count, NonEmpty, read_model
from evprobe.core.json_types import JsonObject


class SweepBest(BaseModel):
    """sweep.json's `best`: the nested best layer and position (probes.sweep)."""

    model_config = OPEN

    layer: Count
    position: NonEmpty
    auroc: float | None
    ci: list[float | None]
    n: Count
    accuracy: float | None
    accuracy_ci: list[float | None]


class SweepRow(BaseModel):
    """One row of sweep.json's `rows` (one layer x position)."""

    model_config = OPEN

    layer: Count
    position: NonEmpty
    n: Count


class SweepSummary(BaseModel):
    """sweep.json (probes.sweep.SweepResult.to_json): what layer-sweep, gating and the report read."""

    model_config = OPEN

    label: NonEmpty
    positive: Any
    n: Count
    n_families: Count
    degenerate: bool
    baselines: dict[str, Any]
    rows: list[SweepRow]
    best: SweepBest | None = None


class PatchingSummary(BaseModel):
    """patching.json (experiments.patching.job.write_summary): its layer and position axes."""

    model_config = OPEN

    layers: list[Count]
    positions: list[NonEmpty]


class DoseMeta(BaseModel):
    model_config = OPEN

    injection: Count = 0  # absent in a dose_response.json written before levels: the main items


class DoseChoice(BaseModel):
    model_config = OPEN

    layer: Count
    alpha: float


class DoseTarget(BaseModel):
    model_config = OPEN

    log_odds_change: Any = None
    change: Any = None


class DoseHeadline(BaseModel):
    """One cross-fitted headline row of dose_response.json."""

    model_config = OPEN

    goal: NonEmpty
    group: NonEmpty
    readout: NonEmpty = "logprobs"
    choices: list[DoseChoice]
    target: DoseTarget


class DoseSummary(BaseModel):
    """dose_response.json (experiments.dose_response.report): the fields the ladder reads."""

    model_config = OPEN

    meta: DoseMeta = DoseMeta()
    headline: list[DoseHeadline] | None = None
    split: dict[str, Any] | None = None


def read_summary(path: str | Path, model: type[BaseModel], fix: str, *, missing: str | None = None) -> JsonObject:
    """The JSON object in `path`, checked against `model` (one line naming the field, else)."""
    return read_model(path, model, fix, missing=missing)[1]


__all__ = ["DoseSummary", "PatchingSummary", "SweepBest", "SweepRow", "SweepSummary", "read_summary"]
