"""Adding an architecture is one file (tests/hooks/toy_arch.py: a model whose names nothing
guesses, and its `register_adapter` call); what fails when an adapter is registered wrongly.

The toy is a real transformers PreTrainedModel run through the real code paths (wrap, capture,
next-token readouts, steering, patching); no mocks.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

import evprobe
from evprobe.hooks.intervention import Add, Read, intervene
from evprobe.hooks.sites import Adapter, adapter_named, register_adapter, site_map
from evprobe.hooks.sites import adapter as registry
from evprobe.hooks.steering import Steering, steer
from evprobe.hooks.tiny_tokenizer import build_tokenizer
from tests.hooks.toy_arch import ADAPTER, toy_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")
PROMPTS = ["the red square is larger than the blue circle", "hi", "three objects"]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(special_tokens=["<s>", "</s>"], named=dict(bos_token="<s>", eos_token="</s>"))


def test_without_an_adapter_the_toy_cannot_be_found(tokenizer) -> None:
    with pytest.raises(ValueError, match=r"could not find the decoder layers of ToyLM.*pass an "
                                         r"Adapter\(decoder_layers=\.\.\.\)") as err:
        evprobe.wrap(toy_model(), tokenizer, adapter=Adapter(name="nothing-given"))
    assert "\n" not in str(err.value)


def test_its_adapter_in_one_file_serves_every_site(tokenizer) -> None:
    h = evprobe.wrap(toy_model(), tokenizer, model_id="toy")
    assert h.sites.adapter.name == ADAPTER.name == "toy"
    assert h.sites.valid() == "resid_pre/resid_post/attn_out/mlp_out.L0-1; attn_head.L0-1.H0-3"
    got = evprobe.capture_components(h, PROMPTS, None, layers=[0, 1], positions=["last"],
                                     components=["resid_pre", "resid_post", "attn_out", "mlp_out"])
    # the toy's block: resid_post = resid_pre + attn_out + mlp_out, exactly what the adapter's paths claim
    np.testing.assert_allclose(got["resid_post"], got["resid_pre"] + got["attn_out"] + got["mlp_out"], atol=1e-6)
    one = np.concatenate([evprobe.capture(h, [p], None, layers=[0, 1], positions=["last"]) for p in PROMPTS])
    np.testing.assert_allclose(got["resid_post"], one, atol=1e-6)  # batched = single ("hi" is one token)
    # a head edit reaches the readout, and the heads side by side are the mixer's output projection input
    plain = evprobe.next_token_logprobs(h, PROMPTS, None, ["A", "B"])
    v = np.random.default_rng(0).normal(size=h.sites.head_dim)
    with steer(h, Steering.at("attn_head.L1.H2", v, alpha=20.0)):
        steered = evprobe.next_token_logprobs(h, PROMPTS, None, ["A", "B"])
    assert np.abs(steered - plain).max() > 1e-3
    enc = evprobe.build_inputs(h, PROMPTS[:1], None)
    with torch.no_grad(), intervene(h, [Read(f"attn_head.L0.H{i}") for i in range(4)] + [Read("attn_out.L0")]) as run:
        h.model(**enc)
    mixer = h.layers[0].mixer
    with torch.no_grad():
        rebuilt = mixer.proj_out(torch.cat([run.value(i) for i in range(4)], dim=-1))
    torch.testing.assert_close(rebuilt, run.value(4), atol=1e-6, rtol=0)


def test_a_wrong_path_is_refused_in_one_line_naming_the_field(tokenizer) -> None:
    wrong = Adapter(name="toy-typo", decoder_layers="backbone.stack", attention="mixr", mlp="ffwd",
                    head_input="proj_out", vision_blocks="", projector="")
    with pytest.raises(ValueError, match=r"the adapter's attention='mixr' is not a module: Block has no child 'mixr' "
                                         r"\(its children: norm1, norm2, mixer, ffwd\)") as err:
        evprobe.wrap(toy_model(), tokenizer, adapter=wrong)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"decoder_layers='backbone.blocks' is not a module: Backbone has no child "
                                         r"'blocks' \(its children: embed, stack\)"):
        site_map(toy_model(), Adapter(name="toy-typo2", decoder_layers="backbone.blocks"))


def test_head_input_of_the_wrong_width_leaves_no_head_sites(tokenizer) -> None:
    """An adapter whose head_input is not the heads' output projection (here the MLP's second linear,
    128 columns where 4 heads x 8 are expected) has no head sites, and says why in one line."""
    sites = site_map(toy_model(), Adapter(name="toy-wide", decoder_layers="backbone.stack", attention="ffwd",
                                          mlp="ffwd", head_input="2", vision_blocks="", projector=""))
    with pytest.raises(ValueError, match=r"no head sites: 2 takes 128 columns, not num_attention_heads \(4\) x "
                                         r"head_dim \(8\)"):
        sites.check("attn_head.L0.H0")
    assert "attn_head" not in sites.kinds()


def test_registering_wrongly_is_refused(monkeypatch) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_BY_NAME", dict(registry._BY_NAME))
    with pytest.raises(ValueError, match="model type 'toy_lm' already has the adapter 'toy'"):
        register_adapter(Adapter(name="toy2", model_types=("toy_lm",)))
    with pytest.raises(ValueError, match="an adapter named 'llava' is already registered"):
        register_adapter(Adapter(name="llava", model_types=("other",)))
    with pytest.raises(ValueError, match="serves no model type"):
        register_adapter(Adapter(name="nobody"))
    with pytest.raises(TypeError, match="register_adapter takes an Adapter, got dict"):
        register_adapter({"name": "x"})
    with pytest.raises(TypeError, match="model_types must be a tuple of names, not a string"):
        Adapter(name="x", model_types="toy_lm")
    with pytest.raises(ValueError, match="no adapter named 'nope'; registered: .*llava"):
        adapter_named("nope")
    register_adapter(Adapter(name="toy2", model_types=("toy_lm",)), replace=True)  # asked for: allowed
    assert registry.registered_for("toy_lm").name == "toy2"


def test_an_entry_point_supplies_an_adapter(tmp_path, monkeypatch) -> None:
    dist = tmp_path / "toyadapters-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toyadapters\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[evprobe.adapters]\ntoy_ep = toyadapters:ADAPTER\n")
    (tmp_path / "toyadapters.py").write_text(
        "from evprobe.hooks.sites import Adapter\n"
        "ADAPTER = Adapter(name='toy_ep', model_types=('toy_ep_lm',), decoder_layers='backbone.stack',\n"
        "                  attention='mixer', mlp='ffwd', head_input='proj_out', vision_blocks='', projector='')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_BY_NAME", dict(registry._BY_NAME))
    monkeypatch.setattr(registry, "_entry_points_read", False)
    try:
        assert registry.registered_for("toy_ep_lm").name == "toy_ep"
        assert adapter_named("toy_ep").head_input == "proj_out"
    finally:
        sys.modules.pop("toyadapters", None)
    (dist / "entry_points.txt").write_text("[evprobe.adapters]\nbroken = toyadapters:NOT_AN_ADAPTER\n")
    (tmp_path / "toyadapters.py").write_text("NOT_AN_ADAPTER = {'name': 'x'}\n")
    monkeypatch.setattr(registry, "_entry_points_read", False)
    try:
        with pytest.raises(TypeError, match="entry point broken = toyadapters:NOT_AN_ADAPTER in evprobe.adapters "
                                            "is a dict, not an evprobe Adapter"):
            registry.registered_for("anything")
    finally:
        sys.modules.pop("toyadapters", None)


def test_load_and_wrap_take_an_adapter_by_name(tokenizer) -> None:
    h = evprobe.wrap(toy_model(), tokenizer, adapter="toy")
    assert h.sites.adapter.decoder_layers == ADAPTER.decoder_layers
    tiny = evprobe.load("tiny:llava", adapter=Adapter(name="llava-text-only", vision_blocks="", projector=""))
    assert tiny.sites.kinds() == ["resid_pre", "resid_post", "attn_out", "mlp_out", "attn_head"]
    enc = evprobe.build_inputs(h, PROMPTS[:1], None)
    with torch.no_grad(), intervene(h, [Add("resid_post.L0", np.ones(32)), Read("resid_post.L0")]) as run:
        h.model(**enc)
    assert run.value(1).shape == (1, enc["input_ids"].shape[1], 32)


def test_the_how_to_page_runs_as_written() -> None:
    """docs/howto/add-site.md's examples, run in order in one namespace as a reader would: the
    intervention on a head, steering and capturing it, and the toy's adapter declaration."""
    import re
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "howto" / "add-site.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) == 3
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/howto/add-site.md", "exec"), namespace)  # noqa: S102 (the repository's own page)
    assert namespace["after"].shape == namespace["before"].shape == (1, namespace["enc"]["input_ids"].shape[1], 16)
    assert (namespace["after"] - namespace["before"]).abs().max() > 1.0  # the Read after the Add sees it
    assert namespace["got"]["attn_head.L1.H2"].shape == (1, 1, 16)
    assert namespace["ADAPTER"] == ADAPTER  # the page's declaration is the toy's own
