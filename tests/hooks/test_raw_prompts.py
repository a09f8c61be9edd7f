"""Base language models and raw prompts through capture, steering, patching, probes (issue 28 item 1).

Two tiny BASE models built offline (GPT-2 style and Llama style, no chat template) and the tiny
text Llama with a chat template: where each named position lands for a chat and a raw prompt,
checked against plain `output_hidden_states` of the tokenizer's own encoding of the prompt."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import evprobe
from evprobe.hooks.fingerprint import loaded_fingerprint
from evprobe.hooks.inputs import build_inputs, render_prompts
from evprobe.hooks.patching import patch_pair
from evprobe.hooks.steering import Steering, option_logprobs, steered_generate
from evprobe.hooks.tiny_text import BASE_ARCHS, save_tiny_base_model

PROMPTS = ["The movie was great", "I hated every minute of this film", "It was fine"]


@pytest.fixture(scope="module")
def base_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("base")
    return {arch: save_tiny_base_model(root / arch, arch=arch) for arch in BASE_ARCHS}


def _hidden(handle, text: str) -> tuple[list[int], tuple[torch.Tensor, ...]]:
    """The tokenizer's own ids of `text` and transformers' hidden states of that row alone."""
    enc = handle.tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        out = handle.model(**enc, output_hidden_states=True)
    return enc["input_ids"][0].tolist(), out.hidden_states


@pytest.mark.parametrize("arch", BASE_ARCHS)
def test_a_base_model_takes_raw_prompts_and_positions_land_on_the_prompt(base_folders, arch) -> None:
    h = evprobe.load(str(base_folders[arch]))
    assert h.prompt_format == "raw" and not h.processor.chat_template  # no template: raw by default
    assert render_prompts(h, PROMPTS, [[]] * 3) == PROMPTS  # the string itself, nothing around it
    acts = evprobe.capture(h, PROMPTS, layers=[0, 2], positions=["last", 0, "text_mean"])
    assert acts.shape == (3, 2, 3, h.d_model)  # images omitted: no image on any row
    for r, text in enumerate(PROMPTS):
        ids, hs = _hidden(h, text)
        for j, layer in enumerate([0, 2]):
            want = hs[layer + 1][0]  # (seq, d_model); layer i == hidden_states[i + 1] below the last
            np.testing.assert_allclose(acts[r, j, 0], want[-1].numpy(), atol=1e-4, rtol=1e-5)  # last prompt token
            np.testing.assert_allclose(acts[r, j, 1], want[0].numpy(), atol=1e-4, rtol=1e-5)  # first prompt token
            np.testing.assert_allclose(acts[r, j, 2], want.mean(0).numpy(), atol=1e-4, rtol=1e-5)  # every token
    # the marker: the first token overlapping "minute" in the row that has it
    ids, hs = _hidden(h, PROMPTS[1])
    offsets = h.tokenizer(PROMPTS[1], return_offsets_mapping=True)["offset_mapping"]
    start = PROMPTS[1].index("minute")
    first = next(i for i, (a, b) in enumerate(offsets) if b > start)
    one = evprobe.capture(h, PROMPTS[1:2], layers=[0], positions=[evprobe.Marker("minute", "first")])
    np.testing.assert_allclose(one[0, 0, 0], hs[1][0, first].numpy(), atol=1e-4, rtol=1e-5)
    # batched (left padding) equals one row at a time
    alone = np.concatenate([evprobe.capture(h, [p], layers=[0, 2], positions=["last", 0]) for p in PROMPTS])
    np.testing.assert_allclose(acts[:, :, :2], alone, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("arch", BASE_ARCHS)
def test_generation_logprobs_steering_and_patching_run_on_a_base_model(base_folders, arch) -> None:
    h = evprobe.load(str(base_folders[arch]))
    gens = evprobe.generate(h, PROMPTS, max_new_tokens=3, batch_size=3)
    one = evprobe.generate(h, PROMPTS[1:2], max_new_tokens=3)
    assert [g.n_new_tokens for g in gens] == [3, 3, 3] and gens[1].text == one[0].text  # batched == alone
    letters = [" A", " B"]
    plain = option_logprobs(h, PROMPTS, letters=letters)
    assert plain.shape == (3, 2)
    np.testing.assert_allclose(plain, evprobe.next_token_logprobs(h, PROMPTS, candidates=letters), atol=1e-9)
    direction = torch.randn(h.d_model, generator=torch.Generator().manual_seed(0))
    steered = option_logprobs(h, PROMPTS, letters=letters, steering=Steering(direction, 1, 8.0))
    assert np.abs(steered - plain).max() > 1e-3  # the edit reaches the readout
    run = steered_generate(h, PROMPTS, steering=Steering(direction, 1, 8.0), max_new_tokens=3)
    assert run.token_ids.shape == (3, 3)
    with evprobe.ablate(h, direction, [1]):
        ablated = option_logprobs(h, PROMPTS, letters=letters)
    assert np.abs(ablated - plain).max() > 0
    # patching two prompts of the same length: the last token's state carries the source's answer
    src, tgt = "It was great", "It was awful"
    assert len(h.tokenizer(src)["input_ids"]) == len(h.tokenizer(tgt)["input_ids"])
    res = patch_pair(h, (src, []), (tgt, []), layers=[h.n_layers - 1], position_sets={"last": [-1]},
                     candidates=letters)
    np.testing.assert_allclose(res.patched[0, 0], res.source, atol=1e-5)


def test_chat_and_raw_positions_on_a_model_with_a_template(tiny_text_folder) -> None:
    """`last` is the end of the generation prompt in chat mode and the prompt's last token in raw
    mode; `text_mean` is the user's words in both; a raw prompt is the tokenizer's own encoding."""
    chat = evprobe.load(str(tiny_text_folder))
    raw = chat.with_prompt_format("raw")
    assert chat.prompt_format == "chat" and raw.prompt_format == "raw"
    assert evprobe.load(str(tiny_text_folder), prompt_format="raw").prompt_format == "raw"
    text = PROMPTS[1]
    rendered = render_prompts(chat, [text], [[]])[0]
    assert rendered != text and rendered.endswith(" [/INST]") and text in rendered  # role markers around it
    enc_chat, enc_raw = build_inputs(chat, [text]), build_inputs(raw, [text])
    ids_raw, hs = _hidden(raw, text)
    assert enc_raw["input_ids"][0].tolist() == ids_raw
    assert chat.tokenizer.decode(enc_chat["input_ids"][0, -1:]).strip() == "[/INST]"  # chat's `last`
    a = evprobe.capture(raw, [text], layers=[1], positions=["last", "text_mean"])
    np.testing.assert_allclose(a[0, 0, 0], hs[2][0, -1].numpy(), atol=1e-4, rtol=1e-5)
    b = evprobe.capture(chat, [text], layers=[1], positions=["last", "text_mean"])
    assert np.abs(a[0, 0, 0] - b[0, 0, 0]).max() > 1e-3  # different tokens: the template's end vs the prompt's
    # the copy shares the model; the setting is pinned only when it is not the default
    assert raw.model is chat.model and "prompt_format" not in loaded_fingerprint(chat)
    assert loaded_fingerprint(raw)["prompt_format"] == "raw"


def test_prompt_format_mistakes_are_one_line(base_folders, tiny_text_folder) -> None:
    with pytest.raises(ValueError, match="no chat template.*prompt_format='raw'"):
        evprobe.load(str(base_folders["gpt2"]), prompt_format="chat")
    with pytest.raises(ValueError, match="one of chat, raw"):
        evprobe.load(str(tiny_text_folder), prompt_format="plain")
    h = evprobe.load(str(base_folders["gpt2"]))
    with pytest.raises(TypeError, match="candidates"):
        evprobe.next_token_logprobs(h, PROMPTS)
    with pytest.raises(TypeError, match="max_new_tokens"):
        steered_generate(h, PROMPTS)
    with pytest.raises(TypeError, match="not a string"):
        evprobe.capture(h, "one prompt", layers=[0], positions=["last"])
    with pytest.raises(ValueError, match="takes no images"):  # a tokenizer would drop them silently
        evprobe.capture(h, PROMPTS[:1], [["an image"]], layers=[0], positions=["last"])


def test_wrap_of_a_base_model_and_its_captures_through_the_probe_path(base_folders, tmp_path) -> None:
    """A researcher's own base model in memory -> captures of their own labelled prompts -> a
    capture folder -> a probe sweep: no chat template, no images anywhere."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = base_folders["llama"]
    h = evprobe.wrap(AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder))
    assert h.prompt_format == "raw"
    words = ["good", "bad"]
    prompts = [f"Review {f}: the food was {words[k]}" for f in range(12) for k in range(2)]
    acts = evprobe.capture(h, prompts, layers=[0, 3], positions=["last"])[:, :, 0]  # (24, 2, d_model)
    rows = [{"family_id": f"f{i // 2}", "positive": i % 2 == 0} for i in range(len(prompts))]
    out = evprobe.write_capture(tmp_path / "mine", acts, rows, layers=[0, 3], model="base-llama")
    caps = evprobe.load_captures([out])
    result = evprobe.sweep(caps, evprobe.labels(caps, "positive"), evprobe.SweepConfig(controls=False, n_boot=50))
    assert [row.layer for row in result.rows] == [0, 3]


