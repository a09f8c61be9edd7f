"""The organism's vocabulary: a few words, and every number as one token of a log-spaced bin.

A number x > 0 of quantity T becomes the one token `<T:k>`, k = round((log10 x - LOG_MIN) /
LOG_STEP) clamped to the range; 0 is `<zero>`. Quantities stated in the prompt have their types
(mass candidates, friction candidates, g, J, q, costs, ...); values the eye reads off a sheet have
two tokens of image types, so the tokens that carry image content are known (what `hooks.spans` calls
the organism's image positions): the reading's block `<seen_T:k>` (k a multiple of BLOCK_BINS: the
0.4-decade block the reading lies in, its lower edge) and its offset within the block `<fine_T:f>`
(f = 0 .. BLOCK_BINS - 1, in 0.01-decade steps), like the two digits of a reading. Candidate values
differ by a factor 2 to 4 (0.3 to 0.6 decades), so neither token alone tells which candidate a sheet
shows: the block is often shared by both candidates, and the offset repeats every 0.4 decades. The
transformer must combine the two positions (`reading_tokens`).

Bin width 0.01 in log10 is a relative error of at most 1.16%; the benchmark's smallest threshold
margin is 17.2% and candidate values differ by a factor of 2 to 4, so binning never changes an
answer. Values outside [0.01, 100] are clamped (the benchmark's quantities lie in about
[0.02, 70]).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

LOG_MIN = -2.0
LOG_MAX = 2.0
LOG_STEP = 0.01
N_BINS = round((LOG_MAX - LOG_MIN) / LOG_STEP) + 1  # 401

# Every number is typed by the quantity it is (its own token range): the reader knows what each
# number in the prompt means, so the model need not route a label word to the number after it.
STATED = ("mass", "friction", "restitution", "stiffness", "g", "J", "h", "q", "cost", "num")
SEEN = ("seen_mass", "seen_friction", "seen_restitution", "seen_stiffness", "seen_g")  # a reading's block
FINE = ("fine_mass", "fine_friction", "fine_restitution", "fine_stiffness", "fine_g")  # its offset in the block
NUMBER_TYPES = STATED + SEEN + FINE
BLOCK_BINS = 40  # bins per block: 0.4 decades

# The reply starts with this token; the letter comes at the next step, so the answer is generated as
# several tokens and the state that predicts the letter is a generated position's (the prefix's).
ANSWER_PREFIX = "ANSWER:"

SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>"]
WORDS = [
    # systems
    "sliding", "bouncing", "spring",
    # evidence
    "unread", "none",
    # menus: a reply letter; each menu row is one token <letter:what>
    "options", "A", "B", "C", "D", "E",
    # tasks (the last prompt token)
    "select", "answer", "recover", "read", "task",
    "<zero>",
    # the reply: ANSWER_PREFIX, then a letter, then <eos>
    ANSWER_PREFIX,
]
LETTERS = ("A", "B", "C", "D", "E")
# What a menu row offers: an action, an answer, or "value" (followed by the number offered).
OPTION_WORDS = ("stop", "mass_test", "other_test", "fall_test", "report", "yes", "no", "undetermined", "value")
OPTIONS = [f"<{letter}:{what}>" for letter in LETTERS for what in OPTION_WORDS]


def number_bin(x: float) -> int | None:
    """The bin of x > 0 (clamped to 0 .. N_BINS - 1); None for 0, negatives, NaN and infinities."""
    if not x > 0.0 or math.isinf(x):
        return None
    return min(max(round((math.log10(x) - LOG_MIN) / LOG_STEP), 0), N_BINS - 1)


def number_token(kind: str, x: float) -> str:
    """The token of x > 0 as quantity `kind` (one of NUMBER_TYPES); 0 is `<zero>`."""
    if x == 0.0:
        return "<zero>"
    k = number_bin(x)
    return "<unk>" if k is None else f"<{kind}:{k}>"


def reading_tokens(prop: str, x: float) -> list[str]:
    """A sheet's reading x of property `prop` as its two image tokens: block, then offset.

    With k the bin of x (`number_bin`), the block token is `<seen_prop:BLOCK_BINS * (k //
    BLOCK_BINS)>` and the offset token `<fine_prop:k % BLOCK_BINS>`; 0 and bad values are one token
    (`<zero>`, `<unk>`), as in number_token."""
    k = number_bin(x)
    if k is None:
        return [number_token(f"seen_{prop}", x)]
    return [f"<seen_{prop}:{BLOCK_BINS * (k // BLOCK_BINS)}>", f"<fine_{prop}:{k % BLOCK_BINS}>"]


def bin_centers() -> list[float]:
    """log10 of each bin's centre, bin 0 first."""
    return [LOG_MIN + k * LOG_STEP for k in range(N_BINS)]


def vocabulary() -> list[str]:
    """Every token in id order: specials, words, then N_BINS bins of each number type."""
    return SPECIAL + WORDS + OPTIONS + [f"<{t}:{k}>" for t in NUMBER_TYPES for k in range(N_BINS)]


@lru_cache(maxsize=1)
def token_ids() -> dict[str, int]:
    return {t: i for i, t in enumerate(vocabulary())}


def bin_start(kind: str) -> int:
    """Id of bin 0 of number type `kind`."""
    return token_ids()[f"<{kind}:0>"]


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer over `vocabulary()`: tokens are separated by spaces."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab=token_ids(), unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins tokens with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",
    )
