"""The site vocabulary, the architecture adapters and SiteMap: every site of every tiny
architecture is where the adapter says, and behaves as the model's own arithmetic says it must.

Known answers used here, each a check that fails when a site is misplaced:
- an attention layer's heads, side by side through its output projection, are its attn_out
  (through Gemma's output norm there), and patching every head of a layer is patching attn_out,
  while patching three of the four heads is not;
- patching the projector's output gives the source run exactly (the image features are the only
  difference between the two members), except on Qwen3-VL, whose DeepStack injects features of an
  early vision block into the decoder besides the projector's;
- LLaVA-family models feed their language model from the vision tower's second-to-last block
  (`vision_feature_layer=-2`): patching the tiny tower's block 0 gives the source, its last block
  (1) changes nothing at all.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from evprobe.hooks import TINY_ARCHS, build_inputs
from evprobe.hooks.intervention import Patch, Read, intervene
from evprobe.hooks.patching import patch_sites
from evprobe.hooks.sites import Adapter, Site, registered_adapters, site_map
from evprobe.hooks.sites.auto import complete

from .conftest import tiny_handle

pytestmark = pytest.mark.usefixtures("one_torch_thread")
PROMPT = "Which option? A. stop B. mass test C. other test D. free fall E. report. Reply with the letter."
LETTERS = list("ABCDE")
PATH_FIELDS = ("decoder_layers", "attention", "mlp", "attn_out", "mlp_out", "head_input", "vision_blocks", "projector")


def sheet(mark: int) -> Image.Image:
    im = Image.new("RGB", (336, 336), "white")
    ImageDraw.Draw(im).rectangle([mark, 150, mark + 60, 210], fill=(255, 0, 255))
    return im


def test_spellings_round_trip_and_bad_ones_are_one_line() -> None:
    for text in ("resid_pre.L0", "resid_post.L12", "attn_out.L3", "mlp_out.L3", "attn_head.L3.H2", "vision_block.L0",
                 "projector_out"):
        assert str(Site.parse(text)) == text
    assert Site.parse("attn_head.L3.H2") == Site("attn_head", 3, 2)
    for bad, why in (("resid_post", "needs a layer"), ("attn_head.L3", "needs a head"),
                     ("projector_out.L1", "takes no layer"), ("resid_post.L3.H1", "takes no head"),
                     ("resid.L3", "unknown site kind 'resid'"), ("resid_post L3", "cannot read site"),
                     ("resid_post.L-1", "cannot read site")):
        with pytest.raises(ValueError, match=why) as err:
            Site.parse(bad)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_each_registered_adapter_matches_what_detection_finds(handles, arch) -> None:
    """The adapters are data the automatic detection would also find on these nine, so it is a real
    fallback for an unregistered architecture of the same families (and an adapter typo shows)."""
    h = tiny_handle(handles, arch)
    registered = registered_adapters()[h.model.config.model_type]
    found = complete(Adapter(name="found"), h.model)
    assert h.sites.adapter.name == registered.name
    for name in PATH_FIELDS:
        assert getattr(found, name) == getattr(h.sites.adapter, name), name
    assert h.sites.kinds() == ["resid_pre", "resid_post", "attn_out", "mlp_out", "attn_head", "vision_block",
                               "projector_out"]
    assert h.sites.valid() == ("resid_pre/resid_post/attn_out/mlp_out.L0-3; attn_head.L0-3.H0-3; vision_block.L0-1; "
                               "projector_out")


def test_a_site_the_model_lacks_is_refused_in_one_line_listing_the_valid_ones(handles) -> None:
    sites = tiny_handle(handles, "llava").sites
    for bad, why in (("attn_head.L9.H0", "layer 9 is out of range"), ("attn_head.L1.H4", "head 4 is out of range"),
                     ("vision_block.L2", "vision layer 2 is out of range"), ("resid_post.L4", "layer 4 is out of range"),
                     ("attn_heads.L1", "unknown site kind")):
        with pytest.raises(ValueError, match=why) as err:
            sites.check(bad)
        message = str(err.value)
        assert "\n" not in message and "valid sites of LlavaForConditionalGeneration (adapter llava): " in message
        assert message.endswith("attn_head.L0-3.H0-3; vision_block.L0-1; projector_out")
    with pytest.raises(ValueError, match="no vision tower blocks"):
        site_map(tiny_handle(handles, "llava").model, Adapter(name="text-only", vision_blocks="")).check(
            "vision_block.L0")


def _reads(h, enc, sites):
    with torch.no_grad(), intervene(h, [Read(s) for s in sites]) as run:
        h.model(**enc)
    return [run.value(i) for i in range(len(sites))]


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_heads_through_the_output_projection_are_attn_out(handles, arch) -> None:
    h = tiny_handle(handles, arch)
    enc = build_inputs(h, [PROMPT], [[sheet(40)]])
    layer = 2
    heads = [f"attn_head.L{layer}.H{i}" for i in range(h.sites.n_heads)]
    *z, attn_out = _reads(h, enc, [*heads, f"attn_out.L{layer}"])
    assert all(t.shape[-1] == h.sites.head_dim for t in z)
    block = h.layers[layer]
    with torch.no_grad():
        out = block.self_attn.o_proj(torch.cat(z, dim=-1))
        if arch == "gemma3":  # sandwich norm: what the sublayer adds is its output norm's output
            out = block.post_attention_layernorm(out)
    torch.testing.assert_close(out, attn_out, atol=1e-6, rtol=0)
    with torch.no_grad():  # and the heads are in the right order: swapping two breaks it
        swapped = block.self_attn.o_proj(torch.cat([z[1], z[0], *z[2:]], dim=-1))
    assert (swapped - block.self_attn.o_proj(torch.cat(z, dim=-1))).abs().max() > 1e-4


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_patching_every_head_of_a_layer_is_patching_its_attn_out(handles, arch) -> None:
    h = tiny_handle(handles, arch)
    src = build_inputs(h, [PROMPT], [[sheet(40)]])
    tgt = build_inputs(h, [PROMPT], [[sheet(200)]])
    layer = 1
    heads = [f"attn_head.L{layer}.H{i}" for i in range(h.sites.n_heads)]
    values = dict(zip([*heads, f"attn_out.L{layer}"], _reads(h, src, [*heads, f"attn_out.L{layer}"]), strict=True))

    def logits(sites):
        with torch.no_grad(), intervene(h, [Patch(s, values[s], positions=(-3, -2, -1)) for s in sites]):
            return h.model(**tgt).logits[0, -1]

    via_heads, via_attn_out, three_heads = logits(heads), logits([f"attn_out.L{layer}"]), logits(heads[:-1])
    torch.testing.assert_close(via_heads, via_attn_out, atol=1e-5, rtol=0)
    assert (three_heads - via_attn_out).abs().max() > 1e-5


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_vision_sites_are_where_the_model_takes_its_image_features(handles, arch) -> None:
    h = tiny_handle(handles, arch)
    r = patch_sites(h, (PROMPT, [sheet(40)]), (PROMPT, [sheet(200)]), sites=["vision_block.L0", "vision_block.L1",
                    "projector_out"], position_sets={"all": "all"}, candidates=LETTERS)
    gap = np.abs(r.patched[:, 0] - r.source).max(axis=1)  # per site: how far from the source
    assert np.abs(r.target - r.source).max() > 1e-3  # the two images are told apart at all
    assert gap[0] == 0.0  # block 0's output carries everything the image contributes
    if arch == "qwen3_vl":  # DeepStack: block 0's features also enter the decoder directly
        assert gap[2] > 1e-4
    else:
        assert gap[2] == 0.0
    if arch.startswith("llava"):  # vision_feature_layer=-2: the last block's output is never read
        np.testing.assert_array_equal(r.patched[1, 0], r.target)


def test_gpt2_is_served_by_detection_alone(tmp_path) -> None:
    """GPT-2 has no adapter: its blocks (`transformer.h`), attention (`attn`), output projection
    (`c_proj`, a Conv1D) and MLP are found from its structure, and the head identity holds."""
    from evprobe.hooks.loading import load
    from evprobe.hooks.tiny_text import save_tiny_base_model

    h = load(str(save_tiny_base_model(tmp_path / "gpt2", arch="gpt2")))
    assert h.sites.adapter.name == "auto:gpt2" and h.sites.adapter.decoder_layers == "transformer.h"
    assert h.sites.valid() == f"resid_pre/resid_post/attn_out/mlp_out.L0-{h.n_layers - 1}; attn_head.L0-" \
                              f"{h.n_layers - 1}.H0-{h.sites.n_heads - 1}"
    src = build_inputs(h, ["The red square is larger"], None)
    tgt = build_inputs(h, ["The blue circle is larger"], None)
    heads = [f"attn_head.L1.H{i}" for i in range(h.sites.n_heads)]
    values = dict(zip([*heads, "attn_out.L1"], _reads(h, src, [*heads, "attn_out.L1"]), strict=True))
    with torch.no_grad(), intervene(h, [Patch(s, values[s]) for s in heads]):
        via_heads = h.model(**tgt).logits
    with torch.no_grad(), intervene(h, [Patch("attn_out.L1", values["attn_out.L1"])]):
        via_attn_out = h.model(**tgt).logits
    torch.testing.assert_close(via_heads, via_attn_out, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="no vision tower blocks"):
        h.sites.check("vision_block.L0")
