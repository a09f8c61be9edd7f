"""Dose-response's specificity controls on items without an initial test: a real tiny-LLaVA capture
of select, no_initial_test and both_given items. no_initial_test items keep a nominal `history`
(their two histories are one prompt), so the history control leaves them out and counts them,
and refuses in one line when nothing is left; before, an empty fit crashed with a raw unpack
ValueError. No mocks of models."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from evprobe import hooks
from evprobe.experiments.config import ConfigError
from evprobe.experiments.dose_response import controls as dose_controls
from evprobe.experiments.dose_response.config import load_dose_response_config
from evprobe.experiments.dose_response.controls import control_directions
from evprobe.experiments.dose_response.plan import make_plan
from evprobe.probes.directions import fit_directions, read_directions, write_directions

pytestmark = pytest.mark.usefixtures("one_torch_thread")

KINDS = ("select", "no_initial_test", "both_given")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """24 capture rows at layer 1 (8 select, 4 no_initial_test, 12 both_given: sliding families) and
    three resolved directions fitted on: select rows (all with a history), select + no_initial_test
    rows (mixed), both_given + no_initial_test rows (no row with an initial test and a history)."""
    from evprobe.bench.generate import GenerateConfig, generate
    from evprobe.experiments.capture import CaptureConfig, capture
    from evprobe.probes.captures import load_captures
    from evprobe.probes.label_sets import labels

    root = tmp_path_factory.mktemp("dose_controls")
    bench, acts = root / "bench", root / "acts"
    generate(bench, GenerateConfig(families_per_system=2, subset_per_cell=1), progress=False)
    capture(CaptureConfig(model="tiny:llava", bench=str(bench), out=str(acts), requests=KINDS, layers="1", limit=24,
                          batch_size=8), progress=False)
    cs = load_captures([acts])
    ls = labels(cs, "resolved")
    kind = np.array([cs.index[r]["variant"] or cs.index[r]["request"] for r in ls.rows])
    out = {"root": root, "bench": bench}
    for name, kinds in {"select": ("select",), "mixed": ("select", "no_initial_test"),
                        "none": ("both_given", "no_initial_test")}.items():
        write_directions(root / name, fit_directions(cs, ls.subset(np.isin(kind, kinds)), [1], "last"))
        out[name] = root / name
    return out


def _controls(folder: Path, names: tuple[str, ...]) -> list:
    (d,) = read_directions(folder).values()
    unit = d.vector.astype(np.float64) / np.linalg.norm(d.vector)
    return control_directions(names, d, {d.name: d}, {1: d}, {1: unit}, seed=0)[1]


def _old_fit(folder: Path, label: str) -> np.ndarray:
    """The control as fitted before the change: the label on every fit row that carries it."""
    from evprobe.probes.label_sets import labels
    from evprobe.probes.provenance import fit_captures

    (d,) = read_directions(folder).values()
    cs = fit_captures(d)
    ls = labels(cs, label)
    mask = np.array([cs.index[r]["item_id"] in set(d.provenance["items"]) for r in ls.rows])
    (fitted,) = fit_directions(cs, ls, [1], "last", "massmean", [(label, mask)])
    v = fitted.vector.astype(np.float64)
    return v / np.linalg.norm(v)


def test_history_control_refused_in_one_line_when_every_row_is_no_initial_test(setup) -> None:
    # before: ValueError: not enough values to unpack (expected 1, got 0) from `(fitted,) = fit_directions(...)`
    with pytest.raises(ConfigError) as err:
        _controls(setup["none"], ("history",))
    msg = str(err.value)
    assert "\n" not in msg and "control 'history' at layer 1" in msg and "no_initial_test items" in msg
    assert "all 4 capture rows" in msg and "controls: [threshold_level, shuffled]" in msg
    # the other controls of that direction still fit: threshold_level is stated in no_initial_test prompts
    (tl,) = _controls(setup["none"], ("threshold_level",))
    assert "excluded" not in tl.source and "on 16 capture rows" in tl.source


def test_refused_before_any_model_is_loaded(setup, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(hooks, "load", refuse)
    cfg = load_dose_response_config("dose_response_tiny", {"bench": str(setup["bench"]), "directions": str(setup["none"]),
                                                           "out": str(setup["root"] / "out")})
    cfg = replace(cfg, layers=(1,), requests=("no_initial_test",), heldout=False, n_random=2, n_relabel=0)
    with pytest.raises(ConfigError, match="control 'history' at layer 1: all 4 capture rows .* no_initial_test"):
        make_plan(cfg)


def test_mixed_fit_excludes_and_counts_no_initial_test_rows(setup) -> None:
    (h,) = _controls(setup["mixed"], ("history",))
    assert h.source.endswith("on 8 capture rows of resolved.massmean.L1.last's items; 4 no_initial_test rows "
                             "excluded (no initial test shown: history is nominal there)")
    assert np.array_equal(h.vector, _old_fit(setup["select"], "history"))  # = the fit on the select rows alone


def test_rows_with_a_history_unchanged(setup) -> None:
    got = _controls(setup["select"], ("history", "threshold_level"))
    for c, label in zip(got, ("history", "threshold_level")):
        assert np.array_equal(c.vector, _old_fit(setup["select"], label))  # bit for bit
        assert c.source == f"fitted: {label}={'1' if label == 'history' else 'high'} on 8 capture rows of " \
                           "resolved.massmean.L1.last's items"


def test_identical_class_means_refused_in_one_line(setup, monkeypatch: pytest.MonkeyPatch) -> None:
    # without the exclusion the history rows left are no_initial_test ones, whose h0 and h1 prompts are the
    # same tokens: identical mean states, which fit_directions skips (before: the unpack ValueError)
    monkeypatch.setattr(dose_controls, "NOMINAL_ON", {})
    with pytest.raises(ConfigError) as err:
        _controls(setup["none"], ("history",))
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("control 'history' at layer 1/last: its two classes have identical "
                                              "mean states on the 4 capture rows")
