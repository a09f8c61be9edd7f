"""Repeated runs (`evprobe run --runs R`): R sampled runs of one setting, each a run folder of its own.

Layout. OUT/run-1 ... OUT/run-R, each a normal, resumable run folder (`bench.runner.run`: records.jsonl,
run.json), and OUT/runs.json, the index (written atomically): the base seed and, per run, its number,
folder and seed. Run r has seed `--seed + r - 1` (`run_seed`), so run r is reproducible on its own
(`evprobe run --out OUT/run-r --seed S+r-1` with the other flags writes the same records) and no two
runs share a seed. The seed reaches every backend through `Sampling.call_seed` (hf seeds torch per
call, vLLM and OpenAI-compatible servers get it per request) and the random policy's draws.

Each run folder holds `runs=1` in its run.json's config: a run folder never knows it is one of R.

When R > 1 is refused. Runs that cannot differ would report a spread of 0 that says nothing about
sampling, so they are refused in one line before anything is written (`check_runs`):
- a model at `--temperature 0`: greedy decoding writes the same records in every run;
- a scripted policy other than `policy:random`: its replies do not depend on the seed.
`policy:random` at any temperature is allowed: its draws are seeded (the tests use it for the
mechanics, since policies make no sampling calls).

Resuming. `--runs R` again after a kill continues: runs.json is written before the first run starts,
each run folder resumes as any run does (finished records are kept, the rest computed), finished
runs cost nothing. A larger R adds runs (run r's seed does not depend on R); a smaller R, another
--seed, model, temperature or top-p (what runs.json records; each run's run.json pins the rest and
refuses a change as any run does), or an OUT that is a single run folder or holds other files, is
refused in one line.
`--runs 1` into a folder of runs is refused too (it would write a run beside the runs): see
`refuse_runs_folder`.

One writer: OUT's lock (`core.lock`) is held for the whole of `run_repeated`, as each run holds its
own folder's; a second `--runs` into OUT is refused at once.

The model is loaded once per run (each run is a `bench.runner.run`, whose run.json pins the model's
file hashes; passing one loaded handle to every run would pin `model_source: in_memory` instead and
a resume without it would be refused).

Not with a launcher or --shard: each run's shards would need merging per run; launch one run at a
time with `--out OUT/run-r --seed S+r-1` instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from evprobe.bench.json_schema import OPEN, read_model
from evprobe.bench.records import RECORDS_FILE, RUN_META_FILE
from evprobe.bench.runner import POLICY_PREFIX, RunConfig, RunSummary, run
from evprobe.core.errors import InputError
from evprobe.core.files import atomic_write_json
from evprobe.core.job_summary import Session
from evprobe.core.json_files import read_json_object
from evprobe.core.json_types import JsonObject
from evprobe.core.lock import LOCK_FILE, folder_lock
from evprobe.core.progress import note

RUNS_FILE = "runs.json"
RUNS_KIND = "runs"
SEED_POLICIES = ("random",)  # the scripted policies whose replies depend on the seed
RUNS_FIX = "restore the file, or write the runs into a new --out"


class RunEntry(BaseModel):
    model_config = OPEN

    run: int
    folder: str
    seed: int


class RunsIndex(BaseModel):
    """OUT/runs.json: the base seed and every run's number, folder (relative to OUT) and seed."""

    model_config = OPEN

    kind: Literal["runs"]
    seed: int
    runs: list[RunEntry]


def run_seed(seed: int, r: int) -> int:
    """The seed of run r (1-based) of runs with base seed `seed`."""
    return seed + r - 1


def run_folder_name(r: int) -> str:
    return f"run-{r}"


def is_runs_folder(folder: str | Path) -> bool:
    """Whether `folder` is a folder of repeated runs (holds runs.json)."""
    return (Path(folder) / RUNS_FILE).is_file()


def read_runs(folder: str | Path) -> RunsIndex:
    """OUT/runs.json, validated: a fault is one line naming the file and the field."""
    return read_model(Path(folder) / RUNS_FILE, RunsIndex, RUNS_FIX,
                      missing=f"{folder} is not a folder of runs; write one with `evprobe run --runs R`")[0]


def check_runs(config: RunConfig, runs: int) -> None:
    """Refuse `runs` that is not a positive integer, or R > 1 runs that could not differ (module docstring)."""
    if type(runs) is not int or runs < 1:
        raise InputError(f"--runs must be a positive integer, got {runs!r}")
    if runs == 1:
        return
    model = config.model.model
    if model.startswith(POLICY_PREFIX):
        if model[len(POLICY_PREFIX):] not in SEED_POLICIES:
            raise InputError(f"--runs {runs} with --model {model}: its replies do not depend on the seed, so every run "
                             f"would be the same; use policy:random or a model with --temperature above 0")
    elif config.temperature == 0:
        raise InputError(f"--runs {runs} at --temperature 0: greedy decoding writes the same records in every run; "
                         "sample (e.g. --temperature 0.8 --top-p 0.95, seed 002's protocol) or drop --runs")
    if config.shard is not None:
        raise InputError(f"--runs {runs} with --shard: shard one run at a time (--out OUT/run-r --seed S+r-1)")


def refuse_runs_folder(config: RunConfig) -> None:
    """A single run (`--runs 1`) into a folder of runs would write beside its runs: refused in one line."""
    out = Path(config.out)
    if is_runs_folder(out):
        n = len(read_runs(out).runs)
        raise InputError(f"{out} is a folder of {n} runs ({RUNS_FILE}); rerun with --runs {n} to continue them, "
                         "or choose another --out")


