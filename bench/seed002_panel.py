"""`evprobe judge RUN --panel seed002`: seed 002's two judges on every answer reply (section 4.2, appendix D).

Each judge is asked, per answer reply, the abstention question (D.2: ABSTAINED or PROVIDED AN
ANSWER) and, on controls (resolved items), the correctness question (D.3: the ground truth given,
the answer extracted), with the seed's call settings (Table 8: temperature 0.8, at most 512 output
tokens, a JSON schema as response_format; `bench.judge_server.Calls`). Prompts, strict reading of
the JSON replies and the combination into one answer per reply: `bench.seed002_judges`. Two of
Table 8's judge settings are not taken: its 12 requests in flight is `--concurrency` (a speed
setting, default 4), and its 0 retries: evprobe keeps the backend's retries of a connection error,
timeout, 429 or 5xx, which only get an answer where the seed would have none (a readable answer is
never asked again, and each request's sampling seed is fixed by its key, so a retry draws no
second opinion).

Writes RUN/judged/ as the four-way panel does (`bench.judges`: judgments.jsonl, records.jsonl,
scores.json, judge.json, judge.md, audit.csv), judge.json pinning `"panel": "seed002"`. Agreement is
reported per judge task as the seed's Table 7 gives it: `void-abstain` (the abstention judge on
voids), `ctrl-abstain` (on controls) and `correctness` (each judge's extracted value matched
against the ground truth, on controls), per task pooled and per task x dataset (`bench.judge_agreement`).
A judgments row keeps, per judge, its abstention (`judges`: abstained / answered / None), its
correctness (`correctness`: correct / incorrect / None), the value it extracted and its own
`correct`; a reply with no decision keeps the judge's words under `invalid`.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from evprobe.bench import seed002_judges as sj
from evprobe.bench.judge_agreement import cell, cells_json, grouped_cells
from evprobe.bench.judge_server import Answer, Calls, ask, open_backends, secrets_of
from evprobe.bench.judged_files import (
    JudgeSummary,
    as_judged,
    audit,
    rule_against_panel,
    scores_table,
    write_judged,
)
from evprobe.bench.protocols import build_prompt
from evprobe.core.json_types import JsonObject

if TYPE_CHECKING:
    from evprobe.bench.items import Item
    from evprobe.bench.json_schema import RunMeta
    from evprobe.bench.judge_inputs import Judge
    from evprobe.bench.records import Record

ABSTAIN_CATEGORIES = ("abstained", "answered")
CORRECT_CATEGORIES = ("correct", "incorrect")
TASKS = {"void-abstain": ABSTAIN_CATEGORIES, "ctrl-abstain": ABSTAIN_CATEGORIES, "correctness": CORRECT_CATEGORIES}
TASK = ("seed 002's judge tasks (Table 7): void-abstain and ctrl-abstain (the abstention judge, D.2, on voids and on "
        "controls) and correctness (each judge's extracted value matched against the ground truth, D.3, on controls)")
CALLS = Calls(temperature=sj.TEMPERATURE, max_tokens=sj.MAX_TOKENS, schemas=sj.SCHEMAS)


def read_reply(key: str, text: str) -> object:
    """A judge's reply to a prompt keyed `TASK:...`, read by that task's strict reader."""
    return sj.read_abstention(text) if key.startswith(sj.ABSTENTION + ":") else sj.read_correctness(text)


def judge_seed002(out: Path, meta: RunMeta, every: list[Item], records: dict[str, Record],
                  answered: list[tuple[Item, Record]], judges: list[Judge], envs: list[str | None], per_stratum: int,
                  concurrency: int, n_boot: int, seed: int) -> JudgeSummary:
    """Ask, combine and write (module docstring); the run's inputs are checked and locked by the caller."""
    prompts = []
    for it, r in answered:
        question = build_prompt(it, "free", meta.regime)
        prompts.append((f"{sj.ABSTENTION}:{it.item_id}", sj.abstention_prompt(question, r.reply)))
        if it.resolved is True:
            prompts.append((f"{sj.CORRECTNESS}:{it.item_id}",
                            sj.correctness_prompt(question, str(it.reference_answer), r.reply)))
    secrets = secrets_of(envs)
    with ExitStack() as stack:
        backends = open_backends(judges, envs, out, concurrency, stack, CALLS)
        said = {j.name: ask(b, prompts, secrets, read_reply) for j, b in zip(judges, backends)}
    names = [j.name for j in judges]
    rows, judged_records = [], [r for r in records.values() if r.error is not None]
    for it, r in answered:
        row = _row(it, r, names, said)
        rows.append(row)
        judged_records.append(as_judged(it, r, row["panel"]) if row["panel"] is not None
                              else _invalid(r, str(row["route"])))
    return _write(out, rows, every, records, judged_records, judges, envs, per_stratum, n_boot, seed)


