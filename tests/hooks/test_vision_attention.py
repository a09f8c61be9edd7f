"""Packed vision attention (evprobe.hooks.vision_attention, one call per layer) against the stock loop.

Measured on CPU, float32 (torch 2.13, transformers 5.24), max |logit diff| packed vs stock over
several image seeds and size sets: <= 2.7e-7 with unequal windows (qwen2_5_vl, qwen3_vl; often
exactly 0), 0 with equal windows, 0 on mistral3. A broken packed function gives 7e-4 .. 3e-3.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AttentionInterface

from evprobe.hooks import VISION_ATTENTIONS, set_vision_attention, tiny
from evprobe.hooks.generation import generate
from evprobe.hooks.inputs import build_inputs
from evprobe.hooks.tiny_models import V_LAYERS
from evprobe.hooks.vision_attention import PACKED_ARCHS, PACKED_IMPLEMENTATION, packed_attention

TOL = 1e-5
PROMPTS = ["Describe the image.", "What is shown?", "Count the objects."]
# (width, height) per row: unequal sizes give unequal windows / images; the last set is all square.
UNEQUAL = {"qwen2_5_vl": [(112, 84), (70, 112), (112, 112)], "qwen3_vl": [(128, 96), (80, 128), (128, 128)],
           "mistral3": [(64, 48), (40, 64), (64, 64)]}
EQUAL = {"qwen2_5_vl": [(112, 112)] * 3, "qwen3_vl": [(128, 128)] * 3, "mistral3": [(64, 64)] * 3}


def _images(sizes: list[tuple[int, int]], seed: int = 0) -> list[list[Image.Image]]:
    rng = np.random.default_rng(seed)
    return [[Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))] for w, h in sizes]


@pytest.fixture(scope="module")
def handles():
    """arch -> float32 tiny handle (built once per module, left on stock attention by each test)."""
    out = {}
    for arch in PACKED_ARCHS:
        handle = tiny(arch)
        handle.model.float()
        out[arch] = handle
    yield out


@pytest.fixture(params=list(PACKED_ARCHS))
def handle(request, handles):
    handle = handles[request.param]
    yield handle
    set_vision_attention(handle, "stock")


def _logits(handle, images, attention: str) -> torch.Tensor:
    set_vision_attention(handle, attention)
    enc = build_inputs(handle, PROMPTS, images)
    with torch.inference_mode():
        return handle.model(**enc).logits.float()


def _max_diff(handle, images) -> float:
    """Max |logit| difference between packed and stock on the same batch (the comparison helper)."""
    stock = _logits(handle, images, "stock")
    packed = _logits(handle, images, "packed")
    return (packed - stock).abs().max().item()


@pytest.mark.parametrize("sizes", [UNEQUAL, EQUAL], ids=["unequal", "equal"])
def test_packed_logits_match_stock(handle, sizes):
    assert _max_diff(handle, _images(sizes[handle.arch])) < TOL  # measured <= 2.7e-7


def test_packed_greedy_generation_matches_stock(handle):
    images = _images(UNEQUAL[handle.arch])
    set_vision_attention(handle, "stock")
    stock = generate(handle, PROMPTS, images, max_new_tokens=8, batch_size=3)
    set_vision_attention(handle, "packed")
    packed = generate(handle, PROMPTS, images, max_new_tokens=8, batch_size=3)
    assert [g.token_ids for g in packed] == [g.token_ids for g in stock]
    assert all(g.n_new_tokens > 0 for g in stock)


def _count_vision_calls(monkeypatch, handle, implementation: str, images) -> tuple[int, set[int]]:
    """Calls of the attention function `implementation` made by the vision tower in one forward,
    and the distinct attention modules that made them."""
    vision = handle.model.config.vision_config
    inner = AttentionInterface._global_mapping[implementation]
    calls: list[int] = []

    def counting(module, *args, **kwargs):
        if module.config is vision:
            calls.append(id(module))
        return inner(module, *args, **kwargs)

    monkeypatch.setitem(AttentionInterface._global_mapping, implementation, counting)
    enc = build_inputs(handle, PROMPTS, images)
    with torch.inference_mode():
        handle.model(**enc)
    monkeypatch.setitem(AttentionInterface._global_mapping, implementation, inner)
    return len(calls), set(calls)


def test_packed_makes_one_call_per_vision_block(monkeypatch, handle):
    images = _images(UNEQUAL[handle.arch])
    set_vision_attention(handle, "stock")
    assert handle.model.config.vision_config._attn_implementation == "sdpa"
    n_stock, _ = _count_vision_calls(monkeypatch, handle, "sdpa", images)
    set_vision_attention(handle, "packed")
    n_packed, modules = _count_vision_calls(monkeypatch, handle, PACKED_IMPLEMENTATION, images)
    assert n_packed == len(modules) == V_LAYERS  # one call per vision block
    # Stock: qwen2_5_vl 10 windows + 3 images = 13 calls, qwen3_vl 3 images x 2 layers = 6;
    # Pixtral already makes one (dense block-masked) call per layer.
    assert n_stock == {"qwen2_5_vl": 13, "qwen3_vl": 6, "mistral3": V_LAYERS}[handle.arch]
    # The text model keeps its own implementation.
    assert handle.model.config.text_config._attn_implementation == "sdpa"


def test_switching_back_restores_exact_stock_output(handle):
    images = _images(UNEQUAL[handle.arch])
    before = _logits(handle, images, "stock")
    _logits(handle, images, "packed")
    _logits(handle, images, "packed")  # twice: the stock name must survive a repeated switch
    after = _logits(handle, images, "stock")
    assert handle.model.config.vision_config._attn_implementation == "sdpa"
    assert torch.equal(before, after)


def test_stock_restores_eager(handles):
    handle = handles["qwen2_5_vl"]
    handle.model.set_attn_implementation({"vision_config": "eager"})
    try:
        set_vision_attention(handle, "packed")
        assert handle.model.config.vision_config._attn_implementation == PACKED_IMPLEMENTATION
        set_vision_attention(handle, "stock")
        assert handle.model.config.vision_config._attn_implementation == "eager"
    finally:
        handle.model.set_attn_implementation({"vision_config": "sdpa"})


def _broken_no_mask(module, query, key, value, attention_mask=None, **kwargs):
    """Packed attention that forgets the window boundaries: every token attends to all tokens."""
    kwargs.pop("cu_seq_lens_q"), kwargs.pop("cu_seq_lens_k")
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, scale=kwargs.get("scaling"))
    return out.transpose(1, 2), None


def _broken_ignore_padding(module, query, key, value, attention_mask=None, **kwargs):
    """Packed attention that lets padded keys in (pads with zeros, no mask)."""
    cu = kwargs["cu_seq_lens_q"].long()
    longest = int((cu[1:] - cu[:-1]).max())
    pieces = []
    for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
        q, k, v = (torch.nn.functional.pad(x[:, :, a:b], (0, 0, 0, longest - (b - a))) for x in (query, key, value))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=kwargs.get("scaling"))
        pieces.append(out[:, :, : b - a])
    return torch.cat(pieces, dim=2).transpose(1, 2), None


@pytest.mark.parametrize("broken", [_broken_no_mask, _broken_ignore_padding])
def test_comparison_catches_a_broken_packed_function(monkeypatch, handle, broken):
    images = _images(UNEQUAL[handle.arch])
    assert _max_diff(handle, images) < TOL
    set_vision_attention(handle, "stock")
    monkeypatch.setattr("evprobe.hooks.vision_attention.packed_attention", broken)
    try:
        assert _max_diff(handle, images) > 10 * TOL  # measured 7e-4 .. 3e-3
    finally:
        set_vision_attention(handle, "stock")
        AttentionInterface.register(PACKED_IMPLEMENTATION, packed_attention)


def _reference(query, key, value, cu) -> torch.Tensor:
    """Per-window SDPA, the stock loop: (1, total, heads, d)."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    outs = [torch.nn.functional.scaled_dot_product_attention(query[:, :, a:b], key[:, :, a:b], value[:, :, a:b])
            for a, b in zip(cu[:-1].tolist(), cu[1:].tolist())]
    return torch.cat(outs, dim=2).transpose(1, 2)


