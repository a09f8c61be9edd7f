"""Transfer matrices: conditions, family-disjoint train/test, planted transfer and non-transfer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evprobe.probes.captures import CaptureError, load_captures
from evprobe.probes.label_sets import labels
from evprobe.probes.report import transfer_markdown, transfer_png
from evprobe.probes.sweep import SweepConfig
from evprobe.probes.synthetic import planted_acts, reference_rows, write_capture
from evprobe.probes.transfer import conditions, transfer

FAST = {"n_boot": 300}


@pytest.fixture(scope="module")
def systems(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sliding and bouncing share one sufficiency direction, spring has its own (orthogonal)."""
    rows = reference_rows(60, seed=4)
    y = np.array([r["resolved"] for r in rows], dtype=int)
    rng = np.random.default_rng(0)
    d = 24
    u, v = np.linalg.qr(rng.standard_normal((d, 2)))[0].T
    acts = planted_acts(np.zeros(len(rows)), 2, 1, d, seed=5)[0].astype(np.float32)
    for i, r in enumerate(rows):
        direction = v if r["system"] == "spring" else u
        acts[i, 1, 0] += 3.5 * (y[i] - 0.5) * direction
    return write_capture(tmp_path_factory.mktemp("sys") / "acts", acts.astype(np.float16), rows)


def test_conditions(systems: Path) -> None:
    cs = load_captures([systems])
    ls = labels(cs, "resolved")
    by_system = conditions(cs, ls, "system")
    assert [c.name for c in by_system] == ["bouncing", "sliding", "spring"] and sum(c.n for c in by_system) == ls.n
    pairs = {c.name: c for c in conditions(cs, ls, "pairs", seed=1)}
    rows = [cs.index[r] for r in ls.rows]
    for f in {r["family_id"] for r in rows}:
        img = [r for r, m in zip(rows, pairs["image_pairs"].mask) if m and r["family_id"] == f]
        thr = [r for r, m in zip(rows, pairs["threshold_pairs"].mask) if m and r["family_id"] == f]
        assert len(img) == 2 and len({r["threshold_level"] for r in img}) == 1 and len({r["history"] for r in img}) == 2
        assert len(thr) == 2 and len({r["history"] for r in thr}) == 1 and len({r["threshold_level"] for r in thr}) == 2
        assert sum(r["resolved"] for r in img) == 1 and sum(r["resolved"] for r in thr) == 1  # each pair flips
    levels = {r["threshold_level"] for r, m in zip(rows, pairs["image_pairs"].mask) if m}
    assert levels == {"low", "high"}  # the coin varies over families
    assert [c.name for c in conditions(cs, ls, "initial")] == ["initial_mass", "initial_other"]
    with pytest.raises(CaptureError, match="two or more captures"):
        conditions(cs, ls, "regime")
    with pytest.raises(CaptureError, match="unknown transfer"):
        conditions(cs, ls, "nonsense")


def test_system_transfer_follows_the_planted_geometry(systems: Path, tmp_path: Path) -> None:
    cs = load_captures([systems])
    res = transfer(cs, labels(cs, "resolved"), "system", SweepConfig(probe="massmean", **FAST))
    names, matrix = res.matrix()
    assert names == ["bouncing", "sliding", "spring"]
    assert res.cell("sliding", "bouncing").scheme == "disjoint" and res.cell("sliding", "sliding").scheme == "folds"
    assert matrix[0, 1] > 0.9 and matrix[1, 0] > 0.9  # shared direction transfers
    assert matrix[0, 0] > 0.9 and matrix[2, 2] > 0.9  # every system is decodable at home
    for a, b in (("sliding", "spring"), ("spring", "bouncing")):  # orthogonal direction: chance
        est = res.cell(a, b).best.auroc
        assert est.ci[0] < 0.5 + 0.05 and abs(est.value - 0.5) < 0.2
    assert all(c.best.layer == 1 for c in res.cells if c.train != "spring" or c.test == "spring")
    md = transfer_markdown(res)
    assert "| **sliding** |" in md and "disjoint" in md
    assert transfer_png(res, tmp_path / "t.png").stat().st_size > 1000


