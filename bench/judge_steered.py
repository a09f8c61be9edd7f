"""`evprobe judge OUT` on a steering output: the panel judges every steered free-form reply (issue 55 item 3).

OUT is a gating or void-transfer folder run with `--readout free`, or a folder the library's
`evprobe.write_replies` wrote (`core.judged_replies`: the kinds, their files and key fields). Every
replies row (item x condition or run / direction / null index x layer x dose) is one judging unit,
with its item's question as the steered model read it (the free protocol's prompt under the row's
regime; the library's own question) and, on controls, the ground truth. The panel is either of
`evprobe judge`'s (`--panel fourway`, `--panel seed002`), asked and combined exactly as on a run:
the same prompts, readers, call settings and majorities (`bench.judges`, `bench.seed002_judges`).

A judge sees only the question, the ground truth and the reply, so rows with the same three are one
prompt, asked once (a dose that leaves a reply unchanged repeats it verbatim; under seed 002's sampled
judges, asking again would give one reply two readings): its decision is every such row's. The
prompt's key is the item and the sha256 of the three (`TASK:ITEM#HASH`), so the request cache of
OUT/judged/http-cache resumes an interrupted judgment with no request asked twice.

Writes OUT/judged/ (each file atomically; nothing else of OUT changes): judgments.jsonl (one row per
replies row, in its order: line, key, reply_sha256, the prompt's hash, the rule's reading, each
judge's decision, the panel's answer and route, and `abstain` / `valid`, the reading the steering
analyses take), judge.json (`steering`: what was judged, `core.judged_replies.steering_pin`; the
panel, judges, prompt counts, no-decision counts, agreement over the distinct prompts with family-
bootstrap intervals (`bench.judge_agreement.cell`), undecided rows, the rule's reading against the
panel's), judge.md and audit.csv (a stratified sample of the distinct prompts, a blank `human` column).
An undecided or unread reply is kept, scored invalid: never an abstention, in every denominator.
"""

from __future__ import annotations

import json
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evprobe.bench import seed002_judges as sj
from evprobe.bench.judge_agreement import cell
from evprobe.bench.judge_inputs import Judge
from evprobe.bench.judge_server import Calls, ask, open_backends, secrets_of
from evprobe.bench.judged_files import JudgeSummary, audit, share
from evprobe.core.bootstrap import Estimate
from evprobe.core.errors import InputError
from evprobe.core.files import atomic_write_bytes, atomic_write_json, atomic_write_jsonl
from evprobe.core.judged_replies import (JUDGE_JSON, JUDGMENTS, SteeringKind, replies_rows, sha256_text,
                                         steering_pin)
from evprobe.core.json_files import read_json_object
from evprobe.core.json_types import JsonObject


@dataclass(frozen=True)
class SteeredReply:
    """One replies row as a judging unit: where it is, what was asked, the reply and the rule's reading."""

    line: int
    key: JsonObject
    item_id: str
    family_id: str
    request: str
    control: bool
    question: str
    truth: str | None
    reply: str
    rule: str | None

    @property
    def prompt(self) -> str:
        """The hash naming the judge prompt (question, truth, reply) this row shares with its copies."""
        return sha256_text(json.dumps([self.question, self.truth, self.reply]))[:20]


def steered_units(out: Path, kind: SteeringKind) -> list[SteeredReply]:
    """Every replies row of `out` as a unit (module docstring); a row of an item the benchmark lacks is one line."""
    rows = replies_rows(out, kind)
    if not rows:
        raise InputError(f"{out / kind.replies_file}: no replies to judge")
    if kind.name == "replies":
        doc = read_json_object(out / kind.run_file, "write it again with evprobe.write_replies")[0]
        items = doc.get("items") if isinstance(doc.get("items"), dict) else {}
        units = []
        for line, row, key in rows:
            it = items.get(row["item_id"])
            if not isinstance(it, dict) or not isinstance(it.get("question"), str):
                raise InputError(f"{out / kind.replies_file}:{line}: field 'item_id' is {row['item_id']!r}, which "
                                 f"{out / kind.run_file} does not describe (its question); write both again")
            truth = it.get("truth")
            units.append(SteeredReply(line, dict(zip(kind.key_fields, key)), str(row["item_id"]),
                                      str(it.get("family_id", row["item_id"])), "own", truth is not None,
                                      it["question"], None if truth is None else str(truth), row["reply"], None))
        return units
    from evprobe.bench.manifest import read_items
    from evprobe.bench.protocols import build_prompt

    config = read_json_object(out / kind.run_file, "rerun the steering command")[0].get("config") or {}
    bench = Path(str(config.get("bench")))
    items = {it.item_id: it for it in read_items(bench, validate_images=False)}
    units = []
    for line, row, key in rows:
        it = items.get(row["item_id"])
        if it is None:
            raise InputError(f"{out / kind.replies_file}:{line}: field 'item_id' is {row['item_id']!r}, not an item of "
                             f"{bench}; judge the output beside the benchmark it was run on")
        regime = row.get("inference") or row.get("regime") or "standard"
        control = bool(it.resolved)
        units.append(SteeredReply(line, dict(zip(kind.key_fields, key)), it.item_id, it.family_id, it.request, control,
                                  build_prompt(it, "free", regime), str(it.reference_answer) if control else None,
                                  row["reply"], row.get("answer") if row.get("valid") else None))
    return units


