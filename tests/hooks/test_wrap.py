"""`evprobe.wrap`: a model the researcher already loaded (transformers or nnsight) gives the Handle
`load` gives, so capture, steering and generation agree on the same weights.

Real tiny models (random weights, built offline); the "researcher's model" is a second instance
of the same class built from the config and loaded with the first one's state dict, so equality
is a real check (two objects, same weights), not identity.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import evprobe
from evprobe.hooks import Steering, generate, load, steer
from evprobe.hooks.capture import capture_layers
from tests.hooks.test_handle import picture

PROMPTS = ["Question: Is it red?\nAnswer yes or no.", "Describe the picture in one short sentence, please."]
LAYERS = [0, 2, 3]
POSITIONS = ["last", "image_mean", "text_mean"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")
IMAGES = [[picture(1, (96, 96))], [picture(2, (96, 96))]]  # small: few image tokens


def twin(model):
    """A second model of the same class and config holding a copy of `model`'s weights."""
    torch.manual_seed(123)  # different init, then overwritten: equality must come from the weights
    other = type(model)(model.config).eval()
    other.load_state_dict(model.state_dict())
    other.generation_config = model.generation_config
    return other


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "gemma3"])
def test_wrap_of_a_transformers_model_captures_like_load(arch):
    ref = load(f"tiny:{arch}")
    mine = twin(ref.model)
    handle = evprobe.wrap(mine, ref.processor)
    assert handle.model is mine and handle.layers_path == ref.layers_path and handle.arch == ref.arch
    expected = capture_layers(ref, PROMPTS, IMAGES, layers=LAYERS, positions=POSITIONS)
    got = capture_layers(handle, PROMPTS, IMAGES, layers=LAYERS, positions=POSITIONS)
    np.testing.assert_array_equal(got, expected)
    # Different weights would be seen: the check can fail.
    with torch.no_grad():
        handle.layers[0].mlp.down_proj.weight.add_(0.05)
    moved = capture_layers(handle, PROMPTS, IMAGES, layers=LAYERS, positions=POSITIONS)
    assert np.abs(moved - expected).max() > 1e-3


@pytest.mark.parametrize("wrapper", ["NNsight", "TransformersModel"])
def test_wrap_of_an_nnsight_model_unwraps_it(wrapper):
    from nnsight import NNsight
    from nnsight.modeling.transformers import TransformersModel

    ref = load("tiny:llava")
    mine = twin(ref.model)
    if wrapper == "NNsight":
        user = NNsight(mine)
        handle = evprobe.wrap(user, ref.processor)
    else:
        user = TransformersModel(mine, processor=ref.processor, tokenizer=ref.tokenizer, task="image-text-to-text")
        handle = evprobe.wrap(user)  # the processor comes from the wrapper
        assert handle.processor is ref.processor
    assert handle.model is mine
    expected = capture_layers(ref, PROMPTS, IMAGES, layers=LAYERS, positions=POSITIONS)
    np.testing.assert_array_equal(capture_layers(handle, PROMPTS, IMAGES, layers=LAYERS, positions=POSITIONS),
                                  expected)

    # Generation and steering agree with load's handle on the same weights.
    v = np.random.default_rng(0).normal(size=ref.d_model)
    s = Steering(v, layer=1, alpha=8.0)
    plain = generate(ref, PROMPTS, IMAGES, max_new_tokens=4)
    assert generate(handle, PROMPTS, IMAGES, max_new_tokens=4) == plain
    with steer(ref, s):
        steered_ref = generate(ref, PROMPTS, IMAGES, max_new_tokens=4)
    with steer(handle, s):
        steered = generate(handle, PROMPTS, IMAGES, max_new_tokens=4)
    assert steered == steered_ref
    assert [g.token_ids for g in steered] != [g.token_ids for g in plain]  # the edit did something

    # The researcher's own wrapper still traces the same module after wrap built its own.
    enc = evprobe.hooks.build_inputs(handle, PROMPTS, IMAGES)
    with torch.no_grad(), user.trace(**enc):
        out = user.get(handle.layers_path)[2].output.save()  # (batch, seq, d_model)
    np.testing.assert_allclose(out[:, -1].float().numpy(), expected[:, 1, 0], atol=1e-6, rtol=0)


def test_wrap_of_a_text_only_language_model():
    """An nnsight LanguageModel over a text-only causal LM: the tokenizer is the processor."""
    from nnsight import LanguageModel
    from transformers import LlamaForCausalLM

    base = load("tiny:llava")
    tok = base.tokenizer
    tok.chat_template = base.processor.chat_template  # the tiny tokenizer carries no template itself
    torch.manual_seed(0)
    lm = LlamaForCausalLM(base.model.config.get_text_config()).eval()
    direct = evprobe.wrap(lm, tok, model_id="tiny-text")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LanguageModel is deprecated in nnsight 0.8 (still supported)
        user = LanguageModel(lm, tokenizer=tok)
    via_nnsight = evprobe.wrap(user)
    assert via_nnsight.model is lm and via_nnsight.tokenizer is tok
    prompts, images = ["Say hi.", "What is two plus two?"], [[], []]
    a = capture_layers(direct, prompts, images, layers=[1, 3], positions=["last", "text_mean"])
    b = capture_layers(via_nnsight, prompts, images, layers=[1, 3], positions=["last", "text_mean"])
    assert a.shape == (2, 2, 2, direct.d_model)
    np.testing.assert_array_equal(a, b)
    assert generate(via_nnsight, prompts[:1], images[:1], max_new_tokens=3)[0].n_new_tokens == 3


def test_wrap_and_load_refuse_the_wrong_thing_clearly():
    ref = load("tiny:llava")
    with pytest.raises(TypeError, match=r"evprobe\.wrap"):
        load(ref.model)  # measured on main: AttributeError 'startswith'
    with pytest.raises(TypeError, match="evprobe.load"):
        evprobe.wrap("tiny:llava", ref.processor)
    with pytest.raises(ValueError, match="needs its processor"):
        evprobe.wrap(twin(ref.model))
    with torch.device("meta"):
        ghost = type(ref.model)(ref.model.config)
    with pytest.raises(ValueError, match="meta device"):
        evprobe.wrap(ghost, ref.processor)
    assert evprobe.wrap(ref) is ref
    # a prefix given with a Handle is applied (it used to be ignored), on a copy: ref keeps its own
    prefixed = evprobe.wrap(ref, answer_prefix="Answer:")
    assert prefixed.answer_prefix == "Answer:" and ref.answer_prefix == "" and prefixed.model is ref.model
    with pytest.raises(TypeError, match="answer_prefix must be a string"):
        evprobe.wrap(ref, answer_prefix=3)
    with pytest.raises(TypeError, match="answer_prefix must be a string"):
        load("tiny:llava", answer_prefix=3)  # the tiny path skipped the check
    assert load("tiny:llava", answer_prefix="Answer:").answer_prefix == "Answer:"
    with pytest.raises(ValueError, match="different processor"):
        evprobe.wrap(ref, object())
