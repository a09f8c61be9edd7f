"""Typed configs: every shipped YAML loads; unknown keys, wrong types, missing files and bad YAML
are one-line errors naming the file and key; CLI overrides beat the file; tiny model configs build."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from evprobe import hooks
from evprobe.experiments.config import (
    CONFIGS_DIR,
    ConfigError,
    ModelConfig,
    config_names,
    load_config,
    load_model,
    load_model_config,
    model_source,
    resolve_config,
)
from evprobe.experiments.dose_response.config import (
    DEFAULT_ALPHAS,
    DoseResponseConfig,
    load_dose_response_config,
)

ROOT = Path(__file__).resolve().parents[2]
MODEL_YAMLS = sorted((ROOT / "configs" / "models").glob("*.yaml"))
EXPERIMENT_YAMLS = sorted((ROOT / "configs" / "experiments").glob("*.yaml"))
FIELDS = [f.name for f in dataclasses.fields(ModelConfig)]
# The seeds' models (seed 000: Qwen2.5-VL 3B/7B/32B, SmolVLM2, Idefics3, Pixtral; seed 002: Qwen3-VL
# 8B, Gemma 4 E4B, LLaVA-NeXT-Video 7B) plus the Gemma 3 fallback.
HUB_MODELS = {
    "qwen2_5_vl_3b": "Qwen/Qwen2.5-VL-3B-Instruct",
    "qwen2_5_vl_7b": "Qwen/Qwen2.5-VL-7B-Instruct",
    "qwen2_5_vl_32b": "Qwen/Qwen2.5-VL-32B-Instruct",
    "smolvlm2_2b": "HuggingFaceTB/SmolVLM2-2.2B-Instruct",
    "idefics3_8b": "HuggingFaceM4/Idefics3-8B-Llama3",
    "pixtral_12b": "mistral-community/pixtral-12b",
    "qwen3_vl_8b": "Qwen/Qwen3-VL-8B-Instruct",
    "gemma4_e4b": "google/gemma-4-E4B-it",
    "gemma3_4b": "google/gemma-3-4b-it",
    "llava_next_video_7b": "llava-hf/LLaVA-NeXT-Video-7B-hf",
}


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text and text
    return text


def write(path: Path, data: dict | str) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def test_configs_folder_is_found_from_the_package() -> None:
    assert CONFIGS_DIR == ROOT / "configs"
    assert set(config_names("models")) >= set(HUB_MODELS) | {f"tiny_{a}" for a in hooks.TINY_ARCHS}
    assert {"dose_response", "dose_response_tiny"} <= set(config_names("experiments"))


@pytest.mark.parametrize("path", MODEL_YAMLS, ids=lambda p: p.stem)
def test_every_model_yaml_loads_with_every_key(path: Path) -> None:
    raw = yaml.safe_load(path.read_text())
    assert list(raw) == FIELDS  # every key written out, in field order: the file documents the config
    cfg = load_model_config(path)
    assert cfg.name == path.stem and load_model_config(path.stem) == cfg  # by path and by bare name
    if cfg.is_tiny or cfg.model == "organism":  # CPU-sized models
        assert (cfg.dtype, cfg.device_map) == ("float32", None)
    else:
        assert (cfg.dtype, cfg.device_map) == ("bfloat16", "auto")
        assert cfg.batch_size <= (4 if any(s in cfg.name for s in ("32b", "12b")) else 8)
        assert (cfg.max_new_tokens_direct, cfg.max_new_tokens_brief) == (16, 256)  # seed 000's limits


def test_the_seed_models_and_their_special_settings() -> None:
    for name, hub_id in HUB_MODELS.items():
        assert load_model_config(name).model == hub_id
    assert load_model_config("pixtral_12b").attn_implementation == "eager"  # seed 000 appendix I
    assert "appendix I" in load_model_config("pixtral_12b").notes
    assert load_model_config("qwen2_5_vl_32b").batch_size <= 4
    gemma4 = load_model_config("gemma4_e4b")
    if "gemma4" not in hooks.TINY_ARCHS:
        assert "no tiny gemma4" in gemma4.notes


@pytest.mark.parametrize("arch", hooks.TINY_ARCHS)
def test_tiny_model_configs_build(arch: str) -> None:
    cfg = load_model_config(f"tiny_{arch}")
    assert cfg.model == f"tiny:{arch}"
    handle = load_model(cfg)  # hooks.load, offline
    assert handle.arch == arch or handle.model_id == f"tiny:{arch}"
    assert handle.n_layers == 4 and handle.d_model == 64


def _experiment_class(stem: str) -> type:
    """The typed config each experiment YAML fills, by its file-name prefix."""
    from evprobe.experiments.gating import GatingConfig
    from evprobe.experiments.layer_sweep import LayerSweepConfig
    from evprobe.experiments.patching.job import PatchingConfig
    from evprobe.experiments.void_transfer import VoidTransferConfig

    kinds = {
        "dose_response": DoseResponseConfig,
        "patching": PatchingConfig,
        "layer_sweep": LayerSweepConfig,
        "gating": GatingConfig,
        "void_transfer": VoidTransferConfig,
    }
    for prefix, cls in kinds.items():
        if stem == prefix or stem.startswith(prefix + "_"):
            return cls
    raise AssertionError(f"configs/experiments/{stem}.yaml belongs to no known experiment")


@pytest.mark.parametrize("path", EXPERIMENT_YAMLS, ids=lambda p: p.stem)
def test_every_experiment_yaml_loads(path: Path) -> None:
    raw = yaml.safe_load(path.read_text())
    cls = _experiment_class(path.stem)
    assert set(raw) == {f.name for f in dataclasses.fields(cls)}  # every key written out
    cfg = load_config(cls, path)
    load_model_config(cfg.model)  # the model it names exists
    if cls is DoseResponseConfig:
        assert load_dose_response_config(path.stem) == load_dose_response_config(path)
        if path.stem == "dose_response":
            assert cfg.alphas == DEFAULT_ALPHAS and cfg.n_random == 50 and cfg.ablation and cfg.heldout


def test_direct_model_strings_become_default_configs() -> None:
    tiny = load_model_config("tiny:llava")
    assert (tiny.model, tiny.name, tiny.dtype, tiny.batch_size) == ("tiny:llava", "tiny_llava", "auto", 8)
    hub = load_model_config("Qwen/Qwen2.5-VL-7B-Instruct")
    assert hub.model == "Qwen/Qwen2.5-VL-7B-Instruct" and hub.name == "Qwen__Qwen2.5-VL-7B-Instruct"
    assert load_model_config(tiny) is tiny
    assert load_model_config(tiny, {"batch_size": 2}).batch_size == 2


def test_unknown_model_names_are_one_line_errors() -> None:
    with pytest.raises(ConfigError) as err:
        load_model_config("qwen_nonexistent")
    assert "qwen_nonexistent" in one_line(err) and "qwen2_5_vl_7b" in one_line(err)
    with pytest.raises(ConfigError) as err:
        load_model_config("tiny:nope")
    assert "'nope'" in one_line(err) and "llava" in one_line(err)
    with pytest.raises(ConfigError) as err:
        load_model_config("configs/models/missing.yaml")
    assert "missing.yaml not found" in one_line(err)


def test_unknown_key_names_key_file_and_valid_keys(tmp_path: Path) -> None:
    path = write(tmp_path / "m.yaml", {"name": "x", "model": "tiny:llava", "batchsize": 4})
    with pytest.raises(ConfigError) as err:
        load_model_config(path)
    text = one_line(err)
    assert str(path) in text and "unknown key 'batchsize'" in text and "ModelConfig" in text
    assert "valid keys: name, model, dtype" in text


def test_unknown_key_in_a_nested_section(tmp_path: Path) -> None:
    path = write(tmp_path / "e.yaml", {"model": {"name": "t", "model": "tiny:llava", "dtyp": "float32"},
                                       "bench": "b", "directions": "d", "out": "o"})
    with pytest.raises(ConfigError) as err:
        load_config(DoseResponseConfig, path)
    text = one_line(err)
    assert str(path) in text and "unknown key 'dtyp' in 'model' (ModelConfig)" in text
    good = write(tmp_path / "g.yaml", {"model": {"name": "t", "model": "tiny:llava", "dtype": "float32"},
                                       "bench": "b", "directions": "d", "out": "o"})
    cfg = load_config(DoseResponseConfig, good)
    assert isinstance(cfg.model, ModelConfig) and cfg.model.dtype == "float32"
    # a dotted override reaches the nested section
    assert load_config(DoseResponseConfig, good, {"model.batch_size": 3}).model.batch_size == 3


def test_type_errors_name_the_key(tmp_path: Path) -> None:
    base = {"bench": "b", "directions": "d", "out": "o", "model": "tiny:llava"}
    cases = [
        ({"n_random": "three"}, "key 'n_random' must be an integer, got 'three'"),
        ({"n_random": True}, "key 'n_random' must be an integer"),  # a bool is not an int
        ({"alphas": [1, "x"]}, "key 'alphas' must be a list of numbers; item 1 is 'x'"),
        ({"alphas": 0.5}, "key 'alphas' must be a list of numbers"),
        ({"layers": "all"}, "key 'layers' must be a list of integers or one of 'from-direction'"),
        ({"readout": "both-ways"}, "key 'readout' must be one of 'logprobs', 'generate', 'both'"),
        ({"heldout": "yes"}, "key 'heldout' must be true or false"),
        ({"limit": 2.5}, "key 'limit' must be an integer or null"),
        ({"alphas": []}, "key 'alphas' is empty"),  # the dataclass's own check, same one-line form
        ({"requests": ["answer_initial"]}, "key 'requests' has 'answer_initial'"),
    ]
    for change, expected in cases:
        path = write(tmp_path / "e.yaml", {**base, **change})
        with pytest.raises(ConfigError) as err:
            load_config(DoseResponseConfig, path)
        assert expected in one_line(err) and str(path) in one_line(err), (change, one_line(err))
    ok = load_config(DoseResponseConfig, write(tmp_path / "e.yaml", {**base, "alphas": [1, -1], "limit": None}))
    assert ok.alphas == (1.0, -1.0) and all(isinstance(a, float) for a in ok.alphas) and ok.limit is None
    assert load_config(DoseResponseConfig, write(tmp_path / "e.yaml", {**base, "layers": [3, 1]})).layers == (3, 1)


def test_missing_required_key_and_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(DoseResponseConfig, write(tmp_path / "e.yaml", {"bench": "b", "out": "o", "model": "m"}))
    assert "missing key 'directions' in DoseResponseConfig" in one_line(err)
    with pytest.raises(ConfigError) as err:
        load_config(DoseResponseConfig, tmp_path / "absent.yaml")
    assert f"config file {tmp_path / 'absent.yaml'} not found" in one_line(err)
    with pytest.raises(ConfigError) as err:
        resolve_config("no_such_experiment", "experiments")
    assert "no_such_experiment" in one_line(err) and "dose_response_tiny" in one_line(err)
    with pytest.raises(ConfigError) as err:
        load_config(DoseResponseConfig, write(tmp_path / "bad.yaml", "bench: [unclosed\nout: o\n"))
    assert "not valid YAML" in one_line(err) and "line" in one_line(err)
    with pytest.raises(ConfigError) as err:
        load_config(DoseResponseConfig, write(tmp_path / "list.yaml", "- a\n- b\n"))
    assert "expected a mapping" in one_line(err)


def test_cli_overrides_beat_the_file_and_none_means_not_given(tmp_path: Path) -> None:
    path = write(tmp_path / "e.yaml", {"bench": "b", "directions": "d", "out": "o", "model": "tiny:llava",
                                       "limit": 8, "alphas": [-1, 0, 1]})
    cfg = load_config(DoseResponseConfig, path, {"limit": 2, "alphas": (0.5,), "n_random": None, "out": None})
    assert (cfg.limit, cfg.alphas, cfg.n_random, cfg.out) == (2, (0.5,), 50, "o")
    with pytest.raises(ConfigError) as err:
        load_config(DoseResponseConfig, path, {"limit": "many"})
    assert one_line(err).startswith("command line: key 'limit' must be an integer")
    with pytest.raises(ConfigError) as err:
        load_config(DoseResponseConfig, path, {"limt": 3})
    assert "command line: unknown key 'limt'" in one_line(err)
    with pytest.raises(ConfigError) as err:
        load_config(DoseResponseConfig, path, {"n_boot": 0})
    assert "command line overrides" in one_line(err) and "'n_boot'" in one_line(err)
    model = write(tmp_path / "m.yaml", {"name": "m", "model": "tiny:llava", "batch_size": 4})
    assert load_model_config(model, {"batch_size": 16, "dtype": None}).batch_size == 16


def test_a_pinned_revision_resolves_through_the_local_hub_cache() -> None:
    assert model_source(ModelConfig(name="t", model="tiny:llava", revision="abc")) == "tiny:llava"
    assert model_source(ModelConfig(name="q", model="Qwen/Qwen2.5-VL-3B-Instruct")) == "Qwen/Qwen2.5-VL-3B-Instruct"
    with pytest.raises(ConfigError) as err:  # offline (HF_HUB_OFFLINE=1) and not cached: one line, no download
        model_source(ModelConfig(name="q", model="Qwen/Qwen2.5-VL-3B-Instruct", revision="abc"))
    assert "at revision 'abc' is not available" in one_line(err)


# ---------------------------------------------------------------- --model naming a model config


def _parsed(argv: list[str]):
    from evprobe.experiments.cli import build_parser

    return build_parser().parse_args(argv)


def test_run_takes_a_model_config_name_or_yaml_path_for_model(
        tmp_path: Path, small_bench: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    import json

    from evprobe.experiments.cli import main

    monkeypatch.chdir(ROOT)  # the YAML path as a user in the repository types it
    for model, out in (("tiny_llava", "by_name"), ("configs/models/tiny_llava.yaml", "by_path")):
        argv = ["run", "--model", model, "--bench", str(small_bench), "--out", str(tmp_path / out), "--limit", "2",
                "--quiet"]
        assert main(argv) == 0, capsys.readouterr().err
        records = (tmp_path / out / "records.jsonl").read_text().splitlines()
        assert len(records) == 2
        meta = json.loads((tmp_path / out / "run.json").read_text())
        # the run records what the model config resolved to: the model id and its settings
        assert (meta["model"], meta["dtype"]) == ("tiny:llava", "float32")
        assert meta["config"]["model"]["model"] == "tiny:llava" and meta["config"]["model"]["dtype"] == "float32"
        assert meta["config"]["model"]["name"] == "tiny_llava" and "dtype" not in meta["config"]  # one spelling
    assert "2/2 records" in capsys.readouterr().out

    err_argv = ["run", "--model", "configs/models/no_such_model.yaml", "--bench", str(small_bench),
                "--out", str(tmp_path / "missing"), "--limit", "2", "--quiet"]
    assert main(err_argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "model config file configs/models/no_such_model.yaml not found" in err
    assert "tiny_llava" in err  # names the known configs
    assert not (tmp_path / "missing").exists()  # refused before anything was written


def test_every_command_names_its_model_one_way(tmp_path: Path, small_bench: Path) -> None:
    """run, capture and patching hold a ModelConfig as gating, layer-sweep and dose-response do: --model
    names a model config or a model, and the same model flags replace its keys."""
    from evprobe.bench.runner import RunConfig
    from evprobe.experiments.capture import CaptureConfig
    from evprobe.experiments.config import config_from_flags, model_config_path
    from evprobe.experiments.patching.job import config_from_args

    common = ["--bench", str(small_bench), "--out", str(tmp_path / "o")]
    pixtral = load_model_config("pixtral_12b")
    cfg = config_from_flags(RunConfig, _parsed(["run", "--model", "pixtral_12b", *common]))
    assert cfg.model == pixtral  # the whole model config, name and all
    assert (cfg.model.dtype, cfg.model.attn_implementation, cfg.model.device_map) == ("bfloat16", "eager", "auto")
    assert cfg.batch_size == RunConfig.batch_size  # the run's own batch size, not the model config's
    argv = ["run", "--model", "pixtral_12b", "--dtype", "float32", "--device-map", "cpu", "--no-trust-remote-code",
            "--revision", "main", "--answer-prefix", "ANSWER:", *common]
    m = config_from_flags(RunConfig, _parsed(argv)).model
    assert (m.model, m.dtype, m.attn_implementation, m.device_map, m.trust_remote_code, m.revision,
            m.answer_prefix) == (pixtral.model, "float32", "eager", "cpu", False, "main", "ANSWER:")

    # Models that are not model configs: a ModelConfig with the defaults, the model as given.
    folder = tmp_path / "tiny_llava"  # a folder wins over the config of the same name
    folder.mkdir()
    for model in ("tiny:llava", "Qwen/Qwen2.5-VL-7B-Instruct", str(folder), "organism", "policy:reference"):
        assert model_config_path(model) is None
        plain = config_from_flags(RunConfig, _parsed(["run", "--model", model, *common]))
        assert plain.model == ModelConfig.of(model) and plain.model.dtype == "auto"
        assert plain == RunConfig(model=model, bench=str(small_bench), out=str(tmp_path / "o"))  # a string: the same

    got = config_from_flags(CaptureConfig, _parsed(["capture", "--model", "tiny_llava.yaml", *common]))
    assert got.model == load_model_config("tiny_llava")  # a bare name with its suffix
    # patching: the model from --config's YAML or the flag; the command line's model flags beat both
    patch = config_from_args(_parsed(["patching", "--config", "patching", "--model", "tiny_llava", "--out", "o"]))
    assert (patch.model.model, patch.model.dtype, patch.model.device_map) == ("tiny:llava", "float32", None)
    patch = config_from_args(_parsed(["patching", "--config", "patching_tiny", "--model",
                                      str(ROOT / "configs" / "models" / "pixtral_12b.yaml"), "--dtype", "float16"]))
    assert (patch.model.model, patch.model.dtype, patch.model.attn_implementation) == (pixtral.model, "float16", "eager")
    patch = config_from_args(_parsed(["patching", "--config", "patching_tiny", "--dtype", "bfloat16"]))
    assert (patch.model.model, patch.model.dtype) == ("tiny:llava", "bfloat16")  # the YAML's model, the flag's dtype
    with pytest.raises(ConfigError) as err:
        config_from_args(_parsed(["patching", "--config", "patching_tiny", "--model", "gone.yml"]))
    assert "model config file gone.yml not found" in one_line(err)
    with pytest.raises(ConfigError) as err:
        config_from_flags(CaptureConfig, _parsed(["capture", "--model", "x.yaml", *common]))
    assert "model config file x.yaml not found" in one_line(err)
    with pytest.raises(ConfigError) as err:  # a model flag's value is checked as a model config's key
        config_from_flags(CaptureConfig, _parsed(["capture", "--model", "tiny:llava", "--dtype", "float8", *common]))
    assert "key 'dtype' is 'float8'; choose from auto" in one_line(err)


def test_a_config_written_before_one_model_spelling_is_refused_with_its_fix(tmp_path: Path) -> None:
    """A patching YAML with the old flat model keys (dtype beside model) names the key and where it goes."""
    from evprobe.experiments.patching.job import PatchingConfig

    old = tmp_path / "old.yaml"
    old.write_text("model: tiny:llava\nbench: b\nout: o\ndtype: float32\n")
    with pytest.raises(ConfigError) as err:
        load_config(PatchingConfig, old)
    assert "key 'dtype' in PatchingConfig is a key of its model now; move it under 'model'" in one_line(err)
    assert load_config(PatchingConfig, {"model": {"name": "t", "model": "tiny:llava", "dtype": "float32"},
                                        "bench": "b", "out": "o"}).model.dtype == "float32"


def test_a_job_meta_of_either_spelling_rebuilds_its_config() -> None:
    """Merging shard folders rebuilds the config from meta.json: the nested model of today, and the flat
    keys of a folder written before (folded into the ModelConfig)."""
    from evprobe.bench.model_config import model_from_record

    now = model_from_record({"model": dataclasses.asdict(ModelConfig.of("tiny:llava", dtype="float32")), "limit": 2})
    before = model_from_record({"model": "tiny:llava", "dtype": "float32", "device_map": None, "limit": 2})
    assert now == before == {"model": ModelConfig.of("tiny:llava", dtype="float32"), "limit": 2}


def test_distributed_placement_reads_the_model_of_every_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evprobe.bench.runner import RunConfig
    from evprobe.experiments import distributed

    monkeypatch.setattr(distributed, "rank_placement", lambda device_map, max_memory: ("cuda:1", None))
    run = RunConfig(model=ModelConfig.of("tiny:llava", device_map="auto"), bench="b", out=str(tmp_path))
    assert distributed.for_rank(run).model.device_map == "cuda:1"
