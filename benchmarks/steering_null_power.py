"""Benchmark: size and power of the steering specificity verdict, by simulation on synthetic models
whose truth is known (analysis.label_null, analysis.specificity).

World (one data set). Rows live in d = 64 dimensions (the organism's width). A family is a matched
pair (label only) or a 2x2 (label x history); families also differ by a system (3 levels), a
threshold level (2 levels) and a random family mean on 8 directions. An item's row:

    x = m0 + mu_f + 2 (sys_f - 1) g_sys + 2 (thr_f - 1/2) g_thr + 2 (h - 1/2) g_hist
        + c s_f (y - 1/2) u + eps,    eps ~ N(0, I),  s_f = s max(0, 1 + 0.3 z_f),  c = CONTRAST = 16

(u, the g's and w orthonormal; s the label-contrast strength, 0.25 to 8, varying 30% across families:
the organism's label contrast at L3 is about 24 noise sds, s = 1.5 here). The model's stop log-odds
read the row along r, plus an idiosyncratic random quadratic read (two directions at the same cosine
with r do not move a real model equally), saturating at +-8 nats; `linear` reads the row as it is,
`normalised` rescales it to its unsteered norm first (a transformer's norm). Its choice is "stop"
when the log-odds are > 0. Truths:

- `reads`: r = unit(u + 0.1 (g_sys + g_thr + g_hist)): the model reads the label plus 0.1 of each
  design factor (the audit's synthetic); a verdict "specific" is right (power);
- `unread`: r = unit(w + 0.1 (g_sys + g_thr + g_hist)), w orthogonal to u: the label is encoded with
  strength s but not read; "specific" is a false verdict (size);
- `meaningless`: as unread with s = 0: the label is not encoded at all, so the probe is one more
  direction of the data's noise (size, where the rank test's bound is exact: 1/51 = 2.0%).

Pipeline (what `evprobe dose-response` does): the probe is the mass-mean direction of F fit
families; the steered direction points toward the unresolved class (y = 0), +alpha = toward
measuring; doses alpha in {+-0.25, +-0.5, +-1} x the targets' mean row norm; F other families are
steered, split into two halves; 50 random unit directions and 50 label-free directions
(analysis.label_null, from the fit rows) go through the same cross-fitted choice (the stop rate
moving furthest toward the goal, analysis.specificity.crossfit_scores) and the verdict is the rank
test on the log-odds at p <= 0.05 / 2 for each of the two goals (induce measuring on y = 1, induce
stopping on y = 0). Rules compared side by side on the same data sets:

- `joint` (printed now): specific when beyond both nulls (analysis.specificity.joint_verdict);
- `label-free`, `random`: each null alone;
- `within-family` (before): directions refitted on the label permuted within families (the
  relabelled null this replaced), alone.

Reported per read x design x families x truth x strength: the share of data sets called specific
for each goal (size under `unread` and `meaningless`, power under `reads`; Monte Carlo se at 100
data sets about 2 points near 5% and 3 near 90%; at 400 (`meaningless`) 0.7 points near 2%).

    python benchmarks/steering_null_power.py [--reps 100] [--size-reps 400] [--families 8,24,72] [--seed 52]
        [--designs pairs,2x2] [--reads linear,normalised] [--truths reads,unread,meaningless]

Each cell is seeded on its own ([seed, F, 100 s, design, truth, read]), so a cell prints the same
numbers whichever others are run beside it.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

from evprobe.analysis.label_null import label_free_directions
from evprobe.analysis.specificity import crossfit_scores, group_means, joint_verdict, specificity_stats
from evprobe.probes.registry import ProbeSpec

D = 64
ALPHAS = (-1.0, -0.5, -0.25, 0.25, 0.5, 1.0)
SATURATION = 8.0  # nats
IDIOSYNCRASY = 0.5  # the quadratic read's weight (read())
K = 50
CONTRAST = 16.0  # label contrast per unit of strength, in sds of a row coordinate (the organism at L3: about 24)
GOALS = (("induce measuring", 1, +1), ("induce stopping", 0, -1))  # (goal, targeted y, sign: +1 lowers stopping)
RULES = ("joint", "label-free", "random", "within-family")
STRENGTHS = {"reads": (0.25, 1, 2, 4, 8), "unread": (0.25, 1, 2, 4, 8), "meaningless": (0,)}


@dataclass(frozen=True)
class World:
    basis: np.ndarray  # (6 + 8, D): u, g_sys, g_thr, g_hist, w, m0 direction, then 8 family directions
    r: np.ndarray  # (D,) the read direction
    normalised: bool
    Q: np.ndarray  # (D, D) symmetric, entries N(0, 1 / D): the idiosyncratic quadratic read
    norm: float = 1.0  # the mean norm of an unsteered row (the normalised read's scale)


def world(rng: np.random.Generator, truth: str, normalised: bool) -> World:
    q, _ = np.linalg.qr(rng.standard_normal((D, 6)))
    basis = np.concatenate([q.T, rng.standard_normal((8, D)) / np.sqrt(D)])
    u, g_sys, g_thr, g_hist, w = basis[:5]
    r = (u if truth == "reads" else w) + 0.1 * (g_sys + g_thr + g_hist)
    G = rng.standard_normal((D, D)) / np.sqrt(2 * D)
    return World(basis, r / np.linalg.norm(r), normalised, G + G.T)


def rows(rng: np.random.Generator, wd: World, n_fam: int, design: str, s: float, offset: int
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X (n, D), y (n,), families (n,)) of n_fam families."""
    u, g_sys, g_thr, g_hist, _, m0 = wd.basis[:6]
    cells = [(1, 0), (0, 0)] if design == "pairs" else [(1, 0), (0, 0), (1, 1), (0, 1)]  # (y, history)
    X, y, fam = [], [], []
    for f in range(n_fam):
        mu = 4.0 * m0 + rng.standard_normal(8) @ wd.basis[6:] * 2.0
        mu = mu + 2.0 * (rng.integers(3) - 1) * g_sys + 2.0 * (rng.integers(2) - 0.5) * g_thr
        s_f = CONTRAST * s * max(0.0, 1.0 + 0.3 * rng.standard_normal())
        for yy, hh in cells:
            X.append(mu + s_f * (yy - 0.5) * u + 2.0 * (hh - 0.5) * g_hist + rng.standard_normal(D))
            y.append(yy)
            fam.append(f"f{offset + f}")
    return np.array(X), np.array(y, dtype=np.int8), np.array(fam, dtype=object)


