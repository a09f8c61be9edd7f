"""benchmarks/gpu_throughput.py: the --small run (tiny qwen2_5_vl and llava on the CPU) measures every
section with positive finite timings and identical outputs under every speed setting, and prints each
section; its hardware-ratio arithmetic and shape table are checked on known numbers."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.throughput.models import tiny_module
from benchmarks.throughput.ratios import hardware_ratio
from benchmarks.throughput.results import SECTIONS
from benchmarks.throughput.shapes import SHAPES, SMALL_MODELS, VisionShape, image_seq_len, shaped_config, text_fields

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_throughput.py"


def _timings(value: Any, path: str = "") -> list[tuple[str, float]]:
    """Every number under a key ending in `_s` or starting `s_per` (or `seconds`), with its path."""
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            if (k.endswith("_s") or k.startswith("s_per") or k == "seconds") and isinstance(v, (int, float)):
                out.append((f"{path}.{k}", float(v)))
            else:
                out += _timings(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _timings(v, f"{path}[{i}]")
    return out


def test_small_run_measures_every_section(tmp_path: Path) -> None:
    out = tmp_path / "x.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(SCRIPT), "--small", "--out", str(out)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(out.read_text())
    assert [m["name"] for m in report["models"]] == list(SMALL_MODELS)
    for m in report["models"]:
        assert m["error"] is None
        status = {s["name"]: s["status"] for s in m["sections"]}
        assert set(status) == set(SECTIONS)
        for name in SECTIONS:
            if name == "vision_attention" and m["arch"] not in ("qwen2_5_vl", "qwen3_vl", "mistral3"):
                assert status[name].startswith("not applicable"), status[name]
                continue
            assert status[name] == "ok", (m["name"], name, status[name])
            assert m[name] is not None
        payload = {name: m[name] for name in SECTIONS}
        times = _timings(payload)
        assert len(times) > 30
        bad = [(p, v) for p, v in times if not (math.isfinite(v) and v > 0)]
        assert not bad, bad
        assert m["throughput"]["failures"] == []
        assert {(p["protocol"], p["batch_size"]) for p in m["throughput"]["points"]} == {
            (proto, b) for proto in ("direct", "brief") for b in report["batch_sizes"]}
        checks = list(m["decode_cache"]) + [m[s] for s in ("vision_attention", "sort_by_length", "prefetch") if m[s]]
        assert {c["on"] for c in m["decode_cache"]} == {"static", "compiled"}
        assert all(c["identical"] is True and c["differing_rows"] == 0 for c in checks), checks
        assert all(c["ratio"] > 0 for c in checks)
        inv = m["batch_invariance"]
        assert len(inv["capture_max_rel_diff"]) == len(inv["layers"])
        assert all(0 <= x < 1e-4 for x in inv["capture_max_rel_diff"])  # float32 on CPU
        assert 0 <= inv["generation_identical_fraction"] <= 1
        assert m["dose_response"]["alpha0_max_abs_diff"] == 0
        assert m["ratios"]["table50"] == [] and m["ratios"]["hardware"] == []  # tiny shape, CPU, no flags
    qwen = next(m for m in report["models"] if m["arch"] == "qwen2_5_vl")
    calls = qwen["vision_attention"]["sdpa_calls"]
    assert calls["packed"]["vision"] < calls["stock"]["vision"]  # one call per tower layer instead of per window
    for name in SECTIONS:
        assert f"  {name}\n" in done.stdout, name
    assert "Bit-stable runs" in done.stdout


def test_hardware_ratio_arithmetic() -> None:
    # 4.8 GB of weights at 4800 GB/s: 1 ms per step; 2 x 1e9 params x 1000 tokens at 1000 TFLOP/s: 2 ms
    r = hardware_ratio(protocol="direct", batch_size=8, decode_step_s=0.002, prefill_s=0.004, prefill_tokens=1000,
                       weight_bytes=4_800_000_000, matmul_params=1_000_000_000, bandwidth_gbs=4800.0,
                       peak_tflops=1000.0)
    assert r.ideal_step_s == pytest.approx(1e-3) and r.decode_ratio == pytest.approx(2.0)
    assert r.prefill_flops == pytest.approx(2e12)
    assert r.ideal_prefill_s == pytest.approx(2e-3) and r.prefill_ratio == pytest.approx(2.0)
    with pytest.raises(ValueError, match="bandwidth_gbs"):
        hardware_ratio(protocol="direct", batch_size=1, decode_step_s=0.002, prefill_s=0.004, prefill_tokens=10,
                       weight_bytes=1, matmul_params=1, bandwidth_gbs=0.0, peak_tflops=1.0)
    with pytest.raises(ValueError, match="prefill_s"):
        hardware_ratio(protocol="direct", batch_size=1, decode_step_s=0.002, prefill_s=math.nan, prefill_tokens=10,
                       weight_bytes=1, matmul_params=1, bandwidth_gbs=1.0, peak_tflops=1.0)


def test_shape_table_to_configs() -> None:
    assert image_seq_len(SHAPES["smolvlm2_2b"].vision) == 81  # 27x27 patches, shuffle 3
    assert image_seq_len(SHAPES["idefics3_8b"].vision) == 169  # 26x26 patches, shuffle 2
    with pytest.raises(ValueError, match="pixel-shuffled"):
        image_seq_len(VisionShape(1152, 4304, 27, 16, 14, image_size=384, scale_factor=4))
    shape = SHAPES["pixtral_12b"]
    assert text_fields(shape.text)["head_dim"] == 128  # given, not 5120 / 32
    import torch

    tiny = tiny_module()
    model_cls, base, _ = tiny._BUILDERS[shape.arch]()
    config = shaped_config(shape, base)
    text, vision = config.get_text_config(), config.vision_config
    assert (text.hidden_size, text.num_hidden_layers, text.num_key_value_heads, text.head_dim, text.vocab_size) == (
        5120, 40, 8, 128, 131072)
    assert (vision.hidden_size, vision.num_hidden_layers, vision.patch_size, config.spatial_merge_size) == (
        1024, 24, 16, 1)
    assert config.image_token_index == base.image_token_index  # the tokenizer's ids are kept
    with torch.device("meta"):  # no memory: the parameter count of the published checkpoint
        n = sum(p.numel() for p in model_cls._from_config(config).parameters())
    assert 12.6e9 < n < 12.8e9
