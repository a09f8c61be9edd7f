"""Capture through vLLM (hooks.vllm_engine.capture, `evprobe capture --backend vllm`) against hf's capture.

vLLM runs in its own environment (`vllm_python`): ONE subprocess, tests/hooks/vllm_capture_driver.py,
starts one engine and does every engine capture; this module computes the same with the hf model
(hooks.capture, the hf `evprobe capture`) and compares. The model is the tiny text Llama
(`tiny_text_folder`, 4 layers, d_model 128); layer 3 is the last (before the final norm).

Tolerance. Both read float32 residual streams of the same weights, summed in another order (vLLM's
CPU attention kernels, hf's left-padded batch). The tiny Llama's stream grows to |x| ~ 90 by layer 3,
where a float32 ulp is 7.6e-6, and hf against itself (the same rows batched or one at a time) already
differs by up to ~1e-4 there. So each vector is held to 1e-4 of its own scale: |vllm - hf| <=
1e-4 * max(1, max |hf|) per (row, layer, position); the measured absolute maximum is printed.

The tests at the end need no engine: the refusals before any model call.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from evprobe.core.errors import InputError

DRIVER = Path(__file__).with_name("vllm_capture_driver.py")
RELATIVE = 1e-4  # of each captured vector's largest component (at least 1): see the module docstring
PROMPTS = ("Question: Which colour is the sky? A) red B) blue C) green D) black",
           "Question: Pick a number.\nA) one B) two C) three D) four",
           "Question: Is water wet?",
           "Question: Name the largest planet of the solar system, and say which moon of it is the largest.")
MARKERS = (None, "Pick a number.", None, "largest planet")
LAYERS = [0, 2, 3]
POSITIONS = ["last", "all", "token:2", "token:-3", "marker:Question:last", "text_mean"]
CLI = ["--requests", "both_given", "--limit", "6", "--layers", "1,3", "--batch-size", "4",
       "--positions", "last,all,token:1,token:-2,text_mean,marker:Question:first"]


def _close(v: np.ndarray, h: np.ndarray) -> tuple[bool, float]:
    scale = np.maximum(1.0, np.abs(h).max(axis=-1, keepdims=True))
    return bool((np.abs(v - h) <= RELATIVE * scale).all()), float(np.abs(v - h).max())


@pytest.fixture(scope="module")
def hf_side(tiny_text_folder: Path, small_bench: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    from evprobe.experiments.capture import CaptureConfig, capture
    from evprobe.hooks.capture import capture_layers
    from evprobe.hooks.inputs import build_inputs
    from evprobe.hooks.positions import parse_position

    from evprobe import hooks

    handle = hooks.load(str(tiny_text_folder), dtype="float32")
    positions = [parse_position(p) for p in POSITIONS]
    times = []
    for _ in range(3):  # the first call warms up; the report takes the median
        t = time.perf_counter()
        acts = capture_layers(handle, list(PROMPTS), layers=LAYERS, positions=positions, text_markers=list(MARKERS))
        times.append(time.perf_counter() - t)
    seconds = sorted(times)[1]
    alone = capture_layers(handle, list(PROMPTS), layers=LAYERS, positions=positions, text_markers=list(MARKERS),
                           batch_size=1)  # hf against itself: its own float32 noise, for the report
    ids = [build_inputs(handle, [p], [[]])["input_ids"][0].tolist() for p in PROMPTS]
    # the low-level call's positions from the ids alone: last, all (mean), the second from the end
    by_ids = capture_layers(handle, list(PROMPTS), layers=LAYERS, positions=["last", "all", -2])
    long_ids = (ids[3] * 40)[:700]
    import torch

    with torch.no_grad():  # the long prompt's layer 0 and 2 outputs (hidden_states[1], [3]): all, last, token 5
        states = handle.model(input_ids=torch.tensor([long_ids]), output_hidden_states=True).hidden_states
    chunked = np.stack([np.stack([s[0].mean(0).numpy(), s[0][-1].numpy(), s[0][5].numpy()])
                        for s in (states[1], states[3])])[None]  # (1, layers, positions, d_model)
    out = tmp_path_factory.mktemp("hf_capture") / "acts"
    capture(CaptureConfig(model=str(tiny_text_folder), bench=str(small_bench), out=str(out),
                          **_flags(CLI)), progress=False)
    return {"acts": acts, "seconds": seconds, "hf_self": float(np.abs(acts - alone).max()), "ids": ids, "by_ids": by_ids, "long_ids": long_ids, "chunked": chunked, "folder": out}


def _flags(args: list[str]) -> dict:
    """CLI's `--name value` pairs as CaptureConfig keywords (tuples where the flag takes a list)."""
    out = {}
    for name, value in zip(args[::2], args[1::2], strict=True):
        key = name.removeprefix("--").replace("-", "_")
        out[key] = (tuple(value.split(",")) if key in ("requests", "positions") else
                    int(value) if key in ("limit", "batch_size") else value)
    return out