def judge_steering(out: Path, kind: SteeringKind, judges: list[Judge], envs: list[str | None], panel: str,
                   per_stratum: int, concurrency: int, n_boot: int, seed: int) -> JudgeSummary:
    """Judge every steered reply of `out` (module docstring); the caller holds the folders' locks."""
    units = steered_units(out, kind)
    first: dict[str, SteeredReply] = {}
    for u in units:
        first.setdefault(u.prompt, u)
    distinct = list(first.values())
    judged = out / "judged"
    names = [j.name for j in judges]
    secrets = secrets_of(envs)
    with ExitStack() as stack:
        if panel == sj.PANEL:
            from evprobe.bench.seed002_panel import CALLS, read_reply

            prompts = [(f"{sj.ABSTENTION}:{u.item_id}#{u.prompt}", sj.abstention_prompt(u.question, u.reply))
                       for u in distinct]
            prompts += [(f"{sj.CORRECTNESS}:{u.item_id}#{u.prompt}",
                         sj.correctness_prompt(u.question, str(u.truth), u.reply)) for u in distinct if u.control]
            backends = open_backends(judges, envs, judged, concurrency, stack, CALLS)
            said = {j.name: ask(b, prompts, secrets, read_reply) for j, b in zip(judges, backends)}
            decided = {u.prompt: _seed002(u, names, said) for u in distinct}
        else:
            from evprobe.bench.judge_fourway import JUDGE_PROMPT, judge_decision, panel_decision

            prompts = [(f"{u.item_id}#{u.prompt}", JUDGE_PROMPT.format(question=u.question, reply=u.reply))
                       for u in distinct]
            backends = open_backends(judges, envs, judged, concurrency, stack, Calls())
            said = {j.name: ask(b, prompts, secrets, lambda _, text: judge_decision(text))
                    for j, b in zip(judges, backends)}
            decided = {}
            for u in distinct:
                each = {n: said[n][f"{u.item_id}#{u.prompt}"] for n in names}
                answer = panel_decision([a.decision for a in each.values()])
                words = {n: a.words for n, a in each.items() if a.words}
                decided[u.prompt] = {"judges": {n: a.decision for n, a in each.items()}, "panel": answer,
                                     "route": "panel" if answer is not None else "invalid:panel_undecided",
                                     **({"invalid": words} if words else {})}
    rows = [{"line": u.line, "key": u.key, "item_id": u.item_id, "family_id": u.family_id, "request": u.request,
             "reply_sha256": sha256_text(u.reply), "prompt": u.prompt, "rule": u.rule, **decided[u.prompt],
             "abstain": decided[u.prompt]["panel"] == "undetermined", "valid": decided[u.prompt]["panel"] is not None}
            for u in units]
    prompt_rows = [{"item_id": u.item_id, "family_id": u.family_id, "request": u.request, "rule": u.rule,
                    **decided[u.prompt]} for u in distinct]
    result, kappa = _summary(out, kind, panel, judges, envs, rows, prompt_rows, distinct, n_boot, seed)
    atomic_write_jsonl(judged / JUDGMENTS, rows)
    atomic_write_json(judged / JUDGE_JSON, result)
    atomic_write_bytes(judged / "judge.md", markdown(result).encode("utf-8"))
    cellf = (lambda r, n: "/".join(str(x) for x in (r["judges"][n], *([r["correctness"][n]] if "correctness" in r
                                                                        else [])))) if panel == sj.PANEL else None
    atomic_write_bytes(judged / "audit.csv", audit(prompt_rows, names, per_stratum, seed, *([cellf] if cellf else [])))
    return JudgeSummary(judged, len(rows), kappa, (JUDGMENTS, JUDGE_JSON, "judge.md", "audit.csv"))


def _seed002(u: SteeredReply, names: list[str], said: dict[str, Any]) -> JsonObject:
    """Seed 002's two judges on one prompt, combined as on a run (`bench.seed002_judges.combine`)."""
    abst = {n: said[n][f"{sj.ABSTENTION}:{u.item_id}#{u.prompt}"] for n in names}
    corr = {n: said[n][f"{sj.CORRECTNESS}:{u.item_id}#{u.prompt}"] for n in names} if u.control else {}
    combined = sj.combine(u.control, u.truth, u.rule, [None if a.decision is None else a.decision.abstained
                                                       for a in abst.values()],
                          [None if c.decision is None else c.decision.extracted for c in corr.values()])
    row: JsonObject = {"task": "ctrl-abstain" if u.control else "void-abstain",
                       "judges": {n: None if a.decision is None else ("abstained" if a.decision.abstained
                                                                       else "answered") for n, a in abst.items()}}
    if u.control:
        row["correctness"] = {n: None if c.decision is None else ("correct" if c.decision.matches(str(u.truth))
                                                                  else "incorrect") for n, c in corr.items()}
    row.update(panel_abstained=combined.abstained, panel=combined.answer, route=combined.route)
    words = {n: {t: a.words for t, a in ((sj.ABSTENTION, abst[n]), (sj.CORRECTNESS, corr.get(n)))
                 if a is not None and a.words} for n in names}
    if any(words.values()):
        row["invalid"] = {n: w for n, w in words.items() if w}
    return row


