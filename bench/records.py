"""One model (or policy) reply to one item: the line `evprobe run` appends to RUN/records.jsonl."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evprobe.core.errors import InputError
from evprobe.core.files import append_log_lines, read_complete_lines
from evprobe.core.json_types import JsonObject

RECORDS_FILE = "records.jsonl"
RUN_META_FILE = "run.json"
OPTIONAL_FIELDS = ("option_logprobs", "logprobs_missing", "error", "cut_off", "thinking_closed")  # Record fields a line may lack


@dataclass(frozen=True)
class Record:
    item_id: str
    model: str  # "tiny:qwen2_5_vl", a hub id or path, or "policy:<name>"
    protocol: str  # direct | brief
    regime: str  # standard | guided | json
    request: str  # copied from the item, so records can be read without the benchmark
    variant: str | None
    family_id: str
    reply: str  # the raw generated text, never edited
    valid: bool  # the parser found exactly one acceptable reading of the reply
    route: str  # how: answer_line | json | direct | letter | name | number, or invalid:<why>
    choice: str | None  # the option letter read (lettered requests)
    action: str | None  # select: the action that letter (or name) stands for
    answer: str | None  # answer requests: yes | no | undetermined
    value: float | None  # read_ruler: metres read; recover_property: the chosen candidate value
    n_prompt_tokens: int | None  # without padding; None for scripted policies
    n_new_tokens: int | None
    seconds: float  # wall time of this item's share of its batch
    # Fields a record has only when set (absent from the line otherwise, so a record written
    # before them is the same line): --option-logprobs' reading, and the backend's own words
    # when it returned no readable reply (the record is then invalid, route "invalid:backend").
    option_logprobs: dict[str, float] | None = None  # letter -> log p at the first reply token
    logprobs_missing: str | None = None  # why option_logprobs is None although it was asked for
    error: str | None = None
    # bench.budgets: true when the reply's budget ran out before it ended (unreadable: route
    # "invalid:cut_off"), and when a reasoning block was closed by its own budget; absent otherwise.
    cut_off: bool | None = None
    thinking_closed: bool | None = None

    def to_json(self) -> JsonObject:
        row = asdict(self)
        for name in OPTIONAL_FIELDS:
            if row[name] is None:
                del row[name]
        return row

    @classmethod
    def from_json(cls, row: JsonObject) -> Record:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__ if name in row or name not in OPTIONAL_FIELDS})


def record_problem(row: Any) -> str | None:
    """What is wrong with one parsed records.jsonl row (the strict `record_model`), or None: the
    check the run's job runner applies on resume (`core.jobs.JsonlRows`)."""
    import json

    from pydantic import ValidationError

    from evprobe.bench.schema import describe

    try:
        record_model().model_validate_json(json.dumps(row))
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        return (f"unknown field {first['loc'][0]!r} (not a field of a record)"
                if first["type"] == "extra_forbidden" else describe(err))
    except (TypeError, ValueError) as err:  # not JSON-able at all
        return f"not a record ({err})"
    return None


def load_records(path: Path) -> dict[str, Record]:
    """Finished records by item id, each line checked against `RecordRow` (strict: "false" is no
    bool, NaN no number, unknown fields are refused). Read only: a torn last line (a run killed
    mid-write) is left out and the file is not touched (the run that resumes cuts it); a line that
    is not UTF-8, not JSON or not a record, or a duplicate id, is a one-line `InputError` naming the
    line (both lines for a duplicate), the field and the fix."""
    from pydantic import ValidationError

    from evprobe.bench.schema import describe, instance

    model = record_model()
    out: dict[str, Record] = {}
    lines_of: dict[str, int] = {}
    for number, line in read_complete_lines(path):  # a byte that is not UTF-8 is an error naming its line
        try:
            row = model.model_validate_json(line)
        except ValidationError as err:
            first = err.errors(include_url=False)[0]
            problem = (f"unknown field {first['loc'][0]!r} (not a field of a record)"
                       if first["type"] == "extra_forbidden" else describe(err))
            raise InputError(f"{path}:{number}: {problem}; {FIX_RECORDS}") from None
        record = instance(Record, row)
        if record.item_id in out:
            raise InputError(f"{path}:{number}: field 'item_id' repeats {record.item_id!r} of line "
                             f"{lines_of[record.item_id]}: duplicate record; {FIX_RECORDS}")
        out[record.item_id] = record
        lines_of[record.item_id] = number
    return out


FIX_RECORDS = "move the file aside and run again (`evprobe run`), or fix the line"


def record_model() -> Any:
    """The strict pydantic model of a records.jsonl line (`bench.schema.row_model` of `Record`),
    made on first use: reading a run need not import pydantic until it reads records."""
    global _RECORD_MODEL
    if _RECORD_MODEL is None:
        from typing import Annotated, Literal

        from pydantic import Field

        from evprobe.bench.schema import Action, Answer, Count, Letter, NonEmpty, NonNegative, Request, Variant, row_model

        finite = Annotated[float, Field(allow_inf_nan=False)]
        _RECORD_MODEL = row_model(Record, {
            "item_id": NonEmpty,
            "model": NonEmpty,
            "request": Request,
            "variant": Variant | None,
            "family_id": NonEmpty,
            "choice": Letter | None,
            "action": Action | None,
            "answer": Answer | None,
            "value": finite | None,
            "n_prompt_tokens": Count | None,
            "n_new_tokens": Count | None,
            "seconds": NonNegative,
            "option_logprobs": dict[Letter, Annotated[float, Field(allow_inf_nan=False, le=0)]] | None,
            "logprobs_missing": NonEmpty | None,
            "error": NonEmpty | None,
            "cut_off": Literal[True] | None,
            "thinking_closed": Literal[True] | None,
        })
    return _RECORD_MODEL


_RECORD_MODEL: Any = None


def append_records(path: Path, records: list[Record]) -> None:
    """Append whole lines with one write and an fsync (see `core.files.append_log_lines`)."""
    append_log_lines(path, (r.to_json() for r in records))
