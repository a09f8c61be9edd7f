"""Typed reads of whole JSON files: RUN/run.json (`RunMeta`) and any summary a command reads.

`read_model(path, Model, fix)` reads a JSON object (`core.json_files.read_json_object`: missing,
not UTF-8, not JSON, not an object are one line each) and validates it with a strict pydantic
model; the first error is one line, FILE:LINE: the field and what it must be (`bench.schema.describe`,
the phrase the benchmark's files use), then the fix. The object is returned as written.

run.json's schema is `RunMeta`: the fields its readers use (score, compare, report, merge) are
required and typed; every other key is allowed, since the runner adds pins across versions (model
file hashes, the loaded model's revision and dtype, n_selected, last_session). `read_run_meta` is the
one reader of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evprobe.bench.records import RUN_META_FILE
from evprobe.core.errors import InputError
from evprobe.core.files import key_line
from evprobe.core.json_files import read_json_object
from evprobe.core.json_types import JsonObject

M = TypeVar("M", bound=BaseModel)

# Strict (nothing converted: "5" is no integer, 1 is no string); keys a model does not name are kept.
OPEN = ConfigDict(strict=True, extra="allow")
NonEmpty = Annotated[str, Field(min_length=1)]
Count = Annotated[int, Field(ge=0)]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]

RUN_FIX = "restore the file, or rerun `evprobe run` into a new --out"


def read_model(path: str | Path, model: type[M], fix: str, *, missing: str | None = None) -> tuple[M, JsonObject]:
    """(`model` of the JSON object in `path`, the object as written); any fault is one InputError
    line naming FILE:LINE, the field and `fix` (`missing`: the fix for a file that is not there)."""
    from evprobe.bench.schema import describe

    path = Path(path)
    raw, text = read_json_object(path, fix, missing=missing)
    try:
        return model.model_validate_json(text), raw
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        loc = first["loc"]
        # the line of the top-level key the error is under; a missing top-level key: the object's line
        key = loc[0] if loc and (first["type"] != "missing" or len(loc) > 1) else None
        raise InputError(f"{path}:{key_line(text, key)}: {describe(err)}; {fix}") from None


class RunMeta(BaseModel):
    """RUN/run.json (`bench.runner.RunJob.meta`, rewritten with the counts when a run ends)."""

    model_config = OPEN

    kind: Literal["run"] | None = None  # absent in a run.json written before jobs named their kind
    model: NonEmpty
    protocol: NonEmpty
    regime: NonEmpty
    items_sha256: Sha256
    bench: NonEmpty
    config: dict[str, Any] | None = None  # the RunConfig (merge rebuilds the job from it)
    shard: NonEmpty | None = None
    n_selected: Count | None = None
    n_records: Count | None = None

    @property
    def title(self) -> str:
        """'MODEL PROTOCOL/REGIME', the run's name in tables."""
        return f"{self.model} {self.protocol}/{self.regime}"


def read_run_meta(run_dir: str | Path) -> RunMeta:
    """RUN/run.json through `RunMeta`: every fault one line naming the file, the field and the fix."""
    run_dir = Path(run_dir)
    path = run_dir / RUN_META_FILE
    return read_model(path, RunMeta, RUN_FIX,
                      missing=f"{run_dir} is not a run folder; create it with `evprobe run`")[0]


__all__ = ["OPEN", "RUN_FIX", "RunMeta", "read_model", "read_run_meta"]