def test_pairs_and_regime_transfer_keep_families_apart(systems: Path, tmp_path: Path) -> None:
    cs = load_captures([systems])
    ls = labels(cs, "resolved")
    res = transfer(cs, ls, "pairs", SweepConfig(**FAST))
    assert {c.scheme for c in res.cells} == {"folds"}  # the same families: always through folds
    assert res.cell("image_pairs", "threshold_pairs").best.auroc.value > 0.8
    # two regimes of the same items: rows of one family never train and test together
    other = write_capture(tmp_path / "guided", np.load(systems / "acts.npy"), [
        {k: v for k, v in r.items() if k not in ("row", "source", "source_name")} for r in cs.index],
        regime="guided")
    both = load_captures([systems, other])
    res2 = transfer(both, labels(both, "resolved"), "regime", SweepConfig(probe="centroid", **FAST))
    assert [c[0] for c in res2.conditions] == ["standard", "guided"]
    assert {c.scheme for c in res2.cells} == {"folds"}
    assert res2.cell("standard", "guided").best.auroc.value > 0.8


def test_halves_are_disjoint_balanced_and_hold_every_system() -> None:
    from evprobe.probes.transfer import _halves

    system_of = {f"{s}-{k:03d}": s for s in ("sliding", "bouncing", "spring") for k in range(7)}
    halves = _halves(system_of, seed=3)
    assert set(halves) == set(system_of) and set(halves.values()) == {"half_a", "half_b"}
    for s in ("sliding", "bouncing", "spring"):
        a = sum(halves[f] == "half_a" for f, sys in system_of.items() if sys == s)
        assert a in (3, 4)  # 7 families: 4 and 3
    assert halves == _halves(dict(reversed(list(system_of.items()))), seed=3)  # order of rows does not matter
    assert halves != _halves(system_of, seed=4)  # the seed draws another split
    small = {f"{s}-{k:03d}": s for s in ("sliding", "bouncing", "spring") for k in range(2)}
    assert sorted(_halves(small, 20260905).values()) == ["half_a"] * 3 + ["half_b"] * 3


def _void_capture(path: Path, shared: bool) -> Path:
    """40 families, each 2 sufficient twins, their 2 occluded and 2 unstated voids (bench.voids' shape).
    Occluded voids move along u; unstated voids along u too (`shared`) or along v, orthogonal to u."""
    rng = np.random.default_rng(7)
    u, v = np.linalg.qr(rng.standard_normal((16, 2)))[0].T
    rows, shift = [], []
    for f in range(40):
        fam = f"{('sliding', 'bouncing')[f % 2]}-{f:03d}"
        for h in (0, 1):
            twin = f"{fam}.answer_initial.h{h}.low"
            rows.append({"item_id": twin, "family_id": fam, "system": fam.split("-")[0], "resolved": True})
            shift.append(np.zeros(16))
            for void, along in (("occluded", u), ("unstated", u if shared else v)):
                rows.append({"item_id": f"{twin}.void-{void}", "family_id": fam, "system": fam.split("-")[0],
                             "resolved": False, "void": void, "twin_id": twin})
                shift.append(3.0 * along)
    acts = rng.standard_normal((len(rows), 1, 1, 16)).astype(np.float32)
    acts[:, 0, 0] += np.array(shift)
    return write_capture(path, acts.astype(np.float16), rows, positions=["last"])


@pytest.mark.parametrize("shared", [True, False])
def test_void_transfer_pairs_each_type_with_its_twins_and_follows_the_planted_geometry(tmp_path: Path, shared: bool) -> None:
    cs = load_captures([_void_capture(tmp_path / "acts", shared)])
    ls = labels(cs, "resolved")
    conds = {c.name: c for c in conditions(cs, ls, "void")}
    assert list(conds) == ["occluded", "unstated"]
    rows = [cs.index[r] for r in ls.rows]
    for name, c in conds.items():  # 80 voids of the type and the 80 twins they name
        picked = [r for r, m in zip(rows, c.mask) if m]
        assert len(picked) == 160 and sum(r["resolved"] for r in picked) == 80
        assert {r.get("void") for r in picked} == {name, None}
    res = transfer(cs, ls, "void", SweepConfig(probe="massmean", **FAST))
    assert all(c.scheme == "folds" for c in res.cells)  # the twins are shared: family folds, never disjoint
    _, matrix = res.matrix()
    assert matrix[0, 0] > 0.9 and matrix[1, 1] > 0.9
    if shared:
        assert matrix[0, 1] > 0.9 and matrix[1, 0] > 0.9
    else:  # orthogonal void directions: chance across types
        for a, b in (("occluded", "unstated"), ("unstated", "occluded")):
            est = res.cell(a, b).best.auroc
            assert abs(est.value - 0.5) < 0.15 and est.ci[0] < 0.55


