"""The answer prefix (Handle.answer_prefix) on every tiny architecture: readouts of the answer
teacher-force it after the generation prompt, generation does not, and nothing before it moves.

Real tiny models (random weights, built offline); no mocks.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from evprobe.hooks import Handle, build_inputs, next_token_logprobs, tiny
from evprobe.hooks.capture import capture_layers

PROMPTS = ["Question: Is it red?\nAnswer with a letter.", "Look closely. Question: Which one is largest?"]
MARKERS = ["Is it red?", "Which one is largest?"]
PREFIX = "ANSWER:"
# Letters the tiny byte-level tokenizer merges with a leading space (" A", " F"), as real BPEs do.
LETTERS = ["A", "F"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def picture(seed: int) -> Image.Image:
    im = Image.new("RGB", (96, 96), (255, 255, 255))
    ImageDraw.Draw(im).rectangle([10 + 7 * seed, 12, 50 + 5 * seed, 60], fill=(200, 40 * seed, 30))
    return im


IMAGES = [[picture(1)], [picture(2)]]


def _tail(handle: Handle, enc, row: int, n: int) -> list[int]:
    ids = enc["input_ids"][row][enc["attention_mask"][row].bool()]
    return ids[-n:].tolist()


def test_readouts_end_with_the_prefix_and_generation_rows_do_not(handle: Handle):
    plain = build_inputs(handle, PROMPTS, IMAGES)
    handle = handle.with_answer_prefix(PREFIX)
    prefixed = build_inputs(handle, PROMPTS, IMAGES)
    for_generation = build_inputs(handle, PROMPTS, IMAGES, for_generation=True)
    assert torch.equal(for_generation["input_ids"], plain["input_ids"])
    for row in range(len(PROMPTS)):
        n_plain = int(plain["attention_mask"][row].sum())
        n_prefixed = int(prefixed["attention_mask"][row].sum())
        assert n_prefixed > n_plain
        added = _tail(handle, prefixed, row, n_prefixed - n_plain)
        assert handle.tokenizer.decode(added) == PREFIX


def test_nothing_before_the_prefix_moves_and_the_last_position_is_the_prefix(handle: Handle):
    """A causal model: the image and question states are the same with or without the prefix after
    them (so the text-span alignment found the same tokens), while the last position and the
    next-token log-probs are the prefix's."""
    layers = [0, handle.n_layers - 1]
    positions = ["last", "image_mean", "text_mean"]
    markers = {"text_markers": MARKERS}
    before = capture_layers(handle, PROMPTS, IMAGES, layers=layers, positions=positions, **markers)
    lp_before = next_token_logprobs(handle, PROMPTS, IMAGES, LETTERS)
    handle = handle.with_answer_prefix(PREFIX)
    after = capture_layers(handle, PROMPTS, IMAGES, layers=layers, positions=positions, **markers)
    lp_after = next_token_logprobs(handle, PROMPTS, IMAGES, LETTERS)
    np.testing.assert_allclose(after[:, :, 1:], before[:, :, 1:], atol=2e-5, rtol=0)  # image, question
    assert np.abs(after[:, :, 0] - before[:, :, 0]).max() > 1e-3  # last: the prefix's state
    assert np.abs(lp_after - lp_before).max() > 1e-4
    # batched equals one row at a time with the prefix too (left padding never leaks)
    single = np.concatenate([next_token_logprobs(handle, [p], [i], LETTERS) for p, i in zip(PROMPTS, IMAGES)])
    np.testing.assert_allclose(lp_after, single, atol=1e-5, rtol=0)


def test_candidates_are_read_as_they_continue_the_prefix():
    """The letter is read as it continues the prefix: " A" after "ANSWER:" for a byte-level BPE that
    merges it (a different token from "A" at a row's start); "B" for the organism's word-level
    vocabulary. Where the letters' first continuation token is a shared space, one line says to end the
    prefix with it; a prefix whose last token merges with the letter is refused."""
    from evprobe import hooks
    from evprobe.hooks.generation import candidate_token_ids

    organism = hooks.load("organism")
    vocab = organism.tokenizer.get_vocab()
    assert candidate_token_ids(organism, ["A", "B"]) == [vocab["A"], vocab["B"]]
    h = tiny("llava")
    bare = candidate_token_ids(h, LETTERS)
    h.answer_prefix = PREFIX
    got = candidate_token_ids(h, LETTERS)
    assert [h.tokenizer.decode([i]) for i in got] == [" A", " F"] and got != bare
    with pytest.raises(ValueError, match="cannot be told apart .* end the prefix with that space"):
        candidate_token_ids(h, ["B", "C"])  # " B" and " C" are a space token, then the letter
    h.answer_prefix = "ANSWER: "
    assert [h.tokenizer.decode([i]) for i in candidate_token_ids(h, ["B", "C"])] == ["B", "C"]
    with pytest.raises(ValueError, match="tokenizes differently before candidate 'A'"):
        candidate_token_ids(h, ["A"])  # the trailing space merges with A


def test_load_and_wrap_take_a_prefix_and_the_organism_declares_its_own():
    from evprobe import hooks, wrap
    from evprobe.hooks.fingerprint import loaded_fingerprint

    h = hooks.load("tiny:llava", answer_prefix="Final answer:")
    assert h.answer_prefix == "Final answer:"
    assert loaded_fingerprint(h)["answer_prefix"] == "Final answer:"
    assert wrap(h.model, h.processor, answer_prefix="X").answer_prefix == "X"
    assert wrap(h.model, h.processor).answer_prefix == ""
    assert loaded_fingerprint(wrap(h.model, h.processor))["answer_prefix"] is None  # older folders resume
    assert hooks.load("organism").answer_prefix == "ANSWER:"
    assert hooks.load("organism", answer_prefix="").answer_prefix == ""
    with pytest.raises(TypeError, match="answer_prefix must be a string"):
        wrap(h.model, h.processor, answer_prefix=3)  # type: ignore[arg-type]
