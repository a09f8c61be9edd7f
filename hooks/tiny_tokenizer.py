"""A small byte-level BPE tokenizer built offline for the tiny models.

Every tiny architecture shares the same learned merges (trained on the short
built-in corpus below) and adds its own special tokens (chat markers, image
placeholders) on top. Training is deterministic: the same corpus and vocab size
give the same vocabulary on every run, so tiny models built twice agree.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

# Learned (non-special) vocabulary size: 256 byte symbols plus merges.
BPE_VOCAB_SIZE = 512

# Short English text in the register of the benchmark prompts (questions about
# images, measurements, options). Only the merges depend on it.
_CORPUS = """\
Look at the image and answer the question. Which option is correct? Answer with the letter only.
A. The red square is larger than the blue circle.
B. The blue circle is larger than the red square.
C. They are the same size.
D. There is not enough information to decide.
E. Take another measurement before answering.
The picture shows a green rectangle on the left and a yellow rectangle on the right.
How many objects are in the picture? There are three objects: two squares and one circle.
What colour is the largest shape? The largest shape is red.
You measured the length of the table: it is 1.25 metres. The threshold is 1.5 metres.
Is the evidence enough to decide, or should you measure again? The evidence is enough.
Describe the scene in one sentence. A small dog sits next to a white chair in a bright room.
The number of items in each row is 4, 7, 12 and 20. The answer is 12.
Please read the chart carefully, compare the values, then give your final answer.
Question: what is shown in the top left corner of the image? Answer: a black triangle.
Think step by step. First, find the objects. Second, compare them. Finally, choose an option.
the of and to in is it that for on with as was at by this be are from or an which
one two three four five six seven eight nine ten hundred thousand zero
"""


@lru_cache(maxsize=1)
def _trained_bpe_json() -> str:
    """Train the shared byte-level BPE once per process; returns its JSON."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB_SIZE,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Repeat the corpus so that merge counts are not all ties.
    tok.train_from_iterator(_CORPUS.splitlines() * 3, trainer=trainer)
    return tok.to_str()


def build_tokenizer(
    *,
    special_tokens: list[str],
    named: dict[str, str],
    extra_named: dict[str, str] | None = None,
) -> PreTrainedTokenizerFast:
    """Wrap the shared BPE plus `special_tokens` in a PreTrainedTokenizerFast.

    special_tokens: every special token of the architecture, in id order (they
        get ids BPE_VOCAB_SIZE, BPE_VOCAB_SIZE + 1, ...).
    named: standard attributes (bos_token, eos_token, pad_token, ...).
    extra_named: model-specific attributes (image_token, boi_token, ...), passed
        as `extra_special_tokens` so processors can read `tokenizer.image_token`.
    """
    from tokenizers import AddedToken, Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_str(_trained_bpe_json())
    if tok.get_vocab_size() != BPE_VOCAB_SIZE:
        raise RuntimeError(f"BPE vocabulary has {tok.get_vocab_size()} entries, expected {BPE_VOCAB_SIZE}")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special_tokens])
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        padding_side="left",
        extra_special_tokens=dict(extra_named or {}),
        **named,
    )
    missing = [t for t in special_tokens if wrapped.convert_tokens_to_ids(t) is None]
    if missing:
        raise RuntimeError(f"special tokens missing from the tiny tokenizer: {missing}")
    return wrapped
