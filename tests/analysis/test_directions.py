"""evprobe.fit_direction: a steering Direction from arrays, the probe `evprobe directions` fits on
the same rows, carrying its rows for the label-free null; each bad input one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import evprobe
from evprobe.core.errors import InputError


def _rows(n_families: int = 12, d: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Matched pairs: each family's two rows differ along a planted line plus noise. (2F, d)."""
    rng = np.random.default_rng(seed)
    line = rng.standard_normal(d)
    base = rng.standard_normal((n_families, d)) * 2.0
    acts = np.concatenate([base + line + 0.3 * rng.standard_normal((n_families, d)),
                           base - line + 0.3 * rng.standard_normal((n_families, d))])
    labels = np.array([1] * n_families + [0] * n_families)
    families = np.array([f"f{i}" for i in range(n_families)] * 2, dtype=object)
    return acts.astype(np.float32), labels, families


@pytest.mark.parametrize("probe", ["massmean", "logistic"])
def test_it_is_the_commands_direction_on_the_same_rows(probe: str, tmp_path: Path) -> None:
    acts, labels, families = _rows()
    acts = acts.astype(np.float16).astype(np.float32)  # what a capture file stores (float16)
    rows = [{"item_id": f"i{i}", "family_id": str(f), "enough": bool(y)}
            for i, (y, f) in enumerate(zip(labels, families, strict=True))]
    folder = evprobe.write_capture(tmp_path / "acts", acts[:, None, :], rows, layers=[3], positions=["last"])
    captures = evprobe.load_captures([folder])
    from evprobe.probes.directions import fit_directions

    (theirs,) = fit_directions(captures, evprobe.labels(captures, "enough"), [3], "last", probe)
    mine = evprobe.fit_direction(acts, labels, families, layer=3, label="enough", probe=probe)
    assert mine.name == theirs.name and mine.layer == 3 and mine.position == "last"
    if probe == "massmean":
        np.testing.assert_allclose(mine.vector, theirs.vector, atol=1e-6)
    else:  # an iterative fit: the same optimum within the solver's stopping rule (rows in another order)
        assert float(mine.vector @ theirs.vector) > 0.99999
    assert np.linalg.norm(mine.vector) == pytest.approx(1.0, abs=1e-6)
    assert float(mine.vector @ (acts[labels == 1].mean(0) - acts[labels == 0].mean(0))) > 0  # toward label 1
    for key in ("n_items", "n_positive", "n_negative", "probe", "label", "d_model"):
        assert mine.provenance[key] == theirs.provenance[key], key


def test_it_carries_its_rows_so_the_label_free_null_needs_nothing_more() -> None:
    acts, labels, families = _rows()
    d = evprobe.fit_direction(acts, labels, families, layer=1)
    rows = evprobe.direction_rows(d)
    assert rows is d.fit_rows and rows.acts.shape == acts.shape and rows.probe == "massmean"
    null = evprobe.label_free_directions(acts, labels, families, d.vector, n=8)
    from evprobe.analysis.label_null import fit_rows_null

    assert fit_rows_null(rows, d.vector, n=8).sha256 == null.sha256
    assert evprobe.to_dataframe(null).shape == (8, 2)


def test_steering_dose_response_takes_it_without_fit_rows() -> None:
    handle = evprobe.tiny("llava")
    prompts = [f"Item {i}: answer A or B." for i in range(8)]
    families = [f"f{i // 2}" for i in range(8)]
    acts = evprobe.capture(handle, prompts, None, layers=[1], positions=["last"])[:, 0, 0]  # (8, d_model)
    labels = np.array([1, 0] * 4)
    d = evprobe.fit_direction(acts, labels, families, layer=1, model=handle)
    kw = dict(direction=d, candidates=["A", "B"], target="A", families=families, alphas=(-0.5, 0.5), n_random=4,
              n_relabel=4, n_boot=50)
    result = evprobe.steering_dose_response(handle, prompts, None, **kw)
    assert not result.notes and result.label_free[1].k == 4
    given = evprobe.steering_dose_response(handle, prompts, None, **{**kw, "direction": {1: d.vector}},
                                           fit_rows=(acts, labels, families))
    assert given.label_free[1].sha256 == result.label_free[1].sha256  # the same null as the rows given by hand
    for table in ("effects", "null", "crossfit", "items"):
        assert evprobe.to_dataframe(result, table=table).equals(getattr(result, table))
    other = evprobe.tiny("smolvlm")
    with pytest.raises(InputError, match="tiny:llava"):  # fitted on another model: refused as a file's would be
        evprobe.steering_dose_response(other, prompts, None, **kw)


@pytest.mark.parametrize("change, message", [
    (dict(labels=np.ones(24)), r"every row has label 1; a direction needs rows of both labels"),
    (dict(labels=np.arange(24) % 3), r"labels must be 0/1 \(or bool\)"),
    (dict(families=["a"] * 3), r"24 rows of acts but 3 family ids"),
    (dict(acts=np.zeros((24, 4, 2))), r"acts must be \(rows, d_model\)"),
    (dict(acts=np.full((24, 16), np.nan)), r"acts row 0 is not finite"),
    (dict(acts=np.ones((24, 16))), r"the two labels' mean rows are identical"),
    (dict(layer=-1), r"layer must be an integer >= 0, got -1"),
    (dict(layer=True), r"layer must be an integer >= 0, got a bool"),
    (dict(probe="nope"), r"probe 'nope': "),
    (dict(model=3.5), r"model must be a handle or a model name, got 3.5"),
])
def test_bad_input_is_one_line(change: dict, message: str) -> None:
    acts, labels, families = _rows()
    kw = dict(acts=acts, labels=labels, families=families, layer=2)
    kw.update(change)
    with pytest.raises(InputError, match=message) as err:
        evprobe.fit_direction(kw.pop("acts"), kw.pop("labels"), kw.pop("families"), **kw)
    assert "\n" not in str(err.value)