def _invalid(record: Record, route: str) -> Record:
    from dataclasses import replace

    return replace(record, valid=False, route=route, choice=None, answer=None)


def _row(it: Item, r: Record, names: list[str], said: dict[str, dict[str, Answer]]) -> JsonObject:
    """One judgments.jsonl row (module docstring)."""
    control = it.resolved is True
    abst = {n: said[n][f"{sj.ABSTENTION}:{it.item_id}"] for n in names}
    corr = {n: said[n][f"{sj.CORRECTNESS}:{it.item_id}"] for n in names} if control else {}
    truth = str(it.reference_answer)
    rule = r.answer if r.valid else None
    combined = sj.combine(control, truth if control else None, rule,
                          [None if a.decision is None else a.decision.abstained for a in abst.values()],
                          [None if c.decision is None else c.decision.extracted for c in corr.values()])
    row: JsonObject = {
        "item_id": it.item_id, "family_id": it.family_id, "request": it.request,
        "task": "ctrl-abstain" if control else "void-abstain", "rule": rule,
        "judges": {n: None if a.decision is None else ABSTAIN_CATEGORIES[0 if a.decision.abstained else 1]
                   for n, a in abst.items()}}
    if control:
        row["truth"] = truth
        row["correctness"] = {n: None if c.decision is None else CORRECT_CATEGORIES[0 if c.decision.matches(truth)
                                                                                     else 1] for n, c in corr.items()}
        row["extracted"] = {n: None if c.decision is None else c.decision.extracted for n, c in corr.items()}
        row["judge_said_correct"] = {n: None if c.decision is None else c.decision.correct for n, c in corr.items()}
    row.update(panel_abstained=combined.abstained, panel_correct=combined.correct, panel=combined.answer,
               route=combined.route)
    invalid = {n: {task: a.words for task, a in ((sj.ABSTENTION, abst[n]), (sj.CORRECTNESS, corr.get(n)))
                   if a is not None and a.words} for n in names}
    invalid = {n: v for n, v in invalid.items() if v}
    if invalid:
        row["invalid"] = invalid
    return row


def _task_rows(rows: list[JsonObject]) -> dict[str, list[JsonObject]]:
    """Each task's rows with that task's decisions under `judges` (what bench.judge_agreement reads)."""
    out: dict[str, list[JsonObject]] = {t: [] for t in TASKS}
    for r in rows:
        out[str(r["task"])].append(r)
        if "correctness" in r:
            out["correctness"].append({**r, "judges": r["correctness"]})
    return out


