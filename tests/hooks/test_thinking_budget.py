"""A reasoning block's own budget (hooks.thinking_budget; bench.budgets): the block is closed by its
budget, the reply after it gets the reply's, every row as alone, and a run records both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import evprobe
from evprobe.experiments.cli import main
from evprobe.hooks.chat_templates import chat_template
from evprobe.hooks.generation import generate_encoded
from evprobe.hooks.thinking_budget import CLOSE_TAG
from evprobe.hooks.tiny_text import save_tiny_text_model

# The tiny text model's turn with a template that opens the reasoning block itself, as the templates of
# thinking-only checkpoints do (the reply starts inside <think>).
OPENING = dict(bos="<s>", user="[INST] ", user_end=" [/INST]", assistant="<think>\n", assistant_end="</s>", image="")


@pytest.fixture(scope="module")
def opening_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import AutoTokenizer

    folder = save_tiny_text_model(tmp_path_factory.mktemp("opening") / "model")
    tok = AutoTokenizer.from_pretrained(folder)
    tok.chat_template = chat_template(**OPENING)
    tok.save_pretrained(folder)
    return folder


def _encoded(handle, prompts):
    from evprobe.hooks.inputs import build_inputs

    return build_inputs(handle, prompts, [[] for _ in prompts], position_ids=False, for_generation=True)


PROMPTS = ["Is it heavy?", "Tell me, in a long sentence, about the weather on the hill this morning"]


def test_the_block_is_closed_by_its_budget_and_the_reply_gets_its_own(opening_folder: Path) -> None:
    handle = evprobe.load(str(opening_folder))
    close = handle.tokenizer.encode(CLOSE_TAG, add_special_tokens=False)
    gens = generate_encoded(handle, _encoded(handle, PROMPTS), max_new_tokens=5, thinking_budget=12)
    for g in gens:
        ids = list(g.token_ids)
        end = next(i for i in range(len(ids)) if ids[i:i + len(close)] == close) + len(close)
        assert end <= 12 and g.thinking_closed  # the random model never closes it: its budget does, on time
        assert len(ids) - end == 5 and g.cut_off  # then the reply's 5 tokens, and no end of sequence
        assert CLOSE_TAG in g.text
    # each row as alone (its state is its own)
    for prompt, batched in zip(PROMPTS, gens):
        alone = generate_encoded(handle, _encoded(handle, [prompt]), max_new_tokens=5, thinking_budget=12)[0]
        assert alone.token_ids == batched.token_ids
    # without a thinking budget the same model spends the whole reply budget inside the block
    plain = generate_encoded(handle, _encoded(handle, PROMPTS), max_new_tokens=5)
    assert all(g.n_new_tokens == 5 and g.cut_off and not g.thinking_closed and CLOSE_TAG not in g.text for g in plain)


def test_sampling_cannot_skip_the_closing_tag_and_a_budget_too_small_for_it_is_refused(opening_folder: Path) -> None:
    handle = evprobe.load(str(opening_folder))
    enc = _encoded(handle, PROMPTS)
    from evprobe.hooks.generation import _eos_ids

    eos = _eos_ids(handle)
    gens = [g for seed in range(4) for g in generate_encoded(handle, enc, max_new_tokens=3, thinking_budget=10,
                                                             temperature=1.5, top_p=0.2, seed=seed)]
    ended = [g for g in gens if g.token_ids[-1] in eos]  # a sampled end inside the block: nothing to close
    assert all(not g.thinking_closed and CLOSE_TAG not in g.text for g in ended)
    closed = [g for g in gens if g not in ended]
    assert len(closed) >= 4 and all(g.thinking_closed and CLOSE_TAG in g.text for g in closed)  # filtered out, still written
    n_close = len(handle.tokenizer.encode(CLOSE_TAG, add_special_tokens=False))
    with pytest.raises(ValueError, match="cannot hold the closing tag"):
        generate_encoded(handle, enc, max_new_tokens=3, thinking_budget=n_close)


def test_a_reply_that_opens_no_block_gets_the_reply_budget_alone(tiny_text_folder: Path) -> None:
    handle = evprobe.load(str(tiny_text_folder))  # its template opens no block, and the random model none either
    gens = generate_encoded(handle, _encoded(handle, PROMPTS), max_new_tokens=4, thinking_budget=20)
    assert all(g.n_new_tokens == 4 and g.cut_off and not g.thinking_closed for g in gens)


def test_a_run_with_a_thinking_budget_pins_it_and_records_the_closed_blocks(opening_folder: Path, small_bench: Path,
                                                                             tmp_path: Path) -> None:
    base = ["run", "--model", str(opening_folder), "--bench", str(small_bench), "--requests", "both_given",
            "--limit", "3", "--quiet", "--max-new-tokens", "4"]
    assert main([*base, "--out", str(tmp_path / "budget"), "--thinking-budget", "12"]) == 0
    assert main([*base, "--out", str(tmp_path / "plain")]) == 0
    meta = json.loads((tmp_path / "budget" / "run.json").read_text())
    assert (meta["max_new_tokens"], meta["thinking_budget"]) == (4, 12)
    assert "thinking_budget" not in json.loads((tmp_path / "plain" / "run.json").read_text())
    budget, plain = ([json.loads(x) for x in (tmp_path / k / "records.jsonl").read_text().splitlines()]
                     for k in ("budget", "plain"))
    assert all(r["thinking_closed"] and r["cut_off"] and CLOSE_TAG in r["reply"] for r in budget)
    assert all(r["n_new_tokens"] <= 16 for r in budget)
    # without one, every reply is cut off inside its block: counted as cut off, not unfinished reasoning
    assert all(r["route"] == "invalid:cut_off" and "thinking_closed" not in r for r in plain)
