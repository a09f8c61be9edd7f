"""Model placement through the configs and the CLI: --device-map, --max-memory, --offload-folder
reach accelerate's big-model loading, and shards placed differently still merge.

No GPU here: a saved tiny checkpoint is spread over CPU and disk (accelerate offload), the same
path that spreads a large model over several GPUs (tests/hooks/test_offload.py checks capture,
steering and patching layer by layer)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evprobe.experiments.cli import main
from evprobe.experiments.config import ConfigError, load_model_config
from evprobe.experiments.merge import merge
from evprobe.hooks import tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ckpt") / "tiny-llava"
    built = tiny("llava")
    built.model.save_pretrained(folder)
    built.processor.save_pretrained(folder)
    return folder


def test_capture_with_an_offloaded_model_equals_the_whole_model(checkpoint: Path, small_bench: Path,
                                                                tmp_path: Path, caplog) -> None:
    args = ["capture", "--model", str(checkpoint), "--bench", str(small_bench), "--requests", "select",
            "--limit", "6", "--positions", "last,image_mean", "--quiet"]
    assert main([*args, "--out", str(tmp_path / "whole")]) == 0
    # A 150 KB CPU budget leaves most of the 1 MB model on disk, loaded module by module per forward.
    assert main([*args, "--device-map", "auto", "--max-memory", "cpu=150KB", "--offload-folder",
                 str(tmp_path / "offload"), "--shard", "0/1", "--out", str(tmp_path / "spread")]) == 0
    # Offloaded (safetensors weights are read in place, so the offload folder may stay empty).
    assert "offloaded to the disk" in caplog.text
    a, b = (np.load(tmp_path / d / "acts.npy") for d in ("whole", "spread"))
    np.testing.assert_array_equal(a, b)
    meta = json.loads((tmp_path / "spread" / "meta.json").read_text())
    assert meta["config"]["model"]["max_memory"] == "cpu=150KB"
    # Shards that differ only in placement merge (shard 0/1 here: the whole job on one machine).
    merge(tmp_path / "merged", [tmp_path / "spread"])
    np.testing.assert_array_equal(np.load(tmp_path / "merged" / "acts.npy"), a)


def test_model_config_placement_keys_are_checked() -> None:
    cfg = load_model_config("tiny_llava", {"device_map": "auto", "max_memory": "0=70GiB,cpu=100GiB"})
    assert (cfg.device_map, cfg.max_memory) == ("auto", "0=70GiB,cpu=100GiB")
    with pytest.raises(ConfigError, match="need a device map; set device_map: auto"):
        load_model_config("tiny_llava", {"offload_folder": "/tmp/off"})
    with pytest.raises(ConfigError, match="not DEVICE=SIZE; write e.g. 0=70GiB"):
        load_model_config("tiny_llava", {"device_map": "auto", "max_memory": "70GiB"})


@pytest.mark.parametrize("command", ["layer-sweep", "dose-response", "gating"])
def test_experiment_flags_override_the_model_configs_placement(command: str) -> None:
    from importlib import import_module

    from evprobe.experiments.cli import build_parser

    config = {"layer-sweep": "layer_sweep_tiny", "dose-response": "dose_response_tiny", "gating": "gating_tiny"}[command]
    module = import_module(f"evprobe.experiments.{command.replace('-', '_')}")
    args = build_parser().parse_args([command, "--config", config, "--dtype", "bfloat16", "--device-map", "auto",
                                      "--max-memory", "cpu=1GiB", "--offload-folder", "/tmp/off"])
    model = module.config_from_args(args).model
    assert (model.dtype, model.device_map, model.max_memory, model.offload_folder) == (
        "bfloat16", "auto", "cpu=1GiB", "/tmp/off")
    untouched = module.config_from_args(build_parser().parse_args([command, "--config", config]))
    assert untouched.model == "tiny_llava" or untouched.model.device_map is None
