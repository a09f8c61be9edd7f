"""Capture at positions of the user's choosing (token indices, marker spans, every token) and at
component outputs (resid_post, attn_out, mlp_out), on real tiny models; no mocks.

Padding cannot leak: batched capture equals one row at a time at every chosen position and for
every per-token array (rows of different lengths, so the batch pads).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from evprobe.hooks import TINY_ARCHS, build_inputs
from evprobe.hooks.capture import capture_components, capture_layers
from evprobe.hooks.capture import COMPONENTS
from evprobe.hooks.sites import Adapter
from evprobe.hooks.positions import Marker, Token
from evprobe.hooks.token_capture import capture_tokens

from .conftest import tiny_handle

PROMPTS = [
    "Question: Is it red?\nAnswer yes or no.",
    "Look at the picture carefully and count the shapes.\nQuestion: Which shape is the largest one here?",
    "Question: What is shown?",
]
MARKERS = ["Is it red?", "Which shape is the largest one here?", None]
POSITIONS = ["last", "text_mean", -1, 0, Token(-3), Marker("Question", "first"), Marker("Question:", "mean"),
             Marker("Question", "last"), Marker(None, "first"), Marker(None, "mean")]
LAYERS = [3, 0, 2]


def picture(seed: int, size: tuple[int, int] = (96, 96)) -> Image.Image:
    im = Image.new("RGB", size, (255, 255, 255))
    ImageDraw.Draw(im).rectangle([8 * seed, 10, 8 * seed + 40, 50], fill=(220, 30 * seed, 30))
    return im


IMAGES = [[picture(1)], [picture(2, (80, 120))], []]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


get = tiny_handle


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_components_add_up_to_the_residual_stream(handles, arch):
    """resid_post[i] == resid_post[i-1] + attn_out[i] + mlp_out[i]: the components are what each
    sublayer writes into the stream (after Gemma's sandwich norms), on every tiny architecture, at
    text positions. At image tokens Qwen3-VL adds its deepstack visual features to the stream
    BETWEEN layers (after layers 0..k-1), so there the identity breaks by exactly that injection."""
    h = get(handles, arch)
    got = capture_components(h, PROMPTS[:2], IMAGES[:2], layers=range(h.n_layers), positions=["last", "image_mean"],
                             components=COMPONENTS)
    r = got["resid_post"]  # (rows, layers, positions, d)
    gap = np.abs(r[:, 1:] - r[:, :-1] - got["attn_out"][:, 1:] - got["mlp_out"][:, 1:])  # (rows, layers-1, pos, d)
    tol = 1e-5 * max(1.0, float(np.abs(r).max()))
    assert gap[:, :, 0].max() <= tol  # last token
    assert np.abs(got["attn_out"]).max() > 0 and np.abs(got["mlp_out"]).max() > 0
    # resid_pre is the layer's input: the previous layer's output (Qwen3-VL's deepstack aside, below)
    pre_gap = np.abs(got["resid_pre"][:, 1:] - r[:, :-1])
    assert pre_gap[:, :, 0].max() == 0.0
    if arch == "qwen3_vl":
        k = len(h.model.config.vision_config.deepstack_visual_indexes)
        assert k >= 1 and gap[:, :k, 1].max() > 1e-3 and gap[:, k:, 1].max() <= tol
    else:
        assert gap[:, :, 1].max() <= tol  # image tokens


def test_the_sandwich_rule_matters_on_gemma(handles):
    """The check above can fail: Gemma 3's raw self_attn / mlp outputs do NOT add up to the stream
    (their output norms sit in between), which is why attn_out / mlp_out read the norms there."""
    h = get(handles, "gemma3")
    assert h.sites.point("attn_out.L1").path.endswith(".1.post_attention_layernorm")
    assert get(handles, "llava").sites.point("attn_out.L1").path.endswith(".1.self_attn")
    enc = build_inputs(h, PROMPTS[:1], IMAGES[:1])
    seen = {}
    hooks = [h.layers[i].register_forward_hook(lambda m, a, o, i=i: seen.__setitem__(("res", i), o))
             for i in (0, 1)]
    hooks += [h.layers[1].self_attn.register_forward_hook(lambda m, a, o: seen.__setitem__("attn", o[0])),
              h.layers[1].mlp.register_forward_hook(lambda m, a, o: seen.__setitem__("mlp", o))]
    try:
        with torch.no_grad():
            h.model(**enc)
    finally:
        for hook in hooks:
            hook.remove()
    raw_gap = seen["res", 1] - seen["res", 0] - seen["attn"] - seen["mlp"]
    assert raw_gap.abs().max() > 1e-2


def test_a_missing_component_is_a_one_line_error(handles):
    h = get(handles, "llava").with_adapter(Adapter(name="no-mlp", mlp="", mlp_out=""))
    with pytest.raises(ValueError, match=r"layer 0: site mlp_out.L0: this architecture has no mlp_out module "
                                         r"\(set the adapter's mlp_out\); valid sites of .*: "
                                         r"resid_pre/resid_post/attn_out.L0-3; attn_head") as err:
        capture_layers(h, PROMPTS, IMAGES, layers=[0], positions=["last"], component="mlp_out")
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="unknown component 'resid_mid'; choose from resid_post, resid_pre"):
        capture_layers(get(handles, "llava"), PROMPTS, IMAGES, layers=[0], positions=["last"], component="resid_mid")


@pytest.mark.parametrize("arch", ["llava", "qwen2_5_vl", "gemma3"])
def test_batched_equals_one_at_a_time_at_chosen_positions(handles, arch):
    h = get(handles, arch)
    kw = dict(layers=LAYERS, positions=POSITIONS, components=COMPONENTS, text_markers=MARKERS)
    batched = capture_components(h, PROMPTS, IMAGES, **kw)
    single = capture_components(h, PROMPTS, IMAGES, batch_size=1, **kw)
    for c in COMPONENTS:
        assert batched[c].shape == (3, len(LAYERS), len(POSITIONS), h.d_model)
        np.testing.assert_allclose(batched[c], single[c], atol=1e-5, rtol=0, err_msg=c)
    r = batched["resid_post"]
    np.testing.assert_array_equal(r[:, :, 2], r[:, :, 0])  # Token(-1) is "last"
    np.testing.assert_array_equal(r[:, :, 9], r[:, :, 1])  # Marker(None, "mean") is "text_mean"

    tok = capture_tokens(h, PROMPTS, IMAGES, layers=LAYERS, component="attn_out", text_markers=MARKERS)
    one = capture_tokens(h, PROMPTS, IMAGES, layers=LAYERS, component="attn_out", text_markers=MARKERS, batch_size=1)
    enc = build_inputs(h, PROMPTS, IMAGES)
    assert tok.n_tokens.tolist() == enc["attention_mask"].sum(1).tolist()  # padding dropped, nothing else
    for r_, (a, b) in enumerate(zip(tok.acts, one.acts, strict=True)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0, err_msg=f"row {r_}")
        np.testing.assert_array_equal(tok.input_ids[r_], one.input_ids[r_])
        # Per-token arrays and reduced positions are the same numbers.
        np.testing.assert_array_equal(a[:, 0], batched["attn_out"][r_, :, 3])  # Token(0)
        np.testing.assert_array_equal(a[:, -3], batched["attn_out"][r_, :, 4])  # Token(-3)
        assert tok.spans[r_].last == a.shape[1] - 1 and tok.spans[r_] == one.spans[r_]
        text = tok.spans[r_].text  # re-based: index k is a[:, k]
        np.testing.assert_allclose(a[:, list(text)].mean(1), batched["attn_out"][r_, :, 1], atol=1e-6, rtol=0)
    block, lengths = tok.padded()
    assert block.shape == (3, len(LAYERS), int(lengths.max()), h.d_model)
    short = int(np.argmin(lengths))
    assert np.isnan(block[short, :, lengths[short]:]).all()
    np.testing.assert_array_equal(block[short, :, : lengths[short]], tok.acts[short])


def test_marker_first_and_last_are_the_edges_of_its_tokens(handles):
    h = get(handles, "qwen2_5_vl")
    tok = capture_tokens(h, PROMPTS, IMAGES, layers=[1])
    got = capture_layers(h, PROMPTS, IMAGES, layers=[1],
                         positions=[Marker("Question", "first"), Marker("Question", "last"), Marker("Question")])
    for r in range(3):
        ids = tok.input_ids[r]
        hits = [k for k in range(len(ids))
                if np.array_equal(tok.acts[r][0, k], got[r, 0, 0]) or np.array_equal(tok.acts[r][0, k], got[r, 0, 1])]
        first, last = hits[0], hits[-1]
        assert h.tokenizer.decode(ids[first:last + 1]).strip() == "Question"
        np.testing.assert_allclose(tok.acts[r][0, first:last + 1].mean(0), got[r, 0, 2], atol=1e-6, rtol=0)


def test_bad_positions_fail_clearly(handles):
    h = get(handles, "llava")
    kw = dict(layers=[0])
    with pytest.raises(ValueError, match=r"row 2: position 'token\[-40\]': token index -40 is out of range"):
        capture_layers(h, PROMPTS, IMAGES, positions=[Token(-40)], **kw)
    with pytest.raises(ValueError, match=r"row 0: position 'marker\[mean\]:largest'.*does not occur"):
        capture_layers(h, PROMPTS, IMAGES, positions=[Marker("largest")], **kw)
    with pytest.raises(ValueError, match="unknown position 'first'"):
        capture_layers(h, PROMPTS, IMAGES, positions=["first"], **kw)
    with pytest.raises(TypeError, match="Token index must be an integer"):
        Token(True)
    with pytest.raises(ValueError, match="Marker reduce must be one of"):
        Marker("x", "max")
    with pytest.raises(ValueError, match="repeat"):
        capture_layers(h, PROMPTS, IMAGES, positions=[-1, Token(-1)], **kw)
    with pytest.raises(TypeError, match="not a single value"):
        capture_layers(h, PROMPTS, IMAGES, positions=-1, **kw)
