"""Models spread by accelerate's big-model loading: capture, steering and patching address each
layer where it lives.

There is no GPU here, so the spread is CPU + disk: offloaded modules keep their parameters on the
`meta` device and an accelerate hook loads them for each forward, which is the same machinery that
places layers on several GPUs. Real saved tiny checkpoints loaded through from_pretrained; every
result is compared with the same checkpoint loaded whole.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from evprobe.hooks import load, tiny
from evprobe.hooks.capture import capture_batch
from evprobe.hooks.devices import module_device, parse_max_memory
from evprobe.hooks.patching import patch_pair
from evprobe.hooks.steering import Steering, steered_generate
from tests.hooks.nnsight_twins import steered_generate_nnsight

PROMPTS = ["Which sheet shows more? Answer with a letter.", "Describe the sheet."]
IMAGES = [[Image.new("RGB", (40, 32), (200, 20, 20))], [Image.new("RGB", (40, 32), (20, 200, 20))]]
ON_DISK = (1, 2)


def _placement(model: torch.nn.Module, layers_path: str, on_disk: tuple[int, ...]) -> dict[str, str]:
    """A device_map with decoder layers `on_disk` and the module holding the model's FIRST parameter
    (the vision tower) offloaded to disk, the rest on the CPU."""
    first = next(iter(model.named_parameters()))[0]
    placement: dict[str, str] = {}

    def walk(module: torch.nn.Module, prefix: str) -> None:
        for name, child in module.named_children():
            path = f"{prefix}{name}"
            if path == layers_path:
                placement.update({f"{path}.{i}": "disk" if i in on_disk else "cpu" for i in range(len(child))})
            elif layers_path.startswith(path + "."):
                walk(child, path + ".")
            else:
                placement[path] = "disk" if first.startswith(path + ".") else "cpu"

    walk(model, "")
    return placement


@pytest.fixture(scope="module", params=["llava", "qwen2_5_vl"])
def pair(request, tmp_path_factory, one_torch_thread):
    """(whole, offloaded) handles of one saved tiny checkpoint."""
    folder = tmp_path_factory.mktemp(f"ckpt-{request.param}")
    built = tiny(request.param)
    built.model.save_pretrained(folder)
    built.processor.save_pretrained(folder)
    whole = load(str(folder), dtype="float32")
    placement = _placement(whole.model, whole.layers_path, ON_DISK)
    spread = load(str(folder), dtype="float32", device_map=placement,
                  offload_folder=str(tmp_path_factory.mktemp("offload")))
    return whole, spread


def test_offloaded_layers_and_first_parameter_are_on_meta(pair):
    whole, spread = pair
    assert next(spread.model.parameters()).device.type == "meta"  # what a naive "first parameter" would pick
    assert all(next(spread.layers[i].parameters()).device.type == "meta" for i in ON_DISK)
    assert spread.device == torch.device("cpu") and all(
        spread.layer_device(i) == torch.device("cpu") for i in range(spread.n_layers))
    assert set(spread.device_map.values()) == {"cpu", "disk"} and whole.device_map is None


def test_capture_of_an_offloaded_model_equals_the_whole_one(pair):
    whole, spread = pair
    layers = list(range(whole.n_layers))
    a = capture_batch(whole, PROMPTS, IMAGES, layers=layers, positions=["last", "image_mean"])
    b = capture_batch(spread, PROMPTS, IMAGES, layers=layers, positions=["last", "image_mean"])
    assert a.acts.shape == b.acts.shape == (2, whole.n_layers, 2, whole.d_model)
    np.testing.assert_array_equal(a.acts, b.acts)


@pytest.mark.parametrize("path", [steered_generate, steered_generate_nnsight], ids=["hooks", "nnsight"])
def test_steering_an_offloaded_layer_equals_steering_the_whole_model(pair, path):
    whole, spread = pair
    steering = Steering(np.random.default_rng(0).normal(size=whole.d_model), layer=ON_DISK[0], alpha=4.0)
    plain = path(whole, PROMPTS, IMAGES, None, 3)
    a = path(whole, PROMPTS, IMAGES, steering, 3)
    b = path(spread, PROMPTS, IMAGES, steering, 3)
    assert not torch.equal(a.scores, plain.scores)  # the dose did something
    assert torch.equal(a.token_ids, b.token_ids) and torch.equal(a.scores, b.scores)


def test_patching_across_offloaded_layers_equals_the_whole_model(pair):
    whole, spread = pair
    src, tgt = (PROMPTS[1], IMAGES[0]), (PROMPTS[1], IMAGES[1])
    kw = dict(layers=[0, *ON_DISK], position_sets={"last": [-1]}, candidates=["A", "B"])
    a, b = patch_pair(whole, src, tgt, **kw), patch_pair(spread, src, tgt, **kw)
    np.testing.assert_array_equal(a.patched, b.patched)


def test_auto_device_map_with_a_memory_budget_offloads_and_captures_the_same(pair, tmp_path: Path):
    whole, _ = pair
    folder = tmp_path / "ckpt"
    whole.model.save_pretrained(folder)
    whole.processor.save_pretrained(folder)
    spread = load(str(folder), dtype="float32", device_map="auto", max_memory="cpu=150KB",
                  offload_folder=str(tmp_path / "offload"))
    assert "disk" in set(spread.device_map.values())
    a = capture_batch(whole, PROMPTS, IMAGES, layers=[0, 3], positions=["last"])
    b = capture_batch(spread, PROMPTS, IMAGES, layers=[0, 3], positions=["last"])
    np.testing.assert_array_equal(a.acts, b.acts)


def test_module_device_of_a_plain_module_is_its_parameters():
    assert module_device(torch.nn.Linear(2, 2)) == torch.device("cpu")
    assert module_device(torch.nn.ReLU()) == torch.device("cpu")  # nothing to read: the CPU


def test_module_device_follows_the_nearest_accelerate_hook_above():
    """A device map that places a whole block (e.g. the language model) hooks that block only; its
    layers, offloaded to `meta`, compute on the block's execution device. accelerate's real hook
    is attached (offload=True moves the weights to `meta`; nothing runs, so no GPU is touched)."""
    from accelerate.hooks import AlignDevicesHook, add_hook_to_module

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)))
    add_hook_to_module(model[1], AlignDevicesHook(execution_device="cuda:1", offload=True, place_submodules=True))
    assert next(model[1][0].parameters()).device.type == "meta"
    assert module_device(model, "1.0") == module_device(model, "1") == torch.device("cuda:1")
    assert module_device(model, "0") == torch.device("cpu")  # not under the hook
    # The nearest hook wins: a layer with its own hook under a hooked block (an int is a GPU index).
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)))
    add_hook_to_module(model[1][1], AlignDevicesHook(execution_device=0, offload=True))
    add_hook_to_module(model[1], AlignDevicesHook(execution_device="cuda:1"))  # no parameters of its own to move
    assert module_device(model, "1.1") == torch.device("cuda:0")
    assert module_device(model, "1.0") == torch.device("cuda:1")


def test_parse_max_memory():
    assert parse_max_memory("0=70GiB, 1=70GiB,cpu=200GiB") == {0: "70GiB", 1: "70GiB", "cpu": "200GiB"}
    assert parse_max_memory(None) is None and parse_max_memory(" ") is None
    for bad, named in [("70GiB", "not DEVICE=SIZE"), ("gpu0=1GiB", "not a GPU index"), ("0=lots", "not DEVICE=SIZE"),
                       ("0=1GiB,0=2GiB", "twice")]:
        with pytest.raises(ValueError, match=named):
            parse_max_memory(bad)


def test_placement_options_need_a_saved_model_and_a_device_map(tmp_path: Path):
    with pytest.raises(ValueError, match="save it"):
        load("tiny:llava", max_memory="cpu=1GiB")
    built = tiny("llava")
    built.model.save_pretrained(tmp_path)
    built.processor.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="give a device map too"):
        load(str(tmp_path), offload_folder=str(tmp_path / "off"))
