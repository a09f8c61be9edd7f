"""Steering (the intervention core's torch hooks) meets capture and nnsight.

The core's capture reads a steered site edited (its Read hook runs after the steering's), and so
do transformers' output_hidden_states records (kept behind the core's hooks). nnsight reads a
module's `.output` inside the module's forward, before torch forward hooks run, so under
`with steer(...)` an nnsight `.output.save()` of the steered layer shows the UNSTEERED value while
the next layer receives the steered one: the pitfall, and the two nnsight idioms that work. Ground
truth is a plain torch forward hook registered after the steering (hooks run in registration
order, so it sees the edited output). Real tiny models; no mocks.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from evprobe.hooks import Steering, build_inputs, steer, tiny
from evprobe.hooks.capture import capture_layers
from evprobe.hooks.intervention import Add, Read, intervene
from tests.hooks.test_handle import picture

PROMPTS = ["Question: Is it red?\nAnswer yes or no.", "Describe the picture in one short sentence, please."]
K = 1  # the steered layer (tiny models have 4)

pytestmark = pytest.mark.usefixtures("one_torch_thread")
IMAGES = [[picture(1, (96, 96))], [picture(2, (96, 96))]]  # small: few image tokens


@pytest.fixture(scope="module", params=["llava", "gemma3"])
def setup(request):
    h = tiny(request.param)
    enc = build_inputs(h, PROMPTS, IMAGES)
    s = Steering(np.random.default_rng(0).normal(size=h.d_model), layer=K, alpha=10.0)
    with torch.no_grad(), h.nn.trace(**enc):
        plain = h.nn_layers[K].output.save()  # (batch, seq, d) unsteered
    seen = {}
    with steer(h, s), torch.no_grad():
        after = h.layers[K].register_forward_hook(lambda m, a, o: seen.__setitem__("steered", o.detach().clone()))
        try:
            h.model(**enc)
        finally:
            after.remove()
    steered = seen["steered"]
    assert (steered - plain).abs().max() > 1.0  # the steering is visible at all
    return h, enc, s, plain.detach().clone(), steered


def test_pitfall_output_save_of_the_steered_layer_is_unsteered(setup):
    h, enc, s, plain, steered = setup
    with steer(h, s), torch.no_grad(), h.nn.trace(**enc):
        same_layer = h.nn_layers[K].output.save()
        next_in = h.nn_layers[K + 1].input.save()
    torch.testing.assert_close(same_layer, plain, atol=0, rtol=0)  # the pitfall: no edit seen
    torch.testing.assert_close(next_in, steered, atol=1e-6, rtol=0)  # idiom 1: the next layer's input


def test_idiom_edit_and_save_inside_one_trace(setup):
    """Idiom 2: steer with nnsight itself, then save in the same trace after the edit."""
    h, enc, s, plain, steered = setup
    delta = s.delta(plain.dtype, plain.device)  # alpha * unit direction, (d_model,)
    with torch.no_grad(), h.nn.trace(**enc):
        out = h.nn_layers[K].output
        out[:] += delta
        edited = out.save()
        reread = h.nn_layers[K].output.save()
        next_in = h.nn_layers[K + 1].input.save()
    for got in (edited, reread, next_in):
        torch.testing.assert_close(got, steered, atol=1e-6, rtol=0)


def test_capture_of_the_steered_layer_reads_the_edited_value(setup):
    h, enc, s, plain, steered = setup
    with steer(h, s), warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about: the read comes after the edit
        at_k = capture_layers(h, PROMPTS, IMAGES, layers=[K], positions=["last"])
        after_k = capture_layers(h, PROMPTS, IMAGES, layers=[K + 1], positions=["last"])
    np.testing.assert_allclose(at_k[:, 0, 0], steered[:, -1].numpy(), atol=1e-6, rtol=0)
    assert np.abs(at_k[:, 0, 0] - plain[:, -1].numpy()).max() > 1.0  # not the unedited value
    unsteered_next = capture_layers(h, PROMPTS, IMAGES, layers=[K + 1], positions=["last"])
    assert np.abs(after_k - unsteered_next).max() > 1e-3  # the edit reaches the next layer


def test_a_read_before_the_edit_in_one_intervention_sees_the_unedited_value(setup):
    """Order is the user's: Read, Add, Read on one site gives the value before and after the edit."""
    h, enc, s, plain, steered = setup
    site = f"resid_post.L{K}"
    ops = [Read(site), Add(site, s.alpha * s.direction), Read(site)]
    with torch.no_grad(), intervene(h, ops) as run:
        h.model(**enc)
    torch.testing.assert_close(run.value(0), plain, atol=1e-6, rtol=0)
    torch.testing.assert_close(run.value(2), steered, atol=1e-6, rtol=0)


def test_transformers_recording_hooks_record_the_edited_value(setup):
    """transformers leaves an output-recording forward hook on every decoder layer once a forward
    asked for output_hidden_states (some VLMs feed their language model from those records): a
    steering added after it must still be what it records."""
    h, enc, s, plain, steered = setup
    with torch.no_grad():
        h.model(**enc, output_hidden_states=True)
    assert h.layers[K]._forward_hooks  # the recorder is there, registered before the steering
    with steer(h, s), torch.no_grad():
        recorded = h.model(**enc, output_hidden_states=True).hidden_states[K + 1]
    torch.testing.assert_close(recorded, steered, atol=1e-6, rtol=0)
