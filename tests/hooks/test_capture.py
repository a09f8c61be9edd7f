"""Token spans and residual-stream capture on every tiny architecture.

Real tiny models (random weights, built offline), real transformers code paths; no mocks.
Reference values come from plain transformers: `output_hidden_states` for layers before the
last, a plain forward hook for the last (its hidden_states entry is after the final norm).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from evprobe.hooks import Handle, build_inputs
from evprobe.hooks.capture import POSITIONS, reduce_at, capture_batch, capture_layers
from evprobe.hooks.spans import batch_spans, image_token_ids, render_row, token_spans

from .conftest import tiny_handle

ALL = list(POSITIONS)  # last, image_mean, text_mean
# Rows of clearly different token lengths; each marker is a whole sentence of its prompt.
PROMPTS = [
    "Question: Is it red?\nAnswer yes or no.",
    (
        "Look at the picture carefully and count the coloured rectangles.\n"
        "Question: Which rectangle is the largest one in this picture?\n"
        "Reply with the colour only."
    ),
    "Describe the scene in one sentence. Question: What is shown here?",
]
MARKERS = ["Is it red?", "Which rectangle is the largest one in this picture?", None]


def picture(seed: int, size: tuple[int, int] = (120, 120)) -> Image.Image:
    im = Image.new("RGB", size, (255, 255, 255))
    draw = ImageDraw.Draw(im)
    colours = [(220, 30, 30), (30, 150, 30), (30, 30, 220)]
    for k in range(3):
        x, y = (seed * 17 + k * 31) % (size[0] - 30), (seed * 11 + k * 23) % (size[1] - 30)
        draw.rectangle([x, y, x + 20 + 5 * k, y + 15 + 3 * seed], fill=colours[(seed + k) % 3])
    return im


IMAGES = [[picture(1)], [picture(2, (100, 140))], [picture(3, (160, 80))]]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _llava(handles) -> Handle:
    return tiny_handle(handles, "llava")


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _lm_input_embeds(handle: Handle, enc) -> torch.Tensor:
    """What the first decoder layer receives: (batch, seq, d_model) embeddings after image merging."""
    seen = {}

    def hook(module, args, kwargs):
        seen["x"] = kwargs.get("hidden_states", args[0] if args else None)

    h = handle.layers[0].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            handle.model(**enc)
    finally:
        h.remove()
    return seen["x"]


# ---------------------------------------------------------------- spans


def test_image_span_is_where_the_model_puts_vision_features(handle: Handle):
    """Independent of the token ids: positions whose LM input embedding is not the token's own
    embedding are exactly the image span (processor's inserted feature tokens), per row."""
    enc = build_inputs(handle, PROMPTS, IMAGES)
    spans = batch_spans(handle, enc, PROMPTS, [1, 1, 1], MARKERS)
    embeds = _lm_input_embeds(handle, enc)  # (batch, seq, d_model)
    with torch.no_grad():
        own = handle.model.get_input_embeddings()(enc["input_ids"])  # (batch, seq, d_model)
    for r, s in enumerate(spans):
        real = enc["attention_mask"][r].bool()
        replaced = ((embeds[r] - own[r]).abs().amax(-1) > 0) & real
        assert tuple(torch.nonzero(replaced).flatten().tolist()) == s.image, f"row {r}"
        assert len(s.image) > 0
        assert not set(s.image) & set(s.image_markers) and not set(s.text) & (set(s.image) | set(s.image_markers))


def test_last_is_the_end_of_the_generation_prompt(handle: Handle):
    enc = build_inputs(handle, PROMPTS, IMAGES)
    spans = batch_spans(handle, enc, PROMPTS, [1, 1, 1])
    seq = enc["input_ids"].shape[1]
    for r, s in enumerate(spans):
        assert s.last == seq - 1  # left padding
        rendered = render_row(handle, PROMPTS[r], 1)
        ids = handle.tokenizer(rendered, add_special_tokens=False)["input_ids"]
        assert int(enc["input_ids"][r, s.last]) == ids[-1]


def test_text_segment_decodes_back_to_its_text(handle: Handle):
    enc = build_inputs(handle, PROMPTS, IMAGES)
    marked = batch_spans(handle, enc, PROMPTS, [1, 1, 1], MARKERS)
    whole = batch_spans(handle, enc, PROMPTS, [1, 1, 1])
    for r in range(3):
        ids = enc["input_ids"][r]
        assert list(whole[r].text) == sorted(whole[r].text)
        assert _squash(handle.tokenizer.decode(ids[list(whole[r].text)])) == _squash(PROMPTS[r])
        expected = MARKERS[r] if MARKERS[r] is not None else PROMPTS[r]
        assert _squash(handle.tokenizer.decode(ids[list(marked[r].text)])) == _squash(expected)
        # A marker span is a contiguous run inside the whole prompt's span.
        t = marked[r].text
        assert set(t) <= set(whole[r].text) and t == tuple(range(t[0], t[-1] + 1))


def test_image_markers_are_the_structural_image_tokens(handles):
    expect = {"mistral3": {"[IMG_BREAK]", "[IMG_END]"}, "gemma3": {"<start_of_image>", "<end_of_image>"},
              "qwen2_5_vl": {"<|vision_start|>", "<|vision_end|>"},
              "idefics3": {"<fake_token_around_image>", "<global-img>", "<row_1_col_1>"}, "llava": set()}
    for arch, names in expect.items():
        h = tiny_handle(handles, arch)
        enc = build_inputs(h, PROMPTS[:1], IMAGES[:1])
        (s,) = batch_spans(h, enc, PROMPTS[:1], [1])
        found = set(h.tokenizer.convert_ids_to_tokens(enc["input_ids"][0, list(s.image_markers)].tolist()))
        assert names <= found and not any("video" in t for t in found), arch
        assert h.tokenizer.convert_ids_to_tokens(image_token_ids(h).feature) not in found


def test_span_errors_name_the_row(handles):
    h = _llava(handles)
    enc = build_inputs(h, PROMPTS[:2], IMAGES[:2])
    with pytest.raises(ValueError, match=r"row 1: text marker 'not there'"):
        batch_spans(h, enc, PROMPTS[:2], [1, 1], [None, "not there"])
    with pytest.raises(ValueError, match="attention mask"):
        token_spans(h, enc["input_ids"][0], enc["attention_mask"][0][:-1], PROMPTS[0], n_images=1)


# ---------------------------------------------------------------- capture


def test_capture_equals_plain_transformers(handle: Handle):
    """Layer i == output_hidden_states[i + 1] (i < n - 1); the last layer == a plain forward hook
    on the last decoder layer, which is NOT hidden_states[-1] (that one is after the final norm)."""
    layers = list(range(handle.n_layers))
    cap = capture_batch(handle, PROMPTS, IMAGES, layers=layers, positions=ALL, text_markers=MARKERS)
    assert cap.acts.shape == (3, handle.n_layers, 3, handle.d_model) and cap.acts.dtype == np.float32
    enc = build_inputs(handle, PROMPTS, IMAGES)
    raw = {}
    hook = handle.layers[-1].register_forward_hook(lambda m, a, out: raw.setdefault("x", out))
    try:
        with torch.no_grad():
            hidden = handle.model(**enc, output_hidden_states=True).hidden_states
    finally:
        hook.remove()
    per_layer = [hidden[i + 1] for i in range(handle.n_layers - 1)] + [raw["x"]]  # each (batch, seq, d)
    for r, s in enumerate(cap.spans):
        for i, x in enumerate(per_layer):
            expected = np.stack([x[r, s.last].numpy(), x[r, list(s.image)].mean(0).numpy(),
                                 x[r, list(s.text)].mean(0).numpy()])
            np.testing.assert_allclose(cap.acts[r, i], expected, atol=1e-5, rtol=0, err_msg=f"row {r} layer {i}")
    normed = hidden[-1][:, -1].numpy()  # (batch, d), after the final norm
    assert np.abs(cap.acts[:, -1, 0] - normed).max() > 1e-3


def test_batched_equals_one_at_a_time(handle: Handle):
    layers = list(range(handle.n_layers))
    batched = capture_layers(handle, PROMPTS, IMAGES, layers=layers, positions=ALL, text_markers=MARKERS)
    single = capture_layers(handle, PROMPTS, IMAGES, layers=layers, positions=ALL, text_markers=MARKERS,
                            batch_size=1)
    np.testing.assert_allclose(batched, single, atol=1e-5, rtol=0)
    # Mixed image counts (0, 1, 2) in one batch: no image_mean for the text-only row.
    images = [[], [picture(4)], [picture(5), picture(6, (90, 130))]]
    batched = capture_layers(handle, PROMPTS, images, layers=layers, positions=["last", "text_mean"],
                             text_markers=MARKERS)
    single = capture_layers(handle, PROMPTS, images, layers=layers, positions=["last", "text_mean"],
                            text_markers=MARKERS, batch_size=1)
    np.testing.assert_allclose(batched, single, atol=1e-5, rtol=0)


def test_layer_order_and_subsets_are_kept(handles):
    h = _llava(handles)
    full = capture_layers(h, PROMPTS, IMAGES, layers=[0, 1, 2, 3], positions=ALL, text_markers=MARKERS)
    part = capture_layers(h, PROMPTS, IMAGES, layers=[2, 0], positions=["text_mean", "last"], text_markers=MARKERS)
    np.testing.assert_array_equal(part, full[:, [2, 0]][:, :, [2, 0]])


def test_padding_cannot_leak_even_if_it_holds_nan():
    out = torch.randn(2, 6, 4)
    out[0, :2] = float("nan")  # row 0's padding
    index = torch.tensor([[2, 3, 0], [0, 4, 5]])
    valid = torch.tensor([[True, True, False], [True, True, True]])
    got = reduce_at(out, [(index, valid)])  # (batch, 1, d)
    torch.testing.assert_close(got[0, 0], out[0, 2:4].mean(0))
    torch.testing.assert_close(got[1, 0], out[1, [0, 4, 5]].mean(0))


def test_bad_requests_fail_clearly(handles):
    h = _llava(handles)
    with pytest.raises(ValueError, match=r"row 1: position 'image_mean' has no tokens"):
        capture_layers(h, PROMPTS[:2], [[picture(1)], []], layers=[0], positions=["image_mean"])
    with pytest.raises(ValueError, match=r"layers 0\.\.3"):
        capture_layers(h, PROMPTS[:1], IMAGES[:1], layers=[4], positions=["last"])
    with pytest.raises(ValueError, match="unknown position 'first'.*last, image_mean, text_mean"):
        capture_layers(h, PROMPTS[:1], IMAGES[:1], layers=[0], positions=["first"])
    with pytest.raises(ValueError, match="repeat"):
        capture_layers(h, PROMPTS[:1], IMAGES[:1], layers=[1, 1], positions=["last"])
    with pytest.raises(ValueError, match="text markers"):
        capture_layers(h, PROMPTS[:2], IMAGES[:2], layers=[0], positions=["last"], text_markers=[None])
