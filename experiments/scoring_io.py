"""Files around scoring: read a run and its benchmark, write scores.json / scores.md, compare."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evprobe.bench.manifest import META_FILE, read_items
from evprobe.core.errors import InputError
from evprobe.core.files import atomic_write_bytes, atomic_write_json
from evprobe.bench.records import RECORDS_FILE, RUN_META_FILE, load_records
from evprobe.bench.reference import Prices
from evprobe.bench.score_report import compare_markdown, scores_markdown
from evprobe.bench.scoring import score

SCORES_JSON = "scores.json"
SCORES_MD = "scores.md"


def run_meta(run_dir: Path) -> dict[str, Any]:
    path = run_dir / RUN_META_FILE
    if not path.is_file():
        raise InputError(f"{path} not found: {run_dir} is not a run folder; create it with `evprobe run`")
    return json.loads(path.read_text())


def score_run(
    run_dir: Path, bench: Path | None = None, *, n_boot: int = 2000, seed: int = 20260905
) -> tuple[dict[str, Any], str]:
    """Score one run folder; writes RUN/scores.json and RUN/scores.md and returns both."""
    meta = run_meta(run_dir)
    bench = bench if bench is not None else Path(meta["bench"])
    bench_meta_path = bench / META_FILE
    if not bench_meta_path.is_file():
        raise InputError(f"{bench_meta_path} not found; pass the run's benchmark with --bench DIR")
    bench_meta = json.loads(bench_meta_path.read_text())
    if bench_meta["items_sha256"] != meta["items_sha256"]:
        raise InputError(
            f"{bench} is not the benchmark {run_dir} was run on (items hash differs); pass the right --bench"
        )
    items = read_items(bench, validate_images=False)
    records = load_records(run_dir / RECORDS_FILE)
    if not records:
        raise InputError(f"{run_dir / RECORDS_FILE} has no records; run `evprobe run` first")
    scores = score(items, records.values(), n_boot=n_boot, seed=seed, prices=Prices(**bench_meta["prices"]))
    scores["run"] = {k: meta[k] for k in ("model", "protocol", "regime") if k in meta}
    title = f"{meta['model']} ({meta['protocol']}, {meta['regime']})"
    markdown = scores_markdown(scores, title)
    atomic_write_json(run_dir / SCORES_JSON, scores)
    atomic_write_bytes(run_dir / SCORES_MD, markdown.encode("utf-8"))
    return scores, markdown


def compare_runs(runs: list[Path]) -> str:
    """One Markdown table of the headline measures of several runs (scoring any unscored run)."""
    named = []
    for run_dir in runs:
        path = run_dir / SCORES_JSON
        scores = json.loads(path.read_text()) if path.is_file() else score_run(run_dir)[0]
        meta = run_meta(run_dir)
        named.append((f"{meta['model']} {meta['protocol']}/{meta['regime']}", scores))
    return compare_markdown(named)
