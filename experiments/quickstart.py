"""`evprobe quickstart`: the main job, end to end, on a fresh machine with no download and no GPU.

Steps (each one resumable; a second run reuses finished work):
 1. generate the benchmark: the main set (48 families per system, 9,216 items, held out from the
    organism's training) for the organism, a 2-family-per-system subset (312 items) for other
    models (`--families-per-system` overrides);
 2. run the model through the behavioural runner (direct protocol) and score it;
 3. capture the residual stream of the selection and initial-answer prompts at every layer
    (last token, question text, image tokens; for the organism, which reads facts, "text" is
    every fact token but the sheet values and "image" the sheet values);
 4. sweep logistic probes for sufficiency (`resolved`) with controls, input baselines and the
    within-family variance check (a model whose state is identical within families is reported
    as DEGENERATE, never as AUROC 0.5);
 5. fit difference-of-means directions for `resolved` on the selections of each half of the families
    (a seeded coin per family), so steering runs on families the direction never saw;
 6. dose-response: the first half's direction on the other half's selections (organism: the last
    position at layers 2-3, alpha +-0.75 to +-1.0), with 50 random directions of the same norm, 50 fitted
    on relabelled rows, 3 specificity controls, ablation and a cross-fitted headline;
 7. pair patching on image pairs;
 8. for the organism, the known-answer checks (experiments/known_answer/checks.py), then one report,
    `OUT/report/report.md`, with every plot beside it.

The embedded default model is the model organism (`organism`, organism/): a small Llama trained
here to decide sufficiency, whose answer is known, so the report shows whether the toolkit finds
it (a few minutes on 2 cores). `--model tiny:llava` runs the same job on a tiny untrained VLM in
about a minute (its report says its numbers describe an untrained model). On a GPU machine,
`--model configs/models/qwen2_5_vl_7b.yaml` runs it on a real checkpoint.

One writer per folder (core.lock): the quickstart holds OUT's lock for its whole run, and each step
also holds its own folder's (OUT/bench, OUT/run, OUT/acts, ...), so a second quickstart into OUT, or
another command into one of its step folders, is refused in one line naming the holder.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from evprobe.bench.generate import GenerateConfig, generate
from evprobe.bench.manifest import META_FILE, read_meta
from evprobe.core.errors import InputError
from evprobe.core.json_files import optional_json_object, read_json_object
from evprobe.core.lock import folder_lock
from evprobe.bench.runner import RunConfig, run

if TYPE_CHECKING:
    from evprobe.experiments.known_answer.checks import KnownAnswerResult

DEFAULT_MODEL = "organism"
RERUN = "run the quickstart again into a new --out"  # the fix for a damaged file of a quickstart folder
UNTRAINED = (
    "The model is {model}: a tiny randomly initialised network of a real architecture, untrained. "
    "Every number below tests the toolkit's plumbing, not what any model knows."
)
ORGANISM = (
    "The model is the model organism: a 5-layer Llama trained here (organism/) to choose the cheapest "
    "sufficient action from facts its front end reads off the prompt and the sheets (numbers, menu, the "
    "measured value), not from pixels or words. Its answer and where it forms are known by construction "
    "(no position reads another before layer 1; sufficiency is read out after layer 3 at the answer "
    "position: `ANSWER:`, the first token of its reply `ANSWER: <letter>`, which the log-prob readouts "
    "teacher-force and generation writes), so the checks below test the toolkit. Known-answer checks: "
    "{verdict}."
)
# The organism's grid: the last position, i.e. the answer prefix `ANSWER:` (where the planted head reads
# sufficiency, and where the decision is carried from layer 3 on: the patching IIA; in generation the
# same state is a generated token's, steered at its decode step), at layers 2 and 3 (the planted layer 3
# is checked; 2 shows the effect is layer-specific), with doses fine enough to catch the switch of a
# confident model. Chosen for this organism (v4, two-token sheets) on the development benchmark (seed
# 777, selections' directions; `python benchmarks/organism_direction_choice.py --directions selections
# --alphas ...`), never the main set: resolved items' stop rate 1.00 -> 0.89 / 0.57 / 0.50 / 0.42 at
# +0.5 / +0.625 / +0.6875 / +0.75, with useless tests 0.00 / 0.03 / 0.06 / 0.11 (the break); unresolved
# items 0.00 -> 0.42 / 0.72 / 0.79 / 0.85 at -0.625 / -0.75 / -0.875 / -1.0, never breaking. Seven doses
# keep the quickstart's cost. Layers 0-1 are left out: layer 0's direction does not exist (identical
# class means) and the last position at layer 1 moved nothing at any dose up to 1.0 (earlier organism).
ORGANISM_ALPHAS = (-1.0, -0.875, -0.75, 0.0, 0.625, 0.6875, 0.75)
ORGANISM_LAYERS = (2, 3)
NULL_BATCH_ROWS = 2048  # rows per forward of the random/control sets (organism prompts are ~22 tokens)


def _middle(layers: list[int]) -> tuple[int]:
    """An untrained tiny model's steered layer: its middle one. Steering every layer (as before)
    made the dose-response 58% of `--model tiny:llava`'s time (45 of 77 s) for plumbing that one
    layer tests as well."""
    return (sorted(layers)[len(layers) // 2],)


def _step(n: int, title: str) -> float:
    print(f"[{n}/8] {title}", file=sys.stderr, flush=True)
    return time.perf_counter()


def _bench_ready(bench: Path, config: GenerateConfig) -> bool:
    meta_path = bench / META_FILE
    if not meta_path.is_file():
        return False
    meta = read_meta(bench)  # validated: a damaged bench.json is one line naming the field and the fix
    return (meta["seed"], meta["families_per_system"], meta["subset_per_cell"]) == (
        config.seed, config.families_per_system, config.subset_per_cell
    )


class QuickstartOptions(TypedDict, total=False):
    """`quickstart`'s keyword arguments, for a set of them kept apart (known_answer.mutations.SMALL_QUICKSTART)."""

    model: str
    families_per_system: int | None
    pairs: int | None
    n_boot: int
    progress: bool
    n_random: int | None
    permutations: int
    refits: int | None
    dose_layers: tuple[int, ...] | None
    alphas: tuple[float, ...] | None
    controls: bool
    voids: tuple[str, ...]


