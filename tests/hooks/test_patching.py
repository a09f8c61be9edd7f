"""Activation patching between aligned runs, on every tiny architecture."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from evprobe.hooks import TINY_ARCHS, tiny
from evprobe.hooks.generation import candidate_token_ids
from evprobe.hooks.inputs import build_inputs
from evprobe.hooks.patching import patch_pair

LETTERS = ["A", "B", "C", "D", "E"]
PROMPT = "Which option? A. stop B. mass test C. other test D. free fall E. report. Reply with the letter."


def sheet(mark: int) -> Image.Image:
    """Same size, different content: the two members of an image pair."""
    im = Image.new("RGB", (672, 672), "white")
    ImageDraw.Draw(im).rectangle([mark, 300, mark + 120, 420], fill=(255, 0, 255))
    return im


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def built() -> dict:
    return {}


@pytest.fixture(params=TINY_ARCHS)
def handle(request, built):
    if request.param not in built:
        built[request.param] = tiny(request.param)
    return built[request.param]


def test_patching_everything_at_the_last_layer_gives_the_source(handle) -> None:
    src, tgt = (PROMPT, [sheet(50)]), (PROMPT, [sheet(450)])
    n = build_inputs(handle, [PROMPT], [[sheet(50)]])["input_ids"].shape[1]
    last = handle.n_layers - 1
    result = patch_pair(handle, src, tgt, layers=[0, last], position_sets={"all": range(n), "last": [-1]},
                        candidates=LETTERS)
    assert result.patched.shape == (2, 2, 5)
    # every position, last layer: the source's numbers (within the batch's float32 reduction noise)
    np.testing.assert_allclose(result.patched[1, 0], result.source, atol=1e-5)
    if handle.arch == "qwen3_vl":
        # DeepStack adds visual features to the residual stream after early decoder layers, so
        # the image still reaches the target after layer 0: patching layer 0 is not enough.
        assert not np.allclose(result.patched[0, 0], result.source, atol=1e-3)
    else:
        np.testing.assert_allclose(result.patched[0, 0], result.source, atol=1e-5)  # every position, first layer
    assert result.top().shape == (2, 2)


def test_patching_a_run_into_itself_changes_nothing(handle) -> None:
    same = (PROMPT, [sheet(200)])
    result = patch_pair(handle, same, same, layers=list(range(handle.n_layers)), position_sets={"last": [-1]},
                        candidates=LETTERS)
    for layer_row in result.patched:
        np.testing.assert_allclose(layer_row[0], result.target, atol=1e-6)


def test_nnsight_patch_equals_a_plain_forward_hook(handle) -> None:
    src_in = build_inputs(handle, [PROMPT], [[sheet(50)]])
    tgt_in = build_inputs(handle, [PROMPT], [[sheet(450)]])
    layer, index = handle.n_layers // 2, [-3, -2, -1]
    saved = {}

    def keep(_mod, _inp, out):
        saved["out"] = out.detach().clone()

    h = handle.layers[layer].register_forward_hook(keep)
    with torch.inference_mode():
        handle.model(**src_in)
    h.remove()

    def put(_mod, _inp, out):
        out = out.clone()
        out[:, index, :] = saved["out"][:, index, :]
        return out

    h = handle.layers[layer].register_forward_hook(put)
    with torch.inference_mode():
        logits = handle.model(**tgt_in).logits[:, -1, :]
    h.remove()
    ids = candidate_token_ids(handle, LETTERS)
    want = torch.log_softmax(logits.float(), dim=-1)[0, ids].double().numpy()
    got = patch_pair(handle, (PROMPT, [sheet(50)]), (PROMPT, [sheet(450)]), layers=[layer],
                     position_sets={"end": index}, candidates=LETTERS)
    np.testing.assert_allclose(got.patched[0, 0], want, atol=1e-6)


def test_batched_patches_equal_one_patch_per_trace(handle) -> None:
    """Each batch row patches its own (layer, position set); padding cannot leak (the rows are
    one prompt repeated), and a row must not see another row's patch."""
    src, tgt = (PROMPT, [sheet(50)]), (PROMPT, [sheet(450)])
    kw = dict(layers=list(range(handle.n_layers)), position_sets={"last": [-1], "end": [-3, -2], "first": [0]},
              candidates=LETTERS)
    one = patch_pair(handle, src, tgt, max_rows=1, **kw)
    for rows in (4, 64):
        np.testing.assert_allclose(patch_pair(handle, src, tgt, max_rows=rows, **kw).patched, one.patched, atol=1e-5)


def test_misaligned_runs_and_bad_layers_are_refused() -> None:
    handle = tiny("llava")
    with pytest.raises(ValueError, match="positions do not align"):
        patch_pair(handle, (PROMPT, [sheet(1)]), (PROMPT + " Longer.", [sheet(2)]), layers=[0],
                   position_sets={"last": [-1]}, candidates=LETTERS)
    with pytest.raises(ValueError, match="layer 9 out of range"):
        patch_pair(handle, (PROMPT, [sheet(1)]), (PROMPT, [sheet(2)]), layers=[9],
                   position_sets={"last": [-1]}, candidates=LETTERS)
