"""What a judged run's folder holds, shared by both panels (`bench.judges`, `bench.seed002_panel`):
the summary `evprobe judge` returns, the panel's answer written into a record, the files of
RUN/judged/ (each written atomically), plain shares, and audit.csv's stratified sample."""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from evprobe.bench.items import Item
from evprobe.bench.records import Record
from evprobe.core.bootstrap import Estimate
from evprobe.core.files import atomic_write_bytes, atomic_write_json
from evprobe.core.json_types import JsonObject


@dataclass(frozen=True)
class JudgeSummary:
    """What `judge_run` wrote: the folder, the replies judged, kappa and the panel-judged scores."""

    out: Path
    n_replies: int
    kappa: Estimate
    files: tuple[str, ...]


def as_judged(item: Item, record: Record, panel: str | None) -> Record:
    """The record with the panel's answer (None: invalid, undecided)."""
    if panel is None:
        return replace(record, valid=False, route="invalid:panel_undecided", choice=None, answer=None)
    letter = next(k for k, v in (item.options or {}).items() if v == panel)
    return replace(record, valid=True, route="panel", choice=letter, answer=panel)


def write_judged(out: Path, rows: list[JsonObject], judged_records: list[Record], scores: JsonObject,
                 result: JsonObject, md: str, audit: bytes) -> tuple[str, ...]:
    """RUN/judged/'s files, each written atomically; their names."""
    atomic_write_bytes(out / "judgments.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8"))
    atomic_write_bytes(out / "records.jsonl", "".join(json.dumps(r.to_json()) + "\n" for r in judged_records)
                       .encode("utf-8"))
    atomic_write_json(out / "scores.json", scores)
    atomic_write_json(out / "judge.json", result)
    atomic_write_bytes(out / "judge.md", md.encode("utf-8"))
    atomic_write_bytes(out / "audit.csv", audit)
    return ("judgments.jsonl", "records.jsonl", "scores.json", "judge.json", "judge.md", "audit.csv")


def share(rows: list[JsonObject], hit: Callable[[JsonObject], bool]) -> JsonObject:
    """A plain share with its count (agreement among the replies given; no interval: a description)."""
    n = len(rows)
    return {"value": (sum(bool(hit(r)) for r in rows) / n) if n else None, "n": n}


def audit(rows: list[JsonObject], names: list[str], per_stratum: int, seed: int,
           cell: Callable[[JsonObject, str], object] = lambda r, n: r["judges"][n]) -> bytes:
    """Up to `per_stratum` replies of each (request, rule, panel) cell, seeded; a blank `human` column.
    cell(row, judge): what the judge's column shows."""
    rng = np.random.default_rng(seed)
    strata: dict[tuple[str, str, str], list[JsonObject]] = {}
    for r in rows:
        strata.setdefault((r["request"], str(r["rule"]), str(r["panel"])), []).append(r)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["stratum", "item_id", "reply_to", "rule", *names, "panel", "human"])
    for key in sorted(strata):
        members = strata[key]
        for i in sorted(rng.choice(len(members), size=min(per_stratum, len(members)), replace=False)):
            r = members[i]
            w.writerow(["|".join(key), r["item_id"], r["request"], r["rule"],
                        *[cell(r, n) for n in names], r["panel"], ""])
    return buf.getvalue().encode("utf-8")

def rule_against_panel(rows: list[JsonObject], every: list[Item], records: Iterable[Record],
                       judged_records: list[Record], n_boot: int, seed: int) -> tuple[JsonObject, JsonObject]:
    """(judge.json's rule-against-panel keys: agreement, counts and both scorings' PECS parts; the
    panel-judged records' scores.json), the run's own records scored beside the panel's."""
    from evprobe.bench.scoring import score

    rule_scores = score(every, records, n_boot=n_boot, seed=seed)
    panel_scores = score(every, judged_records, n_boot=n_boot, seed=seed)
    part: JsonObject = {
        "rule_vs_panel": share([r for r in rows if r["panel"] is not None], lambda r: r["rule"] == r["panel"]),
        "confusion": {f"{a}|{b}": n for (a, b), n in sorted(Counter((str(r["rule"]), str(r["panel"])) for r in rows)
                                                             .items())},
        "scores": {name: {k: s.get(k) for k in ("pecs", "pecs_acc", "pecs_abs_rec", "pecs_false_abs")}
                   for name, s in (("rule", rule_scores), ("panel", panel_scores))},
    }
    return part, panel_scores


def scores_table(scores: JsonObject) -> list[str]:
    """judge.md's table of PECS and its parts judged by rule and by the panel (judge.json's `scores`)."""
    from evprobe.bench.score_cells import pct, plain

    lines = ["| measure | judged by rule (the parser) | judged by the panel |", "|---|---|---|"]
    rule, panel = scores["rule"], scores["panel"]
    for key, label, show in (("pecs", "PECS", plain), ("pecs_acc", "Acc (controls correct)", pct),
                             ("pecs_abs_rec", "AbsRec (voids abstained)", pct),
                             ("pecs_false_abs", "FalseAbs (controls abstained)", pct)):
        lines.append(f"| {label} | {show(rule.get(key))} | {show(panel.get(key))} |")
    return lines


__all__ = ["JudgeSummary", "as_judged", "audit", "rule_against_panel", "scores_table", "share", "write_judged"]