def _saturate(z: np.ndarray) -> np.ndarray:
    """A model's preference does not grow without bound however far it is pushed: +-SATURATION nats."""
    return SATURATION * np.tanh(z / SATURATION)


def read(wd: World, X: np.ndarray) -> np.ndarray:
    """Stop log-odds of unsteered rows X (n, D) (module docstring; steered rows: values())."""
    Y = X - 4.0 * wd.basis[5]
    return _saturate(Y @ wd.r + IDIOSYNCRASY * np.einsum("nd,nd->n", Y, Y @ wd.Q) / wd.norm)


def values(wd: World, X: np.ndarray, V: np.ndarray, unit: float) -> np.ndarray:
    """(C, n, K, 2): log-odds and stop of every target row, steered along each of V (K, D) at each dose.

    The model's idiosyncratic response is a random quadratic read (Q), so that two directions at the
    same cosine with r do not move it equally (a real model's response is no function of one cosine).
    The steered row is z = x + a v (a = alpha x unit); the normalised read rescales it to the unsteered
    norm, c z with c = |x| / |z|, before the read y = c z - m0. Everything is computed from scalar
    pieces, (n,), (K, n) and (K,): |z|^2, <z, r>, z'Qz and z'Q m0 expand in a."""
    m0 = 4.0 * wd.basis[5]
    QX, Qm0 = X @ wd.Q, wd.Q @ m0  # (n, D), (D,)
    xx, xr, xQx, xQm = (X * X).sum(1), X @ wd.r, (X * QX).sum(1), X @ Qm0  # (n,) each
    vx, vr, vQx, vQv, vQm = V @ X.T, V @ wd.r, V @ QX.T, ((V @ wd.Q) * V).sum(1), V @ Qm0  # (K, n), (K,), ...
    mr, mQm = float(m0 @ wd.r), float(m0 @ Qm0)
    out = []
    for alpha in ALPHAS:
        a = alpha * unit
        zz = xx[None] + 2 * a * vx + a * a  # (K, n): |z|^2 (V's rows are unit)
        zr = xr[None] + a * vr[:, None]
        zQz = xQx[None] + 2 * a * vQx + a * a * vQv[:, None]
        zQm = xQm[None] + a * vQm[:, None]
        c = np.sqrt(xx[None] / zz) if wd.normalised else np.ones_like(zz)
        lin = c * zr - mr  # <c z - m0, r>
        quad = c * c * zQz - 2 * c * zQm + mQm  # (c z - m0)' Q (c z - m0)
        lo = _saturate(lin + IDIOSYNCRASY * quad / wd.norm).T  # (n, K)
        out.append(np.stack([lo, (lo > 0).astype(float)], axis=-1))
    return np.stack(out)


