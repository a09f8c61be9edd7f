"""hooks.generation's decode caches give the dynamic cache's tokens, and a batch ends as soon as
every row has ended (transformers' own stop, which the runner relies on instead of a stop of its own)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from evprobe.hooks.generation import DECODE_CACHES, generate, generate_encoded
from evprobe.hooks.inputs import build_inputs
from evprobe.hooks.tiny_models import tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPTS = ["hello there", "a much longer prompt with more words in it", "x"]


def _images(n: int) -> list[list[Image.Image]]:
    rng = np.random.default_rng(0)
    return [[Image.fromarray(rng.integers(0, 255, (60, 60, 3), dtype=np.uint8))] for _ in range(n)]


@pytest.fixture(scope="module")
def llava():
    return tiny("llava")


@pytest.mark.parametrize("cache", [c for c in DECODE_CACHES if c != "dynamic"])
def test_every_decode_cache_gives_the_dynamic_caches_tokens(llava, cache) -> None:
    """float32 on CPU: identical token ids (the compiled step is inductor's CPU code)."""
    args = (llava, PROMPTS, _images(3))
    dynamic = generate(*args, max_new_tokens=12, batch_size=3)
    other = generate(*args, max_new_tokens=12, batch_size=3, decode_cache=cache)
    assert [g.token_ids for g in other] == [g.token_ids for g in dynamic]
    assert all(g.n_new_tokens == 12 for g in dynamic)  # random weights: no row stops early


def test_an_unknown_decode_cache_is_one_line(llava) -> None:
    with pytest.raises(ValueError, match=r"^unknown decode cache 'paged'; choose from dynamic, static, compiled$"):
        generate(llava, ["x"], [[]], max_new_tokens=2, decode_cache="paged")


def test_the_batch_ends_once_every_row_has_ended(llava, monkeypatch) -> None:
    """With every row's first token an end of sequence, generate makes one forward (the prefill);
    with one row left running it makes one per token. So nothing is decoded for a batch whose rows
    have all ended, and an answer-aware stop could only gain by cutting a reply short (which
    changes the record: the parser reads the last ANSWER: line, bench.parse)."""
    enc = build_inputs(llava, PROMPTS, _images(3), position_ids=False, for_generation=True)
    full = [g.token_ids for g in generate_encoded(llava, enc, max_new_tokens=16)]
    first = [t[0] for t in full]
    calls: list[int] = []
    hook = llava.model.model.language_model.register_forward_hook(lambda *a: calls.append(1))
    try:
        monkeypatch.setattr(llava.model.generation_config, "eos_token_id", sorted(set(first)))
        ended = generate_encoded(llava, enc, max_new_tokens=16)
        assert [g.n_new_tokens for g in ended] == [1, 1, 1] and len(calls) == 1
        calls.clear()
        early = sorted({first[0], first[1]} - set(full[2]))  # rows 0 and 1 end at once, row 2 never
        assert early, "the seeded rows share tokens; pick other prompts"
        monkeypatch.setattr(llava.model.generation_config, "eos_token_id", early)
        mixed = generate_encoded(llava, enc, max_new_tokens=16)
        assert mixed[2].n_new_tokens == 16 and len(calls) == 16
    finally:
        hook.remove()