@dataclass(frozen=True)
class QuickstartResult:
    """What a quickstart did: the report's path, each step's seconds, and on the organism the
    known-answer checks (None for other models)."""

    report: str
    seconds: dict[str, float]
    known_answer: KnownAnswerResult | None


def quickstart(
    out: Path,
    *,
    model: str = DEFAULT_MODEL,
    families_per_system: int | None = None,
    pairs: int | None = None,
    n_boot: int = 1000,
    progress: bool = True,
    n_random: int | None = None,
    permutations: int = 49,
    refits: int | None = None,
    dose_layers: tuple[int, ...] | None = None,
    alphas: tuple[float, ...] | None = None,
    controls: bool = True,
    voids: tuple[str, ...] = (),
) -> QuickstartResult:
    """Run the whole pipeline into `out`; returns the timings and the report path.

    voids: the void block's types (bench.voids), generated, run and scored with the main set (never
    captured, steered or patched); on the organism the known-answer checks add their rows.
    n_random (random directions per steered layer x dose, and as many relabelled ones; default 50 for the
    organism, 2 for others),
    permutations and refits (the sweep's; refits default probes.sweep's), dose_layers and alphas (the
    organism's default grid otherwise) and controls (the dose-response's control directions) shrink
    the job, e.g. for the known-answer mutation tests."""
    from evprobe.experiments.config import load_model_config

    cfg = load_model_config(model)  # a bad name or file fails here, before anything runs
    organism = cfg.model == "organism"
    if families_per_system is None:
        families_per_system = 48 if organism else 2
    if pairs is None:
        pairs = 64 if organism else 4
    if families_per_system < 2:
        raise InputError("--families-per-system must be at least 2 (folds and held-out systems need families)")
    # OUT's own lock for the whole pipeline, so a second quickstart into it is refused before step 1
    # (not part-way, after a --force generate under the first one's run); each step also locks its own
    # folder (OUT/bench, OUT/run, ...): other files, never waited on, so they cannot deadlock (core.lock).
    with folder_lock(out, "evprobe quickstart"):
        return _quickstart(out, model, cfg, families_per_system, pairs, n_boot, progress, n_random, permutations,
                           refits, dose_layers, alphas, controls, voids)


