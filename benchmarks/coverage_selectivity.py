"""Benchmark: coverage and false verdicts of the sweep's selectivity, on data where the truth is known.

Selectivity = target AUROC - mean AUROC of k control tasks (random balanced functions of the cell,
probes.control_tasks). Two rules are run side by side on the same fits:

- `printed`: what evprobe prints now. Interval [target - max control, target - min control];
  selective = the target beats every control (probes.control_tasks.selectivity);
- `bootstrap`: the rule it replaced, a paired family bootstrap of target - pair-weighted control
  mean with the fold models and the controls held fixed (kept here, in `paired_bootstrap`, only
  to show what it did).

Settings (families of four rows shaped like the benchmark's, probes.synthetic.reference_rows; 24
cells = system x initial property x history x threshold level). The representation carries the
cell: each cell has a random mean (N(0, 1) per coordinate, times `--cell`), plus a per-family
offset and row noise, so every function of the cell decodes, some better than others.

- `null`: the target is itself a random balanced cell function, drawn per replicate like a control
  (exchangeable with them). Its selectivity is 0 in expectation over the draw: coverage of 0 and
  the share called selective are what the rules promise (>= 95% and <= 1 / (k + 1) for `printed`).
- `planted`: the target is the benchmark's sufficiency (history XOR level XOR a per-family flip,
  not a function of the cell), written along its own direction at `--strength` on top of the cell
  structure: the share called selective is the power.
- `planted-cell`: the target is a random cell function that the representation carries more
  strongly than the others (its direction added at `--strength`): power again, for a label that is
  one of the cell functions, as sufficiency is in the benchmark.

`--capture DIR` (e.g. a quickstart's acts folder) also runs the null on a real capture: at every
layer/position, `--draws` random cell functions of the capture's own cells play the target.

    python benchmarks/coverage_selectivity.py [--reps 200] [--families 30,144] [--k 39] [--d 32]
                                              [--strengths 0.5,1.0,1.5]
                                              [--capture out/quickstart/acts --draws 4] [--jobs 2]

Prints, per setting x size: coverage of 0 (null only) and the share called selective under each
rule, with binomial standard errors, mean interval width and the spread of the estimate.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evprobe.core.bootstrap import FamilyBootstrap, percentile_interval
from evprobe.core.capture_schema import BENCHMARK_CELL_FIELDS
from evprobe.probes.control_tasks import draw_control_tasks, row_cells, selectivity
from evprobe.probes.engine import LogisticFitter, cv_scores
from evprobe.probes.metrics import auroc
from evprobe.probes.splits import family_folds
from evprobe.probes.synthetic import reference_rows

K_FOLDS = 5
N_BOOT = 1000


# -- the rule evprobe printed before (kept only for the side-by-side) ------------------------


def _pair_counts(scores: np.ndarray, y: np.ndarray, fam: np.ndarray, F: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N (F, F), P (F,), Q (F,)): correctly ordered pairs of a positive of family f and a negative of
    family g (ties one half), positives and negatives per family."""
    ok = np.isfinite(scores)
    s, yy, ff = scores[ok], np.asarray(y)[ok].astype(bool), fam[ok]
    P = np.bincount(ff[yy], minlength=F).astype(np.float64)
    Q = np.bincount(ff[~yy], minlength=F).astype(np.float64)
    order = np.argsort(s[~yy], kind="mergesort")
    neg_s, neg_f = s[~yy][order], ff[~yy][order]
    onehot = np.zeros((len(neg_s) + 1, F))
    onehot[np.arange(1, len(neg_s) + 1), neg_f] = 1.0
    cum = np.cumsum(onehot, axis=0)  # (negatives + 1, F)
    lo = np.searchsorted(neg_s, s[yy], side="left")
    hi = np.searchsorted(neg_s, s[yy], side="right")
    N = np.zeros((F, F))
    np.add.at(N, ff[yy], 0.5 * (cum[lo] + cum[hi]))
    return N, P, Q


