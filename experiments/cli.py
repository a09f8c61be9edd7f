"""The `evprobe` command line. Each subcommand validates its input and prints a one-line error
(no traceback) naming the bad thing and the fix; exit status 2 for bad input, 1 for failed checks.

It answers at once: building a parser imports no torch, transformers, nnsight, matplotlib or
sklearn (each subcommand imports them in its run function), and `evprobe NAME ...` builds only
NAME's parser (`experiments.registry` says where each is built), so a command pays only for its own flags;
`evprobe --help` builds them all. tests/experiments/test_cli_speed.py checks both;
benchmarks/cli_startup.py times them.

Progress (rate and ETA, core.progress) is on for every long step; `--no-progress`, on every
subcommand, turns all of it off for the process.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from evprobe.core.argtypes import nonnegative_int, positive_int
from evprobe.experiments.config import config_from_flags
from evprobe.experiments.registry import experiments, names, resolve


def shown_default(action: argparse.Action) -> str | None:
    """The default `--help` shows for an option: its value when it takes one and the default is
    neither None ("not given": a YAML's value or the config's default stands) nor SUPPRESS; None
    for a positional argument and a switch (store_true, --help: no value, the default is off)."""
    default = action.default
    if not action.option_strings or action.nargs == 0 or default is None or default is argparse.SUPPRESS:
        return None
    if isinstance(action, argparse.BooleanOptionalAction):
        return None  # argparse itself shows a BooleanOptionalAction's default
    if isinstance(default, (tuple, list)):
        return ",".join(str(v) for v in default)
    return str(default)


class _HelpFormatter(argparse.HelpFormatter):
    """Every option's default in `--help`, in one place: `(default: X)` after its help (`shown_default`),
    unless the help already says its default (`default` in its text)."""

    def _format_action(self, action: argparse.Action) -> str:
        if not action.help and shown_default(action) is not None:  # an option without help: its default alone
            action = copy.copy(action)
            action.help = f"(default: {shown_default(action).replace('%', '%%')})"  # type: ignore[union-attr]
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        shown = shown_default(action)
        if shown is None or "default" in text.lower():
            return text
        return f"{text.strip()} (default: {shown.replace('%', '%%')})".lstrip()


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> None:  # argparse's own errors: one line, exit 2
        self.exit(2, f"evprobe: error: {message}\n")


def add_generate_parser(sub: argparse._SubParsersAction) -> None:
    from evprobe.bench.generate import MAIN_SEED, PILOT_SEED, SUBSET_SEED

    p = sub.add_parser(
        "generate",
        help="write the benchmark: families.jsonl, items.jsonl, images/",
        description="Generate the controlled experiment-selection benchmark (seed 000).",
    )
    p.add_argument("--out", required=True, type=Path, help="output folder (new or empty; a benchmark folder with --force)")
    p.add_argument("--seed", type=int, default=None, help=f"family seed (main {MAIN_SEED}, pilot {PILOT_SEED})")
    p.add_argument(
        "--families-per-system", type=positive_int, default=None, help="families per system (main 48, pilot 4)"
    )
    p.add_argument("--systems", default="sliding,bouncing,spring", help="comma-separated systems")
    p.add_argument("--subset-seed", type=int, default=SUBSET_SEED, help="seed of the diagnostic subset")
    p.add_argument(
        "--subset-per-cell",
        type=nonnegative_int,
        default=None,
        help="subset families per system x initial test (main 12, pilot 0); 0 = no variants",
    )
    p.add_argument("--pilot", action="store_true", help="the separate pilot set (its own seed, 12 families)")
    p.add_argument(
        "--price",
        action="append",
        metavar="ACTION=COST",
        help="change an action's price in the prompts, e.g. combined_report=3 (repeatable)",
    )
    p.add_argument("--workers", type=positive_int, default=1, help="processes that render images")
    p.add_argument("--numeric", action="store_true",
                   help="add the numeric estimates (property and outcome, 8 per family; scored by threshold accuracy)")
    p.add_argument("--injection", default="", metavar="LEVELS",
                   help="add information-injection levels of the selections and answers, e.g. te,1,2,3 (level 0 is the main "
                        "items; te, also -1: seed 003's target-exclusive baseline, no reference object named)")
    p.add_argument("--voids", default="", metavar="TYPES",
                   help="add void items matched with their sufficient twins (seed 002): occluded (visual), "
                        "unstated, false_premise, unobservable (textual), e.g. occluded,unstated")
    p.add_argument("--evidence", choices=("sheet", "clip"), default="sheet",
                   help="show each measurement as a still sheet of four panels (default) or as a clip of its motion "
                        "(seed 002; an animated PNG per measurement)")
    p.add_argument("--frames", type=positive_int, default=None,
                   help="frames per clip, a multiple of 4 (default 32, the seed's); with --evidence clip")
    p.add_argument("--fps", type=float, default=None, help="frames per second a clip plays at (default 2, the "
                   "seed's); with --evidence clip")
    p.add_argument("--force", action="store_true", help="replace the benchmark already in --out (never any other non-empty folder)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(run=_run_generate)


def _run_generate(args: argparse.Namespace) -> int:
    from evprobe.bench.generate import GenerateConfig, generate, main_summary
    from evprobe.bench.injection import parse_level
    from evprobe.bench.reference import Prices
    from evprobe.bench.voids import parse_voids
    from evprobe.core.errors import InputError

    overrides = {
        key: value
        for key, value in (
            ("seed", args.seed),
            ("families_per_system", args.families_per_system),
            ("subset_per_cell", args.subset_per_cell),
        )
        if value is not None
    }
    overrides["systems"] = tuple(s.strip() for s in args.systems.split(",") if s.strip())
    overrides["subset_seed"] = args.subset_seed
    overrides["prices"] = Prices.parse(args.price)
    overrides["numeric"] = args.numeric
    try:
        overrides["injection_levels"] = tuple(parse_level(x) for x in args.injection.split(",") if x.strip())
    except ValueError:
        raise InputError(f"--injection takes comma-separated levels among 1, 2, 3, te, got {args.injection!r}") from None
    try:
        overrides["voids"] = parse_voids(args.voids)  # the one parser of the flag (quickstart's too)
    except ValueError as err:
        raise InputError(str(err)) from None
    if args.evidence == "clip":
        from evprobe.bench.clips import SEED_FPS, SEED_FRAMES, ClipSpec

        try:
            overrides["clip"] = ClipSpec(args.frames or SEED_FRAMES, SEED_FPS if args.fps is None else args.fps)
        except ValueError as err:
            raise InputError(str(err)) from None
    elif args.frames is not None or args.fps is not None:
        raise InputError("--frames and --fps cut clips; add --evidence clip")
    config = GenerateConfig.pilot(**overrides) if args.pilot else GenerateConfig(**overrides)
    meta = generate(args.out, config, force=args.force, workers=args.workers, progress=not args.quiet)
    print(main_summary(meta, args.out))
    return 0


def add_check_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="recompute a benchmark folder and print the construction checks (Table 9)",
        description="Recompute every item and label from families.jsonl, read every image back "
        "with the pixel detector, and print the construction checks; writes DIR/checks.json. "
        "Exit status 1 when any check fails.",
    )
    p.add_argument("bench", type=Path, help="benchmark folder written by `evprobe generate`")
    p.add_argument("--rerender", action="store_true", help="also re-render every image and compare bytes")
    p.set_defaults(run=_run_check)


def _run_check(args: argparse.Namespace) -> int:
    from evprobe.bench.checks import run_checks, write_report

    report = run_checks(args.bench, rerender=args.rerender)
    print(report.table())
    path = write_report(args.bench, report)
    print(f"wrote {path}")
    return 1 if report.failures else 0


def add_run_parser(sub: argparse._SubParsersAction) -> None:
    from evprobe.bench.backends.registry import add_backend_arguments
    from evprobe.bench.runner import RunConfig
    from evprobe.core.flags import add_config_arguments

    p = sub.add_parser(
        "run",
        help="run a model or scripted policy on benchmark items; writes RUN/records.jsonl",
        description="Run a model (tiny:<arch>, a model config name or YAML, a hub id or a local folder) or a "
        "scripted policy (policy:<name>) on the items of a benchmark. Resumable: rerun the same command to continue.",
    )
    add_config_arguments(p, RunConfig, skip=("backend", "backend_options"))
    add_backend_arguments(p)  # --backend and each registered backend's own flags (bench.backends.registry)
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(run=_run_run)


def _run_run(args: argparse.Namespace) -> int:
    from evprobe.bench.backends.registry import options_from_flags
    from evprobe.bench.runner import RunConfig, RunJob, run
    from evprobe.experiments.distributed import data_parallel

    # the backend's own flags first (another backend's flag: one line), then its model checked as
    # every ModelConfig is, before it loads
    config = config_from_flags(RunConfig, args, backend_options=options_from_flags(args))
    runs = config.runs
    if runs != 1:  # --runs R: OUT/run-1 ... OUT/run-R and OUT/runs.json (bench.repeats)
        from evprobe.bench.repeats import run_repeated, runs_line
        from evprobe.core.errors import InputError
        from evprobe.core.launch import launched_shard

        if launched_shard() is not None:
            raise InputError(f"--runs {runs} under a launcher: launch one run at a time "
                             "(--out OUT/run-r --seed S+r-1), or run --runs without torchrun / accelerate launch")
        print(runs_line(run_repeated(config, runs, progress=not args.quiet)))
        return 0
    from evprobe.bench.repeats import refuse_runs_folder

    refuse_runs_folder(config)  # a single run beside a folder's runs
    # torchrun / accelerate launch: this rank's shard, then rank 0 merges
    if data_parallel(config, lambda c: run(c, progress=not args.quiet), unit="records", job=RunJob):
        return 0
    summary = run(config, progress=not args.quiet)
    session = summary.last_session
    print(
        f"{summary.n_records}/{summary.n_selected} records in {Path(config.out) / 'records.jsonl'} "
        f"({session.items} new in {session.seconds} s)"
    )
    return 0


def add_judge_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "judge",
        help="judge a free-protocol run's replies with a panel of served LLM judges (Fleiss' kappa, audit sample)",
        description="Ask each judge (an OpenAI-compatible server) to classify every answer reply of RUN (evprobe run "
        "--protocol free) as yes / no / cannot be determined / unclear; the panel's strict majority is its "
        "decision. Writes RUN/judged/: judgments.jsonl, records.jsonl and scores.json (the panel-judged records "
        "scored), judge.json and judge.md (Fleiss' kappa with a family-bootstrap interval, agreement, the rule-"
        "and panel-judged scores side by side) and audit.csv (a stratified sample for a human audit). A judge reply "
        "is a decision only when it is one letter (alone, bracketed, with a period, or followed by its own option "
        "words); anything else is kept as no decision with the judge's words. With --score-audit FILE (and no RUN "
        "or --judge) it scores a filled audit.csv instead: the panel against the human column.",
    )
    p.add_argument("run_dir", metavar="RUN", type=Path, nargs="?",
                   help="run folder written by `evprobe run --protocol free`, or a steering output (gating or "
                        "void-transfer --readout free, the library's write_replies): its replies judged row by row "
                        "into OUT/judged, for `--judged`")
    p.add_argument("--judge", action="append", metavar="MODEL@URL",
                   help="a judge: the model a server serves and its base URL (repeat; two or more, three as the seed)")
    p.add_argument("--api-key-env", action="append", metavar="NAME",
                   help="the environment variable holding the judges' API key (never the key itself; read once, "
                        "sent as Authorization: Bearer, written nowhere): once for every judge, or once per --judge "
                        "in the same order; none = no key sent")
    p.add_argument("--bench", type=Path, default=None, help="benchmark folder (default: the one in RUN/run.json)")
    p.add_argument("--per-stratum", type=positive_int, default=5,
                   help="replies per (request, rule reading, panel decision) cell in audit.csv")
    p.add_argument("--concurrency", type=positive_int, default=4, help="requests in flight per judge")
    p.add_argument("--n-boot", type=positive_int, default=2000, help="bootstrap resamples of whole families")
    p.add_argument("--seed", type=int, default=20260905, help="bootstrap and audit-sample seed")
    p.add_argument("--panel", choices=("fourway", "seed002"), default="fourway",
                   help="fourway: one question per reply (yes / no / cannot be determined / unclear, a letter); "
                        "seed002: seed 002's two judges (appendix D.2 abstention, D.3 correctness on controls; its "
                        "prompts verbatim, JSON replies, temperature 0.8, 512 tokens). Pinned in judge.json: a "
                        "folder judged by one panel refuses the other")
    p.add_argument("--score-audit", type=Path, default=None, metavar="FILE",
                   help="score a filled audit.csv (its human column) against the panel, beside judgments.jsonl: "
                        "accuracy, precision, recall, F1 (the abstention class) and Cohen's kappa, with intervals; "
                        "writes FILE's <stem>_score.json and .md")
    p.set_defaults(run=_run_judge)


def _run_judge(args: argparse.Namespace) -> int:
    from evprobe.bench.judges import Judge, judge_run
    from evprobe.core.errors import InputError

    if args.score_audit is not None:
        if args.run_dir is not None or args.judge:
            raise InputError("--score-audit FILE scores a filled audit.csv alone: give no RUN and no --judge with it")
        from evprobe.bench.audit_scoring import score_audit, summary_line

        scored = score_audit(args.score_audit, n_boot=args.n_boot, seed=args.seed)
        print(summary_line(scored))
        print(f"wrote {', '.join(scored.files)} in {args.score_audit.parent}")
        return 0
    if args.run_dir is None or not args.judge:
        raise InputError("give RUN and two or more --judge MODEL@URL (or --score-audit FILE alone)")
    judges = [Judge.parse(spec) for spec in args.judge]
    s = judge_run(args.run_dir, judges, bench=args.bench, api_key_env=args.api_key_env, per_stratum=args.per_stratum,
                  concurrency=args.concurrency, n_boot=args.n_boot, seed=args.seed, panel=args.panel)
    what = "abstention " if args.panel == "seed002" else ""
    print(f"{s.n_replies} replies judged by {len(judges)} judges; {what}Fleiss' kappa {s.kappa.text(3)}")
    print(f"wrote {', '.join(s.files)} in {s.out}")
    return 0


def add_score_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "score",
        help="score a run: every paired measure with family-bootstrap intervals",
        description="Score RUN/records.jsonl against its benchmark; writes RUN/scores.json and "
        "RUN/scores.md and prints the Markdown. On a folder of runs (evprobe run --runs R) scores every "
        "run, then writes OUT/scores.json and OUT/scores.md: per headline measure each run's score, the "
        "runs' mean and sd, and an interval pooled over the runs. With --as seed000, scores the run as "
        "seed 000 scored it instead (its parser, B.2, and plain percentile intervals, B.4) beside evprobe's "
        "numbers, with the seed's control requirements (B.3) checked, and writes RUN/scores_seed000.json and "
        ".md only.",
    )
    p.add_argument("run_dir", metavar="RUN", type=Path,
                   help="run folder written by `evprobe run` (or a folder of runs, --runs R)")
    p.add_argument("--bench", type=Path, default=None, help="benchmark folder (default: the one in RUN/run.json)")
    p.add_argument("--n-boot", type=positive_int, default=2000, help="bootstrap resamples of whole families")
    p.add_argument("--seed", type=int, default=20260905, help="bootstrap seed")
    p.add_argument("--quiet", action="store_true", help="write the files without printing the tables")
    p.add_argument("--as", dest="as_seed", default=None, metavar="SEED",
                   help="reproduce a seed's tables: seed000 (its reply parser and percentile intervals, beside "
                        "evprobe's; seed002 and seed003 are refused, saying where evprobe already does what they do)")
    p.set_defaults(run=_run_score)


def _run_score(args: argparse.Namespace) -> int:
    from evprobe.bench.repeats import is_runs_folder
    from evprobe.experiments.scoring_io import score_run, score_run_as

    if args.as_seed is not None:
        from evprobe.bench.seed_scoring import check_seed
        from evprobe.core.errors import InputError

        check_seed(args.as_seed)  # an unknown or refused seed before the folder is read
        if is_runs_folder(args.run_dir):
            raise InputError(f"{args.run_dir} is a folder of runs; --as {args.as_seed} scores one run folder")
        _, markdown, paths = score_run_as(args.run_dir, args.as_seed, args.bench, n_boot=args.n_boot, seed=args.seed)
        if not args.quiet:
            print(markdown)
        print(f"wrote {paths[1]} and {paths[0]}")
        return 0
    if is_runs_folder(args.run_dir):
        from evprobe.bench.repeats_scoring import score_runs_folder

        _, markdown = score_runs_folder(
            args.run_dir, lambda run_dir: score_run(run_dir, args.bench, n_boot=args.n_boot, seed=args.seed)[0],
            args.bench, n_boot=args.n_boot, seed=args.seed)
    else:
        _, markdown = score_run(args.run_dir, args.bench, n_boot=args.n_boot, seed=args.seed)
    if not args.quiet:
        print(markdown)
    print(f"wrote {args.run_dir / 'scores.json'} and {args.run_dir / 'scores.md'}")
    return 0


def add_compare_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="put the headline scores of several runs side by side (--paired: B - A of two settings)",
        description="Print the headline measures of several scored runs in one table (scores "
        "each run first if RUN/scores.json is missing or no longer scores RUN/records.jsonl). With "
        "--paired, two settings A and B (run folders or folders of runs with the same items): B - A of "
        "every headline measure with a family-bootstrap interval whose every resample is applied to "
        "every run of both settings.",
    )
    p.add_argument("runs", metavar="RUN", type=Path, nargs="+",
                   help="run folders (--paired: A B, each a run folder or a folder of runs)")
    p.add_argument("--out", type=Path, default=None, help="also write the table to this Markdown file")
    p.add_argument("--pecs-space", type=Path, default=None, metavar="PNG",
                   help="also draw the runs in the PECS space (seed 002, Figure 3a) to this PNG: each run's "
                        "equal-weight mean of Acc and J over its datasets, arrows between consecutive runs of one model")
    p.add_argument("--paired", action="store_true", help="B - A of two settings, paired on the same family resamples")
    p.add_argument("--bench", type=Path, default=None, help="--paired: benchmark folder (default: the one in run.json)")
    p.add_argument("--n-boot", type=positive_int, default=2000, help="--paired: bootstrap resamples of whole families")
    p.add_argument("--seed", type=int, default=20260905, help="--paired: bootstrap seed")
    p.set_defaults(run=_run_compare)


def _run_compare(args: argparse.Namespace) -> int:
    from evprobe.bench.repeats import is_runs_folder
    from evprobe.core.errors import InputError

    folders = [run for run in args.runs if is_runs_folder(run)]
    if args.pecs_space is not None:  # checked before any run is scored
        if args.pecs_space.suffix.lower() != ".png":
            raise InputError(f"--pecs-space {args.pecs_space}: the figure is a PNG; give a path ending in .png")
        if folders:
            raise InputError(f"--pecs-space draws run folders and {folders[0]} is a folder of runs; name its runs "
                             f"({folders[0] / 'run-1'} ...)")
    if args.paired:
        if len(args.runs) != 2:
            raise InputError(f"--paired compares two settings, A B; got {len(args.runs)} folders")
        from evprobe.bench.repeats_scoring import paired_comparison

        table = paired_comparison(args.runs[0], args.runs[1], args.bench, n_boot=args.n_boot, seed=args.seed)[1]
    else:
        if folders:
            raise InputError(f"{folders[0]} is a folder of runs: compare two settings with --paired, or name its runs "
                             f"({folders[0] / 'run-1'} ...)")
        from evprobe.experiments.scoring_io import compare_runs

        table = compare_runs(args.runs)
    print(table)
    if args.out is not None:
        from evprobe.core.files import atomic_write_bytes

        atomic_write_bytes(args.out, table.encode("utf-8"))
    if args.pecs_space is not None:
        from evprobe.experiments.pecs_space import write_runs_figure
        from evprobe.experiments.scoring_io import load_scores

        print(f"wrote {write_runs_figure([(run, load_scores(run)) for run in args.runs], args.pecs_space)}")
    return 0


def _add_no_progress(parser: argparse.ArgumentParser) -> None:
    """`--no-progress` on `parser` and on every parser below it that runs something."""
    nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for action in nested:
        for child in action.choices.values():
            _add_no_progress(child)
    if not nested:
        parser.add_argument("--no-progress", action="store_true",
                            help="no progress lines or notes on stderr (for this step and every step it runs)")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of `command` alone (what `evprobe COMMAND ...` needs)."""
    parser = _Parser(prog="evprobe", description="Do VLMs know when their evidence is enough?")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for experiment in experiments():  # experiments.registry: one declaration per command
        if command is None or experiment.name == command:
            resolve(experiment.parser)(sub)
    for child in sub.choices.values():
        _add_no_progress(child)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[0] if argv and argv[0] in names() else None  # else: --help, or an unknown command's error
    try:
        args = build_parser(command).parse_args(argv)
    except SystemExit as stop:  # --help, or argparse's one-line error: return its status
        return int(stop.code or 0)
    from evprobe.core.progress import progress_enabled, set_progress

    previous = progress_enabled()
    set_progress(previous and not args.no_progress)
    if args.no_progress:  # Hugging Face's own bars too ("Loading weights"); read when transformers is imported
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        return args.run(args)
    except (ValueError, OSError) as err:  # bad input (InputError, missing files): one line, no traceback
        from evprobe.core.errors import printable  # a message may quote a file: its escapes shown, not obeyed

        print(f"evprobe: error: {printable(str(err))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("evprobe: interrupted", file=sys.stderr)
        return 130
    finally:
        set_progress(previous)  # main() called in a process (tests, notebooks) leaves the switch as it was


if __name__ == "__main__":
    sys.exit(main())
