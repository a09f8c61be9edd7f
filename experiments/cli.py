"""The `evprobe` command line. Each subcommand validates its input and prints a one-line error
(no traceback) naming the bad thing and the fix; exit status 2 for bad input, 1 for failed checks.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from evprobe.core.argtypes import nonnegative_int, positive_int
from evprobe.experiments.config import config_from_flags, resolve_model_flag


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors: one line, exit 2
        self.exit(2, f"evprobe: error: {message}\n")


def _add_generate(sub: argparse._SubParsersAction) -> None:
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
    p.add_argument("--force", action="store_true", help="replace the benchmark already in --out (never any other non-empty folder)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(run=_run_generate)


def _run_generate(args: argparse.Namespace) -> int:
    from evprobe.bench.generate import GenerateConfig, generate, main_summary
    from evprobe.bench.reference import Prices

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
    config = GenerateConfig.pilot(**overrides) if args.pilot else GenerateConfig(**overrides)
    meta = generate(args.out, config, force=args.force, workers=args.workers, progress=not args.quiet)
    print(main_summary(meta, args.out))
    return 0


def _add_check(sub: argparse._SubParsersAction) -> None:
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


def _add_run(sub: argparse._SubParsersAction) -> None:
    from evprobe.bench.runner import RunConfig
    from evprobe.core.flags import add_config_arguments

    p = sub.add_parser(
        "run",
        help="run a model or scripted policy on benchmark items; writes RUN/records.jsonl",
        description="Run a model (tiny:<arch>, a model config name or YAML, a hub id or a local folder) or a "
        "scripted policy (policy:<name>) on the items of a benchmark. Resumable: rerun the same command to continue.",
    )
    add_config_arguments(p, RunConfig)
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(run=_run_run)


def _run_run(args: argparse.Namespace) -> int:
    from evprobe.bench.runner import RunConfig, RunJob, run
    from evprobe.experiments.distributed import data_parallel

    config = resolve_model_flag(config_from_flags(RunConfig, args), args)
    # torchrun / accelerate launch: this rank's shard, then rank 0 merges
    if data_parallel(config, lambda c: run(c, progress=not args.quiet), unit="records", job=RunJob):
        return 0
    summary = run(config, progress=not args.quiet)
    session = summary["last_session"]
    print(
        f"{summary['n_records']}/{summary['n_selected']} records in {Path(config.out) / 'records.jsonl'} "
        f"({session['items']} new in {session['seconds']} s)"
    )
    return 0


def _add_score(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "score",
        help="score a run: every paired measure with family-bootstrap intervals",
        description="Score RUN/records.jsonl against its benchmark; writes RUN/scores.json and "
        "RUN/scores.md and prints the Markdown.",
    )
    p.add_argument("run_dir", metavar="RUN", type=Path, help="run folder written by `evprobe run`")
    p.add_argument("--bench", type=Path, default=None, help="benchmark folder (default: the one in RUN/run.json)")
    p.add_argument("--n-boot", type=positive_int, default=2000, help="bootstrap resamples of whole families")
    p.add_argument("--seed", type=int, default=20260905, help="bootstrap seed")
    p.add_argument("--quiet", action="store_true", help="write the files without printing the tables")
    p.set_defaults(run=_run_score)


def _run_score(args: argparse.Namespace) -> int:
    from evprobe.experiments.scoring_io import score_run

    scores, markdown = score_run(args.run_dir, args.bench, n_boot=args.n_boot, seed=args.seed)
    if not args.quiet:
        print(markdown)
    print(f"wrote {args.run_dir / 'scores.json'} and {args.run_dir / 'scores.md'}")
    return 0


def _add_compare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="put the headline scores of several runs side by side",
        description="Print the headline measures of several scored runs in one table (scores "
        "each run first if RUN/scores.json is missing or no longer scores RUN/records.jsonl).",
    )
    p.add_argument("runs", metavar="RUN", type=Path, nargs="+", help="run folders")
    p.add_argument("--out", type=Path, default=None, help="also write the table to this Markdown file")
    p.set_defaults(run=_run_compare)


def _run_compare(args: argparse.Namespace) -> int:
    from evprobe.experiments.scoring_io import compare_runs

    table = compare_runs(args.runs)
    print(table)
    if args.out is not None:
        from evprobe.core.files import atomic_write_bytes

        atomic_write_bytes(args.out, table.encode("utf-8"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="evprobe", description="Do VLMs know when their evidence is enough?")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_generate(sub)
    _add_check(sub)
    _add_run(sub)
    _add_score(sub)
    _add_compare(sub)
    from evprobe.experiments.capture import add_capture_parser
    from evprobe.experiments.dose_response import add_dose_response_parser
    from evprobe.experiments.gating import add_gating_parser
    from evprobe.experiments.layer_sweep import add_layer_sweep_parser
    from evprobe.experiments.merge import add_merge_parser
    from evprobe.experiments.organism_cli import add_organism_parser
    from evprobe.experiments.patching import add_patching_parser
    from evprobe.experiments.quickstart import add_quickstart_parser
    from evprobe.experiments.report import add_report_parser
    from evprobe.probes.cli import add_directions_parser, add_sweep_parser

    add_capture_parser(sub)
    add_merge_parser(sub)
    add_patching_parser(sub)
    add_dose_response_parser(sub)
    add_layer_sweep_parser(sub)
    add_gating_parser(sub)
    add_report_parser(sub)
    add_quickstart_parser(sub)
    add_organism_parser(sub)

    add_sweep_parser(sub)
    add_directions_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # --help, or argparse's one-line error: return its status
        return int(stop.code or 0)
    try:
        return args.run(args)
    except (ValueError, OSError) as err:  # bad input (InputError, missing files): one line, no traceback
        print(f"evprobe: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("evprobe: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