def _pooled_draws(scores: np.ndarray, labels: np.ndarray, fam: np.ndarray, counts: np.ndarray) -> tuple[float, np.ndarray]:
    """Pair-weighted AUROC over label vectors (L, n), observed and per resample (B,)."""
    F = counts.shape[1]
    N_sum, Ps, Qs = np.zeros((F, F)), [], []
    for s, y in zip(np.atleast_2d(scores), np.atleast_2d(labels), strict=True):
        N, P, Q = _pair_counts(s, y, fam, F)
        N_sum += N
        Ps.append(P)
        Qs.append(Q)
    P, Q = np.array(Ps).T, np.array(Qs).T  # (F, L)
    W = counts.astype(np.float64)
    draws = np.einsum("bf,bf->b", W @ N_sum, W) / np.einsum("bl,bl->b", W @ P, W @ Q)
    return float(N_sum.sum() / (P.sum(0) * Q.sum(0)).sum()), draws


def paired_bootstrap(target: np.ndarray, y: np.ndarray, ctrl: np.ndarray, ctrl_labels: np.ndarray,
                     fam: np.ndarray, boot: FamilyBootstrap) -> tuple[float, float, float]:
    """(value, lo, hi) of the old rule: target - pair-weighted control mean on the same resamples."""
    t, t_draws = _pooled_draws(target[None], y[None], fam, boot.counts)
    c, c_draws = _pooled_draws(ctrl, ctrl_labels, fam, boot.counts)
    lo, hi = percentile_interval(t_draws - c_draws)
    return t - c, float(lo[0]), float(hi[0])


# -- one replicate ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    name: str
    families: int
    d: int
    k: int
    cell: float
    strength: float