def _summary(out: Path, kind: SteeringKind, panel: str, judges: list[Judge], envs: list[str | None],
             rows: list[JsonObject], prompt_rows: list[JsonObject], distinct: list[SteeredReply], n_boot: int,
             seed: int) -> tuple[JsonObject, Estimate]:
    """(judge.json, the kappa `evprobe judge` prints: the abstention judge's under seed002, else the panel's)."""
    names = [j.name for j in judges]
    if panel == sj.PANEL:
        from evprobe.bench.seed002_panel import ABSTAIN_CATEGORIES, CORRECT_CATEGORIES

        controls = [{**r, "judges": r["correctness"]} for r in prompt_rows if "correctness" in r]
        agreement = {"abstention": cell("abstention", "all", prompt_rows, names, ABSTAIN_CATEGORIES, n_boot, seed),
                     "correctness": cell("correctness", "all", controls, names, CORRECT_CATEGORIES, n_boot, seed)}
    else:
        from evprobe.bench.judge_fourway import CATEGORIES

        agreement = {"decision": cell("decision", "all", prompt_rows, names, CATEGORIES, n_boot, seed)}
    result = {
        "panel": panel, "steering": steering_pin(out, kind, len(rows)),
        "judges": [{"model": j.model, "base_url": j.shown_url, "api_key_env": e} for j, e in zip(judges, envs)],
        "n_rows": len(rows), "n_prompts": len(distinct), "n_controls": sum(u.control for u in distinct),
        "no_decision": {n: sum(r["judges"][n] is None for r in prompt_rows) for n in names},
        "agreement": {k: c.to_json() for k, c in agreement.items()},
        "panel_undecided": sum(r["route"] == "invalid:panel_undecided" for r in rows),
        "panel_unread": sum(r["route"] == "invalid:panel_unread" for r in rows),
        "rule_vs_panel": share([r for r in rows if r["panel"] is not None], lambda r: r["rule"] == r["panel"]),
        "confusion": {f"{a}|{b}": n for (a, b), n in sorted(Counter((str(r["rule"]), str(r["panel"]))
                                                                   for r in rows).items())},
        "abstained": {"rule": share(rows, lambda r: r["rule"] == "undetermined"), "panel": share(rows, lambda r: r["abstain"])},
        "n_boot": n_boot, "seed": seed,
    }
    return result, next(iter(agreement.values())).fleiss_kappa


def markdown(result: JsonObject) -> str:
    from evprobe.bench.score_cells import plain
    from evprobe.core.estimate_text import missing_text

    s = result["steering"]
    pct = lambda x: missing_text("no rows") if x["value"] is None else f"{100 * x['value']:.1f}% (n={x['n']})"  # noqa: E731
    lines = [f"# Steered free-form replies judged by the panel ({result['panel']})", "",
             f"- steering output: {s['kind']} ({s['replies_file']}, {s['rows']} rows, sha256 {s['replies_sha256'][:12]}; "
             f"{s['run_file']} sha256 {s['run_sha256'][:12]})",
             f"- judges: {', '.join(j['model'] for j in result['judges'])}; {result['n_prompts']} distinct prompts "
             f"(question, truth, reply) asked once each, {result['n_controls']} on controls; no decision: "
             + ", ".join(f"{k} {v}" for k, v in result["no_decision"].items()),
             *(f"- {task}: Fleiss' kappa {plain(a['fleiss_kappa'])} over {a['n_decided_by_all']} of {a['n_replies']} "
               "prompts decided by every judge" for task, a in result["agreement"].items()),
             f"- rows undecided: {result['panel_undecided']}, unread: {result['panel_unread']} (both read invalid: no "
             "abstention, kept in every denominator)",
             f"- abstained, every row: rule reader {pct(result['abstained']['rule'])}, panel "
             f"{pct(result['abstained']['panel'])}; the rule's reading equals the panel's on "
             f"{pct(result['rule_vs_panel'])} of the rows the panel decided",
             "- rule | panel (rows): " + ", ".join(f"{k} {v}" for k, v in result["confusion"].items()), "",
             "Re-score the steering with these decisions: `evprobe gating --judged OUT/judged`, `evprobe void-transfer "
             "--judged OUT/judged`, or `evprobe.judged_readout(OUT)` for the library's replies."]
    return "\n".join(lines) + "\n"


__all__ = ["SteeredReply", "judge_steering", "markdown", "steered_units"]
