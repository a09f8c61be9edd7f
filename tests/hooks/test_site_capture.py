"""capture_sites: any site at positions, batched = one row at a time, on real tiny models."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evprobe.hooks import build_inputs
from evprobe.hooks.capture import capture_components
from evprobe.hooks.intervention import Read, intervene
from evprobe.hooks.site_capture import capture_sites

from .conftest import tiny_handle
from .test_positions import IMAGES, MARKERS, POSITIONS, PROMPTS

pytestmark = pytest.mark.usefixtures("one_torch_thread")
SITES = ["attn_head.L1.H0", "attn_head.L1.H3", "resid_pre.L2", "attn_out.L3", "resid_post.L0"]


@pytest.mark.parametrize("arch", ["llava", "qwen2_5_vl", "gemma3", "idefics3"])
def test_text_sites_batched_equal_one_at_a_time_and_agree_with_capture(handles, arch) -> None:
    h = tiny_handle(handles, arch)
    kw = dict(sites=SITES, positions=POSITIONS, text_markers=MARKERS)
    batched = capture_sites(h, PROMPTS, IMAGES, **kw)
    single = capture_sites(h, PROMPTS, IMAGES, batch_size=1, **kw)
    for site in SITES:
        width = h.sites.head_dim if site.startswith("attn_head") else h.d_model
        assert batched[site].shape == (3, len(POSITIONS), width)
        np.testing.assert_allclose(batched[site], single[site], atol=1e-5, rtol=0, err_msg=site)
    layers = capture_components(h, PROMPTS, IMAGES, layers=[0, 2, 3], positions=POSITIONS, text_markers=MARKERS,
                                components=["resid_post", "resid_pre", "attn_out"])
    np.testing.assert_array_equal(batched["resid_post.L0"], layers["resid_post"][:, 0])
    np.testing.assert_array_equal(batched["resid_pre.L2"], layers["resid_pre"][:, 1])
    np.testing.assert_array_equal(batched["attn_out.L3"], layers["attn_out"][:, 2])


def test_a_head_at_last_is_its_slice_of_the_output_projection_input(handles) -> None:
    h = tiny_handle(handles, "mistral3")
    got = capture_sites(h, PROMPTS[:2], IMAGES[:2], sites=["attn_head.L2.H1"], positions=["last"])
    enc = build_inputs(h, PROMPTS[:2], IMAGES[:2])
    seen = {}
    hook = h.layers[2].self_attn.o_proj.register_forward_pre_hook(lambda m, a: seen.__setitem__("z", a[0].clone()))
    try:
        with torch.no_grad():
            h.model(**enc)
    finally:
        hook.remove()
    hd = h.sites.head_dim
    np.testing.assert_allclose(got["attn_head.L2.H1"][:, 0], seen["z"][:, -1, hd:2 * hd].numpy(), atol=1e-6, rtol=0)


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "llava_next", "mistral3"])
def test_vision_sites_are_the_mean_over_the_rows_image_tokens(handles, arch) -> None:
    h = tiny_handle(handles, arch)
    got = capture_sites(h, PROMPTS[:2], IMAGES[:2], sites=["vision_block.L0", "projector_out"], positions=["image_mean"])
    for r in range(2):
        enc = build_inputs(h, [PROMPTS[r]], [IMAGES[r]])
        with torch.no_grad(), intervene(h, [Read("vision_block.L0"), Read("projector_out")]) as run:
            h.model(**enc)
        for k, site in enumerate(("vision_block.L0", "projector_out")):
            value = run.value(k)
            np.testing.assert_allclose(got[site][r, 0], value.reshape(-1, value.shape[-1]).mean(0).numpy(), atol=1e-5)
    assert got["projector_out"].shape == (2, 1, h.d_model)
    assert np.abs(got["projector_out"][0] - got["projector_out"][1]).max() > 1e-4  # the rows' images differ


def test_bad_requests_are_one_line(handles) -> None:
    h = tiny_handle(handles, "llava")
    with pytest.raises(ValueError, match="its only position is image_mean"):
        capture_sites(h, PROMPTS[:1], IMAGES[:1], sites=["projector_out"], positions=["last"])
    with pytest.raises(ValueError, match="row 2: projector_out needs the row's images, and it has none"):
        capture_sites(h, PROMPTS, IMAGES, sites=["projector_out"], positions=["image_mean"])
    with pytest.raises(ValueError, match="repeat one"):
        capture_sites(h, PROMPTS[:1], IMAGES[:1], sites=["resid_post.L0", "resid_post.L0"], positions=["last"])
    with pytest.raises(ValueError, match="site attn_head.L0.H9: head 9 is out of range"):
        capture_sites(h, PROMPTS[:1], IMAGES[:1], sites=["attn_head.L0.H9"], positions=["last"])
    with pytest.raises(TypeError, match="not a string"):
        capture_sites(h, PROMPTS[:1], IMAGES[:1], sites="resid_post.L0", positions=["last"])
