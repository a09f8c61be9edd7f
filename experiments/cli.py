"""The `evprobe` command line. Each subcommand validates its input and prints a one-line error
(no traceback) naming the bad thing and the fix; exit status 2 for bad input, 1 for failed checks.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors: one line, exit 2
        self.exit(2, f"evprobe: error: {message}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _nonnegative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _add_generate(sub: argparse._SubParsersAction) -> None:
    from bench.generate import MAIN_SEED, PILOT_SEED, SUBSET_SEED

    p = sub.add_parser(
        "generate",
        help="write the benchmark: families.jsonl, items.jsonl, images/",
        description="Generate the controlled experiment-selection benchmark (seed 000).",
    )
    p.add_argument("--out", required=True, type=Path, help="output folder (must be empty unless --force)")
    p.add_argument("--seed", type=int, default=None, help=f"family seed (main {MAIN_SEED}, pilot {PILOT_SEED})")
    p.add_argument(
        "--families-per-system", type=_positive_int, default=None, help="families per system (main 48, pilot 4)"
    )
    p.add_argument("--systems", default="sliding,bouncing,spring", help="comma-separated systems")
    p.add_argument("--subset-seed", type=int, default=SUBSET_SEED, help="seed of the diagnostic subset")
    p.add_argument(
        "--subset-per-cell",
        type=_nonnegative_int,
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
    p.add_argument("--workers", type=_positive_int, default=1, help="processes that render images")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out folder")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(run=_run_generate)


def _run_generate(args: argparse.Namespace) -> int:
    from bench.generate import GenerateConfig, generate, main_summary
    from bench.reference import Prices

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
    from bench.checks import run_checks, write_report

    report = run_checks(args.bench, rerender=args.rerender)
    print(report.table())
    path = write_report(args.bench, report)
    print(f"wrote {path}")
    return 1 if report.failures else 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="evprobe", description="Do VLMs know when their evidence is enough?")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_generate(sub)
    _add_check(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # --help, or argparse's one-line error: return its status
        return int(stop.code or 0)
    try:
        return args.run(args)
    except ValueError as err:  # BenchError and other bad-input errors: one line, no traceback
        print(f"evprobe: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("evprobe: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