def _balanced_cell_function(n_cells: int, rng: np.random.Generator) -> np.ndarray:
    f = np.zeros(n_cells, np.int8)
    f[rng.permutation(n_cells)[: n_cells // 2]] = 1
    return f


def _rules(X: np.ndarray, y: np.ndarray, cells: np.ndarray, fam: np.ndarray, k: int, seed: int) -> dict[str, float]:
    """Fit the target and k controls exactly as the sweep does; both rules' numbers."""
    folds = family_folds(fam, K_FOLDS, seed, y)
    tasks = draw_control_tasks(cells, y, k, seed)
    res = cv_scores(X, LogisticFitter(1.0), folds, {"y": y, **tasks.as_labels()}, key=0)
    target = res.oof["y"]
    ctrl = np.array([res.oof[name] for name in tasks.names()])  # (k, n)
    each = [auroc(c[np.isfinite(c)], lab[np.isfinite(c)]) for c, lab in zip(ctrl, tasks.labels, strict=True)]
    ok = np.isfinite(target)
    _, sel = selectivity(auroc(target[ok], y[ok]), each, int(ok.sum()))
    fam_ids = sorted(set(fam))
    boot = FamilyBootstrap(fam_ids, N_BOOT, seed)
    idx = boot.family_index(list(fam))
    old, olo, ohi = paired_bootstrap(target, y, ctrl, tasks.labels, idx, boot)
    lo, hi = sel.estimate.ci
    return {"value": sel.estimate.value, "lo": lo, "hi": hi, "selective": bool(sel.selective),
            "old": old, "old_lo": olo, "old_hi": ohi, "k": sel.k}


def one_replicate(setting: Setting, rep: int) -> dict[str, float]:
    rng = np.random.default_rng([setting.families, setting.d, rep, len(setting.name)])
    rows = reference_rows(setting.families, seed=int(rng.integers(1 << 30)))
    cells = row_cells(rows, BENCHMARK_CELL_FIELDS)[0]
    n_cells = int(cells.max()) + 1
    fam = np.array([r["family_id"] for r in rows], dtype=object)
    _, inv = np.unique(fam, return_inverse=True)
    mu = rng.standard_normal((n_cells, setting.d)) * setting.cell  # the cell's place in the representation
    X = mu[cells] + rng.standard_normal((inv.max() + 1, setting.d))[inv] + rng.standard_normal((len(rows), setting.d))
    if setting.name == "planted":
        y = np.array([r["resolved"] for r in rows], dtype=np.int8)
    else:
        y = _balanced_cell_function(n_cells, rng)[cells]
    if setting.name != "null":
        u = rng.standard_normal(setting.d)
        X += setting.strength * (2.0 * y[:, None] - 1.0) * (u / np.linalg.norm(u))
    return _rules(X.astype(np.float32), y, cells, fam, setting.k, seed=rep)


def _capture_null(path: Path, draws: int, k: int) -> list[tuple[str, dict[str, float]]]:
    """At every layer/position of a real capture, `draws` random cell functions play the target."""
    from evprobe.probes.captures import load_captures
    from evprobe.probes.label_sets import labels

    cs = load_captures([path])
    ls = labels(cs, "resolved")
    cells, why = row_cells([cs.index[r] for r in ls.rows], BENCHMARK_CELL_FIELDS)
    if cells is None:
        sys.exit(f"{path}: {why}")
    fam = np.asarray(ls.families, dtype=object)
    n_cells = int(cells.max()) + 1
    out = []
    for li, layer in enumerate(cs.layers):
        block = cs.block(li, ls.rows).astype(np.float32)  # (n, positions, d)
        for pi, position in enumerate(cs.positions):
            X = block[:, pi]
            if np.allclose(X, X[:1]):
                continue
            for draw in range(draws):
                y = _balanced_cell_function(n_cells, np.random.default_rng([7, li, pi, draw]))[cells]
                out.append((f"L{layer}/{position}", _rules(X, y, cells, fam, k, seed=1000 + draw)))
    return out


# -- summary ----------------------------------------------------------------------------------


def _rate(x: np.ndarray) -> str:
    p = float(np.mean(x))
    return f"{p:.3f} +- {np.sqrt(p * (1 - p) / len(x)):.3f}"


def summarise(name: str, results: list[dict[str, float]], null: bool) -> str:
    v = np.array([r["value"] for r in results])
    lo, hi = np.array([r["lo"] for r in results]), np.array([r["hi"] for r in results])
    olo, ohi = np.array([r["old_lo"] for r in results]), np.array([r["old_hi"] for r in results])
    sel = np.array([r["selective"] for r in results])
    old_sel = olo > 0
    parts = [f"{name:<28} n={len(results):4d}"]
    if null:
        parts.append(f"covers 0: printed {_rate((lo <= 0) & (0 <= hi))}, bootstrap {_rate((olo <= 0) & (0 <= ohi))}")
    parts.append(f"selective: printed {_rate(sel)}, bootstrap {_rate(old_sel)}")
    parts.append(f"width printed {np.mean(hi - lo):.3f} / bootstrap {np.mean(ohi - olo):.3f}; estimate "
                 f"{v.mean():+.3f} (sd {v.std(ddof=1):.3f})")
    return " | ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--families", default="30,144")
    ap.add_argument("--settings", default="null,planted,planted-cell", help="synthetic settings (none: only --capture)")
    ap.add_argument("--k", type=int, default=39, help="control tasks")
    ap.add_argument("--d", type=int, default=32)
    ap.add_argument("--cell", type=float, default=0.6, help="scale of the cell means (how well cells decode)")
    ap.add_argument("--strengths", default="0.5,1.0,1.5", help="planted signal strengths (planted settings)")
    ap.add_argument("--capture", type=Path, default=None, help="also run the null on this capture folder")
    ap.add_argument("--draws", type=int, default=4, help="random cell functions per layer/position (--capture)")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    print(f"k = {args.k} control tasks: printed interval level {(args.k - 1) / (args.k + 1):.3f}, "
          f"false 'selective' rate under the null 1/(k+1) = {1 / (args.k + 1):.3f}", flush=True)
    with ProcessPoolExecutor(args.jobs) if args.jobs > 1 else nullcontext() as pool:
        run = pool.map if pool is not None else map  # --jobs 1: in this process
        for name in [x for x in args.settings.split(",") if x and x != "none"]:
            strengths = [0.0] if name == "null" else [float(x) for x in args.strengths.split(",")]
            for strength in strengths:
                for f in (int(x) for x in args.families.split(",")):
                    setting = Setting(name, f, args.d, args.k, args.cell, strength)
                    results = list(run(one_replicate, [setting] * args.reps, range(args.reps)))
                    what = f"{name}{'' if name == 'null' else f' {strength:g}'}, {f} families"
                    print(summarise(what, results, name == "null"), flush=True)
    if args.capture is not None:
        rows = _capture_null(args.capture, args.draws, args.k)
        print(summarise(f"null on {args.capture.name} (rows x draws)", [r for _, r in rows], True))
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
