"""`evprobe report DIR [DIR ...]`: one self-contained Markdown report of everything pipeline
folders hold (one folder per model or run).

Page one, report.md, reads in two minutes (experiments.report.summary): what model and what was
run, one headline figure, one table of the headline numbers with intervals and n, and sentences
saying what they show; it links one detail page per part (`details-<part>.md`, every plot with a
caption saying what to look for), and report.html holds every page in one self-contained file
(figures inline; experiments.report.html).

The detail pages gather, in this order, whatever they find under DIR: behavioural scores (`*/scores.md`), probe
sweeps (`**/sweep.md`, except an `evprobe ladder` folder's per-level sweeps), directions and their
geometry (`**/geometry.md`), dose-response (`**/dose_response.md`), pair patching
(`**/patching.md`), gating (`**/gating.md`) and the information-injection ladder (`**/ladder.md`): the
parts `experiments.registry` declares, in their rank order. It copies every PNG beside them
into `DIR/report/`, so the report folder can be moved as a whole. Each part keeps its own numbers
with their n and intervals; the report adds nothing it did not read.

Nothing is clobbered: each input folder is named by the shortest tail of its path that no other
input folder shares (`runs/a/out` and `runs/b/out` are `a/out` and `b/out`), every part is headed
by that name, and every copied PNG gets a file name of its own (the folder's name and the PNG's
path under it, joined by `__`; a numbered suffix where two would still meet), so two folders of
the same name never overwrite each other's plots or sections.

Behavioural scores are read fresh: a run folder's scores.md is used only when the scores.json
beside it scores the records.jsonl beside it as it is now; otherwise the run is re-scored first,
or the report refuses in one line naming `evprobe score` (see `experiments.scoring_io`).
"""

from __future__ import annotations

import argparse
import re
import shutil
import warnings
from pathlib import Path
from urllib.parse import quote

from evprobe.core.errors import InputError, OneLineWarning
from evprobe.core.files import atomic_write_bytes
from evprobe.core.lock import folder_lock
from evprobe.experiments.registry import report_parts
from evprobe.experiments.report.summary import inside_ladder


def _demote(markdown: str) -> str:
    """Shift every heading two levels down, so each part sits under the report's own headings."""
    return re.sub(r"^(#+) ", lambda m: "##" + m.group(1) + " ", markdown, flags=re.M)


def _distinct(roots: list[Path]) -> list[Path]:
    """The roots in order, each folder once (however it is spelled)."""
    unique: dict[Path, Path] = {}
    for root in roots:
        unique.setdefault(Path(root).resolve(), Path(root))
    return list(unique.values())


def _root_names(roots: list[Path]) -> list[Path]:
    """For each root, the shortest tail of its absolute path that no other root shares."""
    parts = [r.resolve().parts for r in roots]
    depth = [1] * len(roots)
    while True:
        names = [Path(*p[-k:]) for p, k in zip(parts, depth)]
        clashing = [i for i, n in enumerate(names) if names.count(n) > 1]
        grew = False
        for i in clashing:
            if depth[i] < len(parts[i]):
                depth[i] += 1
                grew = True
        if not grew:
            return names  # only identical roots still clash; build_report keeps one of each


def _inside(path: Path, root: Path) -> bool:
    """Whether `path` (symlinks resolved) lies in `root`'s tree; a link leading elsewhere is left out of
    the report with one warning line, so a report carries only files of the folders it reports on."""
    if root.resolve() in path.resolve().parents:
        return True
    warnings.warn(f"{path}: links to {path.resolve()}, outside {root}; left out of the report",
                  OneLineWarning, stacklevel=3)
    return False


def _target_name(where: Path, png: Path, used: dict[str, Path]) -> str:
    """A file name in the report folder for `png` that no other copied PNG has."""
    base = "__".join(part for part in (*where.parts, png.stem) if part not in ("", ".", "/"))
    name, n = f"{base}{png.suffix}", 1
    while name in used and used[name] != png:
        n += 1
        name = f"{base}-{n}{png.suffix}"
    used[name] = png
    return name


