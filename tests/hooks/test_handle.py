"""The model handle on every tiny architecture: build, inputs, generation, logprobs, save/load.

Real tiny models throughout (random weights, built offline); no mocks. Each arch is
built once per session (fixture cache).
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from evprobe import hooks
from evprobe.hooks import (
    TINY_ARCHS,
    Handle,
    build_inputs,
    generate,
    load,
    next_token_logprobs,
    tiny,
)
from evprobe.hooks.sites.auto import find_decoder_layers

ROOT = Path(__file__).resolve().parents[2]
LETTERS = ["A", "B", "C", "D", "E"]
# Three prompts of clearly different token lengths.
PROMPTS = [
    "Hi.",
    "What is in the image? Answer with one word.",
    (
        "Look at the picture carefully, describe every coloured rectangle you can see, "
        "then say which one is the largest and answer with the letter only."
    ),
]


def picture(seed: int, size: tuple[int, int] = (672, 672)) -> Image.Image:
    """A white image with three coloured rectangles placed by `seed`."""
    im = Image.new("RGB", size, (255, 255, 255))
    draw = ImageDraw.Draw(im)
    colours = [(220, 30, 30), (30, 150, 30), (30, 30, 220), (240, 200, 0)]
    w, h = size
    for k in range(3):
        x = (seed * 97 + k * 151) % (w - 200)
        y = (seed * 53 + k * 211) % (h - 200)
        draw.rectangle([x, y, x + 80 + 30 * k, y + 60 + 15 * seed], fill=colours[(seed + k) % 4])
    return im


# One image per prompt, different content and shape (exercises aspect-ratio paths).
IMAGES = [[picture(1)], [picture(2, (500, 700))], [picture(3, (800, 400))]]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_tiny_archs_names():
    assert TINY_ARCHS == ("qwen2_5_vl", "qwen3_vl", "idefics3", "llava", "llava_next", "gemma3", "mistral3",
                          "smolvlm", "llava_next_video")


def test_builds_with_layers_and_width(handle: Handle):
    text = handle.model.config.get_text_config()
    assert handle.model_id == f"tiny:{handle.arch}"
    assert handle.arch == handle.model.config.model_type
    assert isinstance(handle.layers, torch.nn.ModuleList)
    assert len(handle.layers) == handle.n_layers == text.num_hidden_layers
    assert handle.d_model == text.hidden_size
    # The found list is the language model's own, not the vision tower's.
    assert handle.layers is handle.model.get_decoder().layers
    assert "vision" not in handle.layers_path and "visual" not in handle.layers_path
    assert not handle.model.training
    assert handle.dtype == torch.float32 and handle.device.type == "cpu"
    assert handle.tokenizer is handle.processor.tokenizer and handle.tokenizer.padding_side == "left"


def test_tiny_is_deterministic_in_seed(handle: Handle):
    again = tiny(handle.arch, seed=0).model.state_dict()
    other = tiny(handle.arch, seed=1).model.state_dict()
    ref = handle.model.state_dict()
    assert all(torch.equal(ref[k], again[k]) for k in ref)
    assert any(not torch.equal(ref[k], other[k]) for k in ref)


def test_build_inputs_pads_left_and_keeps_rows(handle: Handle):
    enc = build_inputs(handle, PROMPTS, IMAGES)
    mask = enc["attention_mask"]  # (batch, seq)
    assert mask.shape[0] == 3
    assert bool(mask[:, -1].all()), "left padding: every row ends on a real token"
    lengths = mask.sum(1).tolist()
    assert lengths[0] < lengths[2] and mask[0, 0] == 0
    # Each row alone gives the same tokens as its unpadded part in the batch.
    for i in range(3):
        alone = build_inputs(handle, PROMPTS[i : i + 1], IMAGES[i : i + 1])
        assert torch.equal(enc["input_ids"][i][mask[i].bool()], alone["input_ids"][0])


def test_generate_with_an_image(handle: Handle):
    (gen,) = generate(handle, ["What is in the image?"], [[picture(4)]], max_new_tokens=5)
    enc = build_inputs(handle, ["What is in the image?"], [[picture(4)]])
    assert 1 <= gen.n_new_tokens <= 5 and gen.n_new_tokens == len(gen.token_ids)
    assert gen.n_prompt_tokens == int(enc["attention_mask"].sum())
    assert isinstance(gen.text, str)


def test_images_reach_the_model(handle: Handle):
    logp = next_token_logprobs(handle, ["What is this?"] * 2, [[picture(1)], [picture(5)]], LETTERS)
    assert np.abs(logp[0] - logp[1]).max() > 1e-4


def test_generate_batched_equals_single(handle: Handle):
    batched = generate(handle, PROMPTS, IMAGES, max_new_tokens=8, batch_size=3)
    single = generate(handle, PROMPTS, IMAGES, max_new_tokens=8, batch_size=1)
    assert [g.token_ids for g in batched] == [g.token_ids for g in single]
    assert [g.n_prompt_tokens for g in batched] == [g.n_prompt_tokens for g in single]
    assert len({g.n_prompt_tokens for g in single}) == 3  # the rows really differ in length
    assert [g.text for g in batched] == [g.text for g in single]


def test_mixed_image_counts_batched_equals_single(handle: Handle):
    images = [[], [picture(6)], [picture(7), picture(8, (400, 600))]]
    batched = generate(handle, PROMPTS, images, max_new_tokens=4, batch_size=3)
    single = generate(handle, PROMPTS, images, max_new_tokens=4, batch_size=1)
    assert [g.token_ids for g in batched] == [g.token_ids for g in single]
    lb = next_token_logprobs(handle, PROMPTS, images, LETTERS)
    ls = next_token_logprobs(handle, PROMPTS, images, LETTERS, batch_size=1)
    np.testing.assert_allclose(lb, ls, atol=1e-5, rtol=0)


def test_next_token_logprobs_batched_equals_single(handle: Handle):
    batched = next_token_logprobs(handle, PROMPTS, IMAGES, LETTERS)
    single = np.concatenate([next_token_logprobs(handle, [p], [i], LETTERS) for p, i in zip(PROMPTS, IMAGES)])
    assert batched.shape == (3, 5)
    assert (batched <= 0).all() and np.isfinite(batched).all()
    np.testing.assert_allclose(batched, single, atol=1e-5, rtol=0)


def test_next_token_logprobs_matches_a_plain_forward(handle: Handle):
    """Candidate ids are the letters' first tokens; values are the full-vocab log-softmax."""
    enc = build_inputs(handle, PROMPTS[:1], IMAGES[:1])
    with torch.inference_mode():
        logits = handle.model(**enc).logits[0, -1].float()  # (vocab,)
    ids = [handle.tokenizer(c, add_special_tokens=False)["input_ids"][0] for c in LETTERS]
    expected = torch.log_softmax(logits, -1)[ids].numpy()
    np.testing.assert_allclose(next_token_logprobs(handle, PROMPTS[:1], IMAGES[:1], LETTERS)[0], expected,
                               atol=1e-6)