@pytest.mark.parametrize("lengths,kv_heads", [([5, 3, 8, 1], 4), ([4, 4, 4], 4), ([6, 2, 7], 2)],
                         ids=["unequal", "equal", "gqa"])
def test_packed_attention_function(monkeypatch, lengths, kv_heads):
    gen = torch.Generator().manual_seed(0)
    cu = torch.tensor([0, *np.cumsum(lengths)], dtype=torch.int32)
    total = int(cu[-1])
    query = torch.randn(1, 4, total, 8, generator=gen)
    key, value = (torch.randn(1, kv_heads, total, 8, generator=gen) for _ in range(2))
    masks = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def recording(*args, attn_mask=None, **kwargs):
        masks.append(attn_mask)
        return sdpa(*args, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    out, weights = packed_attention(torch.nn.Module().eval(), query, key, value, cu_seq_lens_q=cu,
                                    cu_seq_lens_k=cu, max_length_q=max(lengths), max_length_k=max(lengths))
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", sdpa)
    assert weights is None and out.shape == (1, total, 4, 8)
    assert (out - _reference(query, key, value, cu)).abs().max().item() < 1e-6
    assert len(masks) == 1 and (masks[0] is None) == (len(set(lengths)) == 1)  # equal windows: no mask


def test_packed_attention_refuses_what_it_does_not_do():
    x, cu = torch.randn(1, 2, 6, 4), torch.tensor([0, 2, 6], dtype=torch.int32)
    module = torch.nn.Module().eval()
    ok = dict(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=4, max_length_k=4)
    with pytest.raises(ValueError, match="cu_seq_lens_k must equal"):
        packed_attention(module, x, x, x, **{**ok, "cu_seq_lens_k": torch.tensor([0, 3, 6], dtype=torch.int32)})
    with pytest.raises(ValueError, match="inference"):
        packed_attention(module, x, x, x, dropout=0.1, **ok)
    with pytest.raises(ValueError, match="packed vision attention only"):
        packed_attention(module, x, x, x)
    with pytest.raises(ValueError, match="not a multiple"):
        packed_attention(module, torch.randn(1, 3, 6, 4), x, x, **ok)


def test_unknown_name_and_unsupported_arch_raise_one_line(handles):
    with pytest.raises(ValueError, match="choose one of stock, packed") as err:
        set_vision_attention(handles["qwen2_5_vl"], "flash")
    assert "\n" not in str(err.value)
    llava = tiny("llava")
    with pytest.raises(ValueError, match="supported: qwen2_5_vl, qwen3_vl, mistral3") as err:
        set_vision_attention(llava, "packed")
    assert "\n" not in str(err.value) and "'llava'" in str(err.value)
    set_vision_attention(llava, "stock")  # stock is always allowed (a no-op here)
    assert VISION_ATTENTIONS == ("stock", "packed")


def test_import_stays_cheap():
    code = ("import sys, evprobe.hooks as hooks; hooks.VISION_ATTENTIONS; hooks.set_vision_attention; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
