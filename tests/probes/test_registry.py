"""The probe registry: every registered probe keeps the protocol (check_probe), a new probe is one
class in one file (the toy ridge probe below) and runs through the sweep, its control tasks, the
CLI and directions; each wrong registration or unknown name is refused in one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from sklearn.linear_model import RidgeClassifier

from evprobe.probes.protocol import LinearProbe
from evprobe.probes.probe_checks import ProbeContractError, check_probe
from evprobe.probes.registry import ProbeSpec, parameters, probe_class, probe_names, register_probe, unregister_probe
from evprobe.probes.solvers import unit

from .conftest import SIGNAL_LAYER


# -- the toy probe: everything a contributor writes ----------------------------------------------


class RidgeProbe(LinearProbe):
    """Ridge regression on the labels (scikit-learn's RidgeClassifier); no fast path, no refits."""

    def __init__(self, alpha: float = 1.0) -> None:
        self.alpha = alpha

    def fit(self, X, y):
        X, y01 = self._prepare(X, y)
        self.model_ = RidgeClassifier(alpha=self.alpha).fit(X, y01)
        self.direction_ = unit(self.model_.coef_.ravel())
        return self

    def decision_function(self, X):
        return self.model_.decision_function(self._check(X))


@pytest.fixture
def ridge():
    register_probe("ridge")(RidgeProbe)
    yield RidgeProbe
    unregister_probe("ridge")


# -- the contract ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["logistic", "massmean", "centroid"])
def test_every_built_in_probe_keeps_the_protocol(name: str) -> None:
    assert name in probe_names()
    check_probe(name)


def test_the_pooled_covariance_mass_mean_keeps_it_too() -> None:
    check_probe(ProbeSpec.of("massmean", pooled_covariance=True))


def test_the_toy_probe_keeps_the_protocol(ridge) -> None:
    check_probe("ridge")
    assert parameters("ridge") == {"alpha": 1.0}
    assert not ProbeSpec.of("ridge").capabilities.refit_intervals


class FastButWrong(RidgeProbe):
    def fitter(self):
        from evprobe.probes.engine import EstimatorFitter

        class Negated(EstimatorFitter):
            def fit_score(self, X, train, ys, key=None):
                return {k: -v for k, v in super().fit_score(X, train, ys, key).items()}

        return Negated(self)


class NotUnit(RidgeProbe):
    def fit(self, X, y):
        super().fit(X, y)
        self.direction_ = self.direction_ * 2
        return self


class Backwards(RidgeProbe):
    def decision_function(self, X):
        return -super().decision_function(X)


class Flipped(RidgeProbe):
    def fit(self, X, y):
        super().fit(X, y)
        self.direction_ = -self.direction_
        return self


class RenamesItsParameter(RidgeProbe):
    def __init__(self, alpha: float = 1.0) -> None:
        self.strength = alpha  # scikit-learn's clone cannot find `alpha`


@pytest.mark.parametrize(("cls", "message"), [
    (FastButWrong, r"fitter\(\) scores disagree with a fresh fit"),
    (NotUnit, "direction_ must be a unit vector"),
    (Backwards, "larger must mean the positive class"),
    (Flipped, "degrees from the planted one"),
    (RenamesItsParameter, "scikit-learn cannot clone it"),
])
def test_a_broken_probe_fails_its_contract_check(cls: type, message: str) -> None:
    register_probe("broken")(cls)
    try:
        with pytest.raises(ProbeContractError, match=message):
            check_probe("broken")
    finally:
        unregister_probe("broken")


# -- wrong registrations and unknown names: one line each -------------------------------------------


def test_wrong_registrations_are_refused(ridge) -> None:
    with pytest.raises(ValueError, match=r"probe 'ridge' is already registered \(registered: logistic, massmean, "
                                         r"centroid, ridge\)"):
        register_probe("ridge")(RidgeProbe)
    with pytest.raises(ValueError, match="probe 'logistic' is already registered"):
        register_probe("logistic")(RidgeProbe)
    with pytest.raises(TypeError, match="is not a subclass of evprobe.probes.LinearProbe"):
        register_probe("plain")(RidgeClassifier)
    with pytest.raises(ValueError, match="use lowercase letters"):
        register_probe("Ridge Probe")(RidgeProbe)

    class Varargs(RidgeProbe):
        def __init__(self, *args: float) -> None:
            self.args = args

    with pytest.raises(TypeError, match=r"takes \*args; declare each parameter by name"):
        register_probe("varargs")(Varargs)
    class NoScore(LinearProbe):
        def fit(self, X, y):
            return self

    with pytest.raises(TypeError, match=r"NoScore does not define decision_function"):
        register_probe("noscore")(NoScore)
    with pytest.raises(TypeError, match=r"LinearProbe does not define fit or decision_function"):
        register_probe("bare")(LinearProbe)
    assert not {"varargs", "plain", "noscore", "bare"} & set(probe_names())
    with pytest.raises(ValueError, match="built in"):
        unregister_probe("logistic")


def test_unknown_names_and_parameters_are_refused_listing_the_valid_ones(ridge) -> None:
    from evprobe.probes.sweep import SweepConfig

    with pytest.raises(ValueError, match=r"^unknown probe 'lasso'; use one of logistic, massmean, centroid, ridge$"):
        SweepConfig(probe="lasso")
    with pytest.raises(ValueError, match=r"^probe 'ridge' has no parameter 'C' \(its parameters: alpha\)$"):
        ProbeSpec.of("ridge", {"C": 2.0})
    with pytest.raises(ValueError, match=r"C=0\.5 applies to the logistic probe; probe 'centroid' has no parameter"):
        SweepConfig(probe="centroid", C=0.5)  # was silently ignored
    with pytest.raises(ValueError, match=r"pooled_covariance=True applies to the massmean probe"):
        SweepConfig(probe="logistic", pooled_covariance=True)
    with pytest.raises(ValueError, match=r"parameter alpha='lots' is not float"):
        SweepConfig(probe="ridge", probe_params=("alpha=lots",))
    with pytest.raises(ValueError, match=r"'alpha' is not NAME=VALUE"):
        SweepConfig(probe="ridge", probe_params=("alpha",))
    with pytest.raises(ValueError, match=r"C is given twice \(0\.5 and 2\.0\)"):
        SweepConfig(probe="logistic", C=2.0, probe_params=("C=0.5",))


def test_a_spec_reads_names_instances_and_flags() -> None:
    from evprobe.probes.estimators import LogisticProbe

    assert str(ProbeSpec.of("logistic")) == "logistic"  # flags at their defaults: the class's defaults
    assert ProbeSpec.of("logistic", C=0.25) == ProbeSpec.of("logistic", ["C=0.25"]) == ProbeSpec.of(LogisticProbe(C=0.25))
    assert ProbeSpec.of("logistic", C=0.25).make().C == 0.25
    assert ProbeSpec.of("massmean", ["pooled_covariance=true", "shrinkage=0.2"]).make().get_params() == {
        "pooled_covariance": True, "shrinkage": 0.2}
    assert ProbeSpec.of("logistic").get("C") == 1.0
    assert ProbeSpec.of("logistic", ["C=1"]) == ProbeSpec.of("logistic")  # a default given is the default


# -- the toy probe through the pipeline --------------------------------------------------------------


def test_the_toy_probe_sweeps_with_control_tasks_and_says_it_has_no_refits(ridge, planted) -> None:
    from evprobe.probes.captures import load_captures
    from evprobe.probes.label_sets import labels
    from evprobe.probes.sweep import SweepConfig, sweep

    path, _ = planted
    cs = load_captures([path])
    result = sweep(cs, labels(cs, "resolved"), SweepConfig(probe="ridge", probe_params=("alpha=0.5",), n_boot=200,
                                                           control_tasks=5, refits=2, nested=False, jobs=1))
    top = max((r for r in result.rows if r.auroc.value is not None), key=lambda r: r.auroc.value)
    assert top.layer == 8 and top.auroc.value > 0.9  # layer index SIGNAL_LAYER = 2 is model layer 8
    assert SIGNAL_LAYER == 2
    assert top.controls is not None and top.controls.k == 5  # control tasks fitted with the toy probe
    assert any("does not declare refit_intervals" in w for w in result.warnings)
    assert result.to_json()["config"]["probe_params"] == ["alpha=0.5"]


def test_the_toy_probe_from_the_command_line_and_into_directions(ridge, planted, tmp_path: Path, capsys) -> None:
    from evprobe.experiments.cli import main

    path, _ = planted
    out = tmp_path / "sweep"
    assert main(["sweep", str(path), "--probe", "ridge", "--probe-params", "alpha=2", "--n-boot", "100",
                 "--control-tasks", "3", "--refits", "0", "--no-nested", "--layers", "8", "--quiet",
                 "--out", str(out)]) == 0
    assert json.loads((out / "sweep.json").read_text())["probe"] == "ridge"
    assert main(["directions", str(path), "--layer", "8", "--probe", "ridge", "--probe-params", "alpha=2",
                 "--out", str(tmp_path / "dirs")]) == 0
    prov = json.loads((tmp_path / "dirs" / "directions.json").read_text())
    (entry,) = prov.values() if isinstance(prov, dict) and "directions" not in prov else prov["directions"]
    meta = entry.get("provenance", entry)
    assert meta["probe"] == "ridge" and meta["probe_params"] == {"alpha": 2.0}
    capsys.readouterr()
    assert main(["sweep", str(path), "--probe", "ridge", "--probe-params", "beta=1", "--quiet"]) == 2
    assert "probe 'ridge' has no parameter 'beta' (its parameters: alpha)" in capsys.readouterr().err


def test_a_probe_from_an_installed_package_entry_point(tmp_path: Path, monkeypatch) -> None:
    """A real distribution on sys.path declaring `evprobe.probes` entry points (no import until used)."""
    import evprobe.probes.registry as registry

    from tests.installed import install

    install(tmp_path, monkeypatch, "toyprobes", "evprobe.probes", {"halfshrunk": "toyprobes.mine:HalfShrunk"}, {
        "toyprobes/__init__.py": "",
        "toyprobes/mine.py": "from evprobe.probes.estimators import MassMeanProbe\n\n"
                             "class HalfShrunk(MassMeanProbe):\n"
                             "    def __init__(self, pooled_covariance: bool = True, shrinkage: float = 0.5) -> None:\n"
                             "        super().__init__(pooled_covariance, shrinkage)\n"})
    monkeypatch.setattr(registry, "_entry_points_read", False)
    try:
        assert "halfshrunk" in probe_names() and "toyprobes.mine" not in sys.modules
        assert probe_class("halfshrunk").__name__ == "HalfShrunk"
        check_probe("halfshrunk")
    finally:
        unregister_probe("halfshrunk")


def test_the_how_to_pages_probe_is_the_one_tested() -> None:
    """docs/howto/add-probe.md's example, run as written, registers a probe that keeps the protocol
    and makes the SweepConfig the page shows."""
    import re

    page = (Path(__file__).parents[2] / "docs" / "howto" / "add-probe.md").read_text()
    example, config = re.findall(r"```python\n(.*?)```", page, re.S)[:2]
    namespace: dict = {}
    exec(compile(example, "docs/howto/add-probe.md", "exec"), namespace)  # noqa: S102 (the repository's own page)
    try:
        check_probe("ridge")
        exec(compile(config, "docs/howto/add-probe.md", "exec"), namespace)  # noqa: S102
        assert ProbeSpec.of("ridge", ["alpha=0.5"]).make().alpha == 0.5
    finally:
        unregister_probe("ridge")


def test_directions_with_other_parameters_are_other_directions(planted, tmp_path: Path) -> None:
    """Two fits of one probe at one layer with different parameters get two names (the defaults keep
    the name they always had)."""
    from evprobe.probes.runs import directions_to_folder

    path, _ = planted
    run = directions_to_folder([path], "resolved", tmp_path / "d", [8], position="last",
                               probe=[ProbeSpec.of("logistic"), ProbeSpec.of("logistic", C=0.5)])
    assert [d.name for d in run.directions] == ["resolved.logistic.L8.last", "resolved.logistic-C_0_5.L8.last"]
    assert run.directions[1].provenance["probe_params"] == {"C": 0.5}


def test_the_layer_sweep_config_takes_and_checks_probe_parameters() -> None:
    from evprobe.experiments.layer_sweep import LayerSweepConfig

    LayerSweepConfig(model="tiny:qwen2_vl", bench="b", out="o", probe="logistic", probe_params=("C=0.5",))
    with pytest.raises(ValueError, match=r"^key 'probe_params': probe 'logistic' has no parameter 'alpha'"):
        LayerSweepConfig(model="tiny:qwen2_vl", bench="b", out="o", probe="logistic", probe_params=("alpha=1",))
