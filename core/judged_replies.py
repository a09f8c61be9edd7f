"""Steered free-form replies and a panel's decisions on them: the files a steering output and `evprobe
judge` share (issue 55 item 3: steering read on judged replies).

A steering output holds a run file and a replies file, one row per steered reply (`KINDS`):

- gating `--readout free`: meta.json (format evprobe-gating/1) and results.jsonl, keyed (item_id, condition);
- void-transfer `--readout free`: void_transfer.json and replies.jsonl, keyed (run, source, group, item_id,
  direction, index, layer, alpha);
- the library (`evprobe.write_replies`, analysis.judged_replies): replies.json and replies.jsonl, keyed
  (item_id, direction, index, layer, alpha).

`evprobe judge OUT` writes OUT/judged/ (bench.judge_steered): judgments.jsonl holds one row per replies
row, in the replies file's order: its `line`, its `key` (the kind's key fields), `reply_sha256`, each
judge's decision, the panel's answer and the 0/1 reading the steering analyses take in place of the
rule reader's (`abstain`: the panel's answer is undetermined; `valid`: the panel gave an answer: an
undecided reply is invalid, never an abstention, and stays in every denominator); judge.json's
`steering` names the kind, the run file's and the replies file's sha256 and the rows.

`read_decisions(out)` joins them back before any work, each fault one InputError line naming the file,
line and fix: no judged/ or no steering judgment in it; another run's decisions (the run file's sha256
differs); a replies row without its judgment, or a judgment without its row (missing rows, the first
named); a reply whose sha256 is not the one judged (a tampered reply, its line named); any other
change to the replies file since it was judged.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evprobe.core.errors import InputError, shown
from evprobe.core.json_files import read_json_lines, read_json_object
from evprobe.core.json_types import JsonObject

JUDGED = "judged"
JUDGMENTS, JUDGE_JSON = "judgments.jsonl", "judge.json"
REPLIES_FORMAT = "evprobe-steered-replies/1"  # the library's replies.json
JUDGE_AGAIN = "judge the steering output again (evprobe judge OUT --judge ...)"


@dataclass(frozen=True)
class SteeringKind:
    """One kind of steering output: its run file, its format there, its replies file and a row's key fields."""

    name: str
    run_file: str
    run_format: str
    replies_file: str
    key_fields: tuple[str, ...]


KINDS = (SteeringKind("gating", "meta.json", "evprobe-gating/1", "results.jsonl", ("item_id", "condition")),
         SteeringKind("void-transfer", "void_transfer.json", "evprobe-void-transfer/1", "replies.jsonl",
                      ("run", "source", "group", "item_id", "direction", "index", "layer", "alpha")),
         SteeringKind("replies", "replies.json", REPLIES_FORMAT, "replies.jsonl",
                      ("item_id", "direction", "index", "layer", "alpha")))


@dataclass(frozen=True)
class Decision:
    """The panel's reading of one steered reply: its answer (None: undecided or unread), why (route),
    and the 0/1 reading the steering analyses take."""

    answer: str | None
    route: str

    @property
    def valid(self) -> bool:
        return self.answer is not None

    @property
    def abstain(self) -> bool:
        return self.answer == "undetermined"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def steering_kind(out: Path) -> SteeringKind | None:
    """The kind of steering output `out` holds (its run file names the format), or None."""
    for kind in KINDS:
        path = out / kind.run_file
        if path.is_file():
            try:
                fmt = json.loads(path.read_text()).get("format")
            except (ValueError, AttributeError, OSError):
                continue
            if fmt == kind.run_format:
                return kind
    return None


def replies_rows(out: Path, kind: SteeringKind) -> list[tuple[int, JsonObject, tuple[Any, ...]]]:
    """(line, row, key) of every row of the replies file; a row without a reply or a key field, or a key
    given twice, is one line."""
    path = out / kind.replies_file
    if not path.is_file():
        raise InputError(f"{path} not found; a {kind.name} output holds its replies there (run it with --readout free)")
    rows, seen = [], {}
    for line, row in read_json_lines(path, f"rerun the {kind.name} command into another folder"):
        missing = next((f for f in ("reply", *kind.key_fields) if f not in row), None)
        if missing is not None or not isinstance(row["reply"], str):
            what = "the letters readout's (no reply)" if missing == "reply" else f"without field {missing!r}"
            raise InputError(f"{path}:{line}: a row {what}; the panel judges free-form replies: run the "
                             f"{kind.name} command with --readout free")
        key = tuple(row[f] for f in kind.key_fields)
        if key in seen:
            raise InputError(f"{path}:{line}: a second row for {shown(dict(zip(kind.key_fields, key)), 120)} "
                             f"(first at line {seen[key]}); rerun into another folder")
        seen[key] = line
        rows.append((line, row, key))
    return rows


