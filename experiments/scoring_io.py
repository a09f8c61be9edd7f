"""Files around scoring: read a run and its benchmark, write scores.json / scores.md, compare.

Scores are tied to the records they scored: scores.json holds, under "records", the sha256 of the
complete lines of RUN/records.jsonl that were scored (an unterminated last line, a run killed
mid-append, is not part of it) and their count. Whatever reads scores.json (`load_scores`: compare,
report) checks that hash against records.jsonl as it is now and re-scores the run when it differs
(with the stale scores' n_boot and seed); where re-scoring is not possible (the run's benchmark is
gone), it refuses in one line naming `evprobe score RUN --bench DIR`. scores.md is written before
scores.json, so a fresh scores.json means a scores.md of the same records.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from evprobe.bench.json_schema import RunMeta, read_run_meta
from evprobe.bench.manifest import META_FILE, read_items, read_meta
from evprobe.core.errors import InputError
from evprobe.core.files import atomic_write_bytes, atomic_write_json, warn_incomplete_line
from evprobe.core.json_files import parse_json
from evprobe.core.lock import folder_lock
from evprobe.bench.items import Item
from evprobe.bench.records import RECORDS_FILE, RUN_META_FILE, Record, load_records
from evprobe.bench.reference import Prices
from evprobe.bench.score_report import compare_markdown, scores_markdown
from evprobe.bench.scoring import score
from evprobe.bench.seed_report import seed_markdown
from evprobe.bench.seed_scoring import Reproduction, check_run, check_seed, reproduce_seed000
from evprobe.experiments.pecs_space import write_run_figure
from evprobe.core.json_types import JsonObject

SCORES_JSON = "scores.json"
SCORES_MD = "scores.md"
SCORES_RECORDS_KEY = "records"  # scores.json: {"file", "sha256", "n_records"} of what was scored


def records_sha256(path: Path) -> str | None:
    """sha256 of the complete lines of an append-only records file (what `load_records` reads:
    an unterminated last line is left out, with its warning); None when there is no file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    complete = data[: data.rfind(b"\n") + 1]
    if len(complete) < len(data):
        warn_incomplete_line(path)
    return hashlib.sha256(complete).hexdigest()


def _load_hashed_records(path: Path) -> tuple[dict[str, Record], str | None]:
    """The records of `path` and the hash of exactly the lines they were read from (a run still
    appending may add lines between reads: read until the hash holds still)."""
    for _ in range(5):
        before = records_sha256(path)
        records = load_records(path)
        if records_sha256(path) == before:
            return records, before
    raise InputError(
        f"{path} kept changing while it was read (a run is writing it); score it when the run ends"
    )


def run_meta(run_dir: Path) -> RunMeta:
    """RUN/run.json, validated (`bench.json_schema.RunMeta`): a fault is one line naming the field."""
    return read_run_meta(run_dir)


def score_run(
    run_dir: Path, bench: Path | None = None, *, n_boot: int = 2000, seed: int = 20260905
) -> tuple[JsonObject, str]:
    """Score one run folder; writes RUN/scores.json, RUN/scores.md and RUN/pecs_space.png
    (experiments.pecs_space) and returns the scores and the Markdown."""
    meta = run_meta(run_dir)
    with folder_lock(run_dir, "evprobe score"):  # one writer of RUN/scores.*; a run still writing RUN refuses it
        return _score_locked(run_dir, meta, bench, n_boot, seed)


def _load(run_dir: Path, meta: RunMeta, bench: Path | None) -> tuple[list[Item], dict[str, Record], str | None, Prices]:
    """The run's benchmark items, its records (and the hash of the lines read) and its prices; one-line
    InputErrors for a missing or different benchmark and for a run with no records."""
    bench = bench if bench is not None else Path(meta.bench)
    bench_meta_path = bench / META_FILE
    if not bench_meta_path.is_file():
        raise InputError(f"{bench_meta_path} not found; pass the run's benchmark with --bench DIR")
    bench_meta = read_meta(bench)  # validated: a damaged bench.json is one line naming its field
    if bench_meta["items_sha256"] != meta.items_sha256:
        raise InputError(
            f"{bench} is not the benchmark {run_dir} was run on (items hash differs); pass the right --bench"
        )
    items = read_items(bench, validate_images=False)
    records, digest = _load_hashed_records(run_dir / RECORDS_FILE)
    if not records:
        raise InputError(f"{run_dir / RECORDS_FILE} has no records; run `evprobe run` first")
    return items, records, digest, Prices(**bench_meta["prices"])


def _reading_line(meta: RunMeta) -> str | None:
    """scores.md's line naming the rubric that read a free run's replies (bench.parse); None for the letter
    protocols, whose scores.md stays as it was."""
    if meta.protocol != "free":
        return None
    rubric = (meta.model_extra or {}).get("rubric")
    if rubric is None:
        return ("Replies read by rubric strict (bench.parse): run.json pins no rubric, so the run was read "
                "before the seed002 rubric existed.")
    return f"Replies read by rubric {rubric} (bench.parse; pinned in run.json)."


