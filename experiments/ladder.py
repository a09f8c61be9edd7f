"""`evprobe ladder`: the information-injection ladder (seed 003, section 4.6; its Figure 5 for our
task): the sufficiency probe's AUROC and the behaviour, level by level.

    evprobe ladder --acts ACTS --out LADDER [--scores RUN/scores.json] [--records RUN]
                   [--label resolved] [--requests select] [--levels 0,1,2,3] [--refits 50]

Input: a capture holding several levels (`evprobe capture --injection 0,1,2,3`; its index rows
carry `injection`, a missing field being level 0) and, for the behavioural panel, the scores of a
run over the same levels (`evprobe run --injection 0,1,2,3`, `evprobe score`: level 0 is the main
measures, level L >= 1 is `scores["injection"]["levels"][L]`).

Per level L, the label is read once over the whole capture (`probes.label_sets.labels`, so its
positive class is the same at every level) and restricted to the rows of level L
(`LabelSet.subset`); `probes.runs.sweep_to_folder` then runs the full sweep on those rows alone
into LADDER/L<L>/ (sweep.json, .md, .png: every layer and position, control tasks, leakage check,
baselines). The ladder's number for L is the sweep's nested estimate (the best layer chosen on
validation folds only, probes.nested), with its interval from refitting the whole pipeline on
family resamples (probes.inference; `--refits 0` falls back to the fixed-model bootstrap, which
the sweep flags as undercovering) and its n.

Choices where the seed is silent:
- One sweep per level, never a probe trained on one level and tested on another: the question is
  how well each prompt's representation encodes sufficiency, the seed's per-level comparison.
- The same sweep settings and seed at every level; the levels of one benchmark share their
  families, so the folds deal the same families and the family resamples are the same sets
  (`ladder.json` states whether the family sets agree; a mismatch is a warning in ladder.md).
- A level whose rows carry one class only, or fewer families than folds, is reported with its
  reason and no number (never a 0.5).
- Behaviour: the min-cost choice rate (the headline selection measure) with its family-bootstrap
  interval and n, and beside it in the table stop-if-enough and test-if-needed; a level the run
  did not score says "not in scores.json".

Paired differences (each level against the reference level, 0 when swept, else the lowest):
two intervals overlapping is not a test of a difference, so every level's difference is computed
on the same resamples. Probe: the levels share their families and every sweep uses the same seed,
so refit b (and fixed-model resample b) drew the same families at every level; the difference's
interval is `probes.inference.refit_difference` on the per-refit differences (`--refits 0`: no
difference is given). Behaviour: the run's scores.json holds level minus level 0 per resample
(`bench.level_differences`). Steering: per level only, each dose-response folder with its own
family-bootstrap intervals (its items are level L's; pairing across folders is not done).

Steering (`--dose DIR [DIR ...]`, one `evprobe dose-response --injection L` folder per level; the
level is read from each folder's dose_response.json): the cross-fitted headline per goal (induce
measuring on resolved items, induce stopping on unresolved ones), its stop log-odds change in nats
and stop-rate change in points, each with interval and n, and where it was chosen.

Outputs: LADDER/ladder.json, ladder.md (level x measure tables), ladder.png (panels: nested
AUROC per level with 95% interval bars and chance; min-cost choice rate per level with its
interval; with --dose, the cross-fitted stop log-odds change per goal and level). `evprobe report`
shows ladder.md and ladder.png under "Information-injection ladder".
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from evprobe.core.estimate_text import estimate_text, missing_text
from evprobe.core.flags import add_config_arguments, setting
from evprobe.core.json_types import JsonObject

if TYPE_CHECKING:
    import numpy as np

LEVEL_NAMES = {0: "implicit baseline", 1: "object awareness", 2: "attribute awareness", 3: "oracle guidance"}
BEHAVIOUR = ("min_cost_choice", "stop_if_enough", "test_if_needed")  # scores.json keys, per level


@dataclass(frozen=True)
class LadderConfig:
    """`evprobe ladder`: every field is a flag (`--n-boot` for n_boot), with this help."""

    acts: tuple[str, ...] = setting(help="capture folder(s) holding the levels (evprobe capture --injection 0,1,2,3)")
    out: str = setting(help="output folder (ladder.json, ladder.md, ladder.png, L<level>/sweep.*)")
    scores: str | None = setting(None, "a run's scores.json (evprobe score) for the behavioural panel")
    records: str | None = setting(None, "run folder whose replies give behavioural labels (stopped, ...)")
    label: str = setting("resolved", "the label to probe, e.g. resolved (sufficiency) or system=sliding")
    requests: tuple[str, ...] = setting(("select",), "request types whose rows are probed")
    levels: tuple[int, ...] | None = setting(None, "injection levels to sweep (default: every level captured)")
    layers: tuple[int, ...] | None = setting(None, "model layer numbers to probe (default: all captured)")
    positions: tuple[str, ...] | None = setting(None, "positions to probe (default: all captured)")
    folds: int = setting(5, "cross-validation folds of whole families")
    n_boot: int = setting(2000, "family bootstrap resamples")
    refits: int = setting(50, "family resamples on which the whole pipeline is refitted for the intervals")
    control_tasks: int = setting(20, "control tasks per layer and position (0: none)")
    dose: tuple[str, ...] = setting((), "dose-response folders, one per level (evprobe dose-response --injection L) "
                                    "for the steering panel")
    seed: int = setting(20260905, "seed of folds, shuffles, refits and bootstrap (the same at every level)")


@dataclass(frozen=True)
class ProbeDifference:
    """A level's nested AUROC minus the reference level's on the same refits, or why there is none."""

    vs: int  # the reference level
    value: float | None = None
    ci: tuple[float, float] | None = None
    n: int | None = None
    n_families: int | None = None
    reason: str | None = None

    def to_json(self) -> JsonObject:
        if self.reason is not None:
            return {"vs": self.vs, "reason": self.reason}
        return {"vs": self.vs, "value": self.value, "ci": list(self.ci or ()), "n": self.n,
                "n_families": self.n_families}


@dataclass(frozen=True)
class GoalSteering:
    """One goal's cross-fitted headline in a level's dose-response folder, or why there is none."""

    group: str | None = None
    setting: str | None = None
    log_odds_change: JsonObject | None = None  # dose_response.json's estimate
    change: JsonObject | None = None
    reason: str | None = None

    def to_json(self) -> JsonObject:
        if self.reason is not None:
            return {"reason": self.reason}
        return {"group": self.group, "setting": self.setting, "log_odds_change": self.log_odds_change,
                "change": self.change}


@dataclass(frozen=True)
class LevelPoint:
    """One level of the ladder: the nested probe estimate and the behaviour."""

    level: int
    n: int  # labelled rows of this level
    n_families: int
    auroc: float | None
    ci: tuple[float | None, float | None]
    layer: int | None  # the nested estimate's most frequent choice
    position: str | None
    reason: str | None  # why there is no AUROC
    behaviour: dict[str, JsonObject]  # BEHAVIOUR key -> scores.json's {value, ci, n} (or {reason})
    difference: ProbeDifference | None = None  # paired against the reference level; None at the reference
    behaviour_difference: dict[str, JsonObject] | None = None  # BEHAVIOUR key -> scores.json's difference
    steering: dict[str, GoalSteering] | None = None  # goal -> the headline of --dose

    def to_json(self) -> JsonObject:
        out = asdict(self)
        out["name"] = LEVEL_NAMES.get(self.level, "")
        out["ci"] = list(self.ci)
        out["difference"] = None if self.difference is None else self.difference.to_json()
        out["steering"] = None if self.steering is None else {g: s.to_json() for g, s in self.steering.items()}
        return out


def level_of(row: JsonObject) -> int:
    """A capture index row's injection level (a row without the field is level 0)."""
    return int(row.get("injection", 0))