def _write(out: Path, rows: list[JsonObject], every: list[Item], records: dict[str, Record],
           judged_records: list[Record], judges: list[Judge], envs: list[str | None], per_stratum: int,
           n_boot: int, seed: int) -> JudgeSummary:

    names = [j.name for j in judges]
    items = {it.item_id: it for it in every}
    by_task = _task_rows(rows)
    abstention = [r for t in ("void-abstain", "ctrl-abstain") for r in by_task[t]]
    pooled = {"abstention": cell("abstention", "all", abstention, names, ABSTAIN_CATEGORIES, n_boot, seed),
              "correctness": cell("correctness", "all", by_task["correctness"], names, CORRECT_CATEGORIES, n_boot,
                                  seed)}
    groups: dict[tuple[str, str], list[JsonObject]] = {}
    for task, task_rows in by_task.items():
        for r in task_rows:
            groups.setdefault((task, items[str(r["item_id"])].system), []).append(r)
    controls = by_task["correctness"]
    own = [(r["judge_said_correct"][n], r["correctness"][n]) for r in controls for n in names
           if r["judge_said_correct"][n] is not None]
    compared, panel_scores = rule_against_panel(rows, every, records.values(), judged_records, n_boot, seed)
    result: JsonObject = {
        "panel": sj.PANEL,
        "judges": [{"model": j.model, "base_url": j.shown_url, "api_key_env": e} for j, e in zip(judges, envs)],
        "prompts": {sj.ABSTENTION: sj.ABSTENTION_PROMPT + sj.INPUTS,
                    sj.CORRECTNESS: sj.CORRECTNESS_PROMPT + sj.CORRECTNESS_INPUTS},
        "calls": {"temperature": CALLS.temperature, "max_tokens": CALLS.max_tokens, "response_format": "json_schema"},
        "schemas": dict(sj.SCHEMAS), "combination": sj.COMBINATION,
        "n_replies": len(rows), "n_controls": len(controls),
        "no_decision": {n: {sj.ABSTENTION: sum(r["judges"][n] is None for r in rows),
                            sj.CORRECTNESS: sum(r["correctness"][n] is None for r in controls)} for n in names},
        "agreement": {k: c.to_json() for k, c in pooled.items()},
        "panel_undecided": sum(r["route"] == "invalid:panel_undecided" for r in rows),
        "panel_unread": sum(r["route"] == "invalid:panel_unread" for r in rows),
        "abstained_but_correct": sum(r["panel_abstained"] is True and r["panel_correct"] is True for r in controls),
        "judge_correct_vs_match": {"value": (sum(a == (b == "correct") for a, b in own) / len(own)) if own else None,
                                   "n": len(own)},
        **compared,
        "n_boot": n_boot, "seed": seed,
        "agreement_by_task_dataset": cells_json(grouped_cells(groups, names, TASKS, n_boot, seed), TASK),
    }
    audit_csv = audit(rows, names, per_stratum, seed, lambda r, n: "/".join(
        str(x) for x in (r["judges"][n], *([r["correctness"][n]] if "correctness" in r else []))))
    files = write_judged(out, rows, judged_records, panel_scores, result, markdown(result), audit_csv)
    return JudgeSummary(out, len(rows), pooled["abstention"].fleiss_kappa, files)


def markdown(result: JsonObject) -> str:
    from evprobe.bench.judge_agreement import cells_markdown
    from evprobe.bench.score_cells import pct, plain

    lines = ["# Free-form replies judged by seed 002's two judges (section 4.2, appendix D)", "",
             f"- judges: {', '.join(j['model'] for j in result['judges'])}; {result['n_replies']} answer replies "
             f"({result['n_controls']} on controls); temperature {result['calls']['temperature']}, at most "
             f"{result['calls']['max_tokens']} tokens, JSON schema",
             "- no decision (abstention / correctness): " + ", ".join(
                 f"{k} {v['abstention']} / {v['correctness']}" for k, v in result["no_decision"].items())]
    for task, a in result["agreement"].items():
        why = f" ({a['reason']})" if "reason" in a else ""
        lines.append(f"- {task}: Fleiss' kappa {plain(a['fleiss_kappa'])}, unanimous (%) {pct(a['unanimous'])}, "
                     f"{a['n_decided_by_all']} of {a['n_replies']} replies decided by every judge{why}")
    lines += [f"- panel undecided: {result['panel_undecided']}, answer unread: {result['panel_unread']} (both scored "
              f"invalid); abstained on a control yet extracted correctly: {result['abstained_but_correct']} (the "
              "seed counts these correct too)", f"- combination: {result['combination']}", "",
              *scores_table(result["scores"])]
    lines += ["", *cells_markdown(result["agreement_by_task_dataset"])]
    return "\n".join(lines) + "\n"


__all__ = ["CALLS", "TASKS", "judge_seed002", "markdown", "read_reply"]