def _score_locked(run_dir: Path, meta: RunMeta, bench: Path | None, n_boot: int, seed: int) -> tuple[JsonObject, str]:
    items, records, digest, prices = _load(run_dir, meta, bench)
    scores = score(items, records.values(), n_boot=n_boot, seed=seed, prices=prices)
    scores["run"] = {"model": meta.model, "protocol": meta.protocol, "regime": meta.regime}
    scores["resources"] = (meta.model_extra or {}).get("resources")  # run.json's; None for a policy run
    scores[SCORES_RECORDS_KEY] = {"file": RECORDS_FILE, "sha256": digest, "n_records": len(records)}
    title = f"{meta.model} ({meta.protocol}, {meta.regime})"
    markdown = scores_markdown(scores, title, reading=_reading_line(meta))
    # scores.md and the PECS-space figure first: scores.json, with the records hash, is the mark that all
    # are written
    atomic_write_bytes(run_dir / SCORES_MD, markdown.encode("utf-8"))
    write_run_figure(scores, run_dir)
    atomic_write_json(run_dir / SCORES_JSON, scores)
    return scores, markdown


def score_run_as(run_dir: Path, as_seed: str, bench: Path | None = None, *, n_boot: int = 2000,
                 seed: int = 20260905) -> tuple[Reproduction, str, tuple[Path, Path]]:
    """Score one run as `as_seed` scored it, beside evprobe's score (`bench.seed_scoring`); writes
    RUN/scores_SEED.json and RUN/scores_SEED.md only (RUN/scores.* are `score_run`'s, untouched).
    A seed without a reproduction mode, or a run its reader cannot read, is refused in one line first."""
    check_seed(as_seed)
    meta = run_meta(run_dir)
    check_run(as_seed, meta.protocol, meta.regime, str(run_dir / RUN_META_FILE))
    with folder_lock(run_dir, "evprobe score"):
        items, records, _, prices = _load(run_dir, meta, bench)
        _, rep = reproduce_seed000(items, list(records.values()), n_boot=n_boot, seed=seed, prices=prices)
        markdown = seed_markdown(rep, f"{meta.model} ({meta.protocol}, {meta.regime})")
        paths = (run_dir / f"scores_{as_seed}.md", run_dir / f"scores_{as_seed}.json")
        atomic_write_bytes(paths[0], markdown.encode("utf-8"))
        atomic_write_json(paths[1], rep.to_json())
    return rep, markdown, paths


def stale_reason(run_dir: Path) -> str | None:
    """Why RUN/scores.json does not score RUN/records.jsonl as it is now (None: it does)."""
    return _read_scores(Path(run_dir))[1]


def _read_scores(run_dir: Path) -> tuple[JsonObject | None, str | None]:
    """(RUN/scores.json or None, why it does not score RUN/records.jsonl as it is now or None)."""
    path = run_dir / SCORES_JSON
    if not path.is_file():
        return None, f"{path} not found"
    try:
        scores = parse_json(path.read_text(), path, "")  # bounded (an InputError is a ValueError)
    except (OSError, UnicodeDecodeError, ValueError):
        return None, f"{path} is not valid JSON"
    if not isinstance(scores, dict):
        return None, f"{path} is not a JSON object"
    scored = scores.get(SCORES_RECORDS_KEY)
    if not isinstance(scored, dict) or "sha256" not in scored:
        return scores, f"{path} does not say which records it scored (written before scores named them)"
    now = records_sha256(run_dir / RECORDS_FILE)
    if scored["sha256"] != now:
        what = "is gone" if now is None else "has changed since"
        return scores, f"{path} scored {scored.get('n_records')} records but {run_dir / RECORDS_FILE} {what}"
    return scores, None


def load_scores(run_dir: Path) -> JsonObject:
    """RUN/scores.json if it scores RUN/records.jsonl as it is now; otherwise the run re-scored
    (with the stale scores' n_boot and seed), or a one-line InputError naming the fix."""
    run_dir = Path(run_dir)
    scores, reason = _read_scores(run_dir)
    if reason is None and scores is not None:
        return scores
    old_meta = scores.get("meta") if scores is not None else None
    old_meta = old_meta if isinstance(old_meta, dict) else {}
    settings = {k: old_meta[k] for k in ("n_boot", "seed") if isinstance(old_meta.get(k), int)}
    try:
        return score_run(run_dir, **settings)[0]
    except InputError as err:
        if not (run_dir / SCORES_JSON).is_file():
            raise  # never scored: score_run's own message names the fix
        raise InputError(
            f"{reason}, and it cannot be re-scored here ({err}); "
            f"run `evprobe score {run_dir} --bench DIR` with the run's benchmark"
        ) from None


def compare_runs(runs: list[Path]) -> str:
    """One Markdown table of the headline measures of several runs (scoring any run whose
    scores.json is missing or does not score its records.jsonl as it is now: `load_scores`)."""
    metas = [run_meta(run_dir) for run_dir in runs]  # every run.json checked before any run is re-scored
    named = [(meta.title, load_scores(run_dir)) for meta, run_dir in zip(metas, runs)]
    return compare_markdown(named)