def behaviour_by_level(scores: JsonObject, level: int) -> dict[str, JsonObject]:
    """The BEHAVIOUR measures of `level` in a run's scores.json (level 0: the main measures)."""
    block = scores if level == 0 else scores.get("injection", {}).get("levels", {}).get(str(level))
    if block is None:
        return {k: {"reason": "not in scores.json"} for k in BEHAVIOUR}
    return {k: block.get(k, {"reason": "not in scores.json"}) for k in BEHAVIOUR}


def behaviour_difference(scores: JsonObject, level: int) -> dict[str, JsonObject]:
    """The BEHAVIOUR differences level minus level 0 in a run's scores.json (bench.level_differences)."""
    block = scores.get("injection", {}).get("differences", {}).get(str(level))
    if block is None:
        return {k: {"reason": "no paired difference in scores.json (rescore the run)"} for k in BEHAVIOUR}
    return {k: block.get(k, {"reason": "not in scores.json"}) for k in BEHAVIOUR}


def steering_by_level(folders: tuple[str, ...]) -> dict[int, dict[str, GoalSteering]]:
    """level -> goal -> its cross-fitted headline from dose-response folders (the
    level is each folder's `meta.injection`; two folders of one level are refused)."""
    from evprobe.core.errors import InputError
    from evprobe.experiments.dose_response.formatting import crossfit_setting

    out: dict[int, dict[str, GoalSteering]] = {}
    for folder in folders:
        from evprobe.experiments.report.summary_files import DoseSummary, read_summary

        path = Path(folder) / "dose_response.json"
        doc = read_summary(path, DoseSummary, "rerun `evprobe dose-response` there",
                           missing="--dose takes folders written by `evprobe dose-response`")
        level = int(doc.get("meta", {}).get("injection", 0))
        if level in out:
            raise InputError(f"{path}: a second dose-response folder of injection level {level}; give one per level")
        goals = {}
        for h in doc.get("headline") or []:
            if h.get("readout", "logprobs") != "logprobs":
                continue
            goals[h["goal"]] = GoalSteering(h["group"], crossfit_setting(h), h["target"].get("log_odds_change"),
                                            h["target"].get("change"))
        out[level] = goals or {"(none)": GoalSteering(
            reason=(doc.get("split") or {}).get("skipped", "no cross-fitted headline"))}
    return out


