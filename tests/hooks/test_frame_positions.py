"""Per-frame positions (hooks.positions.Frame): a clip fed as frames is one image per frame, and
Frame(k) reads the k-th image's feature tokens, on every tiny architecture, with real forwards.

Known answer: the language models are causal and every tiny vision tower encodes an image on its
own, so repainting frame k changes what Frame(k) reads and leaves Frame(j) for every j < k exactly as
it was; a split of the tokens that put any of frame k's tokens into an earlier group would show a
change there. Batched equals one row at a time (rows of different text lengths, so the batch pads).
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageDraw

from evprobe.hooks import TINY_ARCHS
from evprobe.hooks.capture import capture_layers
from evprobe.hooks.positions import Frame, parse_position, position_label, row_indices
from evprobe.hooks.spans import batch_spans
from evprobe.hooks import build_inputs

from .conftest import tiny_handle

pytestmark = pytest.mark.usefixtures("one_torch_thread")
get = tiny_handle

N_FRAMES = 4


def frames(seed: int, n: int = N_FRAMES, size: tuple[int, int] = (64, 64)) -> list[Image.Image]:
    out = []
    for k in range(n):  # a square moving right, one step a frame
        im = Image.new("RGB", size, (250, 250, 250))
        ImageDraw.Draw(im).rectangle([4 + 9 * k, 8 + seed, 24 + 9 * k, 28 + seed], fill=(200, 40 * seed % 255, 30))
        out.append(im)
    return out


PROMPTS = ["What moves in these frames?", "Describe the motion you see across the frames, from first to last."]
POSITIONS = [Frame(0), Frame(1), Frame(-1), "image_mean", "last"]


def test_frame_positions_parse_and_name_themselves() -> None:
    assert parse_position("frame:3") == Frame(3) and parse_position("frame:-1") == Frame(-1)
    assert position_label(Frame(-2)) == "frame[-2]"
    with pytest.raises(ValueError, match="frame:K needs an integer image index"):
        parse_position("frame:last")
    with pytest.raises(TypeError, match="Frame index must be an integer"):
        Frame(1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_frame_k_reads_the_kth_images_tokens_and_batched_equals_single(handles, arch) -> None:
    h = get(handles, arch)
    rows = [frames(1), frames(2)]
    got = capture_layers(h, PROMPTS, rows, layers=[0, h.n_layers - 1], positions=POSITIONS)  # (rows, layers, pos, d)
    for r in range(2):
        one = capture_layers(h, PROMPTS[r:r + 1], rows[r:r + 1], layers=[0, h.n_layers - 1], positions=POSITIONS)
        np.testing.assert_allclose(got[r], one[0], rtol=1e-4, atol=1e-5)
    # the frames' groups tile the image span: their means average to image_mean
    every = capture_layers(h, PROMPTS[:1], rows[:1], layers=[0], positions=[Frame(k) for k in range(N_FRAMES)])
    np.testing.assert_allclose(every[0, 0].mean(0), got[0, 0, 3], rtol=1e-4, atol=1e-5)

    repainted = [frames(1)[:2] + [frames(5)[2]] + frames(1)[3:]]  # frame 2 changed, the others as they were
    before = capture_layers(h, PROMPTS[:1], rows[:1], layers=[h.n_layers - 1],
                            positions=[Frame(k) for k in range(N_FRAMES)])
    after = capture_layers(h, PROMPTS[:1], repainted, layers=[h.n_layers - 1],
                           positions=[Frame(k) for k in range(N_FRAMES)])
    np.testing.assert_array_equal(after[0, 0, :2], before[0, 0, :2])  # frames 0 and 1: not one bit moved
    assert np.abs(after[0, 0, 2] - before[0, 0, 2]).max() > 1e-4  # frame 2 reads its new pixels


def test_a_frame_the_row_lacks_or_a_row_of_mixed_sizes_is_refused_naming_the_row(handles) -> None:
    h = get(handles, "qwen2_5_vl")
    with pytest.raises(ValueError, match=r"row 0: position 'frame\[4\]': image index 4 is out of range: the row has 4"):
        capture_layers(h, PROMPTS[:1], [frames(1)], layers=[0], positions=[Frame(4)])
    mixed = [frames(1, 1) + frames(1, 1, (64, 96))]
    enc = build_inputs(h, PROMPTS[:1], mixed)
    spans = batch_spans(h, enc, PROMPTS[:1], [2], None)
    with pytest.raises(ValueError, match=r"row 0: position 'frame\[0\]': its images differ in size"):
        row_indices(h, enc, PROMPTS[:1], [2], spans, [Frame(0)], image_sizes=[[im.size for im in mixed[0]]])
