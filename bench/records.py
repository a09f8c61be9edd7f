"""One model (or policy) reply to one item: the line `evprobe run` appends to RUN/records.jsonl."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evprobe.core.files import append_log_lines, read_complete_lines

RECORDS_FILE = "records.jsonl"
RUN_META_FILE = "run.json"


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> Record:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})


def load_records(path: Path) -> dict[str, Record]:
    """Finished records by item id. Read only: a torn last line (a run killed mid-write) is left
    out and the file is not touched (the run that resumes cuts it); a bad line elsewhere or a
    duplicate id is an error that names the line."""
    out: dict[str, Record] = {}
    for number, line in read_complete_lines(path):
        try:
            record = Record.from_json(json.loads(line))
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise ValueError(f"{path}:{number}: not a record ({err}); move the file aside") from None
        if record.item_id in out:
            raise ValueError(f"{path}:{number}: duplicate record for {record.item_id}")
        out[record.item_id] = record
    return out


def append_records(path: Path, records: list[Record]) -> None:
    """Append whole lines with one write and an fsync (see `core.files.append_log_lines`)."""
    append_log_lines(path, (r.to_json() for r in records))
