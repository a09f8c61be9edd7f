"""What `evprobe judge` checks before it asks anyone (`bench.judges`): the judges named on the command
line (`Judge.parse`: MODEL@URL), their key variables (`key_envs`: names only, never a key) and the
run's files (`checked_inputs`: run.json, the benchmark and every record, each fault one InputError
line naming file, line, field and fix)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evprobe.bench.backends.redact import key_env_name, shown_url
from evprobe.bench.items import Item
from evprobe.bench.judge_reader import judge_words
from evprobe.bench.protocols import ANSWER_REQUESTS
from evprobe.core.errors import InputError, printable
from evprobe.core.files import read_complete_lines

if TYPE_CHECKING:
    from evprobe.bench.json_schema import RunMeta
    from evprobe.bench.records import Record

RECORDS_FIX = "pass the run's benchmark with --bench DIR, or move records.jsonl aside and rerun `evprobe run`"


@dataclass(frozen=True)
class Judge:
    """One served judge: the model name the server serves and its base URL."""

    model: str
    base_url: str

    @property
    def name(self) -> str:
        return self.model

    @classmethod
    def parse(cls, spec: str) -> Judge:
        """`MODEL@URL`, e.g. `qwen2.5-7b@http://127.0.0.1:8000/v1` (the first `@http` splits them, so
        a URL may hold `user:password@`)."""
        m = re.fullmatch(r"(.+?)@(https?://[^\s/?#]+\S*)", spec)
        if m is None or printable(spec) != spec:  # no terminal escapes in a name judge.md and messages show
            raise InputError(f"--judge {judge_words(spec, 80)!r}: write MODEL@URL, e.g. "
                             "judge-a@http://127.0.0.1:8000/v1")
        return cls(m.group(1), m.group(2))

    @property
    def shown_url(self) -> str:
        """The base URL without its credentials (what judge.json and messages name), as run.json shows it."""
        return shown_url(self.base_url) or self.base_url


def key_envs(names: list[str] | None, n_judges: int) -> list[str | None]:
    """Each judge's key variable: none, one for every judge, or one per judge in --judge order."""
    names = list(names or [])
    for name in names:
        key_env_name(name)
    if len(names) in (0, 1):
        return [names[0] if names else None] * n_judges
    if len(names) != n_judges:
        raise InputError(f"--api-key-env given {len(names)} times for {n_judges} judges: give it once (one key for "
                         "every judge) or once per --judge, in the same order")
    return names


def checked_inputs(run: Path, bench: Path | None) -> tuple[RunMeta, list[Item], dict[str, Record]]:
    """(run.json, the benchmark's items, the run's records), every one checked against its schema
    and the records against the items: a fault is one line naming file, line, field and fix."""
    from evprobe.bench.json_schema import read_run_meta
    from evprobe.bench.manifest import META_FILE, read_items, read_meta
    from evprobe.bench.records import RECORDS_FILE, load_records

    meta = read_run_meta(run)
    if meta.protocol != "free":
        raise InputError(f"{run} is a {meta.protocol!r} run; the panel judges free-form replies "
                         "(evprobe run --protocol free)")
    bench = Path(meta.bench) if bench is None else Path(bench)
    if not (bench / META_FILE).is_file():
        raise InputError(f"{bench / META_FILE} not found; pass the run's benchmark with --bench DIR")
    if read_meta(bench)["items_sha256"] != meta.items_sha256:
        raise InputError(f"{bench} is not the benchmark {run} was run on (items hash differs); pass the right --bench")
    every = read_items(bench, validate_images=False)
    items = {it.item_id: it for it in every}
    path = run / RECORDS_FILE
    records = load_records(path)
    for key, rec in records.items():
        item = items.get(key)
        problem = (f"field 'item_id' is {judge_words(key, 80)!r}, not an item of {bench}" if item is None
                   else f"field 'request' is {rec.request!r}, but item {key!r} is {item.request!r}"
                   if rec.request != item.request
                   else f"field 'request' is {rec.request!r}, which a free run never asks"
                   if item.request not in ANSWER_REQUESTS else None)
        if problem is not None:
            raise InputError(f"{path}:{_line_of(path, key)}: {problem}; {RECORDS_FIX}")
    return meta, every, records


def _line_of(path: Path, item_id: str) -> int:
    """The line of records.jsonl holding `item_id`'s record (read only for an error's message)."""
    return next((n for n, line in read_complete_lines(path, warn=False) if json.loads(line).get("item_id") == item_id), 0)


__all__ = ["RECORDS_FIX", "Judge", "checked_inputs", "key_envs"]
