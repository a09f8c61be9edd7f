"""One position vocabulary (hooks.positions) for capture, steering and patching: "image" is each
row's image-feature tokens, the same tokens for all three, on real tiny models.

Known answers: "image" must equal the tokens whose input id is the config's image (or video)
token id, computed here from input_ids alone; an Add at "image" must change a layer's output at
exactly those tokens and nowhere else (read back with a Read after it); capture's "image" mean must
equal the mean of those tokens' values; a patch at "image" must equal the patch at those indices
given by hand. Batched equals one row at a time (rows of different lengths, so the batch pads).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from evprobe.core.video import mark_video
from evprobe.hooks import TINY_ARCHS, build_inputs, load
from evprobe.hooks.capture import capture_layers
from evprobe.hooks.intervention import Add, Read, intervene
from evprobe.hooks.patching import patch_sites
from evprobe.hooks.positions import Frame, RowPositions, resolve_positions
from evprobe.hooks.steer_rows import residual_norms_at
from evprobe.hooks.steering import Steering, steer, steered_generate
from PIL import Image, ImageDraw

from .conftest import tiny_handle
from .nnsight_twins import steered_generate_nnsight
from .test_native_video import clip

pytestmark = pytest.mark.usefixtures("one_torch_thread")
get = tiny_handle

PROMPTS = ["Question: Is it red?\nAnswer yes or no.", "Describe the picture in one short sentence, please, in words."]
LAYER = 1


def picture(seed: int, size: tuple[int, int] = (96, 96)) -> Image.Image:
    im = Image.new("RGB", size, (250, 250, 250))
    ImageDraw.Draw(im).rectangle([6 * seed, 10, 6 * seed + 40, 50], fill=(220, 40 * seed % 255, 30))
    return im


# Rows of different image sizes (Qwen: different token counts) and prompt lengths, so the batch pads.
IMAGES = [[picture(1)], [picture(2, (80, 120))]]


def reference_mask(h, input_ids: torch.Tensor) -> torch.Tensor:
    """(rows, seq) bool from the config's image / video token ids alone (not hooks.spans' lookup)."""
    ids = {getattr(h.model.config, name, None) for name in
           ("image_token_id", "image_token_index", "video_token_id", "video_token_index")} - {None}
    assert ids, f"{h.arch}: the config names no image token id"
    return torch.isin(input_ids, torch.tensor(sorted(ids)))


def read_layer(h, enc, ops=()) -> torch.Tensor:
    """resid_post.L{LAYER} of the forward over `enc`, read after `ops`."""
    with torch.no_grad(), intervene(h, [*ops, Read(f"resid_post.L{LAYER}")]) as run:
        h.model(**enc)
    return run.value(len(ops))


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_image_is_exactly_the_image_token_ids_for_capture_and_the_core(handles, arch) -> None:
    h = get(handles, arch)
    enc = build_inputs(h, PROMPTS, IMAGES)
    ref = reference_mask(h, enc["input_ids"])
    assert ref.any(1).all()
    resolved = resolve_positions(h, enc, PROMPTS, IMAGES, "image")
    assert [list(r) for r in resolved.rows] == [ref[r].nonzero().flatten().tolist() for r in range(2)]
    # the core finds the same tokens from the forward's input_ids: a Read there returns them
    with torch.no_grad(), intervene(h, [Read(f"resid_post.L{LAYER}"), Read(f"resid_post.L{LAYER}", positions="image")]
                                    ) as run:
        h.model(**enc)
    whole, at_image = run.value(0), run.value(1)
    assert len(at_image) == 2
    for r in range(2):
        torch.testing.assert_close(at_image[r], whole[r][ref[r]], atol=0, rtol=0)
    # capture's "image" is the mean over those tokens, and equals its "image_mean"
    cap = capture_layers(h, PROMPTS, IMAGES, layers=[LAYER], positions=["image", "image_mean", "all"])
    np.testing.assert_array_equal(cap[:, 0, 0], cap[:, 0, 1])
    real = enc["attention_mask"].bool()
    for r in range(2):
        np.testing.assert_allclose(cap[r, 0, 0], whole[r][ref[r]].float().mean(0).numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(cap[r, 0, 2], whole[r][real[r]].float().mean(0).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", ["llava", "qwen2_5_vl", "gemma3"])
def test_steering_at_image_edits_exactly_the_image_tokens_batched_equal_to_single(handles, arch) -> None:
    h = get(handles, arch)
    enc = build_inputs(h, PROMPTS, IMAGES)
    ref = reference_mask(h, enc["input_ids"])
    v = np.random.default_rng(0).normal(size=h.d_model)
    s = Steering(v, layer=LAYER, alpha=5.0, positions="image")
    base = read_layer(h, enc)
    with steer(h, s):
        steered = read_layer(h, enc)
    changed = (steered - base).abs().amax(-1) > 0  # (rows, seq)
    assert torch.equal(changed, ref)
    delta = torch.tensor(5.0 * s.direction, dtype=base.dtype)
    torch.testing.assert_close((steered - base)[ref], delta.expand(int(ref.sum()), -1), atol=1e-5, rtol=1e-5)
    # a later layer, batched vs each row alone (left padding: row r's tokens are the batch row's last n)
    with steer(h, s), torch.no_grad(), intervene(h, [Read(f"resid_post.L{h.n_layers - 1}")]) as run:
        h.model(**enc)
    batched = run.value(0)
    for r in range(2):
        one = build_inputs(h, PROMPTS[r:r + 1], IMAGES[r:r + 1])
        with steer(h, s), torch.no_grad(), intervene(h, [Read(f"resid_post.L{h.n_layers - 1}")]) as run:
            h.model(**one)
        n = one["input_ids"].shape[1]
        torch.testing.assert_close(batched[r, -n:][ref[r, -n:]], run.value(0)[0][ref[r, -n:]], atol=1e-4, rtol=1e-4)


def test_generation_edits_the_prompt_pass_only_at_image(handles) -> None:
    """A generated token is never an image token: an every-step Steering at "image" edits the
    prompt pass and leaves each decode step alone (the log says so)."""
    h = get(handles, "llava")
    s = Steering(np.ones(h.d_model), layer=LAYER, alpha=3.0, positions="image")
    with steer(h, s) as log:
        steered_generate(h, PROMPTS[:1], IMAGES[:1], None, max_new_tokens=3, min_new_tokens=3)
    assert [edited for *_, edited in log.calls] == [True, False, False]
    with pytest.raises(ValueError, match="differ by row: use steered_generate"):
        steered_generate_nnsight(h, PROMPTS[:1], IMAGES[:1], s, max_new_tokens=2)


def test_residual_norm_at_image_is_the_mean_norm_of_the_image_tokens(handles) -> None:
    h = get(handles, "qwen2_5_vl")
    enc = build_inputs(h, PROMPTS, IMAGES)
    ref = reference_mask(h, enc["input_ids"])
    norm, count = residual_norms_at(h, PROMPTS, IMAGES, [LAYER], "image", batch_size=2)[LAYER]
    values = read_layer(h, enc).double().norm(dim=-1)[ref]
    assert count == int(ref.sum())
    assert norm == pytest.approx(float(values.mean()), rel=1e-9)


def test_patching_at_named_positions_equals_the_same_indices_by_hand(handles) -> None:
    h = get(handles, "llava")
    prompt = "Which option? A. stop B. go C. wait. Reply with the letter."
    source, target = (prompt, [picture(1)]), (prompt, [picture(5)])
    enc = build_inputs(h, [prompt], [target[1]])
    image = reference_mask(h, enc["input_ids"])[0].nonzero().flatten().tolist()
    text = list(resolve_positions(h, enc, [prompt], [target[1]], "text").rows[0])
    kw = {"sites": ["resid_post.L1", "resid_post.L2"], "candidates": ["A", "B", "C"]}
    named = patch_sites(h, source, target, position_sets={"image": "image", "text": "text", "last": "last"}, **kw)
    by_hand = patch_sites(h, source, target, position_sets={"image": image, "text": text, "last": [-1]}, **kw)
    np.testing.assert_array_equal(named.patched, by_hand.patched)
    assert named.position_sets == ("image", "text", "last")
    # the image patch moves the target toward the source (the two differ only in their images)
    assert np.abs(named.patched[0, 0] - named.target).max() > 0


def test_a_clips_frames_as_positions_of_steering_and_patching(handles) -> None:
    """A clip read as one video (llava_next_video): "image" is its video tokens, and Frame(k),
    resolved per row, edits only frame k's tokens: the k-th of the equal groups of "image"."""
    h = get(handles, "llava_next_video")
    rows = [mark_video(clip(1, 3), "a", 2.0), mark_video(clip(2, 3), "b", 2.0)]
    enc = build_inputs(h, PROMPTS, rows)
    ref = reference_mask(h, enc["input_ids"])
    assert "pixel_values_videos" in enc and ref.any(1).all()
    assert [list(r) for r in resolve_positions(h, enc, PROMPTS, rows, "image").rows] == \
        [ref[r].nonzero().flatten().tolist() for r in range(2)]
    frame = resolve_positions(h, enc, PROMPTS, rows, Frame(1))
    v = np.random.default_rng(1).normal(size=h.d_model)
    changed = (read_layer(h, enc, [Add(f"resid_post.L{LAYER}", v, positions=frame)]) - read_layer(h, enc)).abs().amax(-1) > 0
    for r in range(2):
        image = ref[r].nonzero().flatten().tolist()
        per = len(image) // 3
        assert changed[r].nonzero().flatten().tolist() == image[per:2 * per]
    # patching at Frame(1) equals patching at its indices by hand
    prompt, kw = PROMPTS[0], {"sites": ["resid_post.L2"], "candidates": ["A", "B"]}
    source, target = (prompt, rows[1]), (prompt, rows[0])
    one = build_inputs(h, [prompt], [rows[0]])
    idx = list(resolve_positions(h, one, [prompt], [rows[0]], Frame(1)).rows[0])
    np.testing.assert_array_equal(patch_sites(h, source, target, position_sets={"f1": Frame(1)}, **kw).patched,
                                  patch_sites(h, source, target, position_sets={"f1": idx}, **kw).patched)