def _pins(config: RunConfig) -> JsonObject:
    """What runs.json says of the setting besides the seed (each run's run.json pins the rest)."""
    return {"model": config.source, "temperature": float(config.temperature), "top_p": float(config.top_p)}


def _index(config: RunConfig, runs: int) -> JsonObject:
    c = config
    return {"kind": RUNS_KIND, "seed": c.seed, **_pins(c),
            "runs": [{"run": r, "folder": run_folder_name(r), "seed": run_seed(c.seed, r), "n_selected": None,
                      "n_records": None} for r in range(1, runs + 1)]}


def _check_out(config: RunConfig, runs: int) -> JsonObject | None:
    """OUT's runs.json as written (None for a new or empty OUT); refuses an OUT it cannot continue."""
    out = Path(config.out)
    if not out.exists():
        return None
    if not out.is_dir():
        raise InputError(f"--out {out} is not a folder")
    if (out / RUN_META_FILE).is_file() or (out / RECORDS_FILE).is_file():
        raise InputError(f"--out {out} is a single run folder; write {runs} runs into another --out")
    if not is_runs_folder(out):
        if any(p.name != LOCK_FILE for p in out.iterdir()):
            raise InputError(f"--out {out} holds files but no {RUNS_FILE}; write the runs into a new or empty folder")
        return None
    index = read_runs(out)
    if index.seed != config.seed:
        raise InputError(f"{out} was written with --seed {index.seed} (runs seeded {index.seed} ... "
                         f"{run_seed(index.seed, len(index.runs))}), this run has --seed {config.seed}; use "
                         f"--seed {index.seed} to resume, or another --out")
    if runs < len(index.runs):
        raise InputError(f"{out} holds {len(index.runs)} runs; --runs {runs} would leave the last "
                         f"{len(index.runs) - runs} out: use --runs {len(index.runs)} (or more), or another --out")
    old = read_json_object(out / RUNS_FILE, "move the folder aside, or use another --out")[0]
    for key, value in _pins(config).items():  # refused before runs.json is rewritten with this run's values
        if key in old and old[key] != value:
            raise InputError(f"{out} was written with {key}={old[key]!r}, this run has {key}={value!r}; use the same "
                             "settings to resume, or another --out")
    return old


@dataclass(frozen=True)
class RepeatedRun:
    """One run of a folder of runs as runs.json lists it, with this session's work on it."""

    run: int
    folder: str
    seed: int
    n_selected: int
    n_records: int
    last_session: Session


@dataclass(frozen=True)
class RepeatedRuns:
    """What `run_repeated` did: OUT and each of its runs (runs.json's entries, with their last session)."""

    out: str
    runs: tuple[RepeatedRun, ...]


def run_repeated(config: RunConfig, runs: int, progress: bool = True,
                 run_one: Callable[[RunConfig], RunSummary] | None = None) -> RepeatedRuns:
    """Write runs 1..`runs` of `config` into OUT/run-1 ... (module docstring); returns what it did
    (`RepeatedRuns`: each run's entry of runs.json, with its last session).

    run_one: how one run is run (default `bench.runner.run` with `progress`); given a config whose
    `out` is the run's folder, `seed` its seed and `runs` 1."""
    check_runs(config, runs)
    one = run_one or (lambda c: run(c, progress=progress))
    out = Path(config.out)
    with folder_lock(out, "evprobe run --runs"):
        old = _check_out(config, runs)
        index = _index(config, runs)
        if old is not None:  # keep what finished runs recorded
            done = {e.get("run"): e for e in old.get("runs", []) if isinstance(e, dict)}
            index["runs"] = [{**entry, **{k: done.get(entry["run"], {}).get(k) for k in ("n_selected", "n_records")}}
                             for entry in index["runs"]]
        atomic_write_json(out / RUNS_FILE, index)  # before any run: a kill leaves an index to resume from
        sessions = []
        for entry in index["runs"]:
            if progress:
                note("run", f"run {entry['run']} of {runs} (seed {entry['seed']}) in {out / entry['folder']}")
            summary = one(replace(config, out=str(out / entry["folder"]), seed=entry["seed"], runs=1))
            entry.update(n_selected=summary.n_selected, n_records=summary.n_records)
            sessions.append(summary.last_session)
            atomic_write_json(out / RUNS_FILE, index)
    return RepeatedRuns(str(out), tuple(RepeatedRun(e["run"], e["folder"], e["seed"], e["n_selected"], e["n_records"], s)
                                        for e, s in zip(index["runs"], sessions)))


def runs_line(summary: RepeatedRuns) -> str:
    """One line of what `run_repeated` did, for the command line."""
    runs = summary.runs
    counts = ", ".join(f"{e.folder} {e.n_records}/{e.n_selected} (seed {e.seed})" for e in runs)
    new = sum(e.last_session.items or 0 for e in runs)
    seconds = sum(e.last_session.seconds or 0.0 for e in runs)
    return (f"{len(runs)} runs in {summary.out}: {counts} records ({new} new in {round(seconds, 3)} s); "
            f"score them with `evprobe score {summary.out}`")


__all__ = ["RUNS_FILE", "RepeatedRun", "RepeatedRuns", "RunsIndex", "check_runs", "is_runs_folder", "read_runs", "refuse_runs_folder",
           "run_repeated", "run_seed", "runs_line"]