def test_raw_prompts_on_a_vision_language_model_put_one_placeholder_per_image() -> None:
    from PIL import Image

    chat = evprobe.load("tiny:llava")
    raw = chat.with_prompt_format("raw")
    img = Image.new("RGB", (32, 32), (200, 30, 30))
    token = chat.processor.image_token
    assert render_prompts(raw, ["What colour?"], [[img]]) == [token + "What colour?"]
    a = evprobe.capture(raw, ["What colour?"], [[img]], layers=[0], positions=["image_mean", "last", "text_mean"])
    b = evprobe.capture(chat, ["What colour?"], [[img]], layers=[0], positions=["image_mean", "last", "text_mean"])
    assert np.isfinite(a).all() and np.abs(a[0, 0, 1] - b[0, 0, 1]).max() > 1e-4  # `last` differs: no template
    # the image tokens come first in both, so the image's states (causal attention) are the same
    np.testing.assert_allclose(a[0, 0, 0], b[0, 0, 0], atol=1e-4, rtol=1e-5) if not chat.tokenizer.bos_token else None


def test_the_cli_runs_and_captures_a_base_model(base_folders, small_bench: Path, tmp_path: Path, capsys) -> None:
    """`evprobe run` on a base model: no chat template, raw prompts by default, pinned in run.json;
    --prompt-format chat on it, and raw through a chat API, are one-line refusals before any work."""
    import json

    from evprobe.experiments.cli import main

    model = str(base_folders["gpt2"])
    out = tmp_path / "r"
    argv = ["run", "--model", model, "--bench", str(small_bench), "--requests", "both_given", "--limit", "2", "--quiet"]
    assert main([*argv, "--out", str(out)]) == 0
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 2 and json.loads((out / "run.json").read_text())["prompt_format"] == "raw"
    capsys.readouterr()
    for extra, words in ((["--prompt-format", "chat"], "no chat template"),
                         (["--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", "--prompt-format", "raw"],
                          "--backend openai sends chat turns")):
        assert main([*argv, "--out", str(tmp_path / "x"), *extra]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err
    assert not (tmp_path / "x" / "records.jsonl").exists()