def _fresh_scores_md(path: Path) -> None:
    """Re-score a run whose scores.md no longer scores its records.jsonl (or refuse, naming the
    fix); folders that are not run folders (no records.jsonl beside) are read as they are."""
    from evprobe.bench.records import RECORDS_FILE
    from evprobe.experiments.scoring_io import SCORES_MD, load_scores, stale_reason

    if path.name == SCORES_MD and (path.parent / RECORDS_FILE).is_file() and stale_reason(path.parent):
        load_scores(path.parent)


# What to look for in each kind of plot (by the PNG's stem up to its first dot), as its caption.
CAPTIONS = {
    "pecs_space": "Control accuracy against J = AbsRec - FalseAbs, one point per dataset (system) with their "
                  "equal-weight mean and the pooled value, 95% intervals on both axes; grey curves are iso-PECS. "
                  "Up and right is better; a point left of the dashed line (J <= 0) scores PECS 0 however "
                  "accurate it is.",
    "sweep": "AUROC by layer and position with 95% intervals. Look for the layer where the curve leaves chance "
             "and rises above the control tasks; the nested estimate (chosen without test labels) is the number "
             "to quote, not the highest point.",
    "transfer-system": "AUROC of a probe fitted on one system (row) and tested on another (column). A direction "
                       "shared across systems keeps the off-diagonal cells near the diagonal.",
    "geometry": "Cosine similarity between directions. Directions of one feature fitted on different halves or "
                "systems should agree; a direction close to another label's measures that label too.",
    "stop_rate": "Stop rate against the dose, paired against alpha = 0, with the random directions' band. Look for "
                 "doses where the probe's curve leaves the band, in the direction its sign predicts.",
    "log_odds": "Stop log-odds (nats) against the dose, paired against alpha = 0, with the random directions' band; "
                "unsaturated, so it shows effects a rate at 0% or 100% hides.",
    "min_cost_accuracy": "Minimum-cost accuracy against the dose: steering that moves the stop rate but breaks "
                         "the choice shows here as a fall.",
    "missing_test_rate": "Rate of buying the missing property's test against the dose: the useful way to stop "
                         "stopping.",
    "useless_test_rate": "Rate of useless tests (free fall, or repeating the initial test) against the dose: a "
                         "rise means the steering breaks the model rather than changes its belief.",
    "invalid_rate": "Rate of invalid replies (no parsable choice) against the dose: steering that breaks the "
                    "reply format shows here. Invalid replies stay in every rate's denominator.",
    "patching": "Share of the gap closed and interchange-intervention accuracy by layer and position, with "
                "values and 95% intervals. Look for where patching the other pair member's state flips the choice.",
    "ladder": "Probe AUROC, behaviour and (with --dose) steering by information-injection level. Read level "
              "differences from the paired table, not from overlapping bars.",
}


# The plots that lead a part's page, in this order (by stem up to its first dot): its headline measure
# first (the log-odds dose-response is unsaturated, the stop rate is what the headline table reports).
LEAD_PLOTS = ("summary", "sweep", "log_odds", "stop_rate", "patching", "geometry", "ladder")


def plot_order(png: Path) -> tuple[bool, int, int, str]:
    """Sort key of a part's plots: lead plots first, whole-part plots before per-system ones, the
    log-prob readout before the generated one, then by name."""
    parts = png.stem.split(".")
    key = next((p for p in parts if p in CAPTIONS), parts[0])
    lead = LEAD_PLOTS.index(key) if key in LEAD_PLOTS else len(LEAD_PLOTS)
    return ("generate" in parts, len(parts) - ("generate" in parts), lead, png.stem)


def caption(stem: str) -> str:
    """What to look for in a plot named `stem` (e.g. `stop_rate.bouncing`, `generate.stop_rate`)."""
    parts = stem.split(".")
    key = next((p for p in parts if p in CAPTIONS), parts[0])
    text = CAPTIONS.get(key, "")
    scope = [p for p in parts if p not in CAPTIONS and p != "generate"]
    if scope and key in CAPTIONS:
        text += f" ({', '.join(scope)} only.)"
    if "generate" in parts:
        text += " Readout: the generated reply."
    return text


def _slug(heading: str) -> str:
    return "details-" + re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-") + ".md"