def test_void_transfer_without_pairs_says_how_to_capture_them(systems: Path) -> None:
    cs = load_captures([systems])
    with pytest.raises(CaptureError, match="--voids occluded,unstated with --requests answer_initial,voids"):
        conditions(cs, labels(cs, "resolved"), "void")


def _void_system_capture(path: Path) -> Path:
    """40 families (sliding, bouncing), bench.voids' shape. Planted: occluded voids of both systems and
    sliding's unstated voids move along u, bouncing's unstated voids along v (orthogonal to u)."""
    rng = np.random.default_rng(9)
    u, v = np.linalg.qr(rng.standard_normal((16, 2)))[0].T
    rows, shift = [], []
    for f in range(40):
        system = ("sliding", "bouncing")[f % 2]
        fam = f"{system}-{f:03d}"
        for h in (0, 1):
            twin = f"{fam}.answer_initial.h{h}.low"
            rows.append({"item_id": twin, "family_id": fam, "system": system, "resolved": True})
            shift.append(np.zeros(16))
            for void in ("occluded", "unstated"):
                rows.append({"item_id": f"{twin}.void-{void}", "family_id": fam, "system": system,
                             "resolved": False, "void": void, "twin_id": twin})
                shift.append(3.0 * (v if (system, void) == ("bouncing", "unstated") else u))
    acts = rng.standard_normal((len(rows), 1, 1, 16)).astype(np.float32)
    acts[:, 0, 0] += np.array(shift)
    return write_capture(path, acts.astype(np.float16), rows, positions=["last"])


def test_modality_by_domain_transfer_is_one_matrix_with_table_3s_kinds(tmp_path: Path) -> None:
    cs = load_captures([_void_system_capture(tmp_path / "acts")])
    ls = labels(cs, "resolved")
    conds = conditions(cs, ls, "void_system")
    names = ["bouncing occluded", "sliding occluded", "bouncing unstated", "sliding unstated"]
    assert [c.name for c in conds] == names
    rows = [cs.index[r] for r in ls.rows]
    for c in conds:  # 40 voids of the cell (20 families x 2) and their 40 twins, nothing else
        system, void = c.name.split()
        picked = [r for r, m in zip(rows, c.mask) if m]
        assert len(picked) == 80 and {r["system"] for r in picked} == {system}
        assert {r.get("void") for r in picked} == {void, None}
    res = transfer(cs, ls, "void_system", SweepConfig(probe="massmean", **FAST))
    kinds = {(c.train, c.test): c.category for c in res.cells}
    assert kinds[("sliding occluded", "sliding occluded")] == "within"
    assert kinds[("sliding occluded", "sliding unstated")] == "cross-modality"
    assert kinds[("sliding occluded", "bouncing occluded")] == "cross-domain"
    assert kinds[("sliding occluded", "bouncing unstated")] == "cross-both"
    assert res.cell("sliding occluded", "sliding unstated").scheme == "folds"  # shared twins
    assert res.cell("sliding occluded", "bouncing occluded").scheme == "disjoint"
    _, matrix = res.matrix()
    assert np.diag(matrix).min() > 0.9
    for a, b in (("sliding occluded", "sliding unstated"), ("sliding unstated", "bouncing occluded"),
                 ("bouncing occluded", "sliding unstated")):  # the shared direction transfers
        assert res.cell(a, b).best.auroc.value > 0.9
    for a, b in (("sliding occluded", "bouncing unstated"), ("bouncing unstated", "sliding unstated"),
                 ("bouncing unstated", "bouncing occluded")):  # the orthogonal one: chance, with an interval over it
        est = res.cell(a, b).best.auroc
        assert abs(est.value - 0.5) < 0.15 and est.ci[0] < 0.55 < est.ci[1]
    data = res.to_json()
    assert {c["category"] for c in data["cells"]} == {"within", "cross-modality", "cross-domain", "cross-both"}
    md = transfer_markdown(res)
    assert "| cross-both (other system and other void type) | sliding occluded -> bouncing unstated |" in md
    # the other kinds keep their files: no category key, no grouped table
    plain = transfer(cs, ls, "void", SweepConfig(probe="massmean", **FAST))
    assert not any("category" in c for c in plain.to_json()["cells"])
    assert "kind of transfer" not in transfer_markdown(plain)


def test_modality_by_domain_transfer_needs_two_cells(systems: Path) -> None:
    cs = load_captures([systems])
    with pytest.raises(CaptureError, match="void_system finds 0 .system, void type. cell"):
        conditions(cs, labels(cs, "resolved"), "void_system")