def test_image_refused_on_a_text_only_model_in_one_line(tiny_text_folder) -> None:
    h = load(str(tiny_text_folder))
    prompts, none = ["Is it red?"], [[]]
    enc = build_inputs(h, prompts, none)
    why = "position 'image': .* has no image tokens \\(a text-only model\\)"
    with pytest.raises(ValueError, match=why), intervene(h, [Add("resid_post.L1", np.ones(h.d_model), positions="image")]):
        pass
    with pytest.raises(ValueError, match=why):
        capture_layers(h, prompts, none, layers=[0], positions=["image"])
    with pytest.raises(ValueError, match=why):
        resolve_positions(h, enc, prompts, none, "image")
    with pytest.raises(ValueError, match="position set 'img' of the target: " + why):
        patch_sites(h, (prompts[0], []), (prompts[0], []), sites=["resid_post.L1"], position_sets={"img": "image"},
                    candidates=["A"])
    with pytest.raises(ValueError, match=why):
        residual_norms_at(h, prompts, none, [1], "image")


def test_bad_positions_are_refused_naming_the_row_or_the_fix(handles) -> None:
    h = get(handles, "llava")
    rows = [[picture(1)], []]
    enc = build_inputs(h, PROMPTS, rows)
    add = Add(f"resid_post.L{LAYER}", np.ones(h.d_model), positions="image")
    with pytest.raises(ValueError, match="position 'image': row 1 of the batch has no such token"):
        read_layer(h, enc, [add])
    read_layer(h, enc, [Add(f"resid_post.L{LAYER}", np.ones(h.d_model), positions="image", rows=(0,))])  # row 0 only
    with pytest.raises(ValueError, match="row 1: position 'image' has no tokens"):
        capture_layers(h, PROMPTS, rows, layers=[0], positions=["image"])
    with pytest.raises(ValueError, match="position 'text' is not one a forward finds by itself.*resolve_positions"):
        Add("resid_post.L1", np.ones(h.d_model), positions="text")
    with pytest.raises(ValueError, match="position Frame\\(index=0\\) is not one .*resolve_positions"):
        Steering(np.ones(h.d_model), layer=1, alpha=1.0, positions=Frame(0))
    text = resolve_positions(h, enc, PROMPTS, rows, "text")
    one = build_inputs(h, PROMPTS[:1], rows[:1])
    with pytest.raises(ValueError, match="'text' was found for 2 rows .* resolve it on this forward's inputs"):
        read_layer(h, one, [Add(f"resid_post.L{LAYER}", np.ones(h.d_model), positions=text)])
    with pytest.raises(ValueError, match="residual_norms_at batches the prompts itself"):
        residual_norms_at(h, PROMPTS, rows, [1], text)
    with pytest.raises(ValueError, match="position 'text': row 1 needs at least one index in 0..4, got \\[\\]"):
        RowPositions(((0, 1), ()), seq_len=5, label="text")
    with pytest.raises(ValueError, match="row 0 needs at least one index in 0..4, got \\[5\\]"):
        RowPositions(((5,),), seq_len=5, label="text")
    with pytest.raises(ValueError, match="vision stream"):
        Add("vision_block.L0", np.ones(4), positions="image")