def ladder(config: LadderConfig, *, progress: bool = True) -> list[LevelPoint]:
    """Sweep each level into OUT/L<level>/ and write ladder.json / .md / .png (module docstring)."""
    from evprobe.core.lock import folder_lock

    with folder_lock(config.out, "evprobe ladder"):  # one writer per folder (core.lock)
        return _ladder(config, progress)


def _ladder(config: LadderConfig, progress: bool) -> list[LevelPoint]:
    import numpy as np

    from evprobe.core.errors import InputError
    from evprobe.probes.runs import labelled, sweep_to_folder
    from evprobe.probes.sweep import SweepConfig

    cs, labelset = labelled(list(config.acts), config.label, records=[config.records] if config.records else None,
                            requests=list(config.requests))
    row_levels = np.array([level_of(cs.index[r]) for r in labelset.rows])  # (n,) level of each labelled row
    present = sorted(set(row_levels.tolist()))
    levels = list(config.levels) if config.levels is not None else present
    missing = [lv for lv in levels if lv not in present]
    if missing:
        raise InputError(f"the capture has no labelled rows of injection level {missing[0]} (levels there: "
                         f"{', '.join(map(str, present))}); capture with --injection {','.join(map(str, levels))}")
    scores = _read_scores(config.scores) if config.scores else None
    steering = steering_by_level(config.dose) if config.dose else {}
    reference = 0 if 0 in levels else min(levels)
    sweep_config = SweepConfig(folds=config.folds, seed=config.seed, n_boot=config.n_boot, refits=config.refits,
                               control_tasks=config.control_tasks, layers=config.layers, positions=config.positions)
    out = Path(config.out)
    points: list[LevelPoint] = []
    families: dict[int, list[str]] = {}
    methods: dict[int, str] = {}
    draws: dict[int, tuple[np.ndarray, np.ndarray] | None] = {}
    for level in levels:
        sub = labelset.subset(row_levels == level, restriction=f"injection level {level}", reason="other injection level")
        fams = sorted(set(sub.families.tolist()))
        families[level] = fams
        behaviour = behaviour_by_level(scores, level) if scores is not None else {}
        extra = {"behaviour_difference": behaviour_difference(scores, level)
                 if scores is not None and level != reference and reference == 0 else None,
                 "steering": steering.get(level)}
        reason = None
        if sub.y.min() == sub.y.max():
            reason = f"one class on all {sub.n} rows of this level"
        elif len(fams) < config.folds:
            reason = f"{len(fams)} families, fewer than the {config.folds} folds"
        if reason:
            points.append(LevelPoint(level, sub.n, len(fams), None, (None, None), None, None, reason, behaviour,
                                     **extra))
            continue
        run = sweep_to_folder(cs, sub, out / f"L{level}", sweep_config, progress=f"level {level}" if progress else None)
        best = run.result.best
        methods[level] = run.result.intervals_json()["method"]
        if best is None or best.auroc.value is None:
            points.append(LevelPoint(level, sub.n, len(fams), None, (None, None), None, None,
                                     "no nested estimate (every candidate degenerate)", behaviour, **extra))
            continue
        draws[level] = run.result.intervals.nested_draws if run.result.intervals is not None else None
        points.append(LevelPoint(level, sub.n, len(fams), best.auroc.value, tuple(best.auroc.ci), best.layer,
                                 best.position, None, behaviour, **extra))
    same = len({tuple(f) for f in families.values()}) <= 1
    points = [p if p.level == reference else replace(p, difference=_probe_difference(p, points, reference, draws, same))
              for p in points]
    doc = {"label": labelset.title, "requests": list(config.requests), "model": cs.model, "reference_level": reference,
           "difference_methods": {"probe": DIFFERENCE_METHOD, "behaviour": "scores.json injection.differences_method",
                                  "steering": "none: each level's folder has its own intervals"},
           "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(config).items()},
           "same_families_at_every_level": same, "interval_method": methods,
           "levels": [p.to_json() for p in points]}
    out.mkdir(parents=True, exist_ok=True)
    from evprobe.core.files import atomic_write_bytes

    atomic_write_bytes(out / "ladder.json", (json.dumps(doc, indent=1) + "\n").encode("utf-8"))
    atomic_write_bytes(out / "ladder.md", ladder_markdown(points, labelset.title, same, reference).encode("utf-8"))
    ladder_png(points, labelset.title, out / "ladder.png")
    return points


