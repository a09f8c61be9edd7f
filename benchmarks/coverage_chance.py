"""Benchmark: size and power of the sweep's test against chance ("decodable"), on data whose truth is known.

Each replicate writes a synthetic capture (probes.synthetic: families of four rows shaped like the
benchmark's, 24 cells) and runs the sweep's own code (probes.sweep.sweep: logistic probe, 5 family
folds, `--permutations` relabellings, controls, nesting and refits off) on it. Every row's verdict is
probes.chance's: decodable = step-down maxT adjusted p <= 0.05 over the sweep's layer/positions.
Beside it, the rule it replaced: "decodable" = the row's AUROC interval above 0.5 (here the
fixed-model interval the sweep prints with refits off; with `--refits B` the refit interval).

The representation: `--layers` layers x 2 positions, d = `--d`, each row = its cell's mean (N(0, 1)
per coordinate times `--cell`: the design's factors are readable, as on the benchmark) + a family
offset + row noise, redrawn per layer. Settings:

- `null-xor`: the label is the benchmark's sufficiency (history XOR level XOR a per-family flip),
  written nowhere: no linear probe can read it, but it is tied to the cell structure the
  representation carries (only the flip is random; balanced within families, the test complements
  each family's labels at random);
- `null-random`: a label drawn at random, two of four rows per family, independent of everything;
- `null-family`: a label constant within families (half the families, at random): the test
  permutes it among the families of each fold;
- `planted S`: sufficiency written along a direction at strength S at layer 1 only (both positions):
  power there, and false calls at the other layers (family-wise error under a partial null).

Under the nulls the share of sweeps with any row called decodable is the family-wise error (<= 5%
promised); per row, the share of rows called decodable. `--capture DIR` also runs `null-random` on
a real capture (every layer/position of it).

`--row` compares the relabelling schemes instead, at one row (one layer, one position, the same data
as the sweeps): the share of p <= 0.05 (and <= 0.10) for the `null-xor` and `null-random` labels under
the scheme the sweep uses for a label balanced within families (each family's labels complemented at
random) and under uniform within-family permutations, both with the row's own probe and folds.

    python benchmarks/coverage_chance.py [--reps 200] [--families 30,144] [--strengths 0.25,0.5,1.0]
                                         [--settings null-xor,null-random,null-family,planted]
                                         [--permutations 99] [--capture out/quickstart/acts] [--first-rep 0]
                                         [--jobs 2]
    python benchmarks/coverage_chance.py --row [--reps 600] [--families 30] [--settings null-xor,null-random]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from evprobe.core.capture_schema import BENCHMARK_CELL_FIELDS
from evprobe.probes.captures import load_captures
from evprobe.probes.label_sets import labels
from evprobe.probes.control_tasks import row_cells
from evprobe.probes.sweep import SweepConfig, sweep
from evprobe.probes.synthetic import reference_rows, write_capture

SIGNAL_LAYER = 1


@dataclass(frozen=True)
class Setting:
    name: str
    families: int
    d: int
    layers: int
    cell: float
    strength: float
    permutations: int
    refits: int


def _label(name: str, rows: list[dict], rng: np.random.Generator) -> np.ndarray:
    n_fam = len(rows) // 4
    if name == "null-random":  # two of each family's four rows, at random
        return np.concatenate([rng.permutation([0, 0, 1, 1]) for _ in range(n_fam)]).astype(bool)
    if name == "null-family":
        return np.repeat(rng.permutation(np.arange(n_fam) < n_fam // 2), 4)
    return np.array([r["resolved"] for r in rows], dtype=bool)  # null-xor, planted


def _config(s: Setting) -> SweepConfig:
    # controls off: the leakage shuffles are not fitted, so two are enough (they are drawn either way)
    return SweepConfig(controls=False, nested=False, refits=s.refits, n_boot=500, chance_permutations=s.permutations,
                       leakage_shuffles=2, jobs=1)


def one_replicate(s: Setting, rep: int) -> list[tuple[int, bool, bool]]:
    """(layer, called decodable by the test, interval above 0.5) per row of one sweep."""
    rng = np.random.default_rng([s.families, s.d, rep, len(s.name), int(s.strength * 1000)])
    rows = reference_rows(s.families, seed=int(rng.integers(1 << 30)))
    y = _label(s.name, rows, rng)
    for r, v in zip(rows, y, strict=True):
        r["resolved"] = bool(v)
    cells = row_cells(rows, BENCHMARK_CELL_FIELDS)[0]
    _, fam = np.unique([r["family_id"] for r in rows], return_inverse=True)
    n = len(rows)
    acts = np.empty((n, s.layers, 2, s.d), dtype=np.float32)
    u = rng.standard_normal(s.d)
    u /= np.linalg.norm(u)
    for layer in range(s.layers):
        mu = rng.standard_normal((int(cells.max()) + 1, s.d)) * s.cell
        base = mu[cells] + rng.standard_normal((fam.max() + 1, s.d))[fam]
        for p in range(2):
            acts[:, layer, p] = base + rng.standard_normal((n, s.d))
            if s.name == "planted" and layer == SIGNAL_LAYER:
                acts[:, layer, p] += s.strength * (2.0 * y[:, None] - 1.0) * u
    with tempfile.TemporaryDirectory() as tmp:
        cs = load_captures([write_capture(Path(tmp) / "acts", acts.astype(np.float16), rows)])
        result = sweep(cs, labels(cs, "resolved"), _config(s))
    return [(r.layer, bool(r.decodable), r.auroc.ci[0] is not None and r.auroc.ci[0] > 0.5) for r in result.rows]


def row_replicate(s: Setting, rep: int) -> dict[str, float]:
    """The per-row p of one layer/position under each relabelling scheme (`--row`)."""
    from evprobe.probes.chance import FLIP, OBSERVED, WITHIN, ChanceTest, chance_labels, chance_names
    from evprobe.probes.engine import LogisticFitter, cv_scores
    from evprobe.probes.metrics import auroc
    from evprobe.probes.splits import family_folds

    rng = np.random.default_rng([s.families, s.d, rep, len(s.name), 1])
    rows = reference_rows(s.families, seed=int(rng.integers(1 << 30)))
    y = _label(s.name, rows, rng).astype(np.int8)
    cells = row_cells(rows, BENCHMARK_CELL_FIELDS)[0]
    fam = np.array([r["family_id"] for r in rows], dtype=object)
    _, inv = np.unique(fam, return_inverse=True)
    mu = rng.standard_normal((int(cells.max()) + 1, s.d)) * s.cell
    X = (mu[cells] + rng.standard_normal((inv.max() + 1, s.d))[inv] + rng.standard_normal((len(rows), s.d)))
    folds = family_folds(fam, 5, rep, y)
    out = {}
    for how in (FLIP, WITHIN):
        perms = chance_labels(y, fam, folds, s.permutations, rep, how=how)
        names = chance_names(s.permutations)
        res = cv_scores(X.astype(np.float32), LogisticFitter(), folds, {OBSERVED: y, **dict(zip(names, perms))}, key=0)
        test = ChanceTest(auroc(res.oof[OBSERVED], y), tuple(auroc(res.oof[n], p) for n, p in zip(names, perms)))
        out["complement" if how == FLIP else "within"] = test.p_value
    return out


def capture_replicate(path: str, permutations: int, rep: int) -> list[tuple[int, bool, bool]]:
    """null-random on a real capture: a random two-of-four label per family (needs families of four select rows)."""
    cs = load_captures([Path(path)])
    base = labels(cs, "resolved")
    rng = np.random.default_rng([7, rep])
    fam = np.asarray(base.families, dtype=object)
    y = np.zeros(len(fam), dtype=np.int8)
    for f in np.unique(fam):
        idx = np.flatnonzero(fam == f)
        y[rng.permutation(idx)[: len(idx) // 2]] = 1
    labelset = replace(base, y=y)
    result = sweep(cs, labelset, SweepConfig(controls=False, nested=False, refits=0, n_boot=500,
                                             chance_permutations=permutations, leakage_shuffles=2, jobs=1))
    return [(r.layer, bool(r.decodable), r.auroc.ci[0] is not None and r.auroc.ci[0] > 0.5)
            for r in result.rows if not r.degenerate]


def _rate(x: np.ndarray) -> str:
    p = float(np.mean(x))
    return f"{p:.3f} +- {np.sqrt(p * (1 - p) / len(x)):.3f}"


def summarise(name: str, results: list[list[tuple[int, bool, bool]]], signal: set[int]) -> str:
    """One line: family-wise error over the null rows, per-row false rate, and power at the signal rows."""
    test_null = np.array([any(t for layer, t, _ in rs if layer not in signal) for rs in results])
    old_null = np.array([any(o for layer, _, o in rs if layer not in signal) for rs in results])
    row_test = np.array([t for rs in results for layer, t, _ in rs if layer not in signal])
    row_old = np.array([o for rs in results for layer, _, o in rs if layer not in signal])
    parts = [f"{name:<30} sweeps={len(results):4d}",
             f"any null row decodable: test {_rate(test_null)}, interval>0.5 {_rate(old_null)}",
             f"per null row: test {_rate(row_test)}, interval>0.5 {_rate(row_old)}"]
    if signal:
        power = np.array([t for rs in results for layer, t, _ in rs if layer in signal])
        parts.append(f"power at the signal rows: {_rate(power)}")
    return " | ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--families", default="30,144")
    ap.add_argument("--settings", default="null-xor,null-random,null-family,planted")
    ap.add_argument("--strengths", default="0.25,0.5,1.0", help="planted signal strengths")
    ap.add_argument("--d", type=int, default=32)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--cell", type=float, default=0.6, help="scale of the cell means (the factors' readability)")
    ap.add_argument("--permutations", type=int, default=99)
    ap.add_argument("--refits", type=int, default=0, help="refits for the interval of the old rule (0: fixed-model)")
    ap.add_argument("--capture", default=None, help="also run null-random on this capture folder")
    ap.add_argument("--capture-reps", type=int, default=40)
    ap.add_argument("--first-rep", type=int, default=0, help="seed of the first replicate (more replicates, new data)")
    ap.add_argument("--row", action="store_true", help="compare the relabelling schemes at one row (null settings)")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    print(f"P = {args.permutations} permutations" + (", p of one row" if args.row else
          f", step-down maxT over {args.layers} layers x 2 positions, alpha 0.05"), flush=True)
    with ProcessPoolExecutor(args.jobs) if args.jobs > 1 else nullcontext() as pool:
        run = pool.map if pool is not None else map  # --jobs 1: in this process
        for name in [x for x in args.settings.split(",") if x and args.row]:
            for f in (int(x) for x in args.families.split(",")):
                s = Setting(name, f, args.d, 1, args.cell, 0.0, args.permutations, 0)
                ps = list(run(row_replicate, [s] * args.reps, range(args.first_rep, args.first_rep + args.reps)))
                parts = [f"{name}, {f} families, one row, {len(ps)} replicates"]
                for scheme in ("complement", "within"):
                    p = np.array([x[scheme] for x in ps])
                    parts.append(f"{scheme}: p <= 0.05 {_rate(p <= 0.05)}, p <= 0.10 {_rate(p <= 0.10)}")
                print(" | ".join(parts), flush=True)
        for name in [x for x in args.settings.split(",") if x and not args.row]:
            strengths = [float(x) for x in args.strengths.split(",")] if name == "planted" else [0.0]
            for strength in strengths:
                for f in (int(x) for x in args.families.split(",")):
                    s = Setting(name, f, args.d, args.layers, args.cell, strength, args.permutations, args.refits)
                    reps = range(args.first_rep, args.first_rep + args.reps)
                    results = list(run(one_replicate, [s] * args.reps, reps))
                    what = f"{name}{f' {strength:g}' if name == 'planted' else ''}, {f} families"
                    print(summarise(what, results, {SIGNAL_LAYER} if name == "planted" else set()), flush=True)
        if args.capture:
            reps = args.capture_reps
            results = list(run(capture_replicate, [args.capture] * reps, [args.permutations] * reps, range(reps)))
            print(summarise(f"null-random on {Path(args.capture).name}", results, set()), flush=True)
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
