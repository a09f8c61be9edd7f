"""analysis.label_null: the label-free null directions of a steering claim, from arrays.

Known answers: for a mass-mean probe a null direction is a random-sign combination of the families'
own label contrasts with the label's line removed (computed by hand here), so it never lies along
the probe; on matched pairs where the label is strongly encoded the within-family permutation it
replaced gives back +- the probe itself. Every refusal is one line before any fit."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from evprobe.analysis.label_null import FitRows, flip_patterns, label_free_directions
from evprobe.core.errors import InputError


def pairs(rng: np.random.Generator, n_fam: int, strength: float, d: int = 16) -> tuple[np.ndarray, ...]:
    """Matched pairs (y = 1, 0) per family: a family mean, the label along u with 30% family-to-family
    variation in strength, unit noise. Returns X (2F, d), y, families, u."""
    u = np.eye(d)[0]
    X, y, fam = [], [], []
    for f in range(n_fam):
        mu, s = rng.normal(size=d) * 2, strength * (1 + 0.3 * rng.normal())
        for yy in (1, 0):
            X.append(mu + s * (yy - 0.5) * u + rng.normal(size=d))
            y.append(yy)
            fam.append(f"f{f}")
    return np.array(X), np.array(y), np.array(fam, dtype=object), u


def within_family(rng: np.random.Generator, X: np.ndarray, y: np.ndarray, fam: np.ndarray, n: int) -> list:
    """The null this replaced: unit mass-mean directions on the label permuted within families."""
    out = []
    for _ in range(n):
        lab = y.copy()
        for f in np.unique(fam):
            idx = np.flatnonzero(fam == f)
            lab[idx] = lab[idx][rng.permutation(len(idx))]
        v = X[lab == 1].mean(0) - X[lab == 0].mean(0)
        out.append(v / np.linalg.norm(v))
    return out


def test_mass_mean_null_is_the_families_flipped_contrasts_without_the_label_line() -> None:
    rng = np.random.default_rng(0)
    X, y, fam, _ = pairs(rng, 12, 8.0)
    p = X[y == 1].mean(0) - X[y == 0].mean(0)
    null = label_free_directions(X, y, fam, p, n=20, seed=3)
    assert null.k == 20 and null.vectors.shape == (20, 16)
    assert np.allclose(np.linalg.norm(null.vectors, axis=1), 1.0)
    assert np.allclose(null.cosines, 0.0, atol=1e-12) and null.near_share() == 0.0
    # by hand: D_f (the pair's contrast) with the probe's line removed, signs from the same patterns
    unit = p / np.linalg.norm(p)
    order = np.argsort(fam[y == 1])  # flip units in the order of their sorted family ids (np.unique)
    D = (X[y == 1] - X[y == 0])[order]  # (F, d)
    D_perp = D - np.outer(D @ unit, unit)
    eps = flip_patterns(12, 20, 3).astype(float)  # (K, F)
    want = eps @ D_perp
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    assert np.allclose(null.vectors, want, atol=1e-10)


def test_matched_pairs_the_within_family_permutation_gives_back_the_probe_and_this_null_does_not() -> None:
    """The audit's degenerate case: for pairs, a within-family permutation keeps or flips each pair,
    so with a strong label its mass-mean is +- the probe (|cos| near 1); the label-free null is not."""
    rng = np.random.default_rng(1)
    X, y, fam, u = pairs(rng, 40, 30.0)
    p = X[y == 1].mean(0) - X[y == 0].mean(0)
    unit = p / np.linalg.norm(p)
    old = [abs(v @ unit) for v in within_family(rng, X, y, fam, 30)]
    assert np.mean(old) > 0.8
    null = label_free_directions(X, y, fam, p, n=30, seed=0)
    assert np.abs(null.cosines).max() < 1e-9 and np.abs(null.vectors @ u).mean() < 0.2


def test_two_by_two_families_keep_their_other_factor_balanced() -> None:
    """Flipping a whole family's labels keeps a crossed factor (history) out of every contrast: the
    null directions carry no history direction beyond noise; a within-family permutation mixes it in."""
    rng = np.random.default_rng(2)
    d, hist = 16, np.eye(16)[1]
    X, y, fam = [], [], []
    for f in range(30):
        mu = rng.normal(size=d)
        for yy, hh in ((1, 0), (0, 0), (1, 1), (0, 1)):
            X.append(mu + 10 * (yy - 0.5) * np.eye(d)[0] + 10 * (hh - 0.5) * hist + 0.5 * rng.normal(size=d))
            y.append(yy)
            fam.append(f"f{f}")
    X, y, fam = np.array(X), np.array(y), np.array(fam, dtype=object)
    p = X[y == 1].mean(0) - X[y == 0].mean(0)
    null = label_free_directions(X, y, fam, p, n=30, seed=0)
    old = [abs(v @ hist) for v in within_family(rng, X, y, fam, 30)]
    # noise-sized (one coordinate of 16: about 0.2), where a within-family permutation mixes history in
    assert np.abs(null.vectors @ hist).mean() < 0.3 < 0.45 < np.mean(old)


def test_other_probes_are_refitted_with_their_parameters_and_say_so() -> None:
    rng = np.random.default_rng(3)
    X, y, fam, _ = pairs(rng, 10, 4.0)
    p = X[y == 1].mean(0) - X[y == 0].mean(0)
    null = label_free_directions(X, y, fam, p, n=5, probe="logistic", probe_params={"C": 0.5}, seed=1)
    assert null.k == 5 and "logistic" in null.source
    assert np.abs(null.cosines).max() < 1e-9  # the label's line removed from the rows and from each fit
    record = null.record()
    assert record["n"] == 5 and record["near_cosine"] == 0.9 and len(record["sha256"]) == 64


def test_flip_patterns_are_distinct_non_constant_and_all_when_few() -> None:
    few = flip_patterns(3, 50, 0)  # 2^3 - 2 = 6 < 50: every non-constant pattern, once
    assert few.shape == (6, 3) and len({tuple(r) for r in few}) == 6
    assert all(r.min() != r.max() for r in few)
    many = flip_patterns(10, 50, 0)
    assert many.shape == (50, 10) and len({tuple(r) for r in many}) == 50 and all(r.min() != r.max() for r in many)
    assert np.array_equal(many, flip_patterns(10, 50, 0)) and not np.array_equal(many, flip_patterns(10, 50, 1))
    rng = np.random.default_rng(4)
    X, y, fam, _ = pairs(rng, 3, 2.0)
    null = label_free_directions(X, y, fam, X[0], n=50)
    assert null.k == 6 and "all 6 sign patterns of 3 families" in null.source


def test_families_of_one_class_keep_their_labels() -> None:
    rng = np.random.default_rng(5)
    X, y, fam, _ = pairs(rng, 6, 2.0)
    X = np.concatenate([X, rng.normal(size=(2, 16))])
    y = np.concatenate([y, [1, 1]])
    fam = np.concatenate([fam, ["solo", "solo"]])
    null = label_free_directions(X, y, fam, X[0] - X[1], n=10)
    assert null.n_flip_families == 6  # the one-class family is not a flip unit


@pytest.mark.parametrize(("change", "message"), [
    (dict(acts=np.full((4, 3), np.nan)), "acts row 0 is not finite"),
    (dict(acts=np.zeros(5)), "acts must be \\(rows, d_model\\)"),
    (dict(labels=[0, 1, 2, 1]), "labels must be 0/1"),
    (dict(labels=[0, 1, 0]), "4 rows of acts but labels of shape"),
    (dict(families=["a", "a", "b"]), "4 rows of acts but 3 family ids"),
    (dict(families="aabb"), "family ids"),
    (dict(direction=np.zeros(3)), "direction must be a finite non-zero vector"),
    (dict(direction=np.ones(4)), "direction must be a finite non-zero vector of length d_model = 3"),
    (dict(n=0), "n must be a positive integer"),
    (dict(n=True), "n must be a positive integer"),
    (dict(families=["a", "a", "a", "a"]), "at least 2 families holding both classes"),
    (dict(labels=[1, 1, 0, 0]), "at least 2 families holding both classes"),
])
def test_bad_input_is_one_line(change: dict, message: str) -> None:
    kw = dict(acts=np.arange(12.0).reshape(4, 3) ** 1.5, labels=[0, 1, 0, 1], families=["a", "a", "b", "b"],
              direction=np.array([1.0, 0.0, 0.0]), n=2)
    kw.update(change)
    with pytest.raises(InputError, match=message) as err:
        label_free_directions(**kw)
    assert "\n" not in str(err.value)


def test_fit_rows_is_a_value() -> None:
    rows = FitRows(np.zeros((2, 3)), np.array([0, 1]), np.array(["a", "a"], dtype=object))
    assert rows.probe == "massmean" and dict(rows.probe_params) == {}


def test_the_analysis_layer_loads_no_benchmark_module() -> None:
    # every module of the layer, found on disk (a new one is covered without editing this test)
    code = ("import importlib, pkgutil, sys, evprobe.analysis as a; "
            "names = [m.name for m in pkgutil.iter_modules(a.__path__, 'evprobe.analysis.')]; "
            "assert len(names) >= 8, names; [importlib.import_module(n) for n in names]; "
            "bad = sorted(m for m in sys.modules if m.startswith(('evprobe.bench', 'evprobe.experiments', "
            "'evprobe.organism'))); print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
