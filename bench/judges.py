"""A panel of LLM judges for free-form replies (seed 002, section 4.2 and appendix D): `evprobe judge RUN`.

A run under the free protocol (`bench.protocols`) is already judged once by rule: the parser reads
its words and leaves invalid what it cannot decide. This module asks a panel of served models
(OpenAI-compatible servers, through the openai backend: bounded concurrency, retries, a request
cache) to classify each answer reply as it was written:

    A. it answers yes   B. it answers no   C. it says the answer cannot be determined (abstains)
    D. none of these clearly (hedges, gives both, answers something else)

A judge's reply is read strictly (`bench.judge_reader.read_label`): the letter alone (optionally
bracketed or followed by a period) or the letter followed by its own option words is a decision;
anything else (two letters, "A is wrong; the answer is C", other words) is no decision, kept with
the judge's words (cut, control characters escaped) in judgments.jsonl. The panel's
decision is the answer (yes, no, undetermined) that a strict majority of the judges gives; a
split panel, a majority for D, or too few decisions leave the reply undecided, which is scored as
an invalid reply (kept in every denominator, never correct, never an abstention).

Outputs, in RUN/judged/: `judgments.jsonl` (per reply: the rule's reading, each judge's decision and
the panel's), `records.jsonl` (the run's records with the panel's decisions as answers), `scores.json`
(those records scored by `bench.scoring.score`, the same families and seed as the run's own scores),
`judge.json` and `judge.md` (Fleiss' kappa over the replies every judge decided, with a family-
bootstrap interval; unanimity; each pair's agreement; the panel against the rule; the rule-judged and
the panel-judged answer scores side by side; and, as seed 002's Table 7, the same agreement per task x
dataset cell, each with its family-bootstrap interval, n and families: `bench.judge_agreement`, whose
docstring says what plays the seed's task (control or void item) and dataset (the system)) and
`audit.csv`, a stratified sample for a human audit: up to `per_stratum` replies of each (request, rule reading, panel decision) cell, seeded, with an
empty `human` column.

That is the default panel (`--panel fourway`). `--panel seed002` asks seed 002's own two judges
instead (appendix D.2 abstention and D.3 correctness, their prompts verbatim, JSON replies read
strictly, temperature 0.8 and 512 tokens: `bench.seed002_judges`, `bench.seed002_panel`). judge.json
pins the panel (`"panel"`; a judge.json without the key is the four-way panel's), and a folder one
panel wrote refuses the other in one line (`check_panel`). The server plumbing both share (opening,
asking, the judges' words kept): `bench.judge_server`.

Like every writer, it checks before it asks: run.json (`bench.json_schema.RunMeta`), the benchmark
(its items hash must be the run's), every record (schema, an item of the benchmark, that item's
request, an answer request) are each a one-line InputError naming file, line, field and fix, and
the judges' servers (each lists its model, each key is accepted) are all checked before the first
judge request. It holds the folder lock (`core.lock`) of RUN (so a run still writing it, or another
command writing it, refuses the judge, and nothing changes the records under it) and of
RUN/judged. Keys come only from the environment (`--api-key-env NAME`, as `evprobe run --backend
openai`); judge.json names the variable, never its value, and a URL's password is left out.

Fleiss' kappa (Fleiss 1971) is written out in `bench.judge_agreement` (`fleiss_kappa`, a few lines)
rather than taken from statsmodels, which evprobe does not otherwise need; a test checks it on the published example.
Its interval resamples families (`FamilyBootstrap`): kappa is a function of per-family sums (the
agreement P_i and the category counts), so every resample recomputes it from its families. Coverage
where the truth is known (benchmarks/coverage_fleiss_kappa.py, the percentile interval hulled with the
jackknife t interval of `bench.judge_agreement`): 94.2-97.2% at 8, 30 and 144 families.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import numpy as np
from evprobe.bench.items import Item
from evprobe.bench.judge_agreement import fleiss_kappa, kappa_estimate
from evprobe.bench.judge_inputs import Judge, checked_inputs, key_envs
from evprobe.bench.judge_fourway import (CATEGORIES, DECISIONS, JUDGE_OPTIONS, JUDGE_PROMPT, judge_decision,
                                         panel_decision)
from evprobe.bench.judge_server import ask, open_backends, secrets_of
from evprobe.bench.judged_files import (
    JudgeSummary,
    as_judged,
    audit,
    rule_against_panel,
    scores_table,
    share,
    write_judged,
)
from evprobe.bench.protocols import build_prompt
from evprobe.bench.records import Record
from evprobe.core.bootstrap import DEFAULT_N_BOOT, DEFAULT_SEED
from evprobe.core.errors import InputError, shown
from evprobe.core.json_types import JsonObject
from evprobe.core.lock import folder_lock

JUDGED = "judged"
FOURWAY, SEED002 = "fourway", "seed002"  # the panels (judge.json's `panel`)
PANELS = (FOURWAY, SEED002)
LOCK_FIX = "wait for it to finish, then judge the run"


def judge_run(run_dir: str | Path, judges: list[Judge], *, bench: str | Path | None = None,
              api_key_env: list[str] | None = None, per_stratum: int = 5, concurrency: int = 4,
              n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED, panel: str = FOURWAY) -> JudgeSummary:
    """Judge a free-protocol run's answer replies with the panel (module docstring); writes RUN/judged/.
    panel: FOURWAY (one four-way question) or SEED002 (the seed's two judges, `bench.seed002_panel`).
    A steering output (gating or void-transfer --readout free, the library's write_replies) is judged
    row by row instead (`bench.judge_steered`); `bench` is then the one its config names."""
    run = Path(run_dir)
    if panel not in PANELS:
        raise InputError(f"--panel {panel!r}: choose one of {', '.join(PANELS)}")
    if len(judges) < 2 or len({j.name for j in judges}) != len(judges):
        raise InputError("give two or more distinct judges (--judge MODEL@URL, repeated); agreement needs two raters")
    envs = key_envs(api_key_env, len(judges))
    from evprobe.bench.json_schema import read_run_meta
    from evprobe.core.judged_replies import steering_kind

    kind = steering_kind(run)
    if kind is not None:  # a steering output's replies (bench.judge_steered)
        from evprobe.bench.judge_steered import judge_steering

        with folder_lock(run, "evprobe judge", fix=LOCK_FIX), folder_lock(run / JUDGED, "evprobe judge", fix=LOCK_FIX):
            check_panel(run / JUDGED, panel)
            return judge_steering(run, kind, judges, envs, panel, per_stratum, concurrency, n_boot, seed)
    read_run_meta(run)  # a folder that is no run is refused before the lock would make RUN/judged in it
    with folder_lock(run, "evprobe judge", fix=LOCK_FIX), folder_lock(run / JUDGED, "evprobe judge", fix=LOCK_FIX):
        check_panel(run / JUDGED, panel)
        meta, every, records = checked_inputs(run, None if bench is None else Path(bench))
        answered = [(it, records[it.item_id]) for it in every
                    if it.item_id in records and records[it.item_id].error is None]
        if not answered:
            raise InputError(f"{run}: no answer replies to judge")
        if panel == SEED002:
            from evprobe.bench.seed002_panel import judge_seed002

            return judge_seed002(run / JUDGED, meta, every, records, answered, judges, envs, per_stratum, concurrency,
                                 n_boot, seed)
        prompts = [(it.item_id, JUDGE_PROMPT.format(question=build_prompt(it, "free", meta.regime), reply=r.reply))
                   for it, r in answered]
        out = run / JUDGED
        secrets = secrets_of(envs)
        with ExitStack() as stack:
            backends = open_backends(judges, envs, out, concurrency, stack)
            decided = {j.name: ask(b, prompts, secrets, lambda _, text: judge_decision(text))
                       for j, b in zip(judges, backends)}
        # a reply the backend never gave (`error`) has nothing to judge: it stays as it is, invalid, in
        # the denominators of both scorings
        rows, judged_records = [], [r for r in records.values() if r.error is not None]
        for it, r in answered:
            each = [decided[j.name][it.item_id].decision for j in judges]
            panel_says = panel_decision(each)
            invalid = {j.name: decided[j.name][it.item_id].words for j in judges if decided[j.name][it.item_id].words}
            rows.append({"item_id": it.item_id, "family_id": it.family_id, "request": it.request,
                         "rule": r.answer if r.valid else None, "judges": dict(zip([j.name for j in judges], each)),
                         "panel": panel_says, **({"invalid": invalid} if invalid else {})})
            judged_records.append(as_judged(it, r, panel_says))
        return _write(out, rows, every, records, judged_records, judges, envs, per_stratum, n_boot, seed)


def check_panel(out: Path, panel: str) -> None:
    """Refuse to judge a folder another panel wrote (judge.json's `panel`; a judge.json written before
    the key existed is the four-way panel's): the two would mix in one judgments.jsonl and audit."""
    from evprobe.core.json_files import read_json_object

    path = out / "judge.json"
    if not path.is_file():
        return
    had = read_json_object(path, f"move {out} aside and judge again")[0].get("panel", FOURWAY)
    if had != panel:
        raise InputError(f"{path}: field 'panel' is {shown(had)} (written by `evprobe judge --panel {had}`), this is "
                         f"--panel {panel}; move {out} aside to judge with another panel, or pass --panel {had}")


def _write(out: Path, rows: list[JsonObject], every: list[Item], records: dict[str, Record], judged_records: list[Record],
           judges: list[Judge], envs: list[str | None], per_stratum: int, n_boot: int, seed: int) -> JudgeSummary:
    """judge.json / .md, the judged records and scores, and audit.csv. every: the benchmark's items;
    records: the run's own (rule-judged) records."""
    from evprobe.bench.judge_agreement import agreement_cells, cells_json

    names = [j.name for j in judges]
    full = [r for r in rows if all(r["judges"][n] is not None for n in names)]
    table = np.array([[sum(r["judges"][n] == c for n in names) for c in CATEGORIES] for r in full], dtype=float)
    kappa = kappa_estimate(table.reshape(-1, len(CATEGORIES)), [r["family_id"] for r in full], n_boot, seed)
    pairs = {f"{a} / {b}": share([r for r in rows if r["judges"][a] is not None and r["judges"][b] is not None],
                                  lambda r: r["judges"][a] == r["judges"][b]) for i, a in enumerate(names)
             for b in names[i + 1:]}
    compared, panel_scores = rule_against_panel(rows, every, records.values(), judged_records, n_boot, seed)
    result = {
        "panel": FOURWAY,
        "judges": [{"model": j.model, "base_url": j.shown_url, "api_key_env": e} for j, e in zip(judges, envs)],
        "prompt": JUDGE_PROMPT,
        "n_replies": len(rows), "n_decided_by_all": len(full),
        "no_decision": {n: sum(r["judges"][n] is None for r in rows) for n in names},
        "fleiss_kappa": kappa.to_json(), "unanimous": share(full, lambda r: len(set(r["judges"].values())) == 1),
        "pairwise_agreement": pairs,
        "panel_undecided": sum(r["panel"] is None for r in rows),
        **compared,
        "n_boot": n_boot, "seed": seed,
        # seed 002's Table 7: the same agreement per task x dataset (bench.judge_agreement)
        "agreement_by_task_dataset": cells_json(agreement_cells(rows, {it.item_id: it for it in every}, names,
                                                                CATEGORIES, n_boot, seed)),
    }
    files = write_judged(out, rows, judged_records, panel_scores, result, markdown(result),
                         audit(rows, names, per_stratum, seed))
    return JudgeSummary(out, len(rows), kappa, files)


def markdown(result: JsonObject) -> str:
    from evprobe.bench.score_cells import plain
    from evprobe.core.estimate_text import missing_text

    def share(s: JsonObject) -> str:
        return missing_text("no replies to compare") if s["value"] is None else f"{100 * s['value']:.1f}% (n={s['n']})"

    lines = ["# Free-form replies judged by a panel (seed 002, section 4.2 and appendix D)", "",
             f"- judges: {', '.join(j['model'] for j in result['judges'])}; {result['n_replies']} answer replies, "
             f"{result['n_decided_by_all']} decided by every judge; no decision: "
             + ", ".join(f"{k} {v}" for k, v in result["no_decision"].items()),
             f"- Fleiss' kappa (A-D, replies decided by every judge; family-bootstrap interval): "
             f"{plain(result['fleiss_kappa'])}; unanimous {share(result['unanimous'])}",
             "- pairwise agreement: " + "; ".join(f"{k} {share(v)}" for k, v in result["pairwise_agreement"].items()),
             f"- panel undecided (split, or a majority for D): {result['panel_undecided']} (scored invalid); the rule's "
             f"reading equals the panel's on {share(result['rule_vs_panel'])} of the decided replies", "",
             *scores_table(result["scores"])]
    lines += ["", "Rule reading | panel decision (counts): "
              + ", ".join(f"{k} {v}" for k, v in result["confusion"].items())]
    if "agreement_by_task_dataset" in result:
        from evprobe.bench.judge_agreement import cells_markdown

        lines += ["", *cells_markdown(result["agreement_by_task_dataset"])]
    return "\n".join(lines) + "\n"


__all__ = ["CATEGORIES", "DECISIONS", "JUDGE_OPTIONS", "JUDGE_PROMPT", "Judge", "JudgeSummary", "fleiss_kappa",
           "judge_decision", "judge_run", "kappa_estimate", "key_envs", "markdown", "panel_decision"]
