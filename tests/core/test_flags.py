"""Flags from a typed config (core.flags): one flag per field, typed by its annotation, with its help."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Literal

import pytest

from evprobe.core.flags import add_config_arguments, config_overrides, flag_name, setting


@dataclass(frozen=True)
class Example:
    out: str = setting(help="output folder")
    layers: tuple[int, ...] | Literal["all"] = setting("all", "all, or layer numbers")
    layer: int | Literal["best"] = setting("best", "a layer or best")
    alphas: tuple[float, ...] = setting((-1.0, 1.0), "doses")
    names: tuple[str, ...] | None = setting(None, "names")
    probe: Literal["logistic", "massmean"] = setting("logistic", "which probe")
    ablation: bool = setting(True, "also ablate")
    limit: int | None = setting(None, "first N")
    spec: str | tuple[int, ...] = setting("all", "a spec the job parses")


def parser_for(cls: type, **kwargs) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(exit_on_error=False)
    add_config_arguments(p, cls, **kwargs)
    return p


def test_each_field_becomes_one_typed_flag_with_its_help() -> None:
    p = parser_for(Example)
    args = p.parse_args(["--out", "o", "--layers", "0,2", "--layer", "3", "--alphas=-0.5,0.5", "--names", "a,b",
                         "--probe", "massmean", "--no-ablation", "--limit", "4", "--spec", "0,1"])
    assert config_overrides(args, Example) == {
        "out": "o", "layers": (0, 2), "layer": 3, "alphas": (-0.5, 0.5), "names": ("a", "b"), "probe": "massmean",
        "ablation": False, "limit": 4, "spec": "0,1"}
    assert p.parse_args(["--out", "o", "--layers", "all", "--layer", "best"]).layers == "all"
    helps = {a.dest: a.help for a in p._actions if a.dest != "help"}
    assert helps["alphas"] == "doses (default: -1.0,1.0)" and helps["limit"] == "first N"
    assert {a.option_strings[0] for a in p._actions if a.dest != "help"} == {
        flag_name(f.name) for f in dataclasses.fields(Example)}


def test_flags_not_given_are_not_overrides_and_required_fields_are_required() -> None:
    args = parser_for(Example).parse_args(["--out", "o"])
    assert config_overrides(args, Example) == {"out": "o"}  # the YAML's or the field's default stands
    with pytest.raises(SystemExit):  # argparse: "the following arguments are required: --out"
        parser_for(Example).parse_args([])
    assert parser_for(Example, required=False).parse_args([]).out is None  # a YAML config may give it


def test_bad_values_are_refused_by_the_flag_type() -> None:
    for argv in (["--out", "o", "--layers", "0-3"], ["--out", "o", "--layer", "first"],
                 ["--out", "o", "--probe", "svm"], ["--out", "o", "--limit", "2.5"]):
        with pytest.raises(argparse.ArgumentError):
            parser_for(Example).parse_args(argv)


def test_an_annotation_without_a_flag_type_is_refused_when_the_parser_is_built() -> None:
    @dataclass(frozen=True)
    class Odd:
        mapping: dict[str, int] = setting(None, "no flag can spell this")

    with pytest.raises(TypeError, match="no flag type"):
        parser_for(Odd)


def test_every_command_config_field_has_help_and_a_flag() -> None:
    """Each field is written once: its flag and help come from it (no hand-written flag lists)."""
    from evprobe.bench.runner import RunConfig
    from evprobe.experiments.capture import CaptureConfig
    from evprobe.experiments.dose_response.config import DoseResponseConfig
    from evprobe.experiments.gating import GatingConfig
    from evprobe.experiments.layer_sweep import LayerSweepConfig
    from evprobe.experiments.patching.job import PatchingConfig
    from evprobe.experiments.cli import build_parser

    commands = {"run": RunConfig, "capture": CaptureConfig, "dose-response": DoseResponseConfig,
                "gating": GatingConfig, "layer-sweep": LayerSweepConfig, "patching": PatchingConfig}
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    from evprobe.bench.backends import backend_specs

    for command, cls in commands.items():
        options = {s for a in sub.choices[command]._actions for s in a.option_strings}
        # evprobe run: backend_options is no flag; every registered backend's own fields are
        backends = [f for spec in backend_specs() for f in dataclasses.fields(spec.options)] if cls is RunConfig else []
        for f in [*dataclasses.fields(cls), *backends]:
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help"
            assert flag_name(f.name) in options or f.name == "backend_options", f"evprobe {command} has no {flag_name(f.name)}"
