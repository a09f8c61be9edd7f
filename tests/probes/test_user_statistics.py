"""Statistics that fit the user's data (issue 28, item 3): control tasks on the user's own cell
fields, said once when missing; no benchmark vocabulary for a capture written by write_capture;
one name per setting (flag dest = SweepConfig field, old names deprecated)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import evprobe
from evprobe.experiments.cli import main
from evprobe.probes.captures import load_captures
from evprobe.probes.label_sets import labels
from evprobe.probes.control_tasks import missing_cells_warning, suggest_cell_fields
from evprobe.probes.sweep import SweepConfig, sweep

FAST = {"n_boot": 100, "refits": 0, "nested": False, "control_tasks": 19}
BENCHMARK_WORDS = ("system", "initial_property", "history", "threshold_level", "regime")


def user_capture(folder: Path, n_families: int = 12, seed: int = 0) -> Path:
    """24 items in 12 families with the user's own fields (topic, speaker) and label (sentiment)."""
    rng = np.random.default_rng(seed)
    rows = [{"family_id": f"doc{i // 2}", "topic": ["food", "film", "travel"][(i // 2) % 3],
             "speaker": ["ann", "bob"][(i // 4) % 2], "sentiment": ["pos", "neg"][(i + i // 2) % 2]}
            for i in range(2 * n_families)]
    acts = rng.normal(size=(len(rows), 3, 16)).astype(np.float32)
    acts[:, 2, 0] += 3.0 * np.array([r["sentiment"] == "pos" for r in rows])
    return evprobe.write_capture(folder, acts, rows, layers=[2, 4, 6])


def sweep_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[str, str, dict]:
    cap = user_capture(tmp_path / "mine")
    out = tmp_path / "out"
    code = main(["sweep", str(cap), "--label", "sentiment", "--positive", "pos", "--out", str(out), "--quiet",
                 "--n-boot", "100", "--refits", "0", "--control-tasks", "19", *flags])
    assert code == 0
    console = capsys.readouterr()
    return (out / "sweep.md").read_text(), console.out + console.err, json.loads((out / "sweep.json").read_text())


def test_missing_cell_fields_said_once_with_the_flag_and_no_benchmark_words(tmp_path, capsys) -> None:
    md, console, js = sweep_cli(tmp_path, capsys)
    for text in (md, console):
        assert sum("--cell-fields" in line for line in text.splitlines()) == 1  # one line names the flag
        assert text.count("CONTROL TASKS SKIPPED") == 1
        assert "e.g. --cell-fields topic,speaker" in text  # the user's own fields, as the example
        assert not [w for w in BENCHMARK_WORDS if w in text], text
    assert "captures: mine" in md and "regimes" not in md
    assert js["captures"] == ["mine"] and "regimes" not in js
    assert js["baselines"] == {}  # no history / threshold baselines made of missing fields
    assert js["control_tasks"]["k"] == 0 and js["control_tasks"]["suggested_fields"] == ["topic", "speaker"]
    assert js["cell_baseline"]["value"] is None


def test_the_users_cell_fields_turn_the_control_tasks_on(tmp_path, capsys) -> None:
    md, console, js = sweep_cli(tmp_path, capsys, "--cell-fields", "topic,speaker")
    assert "CONTROL TASKS SKIPPED" not in console + md
    assert js["control_tasks"]["k"] > 0 and js["control_tasks"]["n_cells"] == 6
    assert js["config"]["cell_fields"] == ["topic", "speaker"] and js["cell_baseline"]["value"] is not None
    assert all(r["control_tasks"] is not None for r in js["rows"])
    assert "cell = topic x speaker" in md


def test_a_misspelt_cell_field_is_named(tmp_path) -> None:
    cs = load_captures([user_capture(tmp_path / "mine")])
    res = sweep(cs, labels(cs, "sentiment=pos"), SweepConfig(cell_fields=("topic", "mood"), **FAST))
    skipped = [w for w in res.warnings if w.startswith("CONTROL TASKS SKIPPED")]
    assert len(skipped) == 1 and "lacks the cell field(s) mood of topic x mood" in skipped[0]
    assert res.control_tasks.k == 0 and res.control_tasks.missing_fields == ("mood",)


def test_suggested_cell_fields_leave_out_ids_constants_and_the_label() -> None:
    rows = [{"row": i, "item_id": str(i), "family_id": f"f{i // 2}", "note": f"n{i}", "same": 1, "topic": "ab"[i % 2],
             "y": i % 2} for i in range(8)]
    assert suggest_cell_fields(rows, "y") == ["topic"]  # note: unique per row; same: constant
    assert suggest_cell_fields(rows, "topic") == ["y"]
    text = missing_cells_warning("y", (), [], [])  # none named: a capture of your own, by default
    assert "no cell fields are named" in text and "--cell-fields FIELD,FIELD" in text and "e.g." not in text
    assert "history" not in text


def test_benchmark_captures_keep_their_regimes(tmp_path) -> None:
    from evprobe.probes.synthetic import planted_acts, reference_rows, write_capture

    rows = reference_rows(16, seed=1)
    acts, _ = planted_acts([r["resolved"] for r in rows], 2, 1, 8, signal_layers=[1], strength=4.0, seed=2)
    cs = load_captures([write_capture(tmp_path / "acts", acts, rows, as_benchmark=True)])
    res = sweep(cs, labels(cs, "resolved"), SweepConfig(**FAST)).to_json()
    assert res["regimes"] == ["standard"] and "captures" not in res
    assert not any("CONTROL TASKS SKIPPED" in w for w in res["warnings"])  # the benchmark's default cell stands
    assert res["config"]["cell_fields"] == ["system", "initial_property", "history", "threshold_level"]


# -- one name per setting ------------------------------------------------------------------------


def test_old_sweep_config_names_warn_and_mean_the_new_ones() -> None:
    with pytest.warns(DeprecationWarning, match="'n_splits' is now 'folds'.*--folds"):
        cfg = SweepConfig(n_splits=3)
    assert cfg.folds == 3 and cfg.n_splits == 3
    with pytest.warns(DeprecationWarning, match="'n_jobs' is now 'jobs'.*--jobs"):
        assert SweepConfig(n_jobs=2).jobs == 2
    with pytest.raises(TypeError, match="give 'folds' only"):
        SweepConfig(folds=3, n_splits=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names are silent, and so is reading the old one
        cfg = dataclasses.replace(SweepConfig(folds=4, jobs=1), seed=1)
        assert (cfg.folds, cfg.n_splits, cfg.jobs, cfg.n_jobs) == (4, 4, 1, 1)
    assert "folds" in dataclasses.asdict(cfg) and "n_splits" not in dataclasses.asdict(cfg)


def flag_mismatches(parser: argparse.ArgumentParser, cls: type, extra: frozenset[str],
                    no_flag: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Flags whose dest is no field of `cls` (nor an input flag), flags spelt unlike their dest, and
    fields without a flag (but those in `no_flag`)."""
    fields = {f.name for f in dataclasses.fields(cls)}
    out, dests = [], set()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        dests.add(action.dest)
        longs = [o for o in action.option_strings if o.startswith("--") and not o.startswith("--no-")]
        if longs and action.dest != longs[0][2:].replace("-", "_"):
            out.append(f"{longs[0]} has dest {action.dest}")
        if action.dest not in fields | extra:
            out.append(f"{action.option_strings or action.dest}: no field {action.dest} of {cls.__name__}")
    out += [f"field {f} of {cls.__name__} has no flag" for f in sorted(fields - dests - set(no_flag))]
    return out


def _subparsers(command: str) -> argparse.ArgumentParser:
    from evprobe.experiments.cli import build_parser

    sub = next(a for a in build_parser(command)._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def test_every_sweep_flag_is_a_sweep_config_field() -> None:
    from evprobe.probes.cli import SWEEP_INPUT_FLAGS

    assert flag_mismatches(_subparsers("sweep"), SweepConfig, SWEEP_INPUT_FLAGS | {"no_progress", "run"}) == []


def test_every_config_command_flag_is_its_config_field() -> None:
    from evprobe.bench.runner import RunConfig
    from evprobe.experiments.capture import CaptureConfig
    from evprobe.experiments.config import add_experiment_parser
    from evprobe.experiments.dose_response import DoseResponseConfig
    from evprobe.experiments.gating import GatingConfig
    from evprobe.experiments.ladder import LadderConfig
    from evprobe.experiments.layer_sweep import LayerSweepConfig
    from evprobe.experiments.patching.job import PatchingConfig

    @dataclasses.dataclass(frozen=True)
    class Nothing:
        pass

    sub = argparse.ArgumentParser().add_subparsers()
    shared = {a.dest for a in add_experiment_parser(sub, "x", Nothing, None, help="", description="",
                                                    example="")._actions} | {"no_progress", "run"}
    commands = {"layer-sweep": LayerSweepConfig, "dose-response": DoseResponseConfig, "gating": GatingConfig,
                "patching": PatchingConfig, "capture": CaptureConfig, "ladder": LadderConfig, "run": RunConfig}
    # the model's own keys are flags of every command that drives a model, the same everywhere (one spelling)
    from evprobe.bench.model_config import ModelConfig

    model_flags = set(ModelConfig.FLAGS)
    for name in commands.keys() - {"ladder"}:
        assert model_flags <= {a.dest for a in _subparsers(name)._actions}, name
    # evprobe run: each registered backend's options are flags too (bench.backends' registry), backend_options none
    from evprobe.bench.backends import backend_specs

    backend_fields = {f.name for spec in backend_specs() for f in dataclasses.fields(spec.options)}
    found = {name: flag_mismatches(_subparsers(name), cls, frozenset(shared | model_flags | (
        backend_fields if cls is RunConfig else set())), no_flag={"backend_options"} if cls is RunConfig else set())
             for name, cls in commands.items()}
    # capture and run add flags of their own beside their config's (hand-written, listed here)
    own = {"capture": {"--model-config"}, "run": {"--model-config"}, "gating": {"--judged"}}  # --judged: a re-scoring
    found = {k: [m for m in v if not any(o in m for o in own.get(k, ()))] for k, v in found.items()}
    assert found == {name: [] for name in commands}, found


def test_the_walk_catches_a_flag_named_unlike_its_field() -> None:
    @dataclasses.dataclass(frozen=True)
    class Cfg:
        folds: int = 5
        jobs: int = 1

    bad = argparse.ArgumentParser()
    bad.add_argument("--folds", dest="n_splits", type=int)  # the old mismatch: --folds fed n_splits
    assert flag_mismatches(bad, Cfg, frozenset()) == [
        "--folds has dest n_splits", "['--folds']: no field n_splits of Cfg", "field folds of Cfg has no flag",
        "field jobs of Cfg has no flag"]
