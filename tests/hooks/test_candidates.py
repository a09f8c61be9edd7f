"""Candidates explained (issue 54, item 5): two candidates read by one token are refused in one line
naming each one's token as text (the unknown token said to be outside the vocabulary) and the fix; a
candidate read by the unknown token is refused; a candidate of several tokens is read by its first,
said once per call in a warning naming its tokens. On real tiny tokenizers: the tiny GPT-2's
byte-level BPE and the organism's word-level vocabulary (an unknown token)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import evprobe
from evprobe.core.errors import InputError
from evprobe.hooks.generation import (
    MultiTokenCandidateWarning,
    candidate_notes,
    candidate_token_ids,
    next_token_logprobs,
)
from evprobe.hooks.tiny_text import save_tiny_base_model


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory):
    return evprobe.load(str(save_tiny_base_model(tmp_path_factory.mktemp("base") / "gpt2", arch="gpt2")))


@pytest.fixture(scope="module")
def organism():
    return evprobe.load("organism")


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


def test_candidates_sharing_an_unknown_token_are_refused_saying_so(organism) -> None:
    assert organism.tokenizer.convert_ids_to_tokens(organism.tokenizer.unk_token_id) == "<unk>"
    with pytest.raises(InputError) as err:
        candidate_token_ids(organism, ["good", "bad"])  # neither word is in the organism's vocabulary
    assert one_line(err) == ("candidates ['good', 'bad'] cannot be told apart after the answer prefix 'ANSWER:': "
                             "'good' and 'bad' both start with '<unk>' (not in the vocabulary); use words in the "
                             "tokenizer's vocabulary (tokenizer.get_vocab())")


def test_one_unknown_candidate_is_refused(organism) -> None:
    with pytest.raises(InputError, match=r"^candidate 'good' starts with '<unk>' \(not in the vocabulary\) after the "
                                         r"answer prefix 'ANSWER:', so its log-probability would be the unknown "
                                         r"token's; use words in the tokenizer's vocabulary") as err:
        candidate_token_ids(organism, ["A", "good"])
    one_line(err)


def test_candidates_sharing_a_known_first_token_name_it(gpt2, organism) -> None:
    with pytest.raises(InputError) as err:
        candidate_token_ids(gpt2, ["yes", "yellow"])
    assert one_line(err) == ("candidates ['yes', 'yellow'] cannot be told apart: 'yes' and 'yellow' both start with "
                             "'y'; give candidates whose first tokens differ")
    with pytest.raises(InputError, match="'A' and 'A B' both start with 'A'; give candidates whose first tokens differ"):
        candidate_token_ids(organism, ["A", "A B"])


def test_a_shared_space_after_the_prefix_names_the_prefix_to_use(gpt2) -> None:
    h = gpt2.with_answer_prefix("Answer:")
    with pytest.raises(InputError) as err:
        candidate_token_ids(h, ["B", "C"])  # " B" and " C" are a space token, then the letter
    assert one_line(err).endswith("'B' and 'C' both start with 'Ġ'; end the prefix with that space "
                                  "(answer_prefix='Answer: ')")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one token each after the suggested prefix: no warning either
        assert len(set(candidate_token_ids(gpt2.with_answer_prefix("Answer: "), ["B", "C"]))) == 2


def test_a_multi_token_candidate_is_read_by_its_first_said_once(gpt2) -> None:
    tok = gpt2.tokenizer
    assert tok.convert_ids_to_tokens(tok("yes", add_special_tokens=False)["input_ids"]) == ["y", "es"]
    with pytest.warns(MultiTokenCandidateWarning) as caught:
        ids = candidate_token_ids(gpt2, ["A", "yes", "no"])
    assert len(caught) == 1  # one warning per call, every such candidate in it
    text = str(caught[0].message)
    assert text == ("candidate 'yes' spans 2 tokens ('y', 'es') and is read by its first, 'y'; "
                    "candidate 'no' spans 2 tokens ('n', 'o') and is read by its first, 'n'")
    assert ids == [tok.convert_tokens_to_ids(t) for t in ("A", "y", "n")]
    assert candidate_notes(gpt2, ["A", "yes", "no"]) == tuple(text.split("; "))
    assert candidate_notes(gpt2, ["A", "B"]) == ()
    with pytest.warns(MultiTokenCandidateWarning, match="'yes' spans 2 tokens"):  # the reading path says it too
        lp = next_token_logprobs(gpt2, ["Is it? "], None, ["A", "yes"])
    assert lp.shape == (1, 2) and np.isfinite(lp).all()


def test_single_token_candidates_are_silent(gpt2, organism) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(candidate_token_ids(organism, ["A", "B", "C"])) == 3
        assert len(candidate_token_ids(gpt2, ["A", "B"])) == 2


def test_an_empty_candidate_is_refused(gpt2) -> None:
    with pytest.raises(InputError, match="candidate '' tokenizes to nothing"):
        candidate_token_ids(gpt2, ["A", ""])
