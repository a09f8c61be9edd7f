"""The organism's image span: each sheet is two image tokens (block, offset), patched whole or in part.

Below the planted layer no position reads another, so patching part of an image pair's span at layer 0
must equal running the target with those input tokens replaced by the source's: two code paths (an
nnsight patch of a layer output, and an edited input through plain transformers), one answer. And the
committed organism must answer such hybrid readings as its causal model says (organism.causal).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from evprobe.bench.manifest import load_item_images, read_items
from evprobe.organism.causal import hybrid_prediction
from evprobe.organism.reader import read_facts

pytestmark = pytest.mark.usefixtures("one_torch_thread")
LETTERS = ["A", "B", "C", "D", "E"]


def _pairs(bench: Path):
    from evprobe.experiments.patching.job import image_pairs

    return image_pairs(read_items(bench))


def test_partial_span_patch_at_layer_0_equals_the_edited_input(small_bench: Path) -> None:
    from evprobe import hooks
    from evprobe.hooks.generation import candidate_token_ids
    from evprobe.hooks.inputs import build_inputs
    from evprobe.hooks.patching import patch_pair
    from evprobe.hooks.spans import token_spans

    handle = hooks.load("organism")
    letter_ids = candidate_token_ids(handle, LETTERS)
    checked = 0
    for source, target in _pairs(small_bench)[:4]:
        src = (source.prompt, load_item_images(small_bench, source.images))
        tgt = (target.prompt, load_item_images(small_bench, target.images))
        enc_s, enc_t = build_inputs(handle, [src[0]], [src[1]]), build_inputs(handle, [tgt[0]], [tgt[1]])
        spans = token_spans(handle, enc_t["input_ids"][0], enc_t["attention_mask"][0], tgt[0], n_images=1)
        assert len(spans.image) == 2  # block, offset
        sets = {"image": list(spans.image), "image_first": list(spans.image[:1]), "image_rest": list(spans.image[1:])}
        result = patch_pair(handle, src, tgt, layers=[0], position_sets=sets, candidates=LETTERS)
        for k, idx in enumerate(sets.values()):
            ids = enc_t["input_ids"].clone()
            ids[0, idx] = enc_s["input_ids"][0, idx]  # the target with those tokens the source's
            with torch.no_grad():
                logits = handle.model(input_ids=ids, attention_mask=enc_t["attention_mask"]).logits[0, -1]
            want = torch.log_softmax(logits.float(), -1)[letter_ids].numpy()
            np.testing.assert_allclose(result.patched[0, k], want, atol=1e-4)
            checked += 1
        # the check can fail: the offset patched where the block is asked for gives another answer
        # whenever the members' blocks differ
        if enc_s["input_ids"][0, spans.image[0]] != enc_t["input_ids"][0, spans.image[0]]:
            assert not np.allclose(result.patched[0, 1], result.patched[0, 2], atol=1e-4)
    assert checked == 12


def test_the_organism_answers_hybrid_readings_as_its_causal_model_says(small_bench: Path) -> None:
    """Every image pair of the small benchmark, both directions, both parts, at layer 0: the patched
    top letter is the predicted member's (the main set's number is in the quickstart's known-answer
    table); both predicted flips and predicted stays occur."""
    from evprobe import hooks
    from evprobe.hooks.inputs import build_inputs
    from evprobe.hooks.patching import patch_pair
    from evprobe.hooks.spans import token_spans

    handle = hooks.load("organism")
    agree, seen = [], set()
    for a, b in _pairs(small_bench):
        for source, target in ((a, b), (b, a)):
            src = (source.prompt, load_item_images(small_bench, source.images))
            tgt = (target.prompt, load_item_images(small_bench, target.images))
            enc = build_inputs(handle, [tgt[0]], [tgt[1]])
            spans = token_spans(handle, enc["input_ids"][0], enc["attention_mask"][0], tgt[0], n_images=1)
            sets = {"image_first": list(spans.image[:1]), "image_rest": list(spans.image[1:])}
            result = patch_pair(handle, src, tgt, layers=[0], position_sets=sets, candidates=LETTERS)
            top_s, top_t = int(result.source.argmax()), int(result.target.argmax())
            for k, part in enumerate(sets):
                who = hybrid_prediction(read_facts(*src), read_facts(*tgt), part)
                if who is None or top_s == top_t:
                    continue
                seen.add(who)
                agree.append(int(result.top()[0, k]) == (top_s if who == "source" else top_t))
    assert seen == {"source", "target"}
    assert len(agree) >= 16 and np.mean(agree) >= 0.95, (np.mean(agree), len(agree))


def test_a_position_set_with_no_token_is_a_one_line_error(small_bench: Path, tmp_path: Path) -> None:
    """Both sheets of an image pair blanked: the eye reads nothing (`unread`, not an image token), so the
    row has no image token and image_first names none; the error names the item and the fix."""
    import shutil

    from PIL import Image

    from evprobe.core.errors import InputError
    from evprobe.experiments.patching.job import PatchingConfig, run_patching

    bench = tmp_path / "bench"
    shutil.copytree(small_bench, bench)
    for item in _pairs(bench)[0]:
        for rel in item.images:
            size = Image.open(bench / rel).size
            Image.new("RGB", size, (255, 255, 255)).save(bench / rel)
    config = PatchingConfig(model="organism", bench=str(bench), out=str(tmp_path / "p"), layers="0",
                            positions=("last", "image_first"), limit_pairs=1, n_boot=20)
    with pytest.raises(InputError, match=r"select\.h1\.\w+: position set image_first has no token in this row "
                                         r"\(image tokens: 0\); drop it from --positions"):
        run_patching(config, progress=False)