def within_family(X: np.ndarray, y: np.ndarray, fam: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The null this replaced: mass-mean directions on the label permuted within families, (K, D)."""
    out = []
    groups = [np.flatnonzero(fam == f) for f in np.unique(fam)]
    for _ in range(K):
        lab = y.copy()
        for idx in groups:
            lab[idx] = lab[idx][rng.permutation(len(idx))]
        v = X[lab == 1].mean(0) - X[lab == 0].mean(0)
        out.append(v / np.linalg.norm(v))
    return np.stack(out)


def one(rng: np.random.Generator, truth: str, s: float, n_fam: int, design: str, normalised: bool
        ) -> dict[str, dict[str, bool | None]]:
    wd = world(rng, truth, normalised)
    Xf, yf, ff = rows(rng, wd, n_fam, design, s, 0)
    Xt, yt, ft = rows(rng, wd, n_fam, design, s, n_fam)
    wd = World(wd.basis, wd.r, wd.normalised, wd.Q, float(np.linalg.norm(Xt, axis=1).mean()))
    spec = ProbeSpec.of("massmean")
    p = spec.make().fit(Xf, yf).direction_  # toward y = 1 (the evidence suffices)
    nulls = {"random": rng.standard_normal((K, D)),
             "label-free": label_free_directions(Xf, yf, ff, p, n=K, seed=int(rng.integers(1 << 30))).vectors,
             "within-family": within_family(Xf, yf, ff, rng)}
    nulls["random"] /= np.linalg.norm(nulls["random"], axis=1, keepdims=True)
    unit = float(np.linalg.norm(Xt, axis=1).mean())
    V = np.concatenate([-p[None, :], nulls["random"], nulls["label-free"], nulls["within-family"]])  # (1 + 3K, D)
    stack = values(wd, Xt, V, unit)  # (C, n, 1 + 3K, 2)
    base = np.stack([read(wd, Xt), (read(wd, Xt) > 0).astype(float)], axis=-1)  # (n, 2)
    halves = ("A", "B")
    order = rng.permutation(np.unique(ft))
    half_of = {f: halves[i % 2] for i, f in enumerate(order)}
    half = np.array([half_of[f] for f in ft])
    verdicts: dict[str, dict[str, bool | None]] = {}
    for goal, target, sign in GOALS:
        cands = [(0, a) for a in ALPHAS if a * sign > 0]
        idx = [ALPHAS.index(a) for _, a in cands]
        fit = yt == target
        scored, _, _ = crossfit_scores(cands, stack[idx], base, half, halves, fit, col=1, toward=-sign)
        eff = group_means(scored, fit)[:, 0] - base[fit, 0].mean()  # (1 + 3K,) log-odds changes
        stats = {name: specificity_stats(float(eff[0]), eff[1 + j * K: 1 + (j + 1) * K], sign)
                 for j, name in enumerate(("random", "label-free", "within-family"))}
        joint = joint_verdict({"random": stats["random"], "relabel": stats["label-free"]})
        verdicts[goal] = {"joint": joint.specific, **{k: v["specific"] for k, v in stats.items()}}
    return verdicts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--size-reps", type=int, default=400, help="data sets per `meaningless` cell (the exact size)")
    ap.add_argument("--families", default="8,24,72", help="families per half (fit, and steered)")
    ap.add_argument("--designs", default="pairs,2x2")
    ap.add_argument("--reads", default="linear,normalised")
    ap.add_argument("--truths", default=",".join(STRENGTHS), help="which truths to simulate (reads, unread, meaningless)")
    ap.add_argument("--seed", type=int, default=52)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    print(f"{args.reps} data sets per cell ({args.size_reps} where the label is meaningless); K = {K} directions "
          "per null; 'specific' at p <= 0.025 per goal; share called specific, induce measuring / induce stopping")
    print(f"{'read':<10} {'design':<6} {'F':>3} {'truth':<11} {'s':>4}  " + "  ".join(f"{r:>15}" for r in RULES))
    for read_kind in args.reads.split(","):
        for design in args.designs.split(","):
            for n_fam in (int(x) for x in args.families.split(",")):
                for truth, strengths in ((t, STRENGTHS[t]) for t in args.truths.split(",")):
                    for s in strengths:
                        rng = np.random.default_rng([args.seed, n_fam, int(100 * s), len(design), len(truth), len(read_kind)])
                        calls = {(g, r): 0 for g, *_ in GOALS for r in RULES}
                        reps = args.size_reps if truth == "meaningless" else args.reps
                        for _ in range(reps):
                            v = one(rng, truth, s, n_fam, design, read_kind == "normalised")
                            for g, *_ in GOALS:
                                for r in RULES:
                                    calls[(g, r)] += bool(v[g][r])
                        cells = "  ".join(f"{calls[(GOALS[0][0], r)] / reps:>7.3f}/{calls[(GOALS[1][0], r)] / reps:<7.3f}"
                                          for r in RULES)
                        print(f"{read_kind:<10} {design:<6} {n_fam:>3} {truth:<11} {s:>4g}  {cells}", flush=True)
    print(f"done in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