@pytest.fixture(scope="module")
def driven(vllm_python: Path, tiny_text_folder: Path, small_bench: Path, hf_side: dict,
           tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("vllm_capture")
    spec = {"model": str(tiny_text_folder), "prompts": list(PROMPTS), "markers": list(MARKERS), "layers": LAYERS,
            "positions": POSITIONS, "prompt_ids": hf_side["ids"], "long_ids": hf_side["long_ids"],
            "cli": ["capture", "--backend", "vllm", "--model", str(tiny_text_folder), "--bench", str(small_bench),
                    *CLI]}
    (folder / "in.json").write_text(json.dumps(spec), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_LOGGING_LEVEL="WARNING")
    t = time.perf_counter()
    proc = subprocess.run([str(vllm_python), str(DRIVER), str(folder / "in.json"), str(folder)],
                          capture_output=True, text=True, timeout=540, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
    result = json.loads((folder / "driver.json").read_text(encoding="utf-8"))
    result["wall_s"] = time.perf_counter() - t
    return folder, result


def test_engine_capture_is_hfs_at_every_position_and_layer(driven: tuple[Path, dict], hf_side: dict) -> None:
    folder, result = driven
    v, h = np.load(folder / "library.npy"), hf_side["acts"]  # (prompts, layers, positions, d_model)
    assert v.shape == h.shape == (len(PROMPTS), len(LAYERS), len(POSITIONS), 128)
    ok, worst = _close(v, h)
    per = np.abs(v - h).max(axis=(0, 1, 3))
    assert ok, dict(zip(POSITIONS, per.tolist()))
    # not vacuous: the positions read different tokens, and the prompts differ in length
    assert len(set(result["n_tokens"])) == len(PROMPTS)
    assert np.abs(h[:, :, 0] - h[:, :, 1]).max() > 1.0
    assert (np.load(folder / "library_again.npy") == v).all()  # a second call: bit for bit
    assert np.array_equal(np.load(folder / "facade.npy"), v) or _close(np.load(folder / "facade.npy"), h)[0]
    print(f"vLLM vs hf capture, {len(PROMPTS)} prompts of {result['n_tokens']} tokens, layers {LAYERS}: max |diff| "
          f"{worst:.3g} (hf batched vs one at a time: {hf_side['hf_self']:.3g}; per position {dict(zip(POSITIONS, [f'{x:.2g}' for x in per]))}); vLLM capture "
          f"{result['library_s']:.3f} s (again {result['library_again_s']:.3f} s), hf {hf_side['seconds']:.3f} s "
          "(median of 3 calls); "
          f"the command line with its engine start {result['cli_s']:.1f} s; driver {result['wall_s']:.0f} s")


def test_token_ids_alone_place_last_all_and_indices(driven: tuple[Path, dict], hf_side: dict) -> None:
    ok, worst = _close(np.load(driven[0] / "ids.npy"), hf_side["by_ids"])
    assert ok, worst


def test_the_command_line_writes_the_hf_folder(driven: tuple[Path, dict], hf_side: dict, tiny_text_folder: Path,
                                               small_bench: Path) -> None:
    """`evprobe capture --backend vllm` and the hf one: the same rows, labels, layers and positions
    (load_capture), acts within the tolerance plus float16's rounding of the stored values; an hf
    capture into the vLLM folder is refused (the backend is pinned)."""
    from evprobe.experiments.capture import CaptureConfig
    from evprobe.experiments.capture.job import CaptureJob

    import evprobe

    folder, result = driven
    assert result["cli_rc"] == 0
    v, h = evprobe.load_capture(folder / "cli"), evprobe.load_capture(hf_side["folder"])
    assert v.index == h.index and v.layers == h.layers and v.positions == h.positions
    a, b = np.asarray(v.acts, np.float32), np.asarray(h.acts, np.float32)
    ulp = np.spacing(np.abs(b).astype(np.float16)).astype(np.float32)  # one float16 step of the stored value
    scale = np.maximum(1.0, np.abs(b).max(axis=-1, keepdims=True))
    assert (np.abs(a - b) <= RELATIVE * scale + ulp).all(), float(np.abs(a - b).max())
    meta = json.loads((folder / "cli" / "meta.json").read_text(encoding="utf-8"))
    assert meta["backend"] == "vllm" and meta["dtype"] == "float32" and meta["config"]["backend"] == "vllm"
    assert meta["engine"]["engine"] == "vllm" and meta["engine"]["version"] == "0.32.0"
    assert meta["engine"]["tensor_parallel_size"] == meta["engine"]["pipeline_parallel_size"] == 1
    assert meta["engine"]["prefix_caching"] is False
    hf_meta = json.loads((hf_side["folder"] / "meta.json").read_text(encoding="utf-8"))
    assert not {"backend", "engine"} & (set(hf_meta) | set(hf_meta["config"]))  # an hf folder is what it was
    with pytest.raises(InputError, match=r"was written with --backend vllm, this run has --backend hf; use another"):
        CaptureJob(CaptureConfig(model=str(tiny_text_folder), bench=str(small_bench), out=str(folder / "cli"),
                                 **_flags(CLI)))
    print(f"CLI: {len(v.index)} rows x layers {v.layers} x {len(v.positions)} positions, max |diff| stored "
          f"{float(np.abs(a - b).max()):.3g}; {result['cli_s']:.1f} s, the engine's start included")


def test_refusals_on_a_live_engine(driven: tuple[Path, dict]) -> None:
    r = driven[1]["refusals"]
    assert r["marker_without_handle"].startswith("ValueError: position Marker(") and "resolve_prompts" in r[
        "marker_without_handle"]
    assert r["version"].startswith("ValueError: vLLM 0.31.0 is not a version")
    assert r["version_job"].startswith("InputError: vLLM 0.31.0 is not a version") and "--backend hf" in r[
        "version_job"]


def test_a_prefix_cached_engine_is_refused_and_why(driven: tuple[Path, dict], hf_side: dict) -> None:
    """Refused in one line; bypassed, the first capture of a 700-token prompt in 128-token chunks is
    hf's, and the second, whose prefix the cache serves, sees only its uncached tail: the token
    counts say so instead of returning a smaller mean."""
    r = driven[1]
    assert r["prefix_refusal"].startswith("ValueError: per-request steering through vLLM needs "
                                          "enable_prefix_caching=False"), r["prefix_refusal"]
    first, second = r["prefix_bypassed"]
    assert first == "no error", first
    ok, worst = _close(np.load(driven[0] / "chunked.npy"), hf_side["chunked"])  # gathered over 6 chunks
    assert ok, worst
    assert second.startswith("RuntimeError: row 0: layer 0 read ") and "prefix cache" in second, second
    print(f"chunked prefill (700 tokens, 128 a step) vs hf: max |diff| {worst:.3g}; prefix cache, bypassed:", second)


# ---------------------------------------------------------------- refusals before any engine


def _config(bench: Path, out: Path, model: str, **kw):
    from evprobe.experiments.capture import CaptureConfig

    return CaptureConfig(**{"model": model, "bench": str(bench), "out": str(out), "requests": ("both_given",),
                            "limit": 2, **kw})


def test_refusals_before_any_engine(small_bench: Path, tiny_text_folder: Path, tmp_path: Path) -> None:
    from evprobe.experiments.capture.job import CaptureJob

    text = str(tiny_text_folder)
    cases = [
        (dict(component="attn_out"), text, "--component attn_out is not read through vLLM"),
        (dict(requests=("select",)), text, "has images and --model"),
        ({}, "tiny:llava", "--model tiny:llava is built in memory"),
    ]
    for changes, model, line in cases:
        with pytest.raises(InputError) as err:
            CaptureJob(_config(small_bench, tmp_path / "x", model, backend="vllm", **changes))
        assert line in str(err.value) and "\n" not in str(err.value), str(err.value)
    assert not (tmp_path / "x").exists()
    with pytest.raises(InputError, match="--max-model-len is a setting of --backend vllm"):
        _config(small_bench, tmp_path / "y", text, max_model_len=512)
    with pytest.raises(InputError, match="--backend must be hf or vllm"):
        _config(small_bench, tmp_path / "y", text, backend="sglang")


def test_without_vllm_the_capture_says_how_to_get_it(small_bench: Path, tiny_text_folder: Path,
                                                      tmp_path: Path) -> None:
    import importlib.util

    from evprobe.bench.backends.vllm import NEEDS_VLLM
    from evprobe.experiments.capture.job import CaptureJob

    # the main environment never holds vLLM (it pins its own transformers: .venv-vllm), so this always runs
    assert importlib.util.find_spec("vllm") is None, "vLLM is in the main environment; it belongs in .venv-vllm"
    with pytest.raises(InputError) as err:
        CaptureJob(_config(small_bench, tmp_path / "x", str(tiny_text_folder), backend="vllm"))
    assert str(err.value) == NEEDS_VLLM


def test_the_library_refuses_without_an_engine_and_with_images(tiny_text_folder: Path) -> None:
    from evprobe.hooks.vllm_engine.capture import NO_IMAGES, prompt_groups

    import evprobe

    h = evprobe.load(str(tiny_text_folder))
    with pytest.raises(ValueError, match="backend 'vllm' needs engine="):
        evprobe.capture(h, ["hi"], layers=[0], positions=["last"], backend="vllm")
    with pytest.raises(ValueError, match="component 'mlp_out' is not read through vLLM"):
        evprobe.capture(h, ["hi"], layers=[0], positions=["last"], backend="vllm", engine=object(),
                        component="mlp_out")
    from PIL import Image

    with pytest.raises(ValueError) as err:
        evprobe.capture(h, ["hi"], [[Image.new("RGB", (8, 8))]], layers=[0], positions=["last"], backend="vllm",
                        engine=object())
    assert str(err.value) == NO_IMAGES
    with pytest.raises(ValueError, match="token index 5 is out of range: the row has 3 tokens"):
        prompt_groups([[1, 2, 3]], [5])
    with pytest.raises(ValueError, match="backend must be 'hf' or 'vllm'"):
        evprobe.capture(h, ["hi"], layers=[0], positions=["last"], backend="sglang")


def test_the_documented_command_is_the_one_the_driver_runs() -> None:
    """docs/api/capture.md's `evprobe capture --backend vllm` is CLI above, run by the driver."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "api" / "capture.md").read_text(encoding="utf-8")
    section = page.split("## Capture through vLLM", 1)[1]
    args = section.split("```bash\n", 1)[1].split("```", 1)[0].replace("\\\n", " ").split()
    assert args[:9] == ["evprobe", "capture", "--backend", "vllm", "--model", "DIR", "--bench", "BENCH", "--out"]
    assert args[10:] == CLI