def test_nnsight_capture_matches_hidden_states(handle: Handle):
    import nnsight

    enc = build_inputs(handle, PROMPTS[:2], IMAGES[:2])
    with torch.inference_mode():
        hidden = handle.model(**enc, output_hidden_states=True).hidden_states
    with handle.nn.trace(**enc):
        acts = nnsight.save([handle.nn_layers[i].output[:, -1, :] for i in range(handle.n_layers)])
    assert len(acts) == handle.n_layers and tuple(acts[0].shape) == (2, handle.d_model)
    # Layer i's output is hidden_states[i + 1] (the last entry is after the final norm).
    for i in range(handle.n_layers - 1):
        torch.testing.assert_close(acts[i], hidden[i + 1][:, -1, :], atol=0, rtol=0)


def test_save_pretrained_then_load_gives_identical_logits(handle: Handle, tmp_path: Path):
    handle.model.save_pretrained(tmp_path)
    handle.processor.save_pretrained(tmp_path)
    loaded = load(str(tmp_path))
    assert loaded.model_id == str(tmp_path) and loaded.arch == handle.arch
    assert type(loaded.processor) is type(handle.processor)
    assert type(loaded.model) is type(handle.model) and loaded.dtype == torch.float32
    assert loaded.n_layers == handle.n_layers
    a = build_inputs(handle, PROMPTS, IMAGES)
    b = build_inputs(loaded, PROMPTS, IMAGES)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with torch.inference_mode():
        assert torch.equal(handle.model(**a).logits, loaded.model(**b).logits)


def test_unknown_tiny_name_lists_valid_names():
    with pytest.raises(ValueError) as err:
        load("tiny:nope")
    for name in TINY_ARCHS:
        assert name in str(err.value)


def test_trust_remote_code_defaults_false():
    assert inspect.signature(load).parameters["trust_remote_code"].default is False
    assert inspect.signature(load).parameters["dtype"].default == "auto"


def test_bad_inputs_fail_clearly(handles):
    h = handles.get("llava") or handles.setdefault("llava", tiny("llava"))
    with pytest.raises(ValueError, match="image lists"):
        build_inputs(h, ["a", "b"], [[]])
    with pytest.raises(TypeError, match="list of strings"):
        build_inputs(h, "a", [[]])
    with pytest.raises(ValueError, match="dtype"):
        load("tiny:llava", dtype="float64")
    with pytest.raises(FileNotFoundError, match="does-not-exist"):
        load("/tmp/evprobe-does-not-exist")


def test_generation_stops_at_eos_the_same_batched_and_single(handle: Handle):
    """Make the token row 0 emits at step 3 an end-of-sequence token: row 0 then ends
    there (batched rows get padded after it, single rows stop) and both agree."""
    free = generate(handle, PROMPTS, IMAGES, max_new_tokens=6, batch_size=3)
    stop = free[0].token_ids[2]
    config = handle.model.generation_config
    saved = config.eos_token_id
    try:
        config.eos_token_id = stop
        batched = generate(handle, PROMPTS, IMAGES, max_new_tokens=6, batch_size=3)
        single = generate(handle, PROMPTS, IMAGES, max_new_tokens=6, batch_size=1)
    finally:
        config.eos_token_id = saved
    assert batched[0].token_ids[-1] == stop and batched[0].n_new_tokens <= 3
    assert [g.token_ids for g in batched] == [g.token_ids for g in single]
    assert all(stop not in g.token_ids[:-1] for g in batched)


def test_layers_found_without_get_decoder(handle: Handle):
    """The structural search (no get_decoder, no config) finds the same list, not the vision blocks."""

    class NoPointer(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module):
            super().__init__()
            self.inner = inner

    assert find_decoder_layers(NoPointer(handle.model.model)) is handle.layers


def test_load_tiny_in_bfloat16():
    h = load("tiny:llava", dtype="bfloat16")
    assert h.dtype == torch.bfloat16
    (gen,) = generate(h, ["What is this?"], [[picture(1)]], max_new_tokens=3)
    assert gen.n_new_tokens >= 1


def test_find_decoder_layers_fails_with_the_class_name():
    with pytest.raises(ValueError, match="Linear"):
        find_decoder_layers(torch.nn.Linear(2, 2))


def test_import_hooks_does_not_import_torch():
    code = "import sys, evprobe.hooks as hooks; hooks.TINY_ARCHS; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    assert set(hooks.__all__) >= {"load", "tiny", "Handle", "TINY_ARCHS"}
