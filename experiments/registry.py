"""The experiments, each declared once: its command, its parser, the job `evprobe merge` rebuilds
from its shard folders, and the part `evprobe report` gathers from what it writes.

    from evprobe.experiments.registry import Experiment, ReportPart, register
    register(Experiment("head-attribution", parser="mypkg.heads:add_parser", job="mypkg.heads:HeadJob",
                        report=ReportPart("Head attribution", "heads.md", rank=55)))

The CLI (`experiments.cli`), merge (`experiments.merge`) and the report (`experiments.report.build`)
iterate over `experiments()`; none keeps a table of its own. References are "module:attribute"
strings, imported only when used, so `evprobe NAME ...` imports only NAME's module (the CLI answers
at once: tests/experiments/test_cli_speed.py). A new experiment is one module plus one `register`
call (here for the built-in ones, or in the user's own code before `evprobe.experiments.cli.main`
runs); a name, kind or report file registered twice, or a reference that is not "module:attribute",
is refused in one line listing what is registered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import import_module
from typing import Any

REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


@dataclass(frozen=True)
class ReportPart:
    """What `evprobe report` gathers: every `file` under the folders it reports on, as one detail page
    headed `heading`; pages come in `rank` order (lower first)."""

    heading: str
    file: str
    rank: int


@dataclass(frozen=True)
class Experiment:
    """One experiment. `parser`: "module:function" adding its subparser to argparse's subparsers;
    `job`: "module:JobClass" (or a function(out, folders) returning a core.job_summary.MergeSummary) merging
    its `--shard K/N` folders, by the `kind` its meta records (default: its name); `report`: the
    part the report gathers, if any."""

    name: str
    parser: str
    job: str | None = None
    kind: str | None = None
    report: ReportPart | None = None

    @property
    def job_kind(self) -> str | None:
        return None if self.job is None else (self.kind or self.name)


def resolve(ref: str) -> Any:
    """The object a "module:attribute" reference names (imported now)."""
    module, name = ref.split(":")
    return getattr(import_module(module), name)


_REGISTRY: dict[str, Experiment] = {}


def register(experiment: Experiment) -> Experiment:
    """Add `experiment` (module docstring); refused in one line when it clashes or is malformed."""
    e = experiment
    listed = ", ".join(_REGISTRY)
    if not re.fullmatch(r"[a-z][a-z0-9-]*", e.name):
        raise ValueError(f"experiment name {e.name!r}: use lowercase letters, digits and '-' (registered: {listed})")
    if e.name in _REGISTRY:
        raise ValueError(f"experiment {e.name!r} is already registered (registered: {listed}); pick another name")
    for field, ref in (("parser", e.parser), ("job", e.job)):
        if ref is not None and not REF.match(ref):
            raise ValueError(f"experiment {e.name!r}: {field}={ref!r} is not a 'module:attribute' reference "
                             "(e.g. 'mypkg.heads:add_parser')")
    if e.job_kind is not None and e.job_kind in job_kinds():
        raise ValueError(f"experiment {e.name!r}: job kind {e.job_kind!r} is already merged by "
                         f"{job_kinds()[e.job_kind].name!r} (kinds: {', '.join(job_kinds())})")
    if e.report is not None and e.report.file in {p.file for p in report_parts()}:
        raise ValueError(f"experiment {e.name!r}: report file {e.report.file!r} is already gathered "
                         f"(files: {', '.join(p.file for p in report_parts())})")
    _REGISTRY[e.name] = e
    return e


def unregister(name: str) -> None:
    """Remove a registered experiment (a user's own, e.g. in a notebook or a test)."""
    if name not in _REGISTRY:
        raise ValueError(f"no experiment {name!r} (registered: {', '.join(_REGISTRY)})")
    del _REGISTRY[name]


def experiments() -> tuple[Experiment, ...]:
    """Every registered experiment, in `evprobe --help`'s order (the order of registration)."""
    return tuple(_REGISTRY.values())


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def get(name: str) -> Experiment:
    """The experiment called `name`; an unknown name is one line listing the registered ones."""
    if name not in _REGISTRY:
        raise ValueError(f"no experiment {name!r}; registered: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def job_kinds() -> dict[str, Experiment]:
    """Job kind (as a shard folder's meta records it) -> the experiment whose job merges it."""
    return {e.job_kind: e for e in _REGISTRY.values() if e.job_kind is not None}


def report_parts() -> tuple[ReportPart, ...]:
    """The parts the report gathers, in rank order."""
    return tuple(sorted((e.report for e in _REGISTRY.values() if e.report is not None), key=lambda p: p.rank))


# The built-in experiments, in `evprobe --help`'s order.
_CLI = "evprobe.experiments.cli"
for _e in (
    Experiment("generate", f"{_CLI}:add_generate_parser"),
    Experiment("check", f"{_CLI}:add_check_parser"),
    Experiment("run", f"{_CLI}:add_run_parser", job="evprobe.bench.runner:RunJob"),
    Experiment("score", f"{_CLI}:add_score_parser", report=ReportPart("Behaviour", "scores.md", 20)),
    Experiment("compare", f"{_CLI}:add_compare_parser"),
    Experiment("judge", f"{_CLI}:add_judge_parser", report=ReportPart("Free-form replies judged", "judge.md", 75)),
    Experiment("confabulation", "evprobe.experiments.confabulation.classify:add_confabulation_parser",
               report=ReportPart("Confabulation types of void failures", "confabulation.md", 76)),
    Experiment("capture", "evprobe.experiments.capture.job:add_capture_parser",
               job="evprobe.experiments.capture.job:CaptureJob"),
    Experiment("merge", "evprobe.experiments.merge:add_merge_parser"),
    Experiment("patching", "evprobe.experiments.patching.job:add_patching_parser",
               job="evprobe.experiments.patching.job:PatchingJob", report=ReportPart("Pair patching", "patching.md", 60)),
    Experiment("dose-response", "evprobe.experiments.dose_response.job:add_dose_response_parser",
               job="evprobe.experiments.dose_response.job:DoseResponseJob",
               report=ReportPart("Dose-response", "dose_response.md", 50)),
    Experiment("layer-sweep", "evprobe.experiments.layer_sweep:add_layer_sweep_parser",
               job="evprobe.experiments.layer_sweep:merge_shards"),
    Experiment("gating", "evprobe.experiments.gating.job:add_gating_parser", job="evprobe.experiments.gating.job:GatingJob",
               report=ReportPart("Gating", "gating.md", 55)),
    Experiment("report", "evprobe.experiments.report.build:add_report_parser"),
    Experiment("quickstart", "evprobe.experiments.quickstart:add_quickstart_parser",
               report=ReportPart("Known-answer checks", "known_answer.md", 10)),
    Experiment("organism", "evprobe.experiments.known_answer.organism_cli:add_organism_parser"),
    Experiment("sweep", "evprobe.probes.cli:add_sweep_parser", report=ReportPart("Probe sweeps", "sweep.md", 30)),
    Experiment("directions", "evprobe.probes.cli:add_directions_parser",
               report=ReportPart("Direction geometry", "geometry.md", 40)),
    Experiment("ladder", "evprobe.experiments.ladder:add_ladder_parser",
               report=ReportPart("Information-injection ladder", "ladder.md", 70)),
    Experiment("parity", "evprobe.experiments.parity:add_parity_parser"),
    Experiment("void-transfer", "evprobe.experiments.void_transfer:add_void_transfer_parser",
               report=ReportPart("Probes and steering across void types", "void_transfer.md", 58)),
):
    register(_e)
del _e

__all__ = ["Experiment", "ReportPart", "experiments", "get", "job_kinds", "names", "register", "report_parts",
           "resolve", "unregister"]