DIFFERENCE_METHOD = ("nested AUROC of level L minus the reference level's on the same refits (same families, "
                     "same seed): estimate +- t(B-1) x sd of the paired refit differences (probes.inference."
                     "refit_difference); MOVER from the two levels' own intervals when they have no spread")


def _probe_difference(p: LevelPoint, points: list[LevelPoint], reference: int,
                      draws: dict[int, tuple[np.ndarray, np.ndarray] | None], same_families: bool) -> ProbeDifference:
    """The paired AUROC difference of `p` against the reference level (module docstring)."""
    from evprobe.probes.inference import refit_difference

    ref = next(q for q in points if q.level == reference)
    if p.auroc is None or ref.auroc is None:
        return ProbeDifference(reference, reason="no nested estimate at one of the two levels")
    if not same_families:
        return ProbeDifference(reference, reason="the levels hold different families: no paired difference")
    if draws.get(p.level) is None or draws.get(reference) is None:
        return ProbeDifference(reference, reason="no refits (--refits 0): no paired difference")
    value, ci = refit_difference(p.auroc, draws[p.level], p.ci, ref.auroc, draws[reference], ref.ci, p.n_families)
    # the refits resample the level's families, the same at both levels (checked above)
    return ProbeDifference(reference, value, tuple(ci), p.n, p.n_families)