def steering_pin(out: Path, kind: SteeringKind, n_rows: int) -> JsonObject:
    """judge.json's `steering`: what the decisions were made on."""
    return {"kind": kind.name, "run_file": kind.run_file, "run_sha256": sha256_file(out / kind.run_file),
            "replies_file": kind.replies_file, "replies_sha256": sha256_file(out / kind.replies_file),
            "rows": n_rows}


def read_decisions(out: str | Path, judged: str | Path | None = None) -> dict[tuple[Any, ...], Decision]:
    """The panel's decision per replies row of the steering output `out` (keyed by the kind's key
    fields), from `judged` (default OUT/judged), checked against the output (module docstring)."""
    out = Path(out)
    judged = out / JUDGED if judged is None else Path(judged)
    kind = steering_kind(out)
    if kind is None:
        raise InputError(f"{out} holds no steering output with free-form replies (gating or void-transfer with "
                         "--readout free, or the library's write_replies)")
    pin_path = judged / JUDGE_JSON
    if not pin_path.is_file():
        raise InputError(f"{pin_path} not found; judge the replies first: evprobe judge {out} --judge ...")
    pin = read_json_object(pin_path, JUDGE_AGAIN)[0].get("steering")
    if not isinstance(pin, dict) or pin.get("kind") != kind.name:
        raise InputError(f"{pin_path}: field 'steering' is {shown(pin, 80)}, not a judgment of {out}'s {kind.name} "
                         f"replies; {JUDGE_AGAIN}")
    if pin.get("run_sha256") != sha256_file(out / kind.run_file):
        raise InputError(f"{pin_path}: field 'steering.run_sha256' is another run's ({out / kind.run_file} differs): "
                         f"these decisions judged another steering run; {JUDGE_AGAIN}")
    rows = replies_rows(out, kind)
    path = judged / JUDGMENTS
    if not path.is_file():
        raise InputError(f"{path} not found; {JUDGE_AGAIN}")
    judgments = {tuple(j.get("key", {}).get(f) for f in kind.key_fields) if isinstance(j.get("key"), dict) else None:
                 (n, j) for n, j in read_json_lines(path, JUDGE_AGAIN)}
    lost = [(line, key) for line, _, key in rows if key not in judgments]
    if lost or len(judgments) != len(rows):
        where = (f"{out / kind.replies_file}:{lost[0][0]} ({shown(dict(zip(kind.key_fields, lost[0][1])), 120)}) has "
                 "no judgment" if lost else f"{path} holds {len(judgments) - len(rows)} judgment(s) of rows the "
                 "replies file lacks")
        raise InputError(f"{path}: missing rows: {len(rows)} replies, {len(judgments)} judgments; {where}; {JUDGE_AGAIN}")
    decisions = {}
    for line, row, key in rows:
        n, j = judgments[key]
        if j.get("reply_sha256") != sha256_text(row["reply"]):
            raise InputError(f"{path}:{n}: field 'reply_sha256' is not the sha256 of the reply at "
                             f"{out / kind.replies_file}:{line}: the reply differs from the one judged (tampered or "
                             f"rewritten); {JUDGE_AGAIN}")
        answer, route = j.get("panel"), j.get("route")
        if answer not in (None, "yes", "no", "undetermined") or not isinstance(route, str):
            raise InputError(f"{path}:{n}: field 'panel' is {shown(answer)} (route {shown(route)}); {JUDGE_AGAIN}")
        decisions[key] = Decision(answer, route)
    if pin.get("replies_sha256") != sha256_file(out / kind.replies_file):
        raise InputError(f"{pin_path}: field 'steering.replies_sha256' differs from {out / kind.replies_file}'s: the "
                         f"replies file changed since it was judged; {JUDGE_AGAIN}")
    return decisions


def panel_name(out: str | Path, judged: str | Path | None = None) -> str:
    """The panel and judges that made the decisions, as a report names its reader."""
    judged = Path(out) / JUDGED if judged is None else Path(judged)
    result = read_json_object(judged / JUDGE_JSON, JUDGE_AGAIN)[0]
    models = ", ".join(str(j.get("model")) for j in result.get("judges", []) if isinstance(j, dict))
    return f"the LLM panel ({result.get('panel', 'fourway')}: {models})"


__all__ = ["JUDGED", "JUDGE_JSON", "JUDGMENTS", "KINDS", "REPLIES_FORMAT", "Decision", "SteeringKind", "panel_name",
           "read_decisions", "replies_rows", "sha256_file", "sha256_text", "steering_kind", "steering_pin"]
