"""`evprobe report DIR [DIR ...]`: one self-contained Markdown report of everything pipeline
folders hold (one folder per model or run).

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

from evprobe.core.errors import InputError
from evprobe.core.files import atomic_write_bytes

PARTS = (
    ("Known-answer checks", "known_answer.md"),
    ("Behaviour", "scores.md"),
    ("Probe sweeps", "sweep.md"),
    ("Direction geometry", "geometry.md"),
    ("Dose-response", "dose_response.md"),
    ("Pair patching", "patching.md"),
)


def _demote(markdown: str) -> str:
    """Shift every heading two levels down, so each part sits under the report's own headings."""
    return re.sub(r"^(#+) ", lambda m: "##" + m.group(1) + " ", markdown, flags=re.M)


def build_report(
    roots: Path | list[Path], *, title: str, banner: str | None = None, out: Path | None = None
) -> Path:
    """Write `out/report.md` (default: the first root's `report/`) with the PNGs it cites, from the
    parts found under every root (one root per model or run, in the order given)."""
    roots = [Path(r) for r in ([roots] if isinstance(roots, (str, Path)) else roots)]
    for root in roots:
        if not root.is_dir():
            raise InputError(f"{root}: no such folder; point `evprobe report` at pipeline output folders")
    out = Path(out) if out is not None else roots[0] / "report"
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title}", ""]
    if banner:
        lines += [f"> **{banner}**", ""]
    found = 0
    for heading, name in PARTS:
        paths = [(root, p) for root in roots for p in sorted(root.rglob(name)) if out not in p.parents]
        if not paths:
            continue
        lines += [f"## {heading}", ""]
        for root, path in paths:
            found += 1
            rel = path.parent.relative_to(root)
            where = Path(root.name) / rel if len(roots) > 1 else rel
            lines += [f"*From `{where / name}`.*", "", _demote(path.read_text().strip()), ""]
            for png in sorted(path.parent.glob("*.png")):
                target = f"{str(where).replace('/', '__')}__{png.name}"
                shutil.copyfile(png, out / target)
                lines += [f"![{png.stem} ({where})]({target})", ""]
    if not found:
        names = ", ".join(str(r) for r in roots)
        raise InputError(f"{names}: found no scores.md, sweep.md, dose_response.md or patching.md to report")
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
    p.add_argument("roots", metavar="DIR", type=Path, nargs="+",
                   help="pipeline output folders, e.g. one quickstart or run folder per model")
    p.add_argument("--title", default=None, help="report title (default: the folder names)")
    p.add_argument("--out", type=Path, default=None, help="report folder (default: the first DIR's report/)")
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    title = args.title or "evprobe report: " + ", ".join(r.name for r in args.roots)
    path = build_report(args.roots, title=title, out=args.out)
    print(f"wrote {path}")
    return 0
