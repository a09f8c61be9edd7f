"""The chat template's thinking switch (seed 002, section 5.3: reasoning on/off pairs): `thinking="on" | "off"`
passes `enable_thinking` to a chat template that reads it (as Qwen3's do), is refused in one line for a
template that never reads it, and is pinned, so a run's folder never mixes the two."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import evprobe
from evprobe.bench.model_config import ModelConfig
from evprobe.bench.records import load_records
from evprobe.bench.runner import RunConfig, run
from evprobe.experiments.cli import main
from evprobe.hooks.fingerprint import loaded_fingerprint
from evprobe.hooks.inputs import render_prompts
from evprobe.hooks.chat_templates import THINK_OFF
from evprobe.hooks.tiny_text import save_tiny_text_model

@pytest.fixture(scope="module")
def thinking_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_text_model(tmp_path_factory.mktemp("thinking") / "model", thinking_switch=True)


def test_the_switch_reaches_the_template_and_is_pinned(thinking_folder: Path) -> None:
    default = evprobe.load(str(thinking_folder))
    on, off = default.with_thinking("on"), evprobe.load(str(thinking_folder), thinking="off")
    assert (default.thinking, on.thinking, off.thinking) == (None, "on", "off")
    text = {h.thinking: render_prompts(h, ["Is it heavy?"], [[]], for_generation=True)[0] for h in (default, on, off)}
    assert text[None] == text["on"] == "<s>[INST] Is it heavy? [/INST]"  # the template's own default: thinking
    assert text["off"] == text["on"] + THINK_OFF
    # the answer readouts see it too: the prompt they teacher-force ends in the empty block, then the prefix
    prefixed = off.with_answer_prefix("ANSWER:")
    assert render_prompts(prefixed, ["Is it heavy?"], [[]])[0] == text["off"] + "ANSWER:"
    assert "thinking" not in loaded_fingerprint(default)  # absent when unset: older folders resume
    assert loaded_fingerprint(on)["thinking"] == "on" and loaded_fingerprint(off)["thinking"] == "off"


def test_a_template_without_the_switch_and_a_bad_value_are_refused_in_one_line(tiny_text_folder: Path,
                                                                                thinking_folder: Path) -> None:
    with pytest.raises(ValueError, match="its chat template has no thinking switch") as err:
        evprobe.load(str(tiny_text_folder), thinking="off")
    assert "\n" not in str(err.value) and "drop thinking" in str(err.value)
    with pytest.raises(ValueError, match="no thinking switch"):
        evprobe.load("tiny:llava", thinking="on")
    with pytest.raises(ValueError, match="thinking needs prompt_format='chat'"):
        evprobe.load(str(thinking_folder), thinking="off", prompt_format="raw")
    with pytest.raises(ValueError, match="thinking must be one of on, off"):
        evprobe.load(str(thinking_folder), thinking="yes")
    with pytest.raises(ValueError, match="key 'thinking' is 'yes'; choose from on, off"):
        ModelConfig.of("tiny:llava", thinking="yes")
    with pytest.raises(ValueError, match="keys 'thinking' and 'prompt_format: raw' do not go together"):
        ModelConfig.of(str(thinking_folder), thinking="off", prompt_format="raw")  # at config time, before loading


def test_a_run_pins_its_setting_and_refuses_the_other_on_resume(thinking_folder: Path, small_bench: Path,
                                                                 tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    base = ["run", "--model", str(thinking_folder), "--bench", str(small_bench), "--requests", "both_given",
            "--limit", "2", "--quiet"]
    assert main([*base, "--out", str(tmp_path / "off"), "--thinking", "off"]) == 0
    assert main([*base, "--out", str(tmp_path / "on"), "--thinking", "on"]) == 0
    meta = {k: json.loads((tmp_path / k / "run.json").read_text()) for k in ("off", "on")}
    assert meta["off"]["thinking"] == "off" and meta["on"]["thinking"] == "on"
    off, on = (load_records(tmp_path / k / "records.jsonl") for k in ("off", "on"))
    assert off.keys() == on.keys() and len(off) == 2
    extra = len(evprobe.load(str(thinking_folder)).tokenizer(THINK_OFF, add_special_tokens=False)["input_ids"])
    for key in off:  # the same items, each prompt longer by the empty block's tokens
        assert off[key].n_prompt_tokens == on[key].n_prompt_tokens + extra
    capsys.readouterr()
    assert main([*base, "--out", str(tmp_path / "off"), "--thinking", "on"]) == 2
    err = capsys.readouterr().err
    assert "thinking" in err and err.count("\n") == 1
    # the library's spelling: a ModelConfig key, the same pin
    done = run(RunConfig(model=ModelConfig.of(str(thinking_folder), thinking="off"), bench=str(small_bench),
                         out=str(tmp_path / "off"), requests=("both_given",), limit=2), progress=False)
    assert done.last_session.items == 0


def test_the_vllm_backend_hands_the_engine_the_same_tokens(thinking_folder: Path, tiny_text_folder: Path,
                                                           small_bench: Path, tmp_path: Path) -> None:
    """What the vLLM backend gives its engine for a text-only model is token ids it renders itself,
    so the switch is checked here without an engine (as tests/bench/test_backend_vllm.py checks image
    prompts): the hf handle's ids of the same setting, and the setting pinned."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from evprobe.bench.backends.vllm import EngineSettings, VLLMBackend
    from evprobe.bench.runner import RunJob

    ids = {}
    for thinking in ("on", "off"):
        config = RunConfig(model=ModelConfig.of(str(thinking_folder), thinking=thinking), bench=str(small_bench),
                           out=str(tmp_path / thinking), backend="vllm", requests=("both_given",), limit=2)
        engine = SimpleNamespace(settings=EngineSettings.of(config), start_s=0.0, takes_images=False,
                                 processor=AutoTokenizer.from_pretrained(thinking_folder))
        backend = VLLMBackend(engine, config)  # type: ignore[arg-type]
        prompts = RunJob(config).model_prompts(RunJob(config).items)
        ids[thinking] = [x["prompt_token_ids"] for x in backend.prepare(prompts)]
        handle = evprobe.load(str(thinking_folder), thinking=thinking)
        want = handle.tokenizer(render_prompts(handle, [p.text for p in prompts], [[]] * len(prompts),
                                               for_generation=True))["input_ids"]
        assert ids[thinking] == [list(x) for x in want]
        assert backend.thinking == thinking
    extra = evprobe.load(str(thinking_folder)).tokenizer(THINK_OFF, add_special_tokens=False)["input_ids"]
    assert all(off == on + extra for on, off in zip(ids["on"], ids["off"]))
    config = RunConfig(model=ModelConfig.of(str(tiny_text_folder), thinking="off"), bench=str(small_bench),
                       out=str(tmp_path / "none"), backend="vllm")
    engine = SimpleNamespace(settings=EngineSettings.of(config), start_s=0.0, takes_images=False,
                             processor=AutoTokenizer.from_pretrained(tiny_text_folder))
    with pytest.raises(ValueError, match="no thinking switch"):
        VLLMBackend(engine, config)  # type: ignore[arg-type]


def test_capture_reads_the_switched_prompt_and_pins_it(thinking_folder: Path, small_bench: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    import numpy as np

    base = ["capture", "--model", str(thinking_folder), "--bench", str(small_bench), "--requests", "both_given",
            "--layers", "0,1", "--limit", "4", "--quiet"]
    for thinking in ("on", "off"):
        assert main([*base, "--out", str(tmp_path / thinking), "--thinking", thinking]) == 0
        assert json.loads((tmp_path / thinking / "meta.json").read_text())["thinking"] == thinking
    on, off = (np.load(tmp_path / k / "acts.npy") for k in ("on", "off"))
    assert on.shape == off.shape and not np.array_equal(on, off)  # the last position reads another prompt
    capsys.readouterr()
    assert main([*base, "--out", str(tmp_path / "off"), "--thinking", "on"]) == 2
    assert "thinking" in capsys.readouterr().err  # a folder never mixes the two
