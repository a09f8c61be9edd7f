"""`evprobe report DIR`: one self-contained Markdown report of everything a pipeline folder holds.

It gathers, in this order, whatever it finds under DIR: behavioural scores (`*/scores.md`), probe
sweeps (`**/sweep.md`), directions and their geometry (`**/geometry.md`), dose-response
(`**/dose_response.md`) and pair patching (`**/patching.md`), and copies every PNG beside them
into `DIR/report/`, so the report folder can be moved as a whole. Each part keeps its own numbers
with their n and intervals; the report adds nothing it did not read.
"""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

from bench.manifest import BenchError, atomic_write_bytes

PARTS = (
    ("Behaviour", "scores.md"),
    ("Probe sweeps", "sweep.md"),
    ("Direction geometry", "geometry.md"),
    ("Dose-response", "dose_response.md"),
    ("Pair patching", "patching.md"),
)


def _demote(markdown: str) -> str:
    """Shift every heading two levels down, so each part sits under the report's own headings."""
    return re.sub(r"^(#+) ", lambda m: "##" + m.group(1) + " ", markdown, flags=re.M)


def build_report(root: Path, *, title: str, banner: str | None = None) -> Path:
    """Write `root/report/report.md` (and copy the PNGs it cites) from the parts found in `root`."""
    root = Path(root)
    if not root.is_dir():
        raise BenchError(f"{root}: no such folder; point `evprobe report` at a pipeline output folder")
    out = root / "report"
    out.mkdir(exist_ok=True)
    lines = [f"# {title}", ""]
    if banner:
        lines += [f"> **{banner}**", ""]
    found = 0
    for heading, name in PARTS:
        paths = sorted(p for p in root.rglob(name) if out not in p.parents)
        if not paths:
            continue
        lines += [f"## {heading}", ""]
        for path in paths:
            found += 1
            rel = path.parent.relative_to(root)
            lines += [f"*From `{rel / name}`.*", "", _demote(path.read_text().strip()), ""]
            for png in sorted(path.parent.glob("*.png")):
                target = f"{str(rel).replace('/', '__')}__{png.name}"
                shutil.copyfile(png, out / target)
                lines += [f"![{png.stem} ({rel})]({target})", ""]
    if not found:
        raise BenchError(f"{root}: found no scores.md, sweep.md, dose_response.md or patching.md to report")
    path = out / "report.md"
    atomic_write_bytes(path, ("\n".join(lines).rstrip() + "\n").encode("utf-8"))
    return path


def add_report_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="gather scores, sweeps, dose-response and patching of a folder into one Markdown report",
        description="Write DIR/report/report.md with the PNG plots beside it, from every scores.md, "
        "sweep.md, geometry.md, dose_response.md and patching.md found under DIR.",
    )
    p.add_argument("root", metavar="DIR", type=Path, help="a pipeline output folder (e.g. evprobe quickstart's)")
    p.add_argument("--title", default=None, help="report title (default: the folder name)")
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    path = build_report(args.root, title=args.title or f"evprobe report: {args.root.name}")
    print(f"wrote {path}")
    return 0
