"""The layer-sweep job on a small generated benchmark with a tiny real LLaVA: every output is
written, a rerun reuses the capture and skips finished sweeps, and config errors are one line
before any model is loaded. No mocks of models (hooks.load is only replaced by a tripwire)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evprobe import hooks
from evprobe.experiments.config import ConfigError
from evprobe.experiments.layer_sweep import (
    LayerSweepConfig,
    layer_sweep,
    load_layer_sweep_config,
    make_plan,
)

MODEL = "tiny:llava"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def bench(small_bench: Path) -> Path:
    return small_bench  # shared, read-only (tests/conftest.py)


def config(bench: Path, out: Path, **overrides) -> LayerSweepConfig:
    return load_layer_sweep_config("layer_sweep_tiny", {"bench": str(bench), "out": str(out), "n_boot": 100,
                                                        **overrides})


def bad_bench(bench: Path) -> Path:
    return bench.parent / "no_such_bench"


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(hooks, "load", boom)


@pytest.fixture(scope="module")
def first(bench: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("ls_out") / "run"
    return out, layer_sweep(config(bench, out), progress=False)


def test_outputs_written(first: tuple[Path, dict]) -> None:
    out, summary = first
    assert summary.captured == summary.n_items == 48
    assert summary.swept == ("resolved", "history", "threshold_level", "missing_property")
    for label in summary.swept:
        assert (out / "sweeps" / label / "sweep.png").stat().st_size > 0
        assert (out / "sweeps" / label / "settings.json").is_file()
    for kind in ("system", "pairs", "request"):
        assert (out / "sweeps" / "resolved" / f"transfer-{kind}.png").stat().st_size > 0
    assert not (out / "sweeps" / "history" / "transfer-system.json").exists()  # transfer only for resolved
    assert (out / "directions" / "geometry.png").stat().st_size > 0
    assert len(json.loads((out / "directions" / "geometry.json").read_text())["names"]) == 4 * 3  # layers x systems
    assert (out / "layer_sweep.png").stat().st_size > 0
    result = json.loads((out / "best_layers.json").read_text())
    assert tuple(r["label"] for r in result["labels"]) == summary.swept
    for r in result["labels"]:
        assert r["n"] == 48 and r["best"]["n"] == 48 and len(r["best"]["ci"]) == 2
        assert r["control_tasks"]["n"] == 48 and r["selectivity"]["n"] == 48
        assert set(r["baselines"]) == {"history", "threshold", "history_threshold"}
    md = (out / "best_layers.md").read_text()
    # best, control and three baselines on every label row; the AUROCs say the families they rest on
    # (6 families here: fewer than 8, so each says its interval may be too narrow)
    assert md.count("(n=48 in only 6 families: the interval may be too narrow)") >= 4 * 5
    assert "resolved=True | 48 (6) | L" in md and "[" in md


def test_rerun_reuses(first: tuple[Path, dict], bench: Path, no_model: None) -> None:
    out, _ = first
    before = (out / "sweeps" / "resolved" / "sweep.json").stat().st_mtime_ns
    again = layer_sweep(config(bench, out), progress=False)
    assert again.captured == 0 and again.swept == () and not again.directions_fitted
    assert again.reused == ("resolved", "history", "threshold_level", "missing_property")
    assert (out / "sweeps" / "resolved" / "sweep.json").stat().st_mtime_ns == before


def test_changed_settings_resweep_only_that(first: tuple[Path, dict], bench: Path, no_model: None) -> None:
    out, _ = first
    again = layer_sweep(config(bench, out, labels=("resolved", "history=0")), progress=False)
    assert again.reused == ("resolved",) and again.swept == ("history=0",)
    assert "history=0" in (out / "best_layers.md").read_text()


@pytest.mark.parametrize(("overrides", "needle"), [
    ({"labels": ("resolved", "sufficiency")}, "unknown label 'sufficiency'"),
    ({"positions": ("last", "middle")}, "key 'positions'"),
    ({"transfer": ("system", "regime")}, "unknown kind 'regime'"),
    ({"transfer": ("void_system",)}, "captures no voids (select, answer_initial); add voids"),
    ({"layers": (0, 9)}, "layer 9 is out of range"),
    ({"requests": ("select", "bogus")}, "unknown request type 'bogus'"),
])
def test_config_errors_before_model_load(bench: Path, tmp_path: Path, no_model: None, overrides: dict,
                                         needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        make_plan(config(bench, tmp_path / "x", **overrides))
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "x").exists()


def test_missing_bench(bench: Path, tmp_path: Path, no_model: None) -> None:
    with pytest.raises(ConfigError, match="benchmark .* not found"):
        make_plan(config(bad_bench(bench), tmp_path / "x"))


def test_unknown_key_in_file(tmp_path: Path, no_model: None) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("model: tiny_llava\nbench: b\nout: o\nlabelz: [resolved]\n")
    with pytest.raises(ConfigError, match="unknown key 'labelz'"):
        load_layer_sweep_config(str(path))


def test_parser_registers(tmp_path: Path) -> None:
    import argparse

    from evprobe.experiments.layer_sweep import add_layer_sweep_parser, config_from_args

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    add_layer_sweep_parser(sub)
    args = parser.parse_args(["layer-sweep", "--config", "layer_sweep_tiny", "--labels", "resolved,history",
                              "--layers", "1,2", "--n-boot", "50", "--out", str(tmp_path)])
    cfg = config_from_args(args)
    assert cfg.labels == ("resolved", "history") and cfg.layers == (1, 2) and cfg.n_boot == 50
    assert callable(args.run)