def _read_scores(path: str) -> JsonObject:
    from evprobe.core.json_files import read_json_object

    p = Path(path)
    if p.is_dir():
        p = p / "scores.json"
    return read_json_object(p, "rescore the run (`evprobe score RUN`)",
                            missing="score the run first (`evprobe score RUN`)")[0]


NO_SCORES = "no scores given"  # a level without a scored run: its behaviour is not measured


def _cell(est: JsonObject | None, pct: bool = False, sign: bool = False) -> str:
    """The one formatter (core.estimate_text): percent with 1 decimal, else 3 decimals."""
    if est is None:
        return missing_text(NO_SCORES)
    return estimate_text(est, 1 if pct else 3, scale=100.0 if pct else 1.0, sign=sign)


def ladder_markdown(points: list[LevelPoint], title: str, same_families: bool, reference: int = 0) -> str:
    """The level x measure tables: levels, paired differences against the reference, steering."""
    head = ["level", "name", f"probe AUROC {title} (nested, 95% CI)", "layer/position", "families"]
    head += [f"{k} % (95% CI)" for k in BEHAVIOUR]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in points:
        # the refit interval resamples the level's families: its effective n (issue 52)
        auc = (_cell({"value": p.auroc, "ci": p.ci, "n": p.n, "n_families": p.n_families}) if p.reason is None
               else missing_text(p.reason))
        where = "" if p.layer is None else f"{p.layer}/{p.position}"
        cells = [str(p.level), LEVEL_NAMES.get(p.level, ""), auc, where, str(p.n_families)]
        cells += [_cell(p.behaviour.get(k), pct=True) if p.behaviour else missing_text(NO_SCORES) for k in BEHAVIOUR]
        lines.append("| " + " | ".join(cells) + " |")
    text = "# Information-injection ladder\n\n" + "\n".join(lines) + "\n"
    if not same_families:
        text += "\nWARNING: the levels do not hold the same families; their numbers are not comparable.\n"
    text += ("\nEach level is its own sweep (LADDER/L<level>/sweep.md); two levels' intervals overlapping is not a "
             "test of their difference, which the next table gives.\n")
    others = [p for p in points if p.level != reference]
    if others:
        head = ["level", f"probe AUROC minus level {reference} (paired refits)"]
        head += [f"{k} minus level 0, points (paired resamples)" for k in BEHAVIOUR]
        rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for p in others:
            cells = [str(p.level), _cell(None if p.difference is None else p.difference.to_json(), sign=True)]
            cells += ([_cell(p.behaviour_difference.get(k), pct=True, sign=True) for k in BEHAVIOUR]
                      if p.behaviour_difference else [missing_text(NO_SCORES)] * len(BEHAVIOUR))
            rows.append("| " + " | ".join(cells) + " |")
        text += (f"\n## Differences from level {reference}\n\nSame families and seed at every level, so refit "
                 "(and bootstrap resample) b draws the same families at both levels and the difference is taken "
                 "per resample.\n\n" + "\n".join(rows) + "\n")
    steered = [p for p in points if p.steering]
    if steered:
        rows = ["| level | goal | chosen at | stop log-odds change, nats (95% CI) | stop-rate change, points (95% CI) |",
                "|---|---|---|---|---|"]
        for p in steered:
            for goal, g in p.steering.items():
                if g.reason is not None:
                    rows.append(f"| {p.level} | {goal} | {missing_text(g.reason)} | | |")
                    continue
                rows.append(f"| {p.level} | {goal} ({g.group} items) | {g.setting} | "
                            f"{_cell(g.log_odds_change, sign=True)} | {_cell(g.change, pct=True, sign=True)} |")
        text += ("\n## Steering per level\n\nThe cross-fitted headline of each level's dose-response folder "
                 "(the same directions and alpha unit at every level; intervals per level, not paired).\n\n"
                 + "\n".join(rows) + "\n")
    return text