def _quickstart(out: Path, model: str, cfg: Any, families_per_system: int, pairs: int, n_boot: int,
                progress: bool, n_random: int | None, permutations: int, refits: int | None,
                dose_layers: tuple[int, ...] | None, alphas: tuple[float, ...] | None,
                controls: bool, voids: tuple[str, ...]) -> QuickstartResult:
    """`quickstart`'s steps, with OUT's lock held."""
    organism = cfg.model == "organism"
    bench, run_dir, acts = out / "bench", out / "run", out / "acts"
    directions, dose, patch = out / "directions", out / "dose_response", out / "patching"
    timings: dict[str, float] = {}

    t = _step(1, "generate the benchmark subset")
    # The organism's set is the main set itself (its seed, its variant subset): held out from training.
    gen = (GenerateConfig() if organism and families_per_system == 48
           else GenerateConfig(families_per_system=families_per_system, subset_per_cell=0))
    gen = replace(gen, voids=voids)  # opt-in: run and scored with the rest, never captured or steered
    if not _bench_ready(bench, gen):
        generate(bench, gen, force=True, progress=progress)
    timings["generate"] = time.perf_counter() - t

    t = _step(2, f"run {cfg.model} on every item and score it")
    run(RunConfig(model=cfg, bench=str(bench), out=str(run_dir), batch_size=cfg.batch_size), progress=progress)
    from evprobe.experiments.scoring_io import score_run

    score_run(run_dir, bench, n_boot=n_boot)
    timings["run+score"] = time.perf_counter() - t

    t = _step(3, "capture the residual stream")
    from evprobe.experiments.capture.config import CaptureConfig
    from evprobe.experiments.capture.job import capture
    capture(CaptureConfig(model=cfg, bench=str(bench), out=str(acts), requests=("select", "answer_initial"),
                          positions=("last", "text_mean", "image_mean"), batch_size=cfg.batch_size),
            progress=progress)
    timings["capture"] = time.perf_counter() - t

    t = _step(4, "sweep probes for sufficiency")
    from evprobe.probes.runs import directions_to_folder, labelled, sweep_to_folder
    from evprobe.probes.sweep import SweepConfig

    sweep_cfg = SweepConfig(n_boot=n_boot, permutations=permutations, **({} if refits is None else {"refits": refits}))
    sweep_to_folder([acts], "resolved", acts / "probes" / "resolved", sweep_cfg,
                    progress="sweep" if progress else None)
    timings["sweep"] = time.perf_counter() - t

    t = _step(5, "fit directions on the selections of each half of the families")
    meta = read_json_object(acts / "meta.json", RERUN)[0]
    # Fitted on the selections only, the request type the dose-response steers: the answer rows'
    # resolved / unresolved split (yes-no vs undetermined) tilts a pooled direction. Chosen on a
    # development benchmark (seed 777, 24 families per system), never the main set: with the pooled
    # direction the organism's resolved items moved from stop 1.00 to 0.53 at +1.25 with 12% useless
    # tests (the steering check's break) and only to 0.74 at +1.0; with the selections' direction to
    # 0.51 at +1.0 with none, and unresolved items from 0.00 to 0.93 at -0.75
    # (benchmarks/organism_direction_choice.py).
    captures, resolved = labelled([acts], "resolved", requests=("select",))
    directions_to_folder(captures, resolved, directions, meta["layers"], position="last", by="half")
    timings["directions"] = time.perf_counter() - t

    t = _step(6, "dose-response on held-out families")
    from evprobe.experiments.dose_response.config import CONTROLS, DoseResponseConfig
    from evprobe.experiments.dose_response import dose_response

    dose_response(DoseResponseConfig(model=model, bench=str(bench), directions=str(directions), out=str(dose),
                                     layers=dose_layers or (ORGANISM_LAYERS if organism else _middle(meta["layers"])),
                                     alphas=alphas or (ORGANISM_ALPHAS if organism else (-1.0, -0.5, 0.0, 0.5, 1.0)),
                                     # untrained tiny VLMs: ~1,200-token prompts, so the plumbing-only null of before
                                     n_random=n_random if n_random is not None else (50 if organism else 2),
                                     # the specificity null: directions fitted on relabelled rows, as many
                                     n_relabel=n_random if n_random is not None else (50 if organism else 2),
                                     controls=CONTROLS if organism and controls else (),
                                     positions="last" if organism else "all",
                                     # the organism's reply is `ANSWER: <letter>`: the generated reply of the
                                     # probe direction is read too (a known-answer check compares it with the
                                     # log-probs); the random and control sets by log-probs only (cost)
                                     readout="both" if organism else "logprobs", generate_sets=not organism,
                                     null_batch_rows=NULL_BATCH_ROWS if organism else None, n_boot=n_boot),
                  progress=progress)
    timings["dose_response"] = time.perf_counter() - t

    t = _step(7, "pair patching")
    from evprobe.experiments.patching.job import DEFAULT_POSITION_SETS, POSITION_SETS, PatchingConfig, run_patching

    # the organism's sheets are spans of two image tokens (block, offset): patched apart too
    sets = POSITION_SETS if organism else DEFAULT_POSITION_SETS
    run_patching(PatchingConfig(model=cfg, bench=str(bench), out=str(patch), limit_pairs=pairs, positions=sets,
                                n_boot=n_boot), progress=progress)
    timings["patching"] = time.perf_counter() - t

    t = _step(8, "known-answer checks and the report" if organism else "write the report")
    from evprobe.experiments.report.build import build_report

    banner = UNTRAINED.format(model=cfg.model) if cfg.model.startswith("tiny:") else None
    checks = None
    if organism:
        from evprobe.experiments.known_answer.checks import known_answer_checks

        checks = known_answer_checks(out)
        failed = checks.failed()
        verdict = "all passed" if not failed else "NOT passed: " + ", ".join(failed)
        banner = ORGANISM.format(verdict=verdict)
    report = build_report(out, title=f"evprobe quickstart: {cfg.model}", banner=banner)
    timings["report"] = time.perf_counter() - t
    return QuickstartResult(str(report), {k: round(v, 2) for k, v in timings.items()}, checks)


