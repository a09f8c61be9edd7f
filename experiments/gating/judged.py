"""`evprobe gating --judged OUT/judged`: a finished `--readout free` gating run re-scored from the LLM
panel's decisions (`evprobe judge OUT`; core.judged_replies) instead of the rule reader's.

No model loads and nothing is steered again: every row of OUT/results.jsonl keeps its reply, and only
its 0/1 reading changes (abstain = the panel's answer is undetermined; an undecided reply is invalid,
no abstention, and stays in every denominator). The rows then go through `report.aggregate`, the
code every gating run reports with, so the tables, paired changes and family-bootstrap intervals
(the same held-out families, B and seed) are computed as the rule reader's were. Written beside the
decisions, in OUT/judged/: gating.json, gating.md and gating.png, whose readout line names the panel
and its judges. OUT itself is never written. Decisions that do not match the run (another run's,
missing rows, a reply that is not the one judged) are refused in one line before any work
(core.judged_replies.read_decisions).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from evprobe.core.errors import InputError
from evprobe.core.files import atomic_write_bytes
from evprobe.core.jobs import read_meta
from evprobe.core.json_types import JsonObject
from evprobe.core.judged_replies import Decision, panel_name, read_decisions
from evprobe.core.lock import folder_lock
from evprobe.experiments.gating.config import FORMAT, JSON_FILE, MD_FILE, PNG_FILE, RUN_META_FILE
from evprobe.experiments.gating.report import FREE_READOUT, GatingResult, aggregate, markdown, plot

PANEL_READOUT = ("a generated free-form reply (free protocol, greedy, steered at every prompt position and generated "
                 "token) read by {panel} (evprobe judge; decisions in {path}): abstention = the panel's answer is "
                 "undetermined; an undecided or unread reply is no abstention and stays in every denominator")


def rescore(judged: str | Path, from_meta: Callable[[JsonObject, Path], Any]) -> tuple[GatingResult, tuple[str, ...]]:
    """Re-score OUT (= judged's parent) from the panel's decisions (module docstring); returns
    (the GatingResult, the files written in `judged`). from_meta: GatingJob.from_meta (the job as its
    meta.json rebuilds it; passed in, as job.py imports this module)."""
    judged = Path(judged)
    out = judged.parent
    meta = read_meta(out / RUN_META_FILE)
    if meta is None or meta.get("format") != FORMAT:
        raise InputError(f"--judged {judged}: {out / RUN_META_FILE} is no gating run's; give OUT/judged of a gating "
                         "run judged by `evprobe judge OUT`")
    if meta.get("readout") != "free":
        raise InputError(f"{out / RUN_META_FILE}: field 'readout' is {meta.get('readout')!r}: the run read option "
                         "letters, which no panel judges; rerun it with --readout free, then evprobe judge")
    with folder_lock(out, "evprobe gating --judged"), folder_lock(judged, "evprobe gating --judged"):
        decisions = read_decisions(out, judged)  # every refusal before any work
        job = from_meta(meta, out)
        done = job.store_at(out).done()
        wanted = [(u.key, c) for u in job.my_units() for c in job.conditions()]
        lost = [k for k in wanted if k not in done]
        if lost:
            raise InputError(f"{out}: the gating run is unfinished ({len(wanted) - len(lost)} of {len(wanted)} rows; "
                             f"first missing {lost[0]}); finish it (rerun evprobe gating), judge it, then re-score")
        rows = {k: {**done[k], **_reading(decisions[(done[k]["item_id"], done[k]["condition"])])} for k in wanted}
        result = aggregate(job.plan, rows, job.layer, job.best, job.directions, job.cosine)
        sentence = PANEL_READOUT.format(panel=panel_name(out, judged), path=judged / "judgments.jsonl")
        assert result.meta.readout == FREE_READOUT  # the rule reader's sentence, replaced by the panel's
        result = replace(result, meta=replace(result.meta, readout=sentence))
        atomic_write_bytes(judged / JSON_FILE, (json.dumps(result.to_json(), indent=1) + "\n").encode("utf-8"))
        atomic_write_bytes(judged / MD_FILE, markdown(result).encode("utf-8"))
        plot(result, judged / PNG_FILE)
    return result, (JSON_FILE, MD_FILE, PNG_FILE)


def _reading(decision: Decision) -> dict[str, object]:
    """A row's reading fields (FREE_ROW_TYPES: valid, route, answer, abstain) as the panel decided."""
    return {"valid": decision.valid, "route": decision.route, "answer": decision.answer, "abstain": decision.abstain}


__all__ = ["PANEL_READOUT", "rescore"]