def ladder_png(points: list[LevelPoint], title: str, path: Path) -> Path:
    """Panels: nested AUROC per level with interval bars and chance; min-cost choice rate per level;
    with steering, the cross-fitted stop log-odds change per goal and level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    def bars(ax, xs, values, cis, color, label=None):
        v = np.array([np.nan if x is None else x for x in values], dtype=float)
        lo = np.array([np.nan if c[0] is None else c[0] for c in cis], dtype=float)
        hi = np.array([np.nan if c[1] is None else c[1] for c in cis], dtype=float)
        ax.errorbar(xs, v, yerr=[v - lo, hi - v], fmt="o-", color=color, capsize=4, label=label)

    steered = any(p.steering for p in points)
    fig, axes = plt.subplots(1, 3 if steered else 2, figsize=(15 if steered else 10, 4))
    a, b = axes[0], axes[1]
    xs = [p.level for p in points]
    bars(a, xs, [p.auroc for p in points], [p.ci for p in points], "C0")
    a.axhline(0.5, ls=":", color="C7", label="chance")
    a.set(xlabel="injection level", ylabel="AUROC (nested, 95% CI)", title=f"probe {title}", ylim=(0.0, 1.05))
    a.legend(loc="lower right")
    mc = [p.behaviour.get("min_cost_choice", {}) for p in points]
    values = [None if m.get("value") is None else 100 * m["value"] for m in mc]  # percent, as the tables
    cis = [tuple(None if c is None else 100 * c for c in m.get("ci", (None, None))) for m in mc]
    bars(b, xs, values, cis, "C1")
    b.set(xlabel="injection level", ylabel="min-cost choice, % (95% CI)", title="behaviour", ylim=(0.0, 105.0))
    if steered:
        c = axes[2]
        goals = sorted({g for p in points for g, s in (p.steering or {}).items() if s.reason is None})
        for i, goal in enumerate(goals):
            cells = [(p.steering or {}).get(goal) for p in points]
            ests = [(s.log_odds_change if s is not None else None) or {} for s in cells]
            bars(c, xs, [e.get("value") for e in ests], [tuple(e.get("ci") or (None, None)) for e in ests],
                 f"C{i + 2}", label=goal)
        c.axhline(0.0, ls=":", color="C7")
        c.set(xlabel="injection level", ylabel="stop log-odds change, nats (95% CI)",
              title="steering (cross-fitted)")
        if goals:
            c.legend(loc="best", fontsize=8)
    for ax in axes:
        ax.set_xticks(range(4), [f"{lv}\n{LEVEL_NAMES[lv]}" for lv in range(4)], fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ---------------------------------------------------------------- command line


def add_ladder_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("ladder", help="probe AUROC and behaviour per information-injection level (seed 003 Fig. 5)",
                       description="Sweep the label on each injection level's rows of a capture (one sweep per "
                       "level) and put the nested AUROC beside a run's min-cost choice rate per level: "
                       "LADDER/ladder.json, ladder.md, ladder.png.")
    add_config_arguments(p, LadderConfig)
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(run=run_ladder)
    return p


def run_ladder(args: argparse.Namespace) -> int:
    from evprobe.experiments.config import config_from_flags

    config = config_from_flags(LadderConfig, args)
    points = ladder(config, progress=not args.quiet)
    print((Path(config.out) / "ladder.md").read_text(encoding="utf-8"), end="")
    return 0 if points else 1