def build_report(
    roots: Path | list[Path], *, title: str, banner: str | None = None, out: Path | None = None,
    html: bool = True,
) -> Path:
    """Write `out/report.md` (default: the first root's `report/`): page one (experiments.report.summary:
    the headline figure, table and sentences) linking one detail page per part found under the roots
    (`details-<part>.md`, every plot with its caption), the PNGs they cite, and with `html` a
    self-contained report.html of all pages. Every copied PNG and every part is named after its own
    root, so same-named roots never collide."""
    roots = [Path(r) for r in ([roots] if isinstance(roots, (str, Path)) else roots)]
    for root in roots:
        if not root.is_dir():
            raise InputError(f"{root}: no such folder; point `evprobe report` at pipeline output folders")
    roots = _distinct(roots)
    names = _root_names(roots)
    out = Path(out) if out is not None else roots[0] / "report"
    with folder_lock(out, "evprobe report"):  # one writer per report folder (core.lock)
        return _write_report(roots, names, out, title, banner, html)


def _write_report(roots: list[Path], names: list[Path], out: Path, title: str, banner: str | None,
                  html: bool) -> Path:
    """`build_report` once the report folder's lock is held."""
    from evprobe.experiments.report.summary import summary_markdown

    out_resolved = out.resolve()
    used: dict[str, Path] = {}  # report file name -> the PNG copied under it
    details: list[tuple[str, str]] = []  # (heading, page file name)
    for heading, name in ((p.heading, p.file) for p in report_parts()):  # experiments.registry
        paths = [
            (root, root_name, p)
            for root, root_name in zip(roots, names)
            for p in sorted(root.rglob(name))
            if out_resolved not in p.resolve().parents and not (name == "sweep.md" and inside_ladder(p))
            and _inside(p, root)
        ]
        if not paths:
            continue
        lines = [f"# {title}", "", "[Back to the summary](report.md)", "", f"## {heading}", ""]
        for root, root_name, path in paths:
            _fresh_scores_md(path)
            rel = path.parent.relative_to(root)
            where = root_name / rel if len(roots) > 1 else rel
            lines += [f"*From `{where / name}`.*", "", _demote(path.read_text().strip()), ""]
            pngs = sorted((png for png in path.parent.glob("*.png") if _inside(png, root)), key=plot_order)
            if pngs:  # under a heading of their own, not under the part's last section
                lines += [f"### Plots: {where}", ""]
            for png in pngs:
                target = _target_name(where, png.resolve(), used)
                shutil.copyfile(png, out / target)
                lines += [f"![{png.stem} ({where})]({quote(target)})", ""]
                note = caption(png.stem)
                if note:
                    lines += [f"*{note}*", ""]
        page = _slug(heading)
        atomic_write_bytes(out / page, ("\n".join(lines).rstrip() + "\n").encode("utf-8"))
        details.append((heading, page))
    if not details:
        listed = ", ".join(str(r) for r in roots)
        raise InputError(f"{listed}: found none of {', '.join(p.file for p in report_parts())} to report")
    path = out / "report.md"
    atomic_write_bytes(path, (summary_markdown(roots, out, title, banner, details).rstrip() + "\n").encode("utf-8"))
    if html:
        from evprobe.experiments.report.explorer import explorer_section
        from evprobe.experiments.report.html import write_html

        # the item and pair explorer: only in the HTML (filters need a script); None without dose or patching
        write_html(out, title, ["report.md", *(page for _, page in details)], explorer=explorer_section(roots))
    return path


def add_report_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="gather scores, sweeps, dose-response, patching and the ladder of a folder into one Markdown report",
        description="Write DIR/report/report.md with the PNG plots beside it, from every scores.md, "
        "sweep.md, geometry.md, dose_response.md, patching.md and ladder.md found under DIR.",
    )
    p.add_argument("roots", metavar="DIR", type=Path, nargs="+",
                   help="pipeline output folders, e.g. one quickstart or run folder per model")
    p.add_argument("--title", default=None, help="report title (default: the folder names)")
    p.add_argument("--out", type=Path, default=None, help="report folder (default: the first DIR's report/)")
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    title = args.title or "evprobe report: " + ", ".join(str(n) for n in _root_names(_distinct(args.roots)))
    path = build_report(args.roots, title=title, out=args.out)
    print(f"wrote {path} (and report.html beside it)")
    return 0