def add_quickstart_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "quickstart",
        help="the main job: benchmark, behaviour, capture, probes, steering, patching, report",
        description="Generate a benchmark subset, run the model, score it, capture activations, sweep "
        "probes, fit directions, run a small dose-response and pair patching, and write one report "
        "(OUT/report/report.md). No download and no GPU with the default tiny model.",
    )
    p.add_argument("--out", type=Path, default=Path("out/quickstart"), help="output folder")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="organism (default), tiny:<arch>, a config in configs/models (e.g. qwen2_5_vl_7b or its "
                   "path), or a hub id")
    p.add_argument("--families-per-system", type=int, default=None,
                   help="benchmark size (default: 48, the main set, for the organism; 2 for other models)")
    p.add_argument("--pairs", type=int, default=None, help="image pairs to patch (default: 64 organism, 4 others)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--voids", type=_void_list, default=(),
                   help="add the void block (occluded,unstated; bench.voids): run and scored beside the main set, and "
                   "on the organism checked against its known answer (it abstains on every void)")
    p.set_defaults(run=_run)


def _void_list(text: str) -> tuple[str, ...]:
    from evprobe.bench.voids import parse_voids

    try:
        return parse_voids(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _run(args: argparse.Namespace) -> int:
    # progress: --no-progress turns it off process-wide
    result = quickstart(args.out, model=args.model, families_per_system=args.families_per_system,
                        pairs=args.pairs, n_boot=args.n_boot, progress=True, voids=args.voids)
    total = sum(result.seconds.values())
    if result.known_answer is not None:
        for c in result.known_answer.checks:
            print(f"{'pass' if c.passed else 'FAIL'}: {c.check}: {c.measured}")
    steps = ", ".join(f"{k} {v:.0f} s" for k, v in result.seconds.items())
    print(f"quickstart done in {total:.0f} s ({steps})")
    for line in headline_lines(args.out):
        print(line)
    print(f"report: {result.report}")
    return 0


def headline_lines(out: Path) -> list[str]:
    """The three headline numbers of a quickstart folder, each with its interval and n: behaviour,
    the probe's nested estimate, and the cross-fitted steering effects (what the report opens with)."""
    def load(rel: str) -> Any:
        path = out / rel
        return optional_json_object(path, RERUN)

    from evprobe.bench.score_cells import pct, plain, points
    from evprobe.experiments.dose_response.formatting import crossfit_setting, fmt_estimate

    lines = []
    scores = load("run/scores.json")
    if scores:
        lines.append(f"behaviour: minimum-cost choice (%) {pct(scores.get('min_cost_choice'))}")
    sweep = load("acts/probes/resolved/sweep.json")
    best = (sweep or {}).get("best") or {}
    if best.get("layer") is not None:
        from evprobe.probes.sweep_row import auroc_json

        # n_families where the sweep gives it: the families the nested estimate's interval rests on
        lines.append(f"probe: sufficiency decoded at AUROC {plain(auroc_json(best))}, nested estimate (layer and position "
                     f"chosen without test labels: L{best['layer']}/{best['position']})")
    dose = load("dose_response/dose_response.json")
    for h in (dose or {}).get("headline") or []:
        if h.get("readout", "logprobs") != "logprobs":  # as on the report's page one
            continue
        where = crossfit_setting(h)
        t = h["target"]
        lines.append(f"steering ({h['goal']}, {h['group']} items, cross-fitted at {where}): stop log-odds (nats) "
                     f"{fmt_estimate(t.get('log_odds_change'), 'log_odds')}, stop rate (points) "
                     f"{points(t.get('change'))}")
    return lines
