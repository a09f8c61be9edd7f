"""`evprobe sweep` and `evprobe directions`: parsers and run functions for experiments.cli.

    evprobe sweep ACTS [ACTS ...] [--label NAME] [--positive VALUE] [--probe logistic|massmean|centroid]
                  [--records RUN ...] [--requests TYPES] [--restrict confabulated|confabulated_twin|overcautious|not_reference]
                  [--transfer system|initial|pairs|request|regime|void|void_system|FIELD ...] [--layers L,L] [--positions P,P]
                  [--folds 5] [--n-boot 2000] [--seed 20260905] [--C 1.0] [--pooled-covariance]
                  [--probe-params NAME=VALUE,...] [--no-nested] [--control-tasks 39] [--cell-fields F,F,...] [--leakage-shuffles 16]
                  [--catch-by FIELD,FIELD --catch-layer L [--catch-position P]]
                  [--jobs N] [--out DIR] [--quiet]
                  [--nonfinite refuse|drop]
    evprobe directions ACTS [ACTS ...] --layer L[,L ...] [--position last] [--label NAME] [--positive VALUE]
                  [--probe massmean|logistic|centroid|all] [--by KIND] [--records RUN ...] [--requests TYPES]
                  [--restrict RULE] [--C 1.0] [--pooled-covariance] [--probe-params NAME=VALUE,...]
                  [--seed 20260905] [--out DIR]
                  [--nonfinite refuse|drop]

Captures are checked at read: a row holding NaN or inf is refused in one line naming it, unless
`--nonfinite drop` leaves its family out (probes.captures; counted in sweep.md and warned).

The work is `probes.runs` (sweep_to_folder, directions_to_folder); these only parse and print. Bad
input raises ValueError (CaptureError) with a one-line message naming the fix; the main CLI prints
it and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from evprobe.core.argtypes import (
    int_list,
    nonnegative_int,
    positive_float,
    positive_int,
    str_list,
)
from evprobe.core.bootstrap import DEFAULT_N_BOOT, DEFAULT_REFITS, DEFAULT_SEED
from evprobe.probes.captures import NONFINITE_POLICIES
from evprobe.probes.chance import DEFAULT_CHANCE_PERMUTATIONS
from evprobe.probes.control_tasks import DEFAULT_CONTROL_TASKS
from evprobe.probes.label_sets import RESTRICTIONS
from evprobe.probes.registry import SHARED_KNOBS, ProbeSpec, parameters, probe_names
from evprobe.probes.runs import (
    default_sweep_out,
    directions_to_folder,
    labelled,
    sweep_to_folder,
)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("acts", metavar="ACTS", type=Path, nargs="+",
                   help="capture folder(s) written by `evprobe capture`; several = several prompt regimes")
    p.add_argument("--label", default=None,
                   help="an index field of the capture (your own capture's: the fields of its rows; the benchmark's: "
                        "resolved, history, threshold_level, system, ..., missing_property, initial, or from "
                        "--records: stopped, committed, chose_reference, valid); `name=value` names the positive "
                        "class (default: resolved where the capture has it, else the capture's one label)")
    p.add_argument("--positive", default=None, help="the class called 1 (needed when the label has >2 values)")
    p.add_argument("--records", type=Path, action="append", default=None,
                   help="RUN folder (records.jsonl) for behavioural labels and --restrict; one for all captures or "
                        "one per capture, in order (repeatable)")
    p.add_argument("--requests", type=str_list, default=None,
                   help="comma-separated request types / variant names to keep (default: every captured row)")
    p.add_argument("--restrict", choices=RESTRICTIONS, default=None,
                   help="keep only rows whose behaviour (--records) was wrong, with their image/threshold-pair "
                        "partners (`confabulated`, `overcautious`, `not_reference`); `confabulated_twin`: TRAPS's "
                        "Cf -> Cf, each void the model confabulated on with exactly its twin (1:1; voids whose "
                        "twin was not captured are dropped and counted)")
    p.add_argument("--C", dest="C", type=positive_float, default=SHARED_KNOBS["C"],
                   help="logistic inverse regularisation (TRAPS: 1)")
    p.add_argument("--pooled-covariance", action="store_true", default=SHARED_KNOBS["pooled_covariance"],
                   help="mass-mean probe through the ridge-regularised pooled within-class covariance")
    p.add_argument("--probe-params", type=str_list, default=None, metavar="NAME=VALUE,...",
                   help="parameters the probe's class declares, comma-separated, e.g. shrinkage=0.2 for massmean (an "
                        "unknown name is refused, listing the probe's parameters)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of folds, shuffles and bootstrap")
    p.add_argument("--nonfinite", choices=NONFINITE_POLICIES, default="refuse",
                   help="what a capture row holding NaN or inf does: refuse (default: one error naming the row) or "
                        "drop (leave out every family holding such a row, with its pair partners; counted and "
                        "warned)")


def _labelled(args: argparse.Namespace) -> tuple[Any, Any]:
    return labelled(args.acts, args.label, positive=args.positive, records=args.records, requests=args.requests,
                    restrict=args.restrict, nonfinite=args.nonfinite)


# -- sweep ------------------------------------------------------------------------------------


def add_sweep_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "sweep",
        help="probe a label at every captured layer and position (grouped CV, controls, nested best layer)",
        description="Linear probes per layer and position on captured activations: family-grouped cross-validated "
        "AUROC and accuracy with family-bootstrap intervals, control tasks (random functions of the prompt's cell) and "
        "the selectivity they give, a leakage check (within-family shuffled labels), input-only baselines, a "
        "within-family variance diagnostic, the best layer chosen on validation folds only, and "
        "optional transfer matrices. Writes sweep.json, sweep.md, sweep.png (and transfer-KIND.*) in --out.",
    )
    _common(p)
    p.add_argument("--probe", choices=probe_names(), default="logistic",
                   help="a registered probe (probes.registry; entry points of the group evprobe.probes add yours)")
    p.add_argument("--transfer", action="append", default=None, metavar="KIND",
                   help="also a transfer matrix: system, initial, pairs (image -> threshold pairs), request, regime "
                        "(several ACTS), void (void type), void_system (system x void type as one matrix, seed 002's "
                        "Table 3), or any index field (repeatable)")
    p.add_argument("--catch-by", type=str_list, default=None, metavar="FIELD,FIELD",
                   help="also catch rates per group of these index fields (seed 002, appendix H: "
                        "system,initial_property are the sub-scenarios) at --catch-layer: per group and class, the "
                        "share of its rows the probe assigns to it out of fold (catch-rates.json / .md)")
    p.add_argument("--catch-layer", type=int, default=None, help="the model layer of --catch-by (the seed: 32)")
    p.add_argument("--catch-position", default=None, help="the position of --catch-by (default: last if captured, "
                   "else the first)")
    p.add_argument("--layers", type=int_list, default=None, help="model layer numbers to probe (default: all captured)")
    p.add_argument("--positions", type=str_list, default=None, help="positions to probe (default: all captured)")
    p.add_argument("--folds", type=positive_int, default=5, help="cross-validation folds of whole families")
    p.add_argument("--n-boot", type=positive_int, default=DEFAULT_N_BOOT, help="family bootstrap resamples")
    p.add_argument("--nested", action=argparse.BooleanOptionalAction, default=True,
                   help="nested best-layer selection (--no-nested: skip it, faster)")
    p.add_argument("--controls", action=argparse.BooleanOptionalAction, default=True,
                   help="control tasks, leakage check and input baselines (--no-controls: none of them)")
    p.add_argument("--control-tasks", type=nonnegative_int, default=DEFAULT_CONTROL_TASKS,
                   help="control tasks per layer/position: random balanced functions of the cell (0: none)")
    p.add_argument("--cell-fields", type=str_list, default=None, metavar="FIELD,FIELD",
                   help="index fields whose values together make a row's cell (its prompt type), for the control "
                        "tasks and the one-hot cell baseline, e.g. topic,speaker (default: the capture's own: "
                        "none on yours, said once with fields that could serve; the benchmark's cell on its "
                        "captures)")
    p.add_argument("--leakage-shuffles", type=positive_int, default=16,
                   help="independent within-family label shuffles of the leakage check (>= 2)")
    p.add_argument("--refits", type=nonnegative_int, default=DEFAULT_REFITS,
                   help="family resamples on which the whole pipeline is refitted for the AUROC/accuracy intervals "
                        "(0: fixed-model intervals, which undercover)")
    p.add_argument("--permutations", type=nonnegative_int, default=0,
                   help="relabellings under chance (as the per-row test draws them, probes.chance) for the nested "
                        "estimate's p-value (0: no test)")
    p.add_argument("--chance-permutations", type=nonnegative_int, default=DEFAULT_CHANCE_PERMUTATIONS,
                   help="relabellings of the label under chance (each family's labels complemented for a label balanced "
                        "within families, else permuted within families, or among the families of each fold for a "
                        "family-constant label) refitted through every row's pipeline for the test against chance: "
                        "a row is called decodable only where it rejects (step-down maxT over the rows, 5%%; "
                        "0: no test, no row called decodable)")
    p.add_argument("--jobs", type=positive_int, default=None, help="threads over layers (default: all CPUs)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: ACTS/probes/LABEL=POSITIVE.PROBE)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(run=run_sweep)
    return p


def run_sweep(args: argparse.Namespace) -> int:
    config = sweep_config(args)
    if (args.catch_by is None) != (args.catch_layer is None):
        raise ValueError("--catch-by and --catch-layer go together: name the fields and the layer, e.g. "
                         "--catch-by system,initial_property --catch-layer 32")
    captures, labelset = _labelled(args)
    if args.catch_by:  # the layer and position checked before the sweep's work
        captures.layer_index(args.catch_layer)
        position = args.catch_position or ("last" if "last" in captures.positions else captures.positions[0])
        captures.position_index(position)
    out = args.out or default_sweep_out(args.acts[0], labelset, args.probe)
    run = sweep_to_folder(captures, labelset, out, config, transfer=args.transfer or (),
                          progress=None if args.quiet else "sweep")
    for w in run.result.warnings:
        print(f"evprobe sweep: WARNING: {w}", file=sys.stderr)
    print(_summary(run.result))
    written = list(run.written)
    if args.catch_by:
        written += _write_catch_rates(captures, labelset, out, config, args.catch_by, args.catch_layer, position)
    print(f"wrote {', '.join(written)} in {out}")
    return 0


def _write_catch_rates(captures: Any, labelset: Any, out: Path, config: Any, by: list[str], layer: int,
                       position: str) -> list[str]:
    """catch-rates.json and catch-rates.md in `out` (probes.catch_rates); their names."""
    from evprobe.core.files import atomic_write_bytes
    from evprobe.core.lock import folder_lock
    from evprobe.probes.catch_rates import catch_markdown, catch_rates
    from evprobe.probes.runs import write_json

    result = catch_rates(captures, labelset, by, layer, position, config)
    with folder_lock(out, "evprobe sweep"):
        write_json(out / "catch-rates.json", result.to_json())
        atomic_write_bytes(out / "catch-rates.md", catch_markdown(result).encode("utf-8"))
    return ["catch-rates.json", "catch-rates.md"]


# Flags of `evprobe sweep` that are not SweepConfig fields: what to read, label and write.
SWEEP_INPUT_FLAGS = frozenset({"acts", "label", "positive", "records", "requests", "restrict", "nonfinite",
                               "transfer", "out", "quiet", "catch_by", "catch_layer", "catch_position"})


def sweep_config(args: argparse.Namespace) -> Any:
    """The SweepConfig of the flags: each flag's dest is the field's name (`--folds` -> `folds`),
    so a flag and a Python setting cannot disagree (tests/probes/test_user_statistics.py)."""
    import dataclasses

    from evprobe.probes.sweep import SweepConfig

    names = {f.name for f in dataclasses.fields(SweepConfig)}
    given = {k: v for k, v in vars(args).items() if k in names and v is not None}
    for key in ("layers", "positions", "cell_fields", "probe_params"):
        if key in given:
            given[key] = tuple(given[key])
    return SweepConfig(**given)


def _summary(result: Any) -> str:
    """One line: the nested best layer (or why there is none), its control tasks and selectivity, and
    the one-hot cell baseline."""
    from evprobe.probes.report import fmt, fmt_controls, fmt_selectivity

    base = f"one-hot cell {fmt(result.cell_baseline)}" if result.cell_baseline.value is not None else ""
    if result.degenerate:
        head = f"{result.label}={result.positive}: DEGENERATE capture, no layer can be probed (see sweep.md)"
    elif result.best is not None:
        b = result.best
        head = (f"{result.label}={result.positive} ({result.probe}, n={result.n}, {result.n_families} families): "
                f"nested best L{b.layer}/{b.position} AUROC {fmt(b.auroc)}")
        row = next((r for r in result.rows if r.layer == b.layer and r.position == b.position), None)
        if row is not None and row.chance is not None and row.chance.p_adjusted is not None:
            head += f", {'decodable' if row.decodable else 'not decodable'} (permutation p adjusted {row.chance.p_adjusted:.2g})"
        if row is not None and row.controls is not None:
            head += f" (control tasks {fmt_controls(row.controls)}, selectivity {fmt_selectivity(row.selectivity)})"
    else:
        head = f"{result.label}={result.positive} ({result.probe}, n={result.n}): swept {len(result.rows)} layer/positions"
    return head + (f"; input baseline: {base}" if base else "")


# -- directions -------------------------------------------------------------------------------


def add_directions_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "directions",
        help="fit named unit directions (with provenance) at chosen layers for steering",
        description="Fit a probe on all labelled rows at each --layer and one --position and write its unit "
        "direction in the residual basis as DIR/<name>.safetensors (provenance in its metadata and in "
        "DIR/directions.json: model, layer, position, label, items used, mean residual norm). With two or more directions in DIR, also writes their "
        "cosine matrix: geometry.json, geometry.md, geometry.png.",
    )
    _common(p)
    p.add_argument("--layer", type=int_list, required=True, help="model layer number(s), comma-separated")
    p.add_argument("--position", default=None, help="position (default: last if captured, else the first)")
    p.add_argument("--probe", choices=(*probe_names(), "all"), default="massmean",
                   help="massmean (default: the class-mean displacement that steering adds), logistic, centroid, any "
                        "registered probe, or all of them")
    p.add_argument("--by", default=None, metavar="KIND",
                   help="one direction per condition: system, initial, pairs, request, regime or an index field")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: ACTS/directions)")
    p.set_defaults(run=run_directions)
    return p


def direction_specs(args: argparse.Namespace) -> list[ProbeSpec]:
    """The probes of `evprobe directions`: --probe with --probe-params and the shared flags; for `all`,
    every registered probe, each taking the flags and parameters its class declares."""
    shared = {"C": args.C, "pooled_covariance": args.pooled_covariance}
    if args.probe != "all":
        return [ProbeSpec.of(args.probe, args.probe_params or (), **shared)]
    names = probe_names()
    params = [str(p) for p in args.probe_params or ()]
    for p in params:
        if not any(p.partition("=")[0].strip() in parameters(n) for n in names):
            raise ValueError(f"--probe-params {p}: no registered probe declares {p.partition('=')[0]!r} "
                             f"(probes: {', '.join(names)})")
    return [ProbeSpec.of(n, [p for p in params if p.partition("=")[0].strip() in parameters(n)],
                         **{k: v for k, v in shared.items() if k in parameters(n)}) for n in names]


def run_directions(args: argparse.Namespace) -> int:
    run = directions_to_folder(*_labelled(args), args.out or args.acts[0] / "directions", args.layer,
                               position=args.position, probe=direction_specs(args), by=args.by, seed=args.seed)
    from evprobe.probes.geometry import number_text

    for d in run.directions:
        print(f"{d.name}: {d.provenance['n_items']} items ({d.provenance['n_positive']} positive), "
              f"mean residual norm {number_text(d.mean_norm, '.4g', 'non-finite activations')}")
    written = run.written
    print(f"wrote {len(run.directions)} direction(s) in {run.out} ({', '.join(written[:4])}"
          f"{' ...' if len(written) > 4 else ''})")
    return 0
