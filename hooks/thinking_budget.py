"""A reasoning block's own token budget inside one `generate` call ("budget forcing").

A row whose reply opens a reasoning block (`<think>` as its first tokens, or a prompt that ends
inside an open one, as some chat templates render it) may spend `thinking` tokens on the block, its
tags included: when only the closing tag's tokens are left, they are written for it (every other
token's logit set to -inf, so greedy and sampled decoding both take them), and `thinking_closed` says
so. The reply after the block, or the whole reply of a row without one, gets `reply` tokens; a row
that spends them is stopped there (`cut_off`). generate's own limit is `thinking + reply`.

Each row's state is its own, read from its tokens, so a row gives the same tokens batched as alone.
The tags are matched as token sequences (`tokenizer.encode(tag)`: one special token in Qwen3's
vocabularies); a block the model closes with another tokenization of `</think>` is not seen as
closed here, and is then closed by its budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

OPEN_TAG, CLOSE_TAG = "<think>", "</think>"
BEFORE, THINKING, REPLYING = 0, 1, 2  # a row's phase: no block yet, inside one, in the reply


@dataclass
class _Row:
    phase: int
    trace: int = 0  # tokens of the block so far, its tags included
    reply: int = 0  # tokens of the reply so far (after the block, or all of them without one)
    closed_by_budget: bool = False
    forcing: int = 0  # closing-tag tokens written for the row so far
    ended: bool = False  # it wrote an end-of-sequence token: generate pads it from there
    stopped_at: int | None = None  # new tokens kept when the reply's budget stopped the row
    ids: list[int] = field(default_factory=list)  # the row's new tokens


class ThinkingBudget:
    """The shared state of one call: `processor` goes in generate's logits_processor list,
    `criteria` in its stopping_criteria list."""

    def __init__(self, tokenizer: Any, prompt_ids: Any, *, thinking: int, reply: int, eos: set[int]) -> None:
        self.open_ids = list(tokenizer.encode(OPEN_TAG, add_special_tokens=False))
        self.close_ids = list(tokenizer.encode(CLOSE_TAG, add_special_tokens=False))
        if thinking <= len(self.close_ids):
            raise ValueError(f"a thinking budget of {thinking} tokens cannot hold the closing tag {CLOSE_TAG!r} "
                             f"({len(self.close_ids)} tokens) and any reasoning; give more")
        self.thinking, self.reply_budget, self.eos = thinking, reply, eos
        self.prompt_len = int(prompt_ids.shape[1])
        # (batch, prompt_len), left-padded: a prompt's last tokens are its own
        tails = [tokenizer.decode(row[-8:]) for row in prompt_ids.tolist()]
        # an open tag in the prompt is the template's, not generated: the block's budget counts new tokens
        self.rows = [_Row(THINKING if _opens(tail) else BEFORE) for tail in tails]
        self.processor = _Processor(self)
        self.criteria = _Criteria(self)

    @property
    def max_new_tokens(self) -> int:
        return self.thinking + self.reply_budget

    def advance(self, input_ids: Any) -> None:
        """Read the tokens generated since the last call."""
        new = input_ids[:, self.prompt_len:].tolist()  # (batch, new so far)
        for row, tokens in zip(self.rows, new):
            for token in tokens[len(row.ids):]:
                row.ids.append(token)
                if row.stopped_at is None and not row.ended:
                    self._step(row, token)

    def _step(self, row: _Row, token: int) -> None:
        if token in self.eos:
            row.ended = True
            return
        if row.phase == BEFORE:
            n = len(row.ids)
            if row.ids == self.open_ids[:n]:
                if n == len(self.open_ids):
                    row.phase, row.trace = THINKING, n
                return
            row.phase, row.reply = REPLYING, n  # the reply does not open a block: every token is the reply's
        elif row.phase == THINKING:
            row.trace += 1
            if row.closed_by_budget:
                row.forcing += 1
            if row.forcing == len(self.close_ids) or row.ids[-len(self.close_ids):] == self.close_ids:
                row.phase = REPLYING
        else:
            row.reply += 1
        if row.phase == REPLYING and row.reply >= self.reply_budget:
            row.stopped_at = len(row.ids)

    def forced(self, row: _Row) -> int | None:
        """The closing tag's next token once the block's budget leaves room for the tag alone."""
        if row.phase != THINKING or row.stopped_at is not None or row.ended:
            return None
        if row.trace + len(self.close_ids) < self.thinking:
            return None
        row.closed_by_budget = True
        return self.close_ids[row.forcing]


class _Processor:
    def __init__(self, state: ThinkingBudget) -> None:
        self.state = state

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        self.state.advance(input_ids)
        for i, row in enumerate(self.state.rows):
            token = self.state.forced(row)
            if token is not None:  # (vocab,) row: only the tag's token can be taken, whatever filters ran before
                scores[i] = float("-inf")
                scores[i, token] = 0.0
        return scores


class _Criteria:
    def __init__(self, state: ThinkingBudget) -> None:
        self.state = state

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        self.state.advance(input_ids)
        done = [row.stopped_at is not None for row in self.state.rows]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def _opens(tail: str) -> bool:
    """Whether a prompt's last text leaves a reasoning block open."""
    text = tail.rstrip()
    return text.endswith(OPEN_TAG)
