"""`evprobe run`'s throughput settings: each gives the records of the default run (float32, CPU),
sort and prefetch really reorder and really run on a thread, and the pins say what changes numbers."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import get_args

import pytest

from evprobe.bench.backends.hf import HFBackend
from evprobe.bench.backends.hf import DecodeCache, VisionAttention
from evprobe.bench.runner import RunConfig, RunJob, run
from evprobe.core.errors import InputError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# Three request types (prompts of different lengths), one image each: 12 items, 3 batches of 4.
SELECTION = dict(requests=("select", "answer_initial", "read_ruler"), limit=12, batch_size=4)


def _records(out: Path) -> dict[str, dict]:
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return {r["item_id"]: {k: v for k, v in r.items() if k != "seconds"} for r in rows}


def _run(bench: Path, out: Path, model: str = "tiny:qwen2_5_vl", **settings) -> dict[str, dict]:
    run(RunConfig.of(model=model, bench=str(bench), out=str(out), **{**SELECTION, **settings}), progress=False)
    return _records(out)


@pytest.fixture(scope="module")
def default_records(small_bench: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    return _run(small_bench, tmp_path_factory.mktemp("default") / "run")


def test_the_runner_spells_the_choices_hooks_accepts() -> None:
    from evprobe.bench.model_config import PromptFormat, Thinking
    from evprobe.hooks.generation import DECODE_CACHES
    from evprobe.hooks.handle import PROMPT_FORMATS
    from evprobe.hooks.inputs import THINKING
    from evprobe.hooks.vision_attention import VISION_ATTENTIONS

    assert get_args(DecodeCache) == DECODE_CACHES and get_args(VisionAttention) == VISION_ATTENTIONS
    assert get_args(PromptFormat) == PROMPT_FORMATS  # the --prompt-format choices are the handle's
    assert get_args(Thinking) == THINKING  # and the --thinking choices


@pytest.mark.parametrize("settings", [
    dict(sort_by_length=True),
    dict(prefetch=2),
    dict(sort_by_length=True, prefetch=1, decode_cache="static"),
    dict(vision_attention="packed"),
], ids=["sorted", "prefetch", "sorted-prefetch-static", "packed-vision"])
def test_each_setting_gives_the_default_runs_records(settings, small_bench, default_records, tmp_path) -> None:
    records = _run(small_bench, tmp_path / "run", **settings)
    assert records == default_records
    assert len(records) == 12 and any(r["reply"] for r in records.values())


def test_sorting_batches_longest_prompts_first_and_a_rerun_plans_the_same(small_bench) -> None:
    from evprobe.bench.protocols import build_prompt

    cfg = RunConfig(model="tiny:llava", bench=str(small_bench), out="unused", sort_by_length=True, **SELECTION)
    lengths = [len(build_prompt(u.value, "direct")) for u in RunJob(cfg).units()]
    plain = [len(build_prompt(u.value, "direct")) for u in RunJob(RunConfig(**{**vars(cfg), "sort_by_length": False})).units()]
    assert lengths == sorted(plain, reverse=True) and plain != lengths  # the selection has unequal prompts
    assert [u.key for u in RunJob(cfg).units()] == [u.key for u in RunJob(cfg).units()]


def test_prefetch_prepares_on_a_thread_and_without_it_inline(small_bench, tmp_path, monkeypatch) -> None:
    threads: list[bool] = []
    original = HFBackend.prepare

    def recording(self, batch):
        threads.append(threading.current_thread() is threading.main_thread())
        return original(self, batch)

    monkeypatch.setattr(HFBackend, "prepare", recording)
    _run(small_bench, tmp_path / "ahead", model="tiny:llava", prefetch=2)
    assert threads == [False] * 3
    threads.clear()
    _run(small_bench, tmp_path / "inline", model="tiny:llava")
    assert threads == [True] * 3


def test_numeric_settings_are_pinned_and_batching_settings_are_not(small_bench, tmp_path) -> None:
    out = tmp_path / "run"
    _run(small_bench, out, model="tiny:llava", decode_cache="static", limit=4)
    meta = json.loads((out / "run.json").read_text())
    assert meta["decode_cache"] == "static" and meta["vision_attention"] is None
    with pytest.raises(InputError, match="decode_cache='static', this run has decode_cache=None"):
        _run(small_bench, out, model="tiny:llava", limit=8)
    # Sorting and prefetch change no record: a resume may use others.
    _run(small_bench, out, model="tiny:llava", decode_cache="static", limit=8, sort_by_length=True, prefetch=1)
    assert len(_records(out)) == 8


def test_a_model_in_memory_runs_like_the_loaded_one_and_says_so(small_bench, tmp_path) -> None:
    from evprobe.hooks.tiny_models import tiny

    loaded = _run(small_bench, tmp_path / "loaded", model="tiny:llava", limit=4)
    cfg = RunConfig(model="my-llava", bench=str(small_bench), out=str(tmp_path / "mem"), **{**SELECTION, "limit": 4})
    run(cfg, progress=False, handle=tiny("llava"))
    in_memory = _records(tmp_path / "mem")
    assert {k: {**v, "model": "tiny:llava"} for k, v in in_memory.items()} == loaded
    meta = json.loads((tmp_path / "mem" / "run.json").read_text())
    assert meta["model_source"] == "in_memory" and meta["model"] == "my-llava"
    with pytest.raises(InputError, match="is a policy"):
        RunJob(RunConfig(model="policy:reference", bench=str(small_bench), out=str(tmp_path / "p")), tiny("llava"))


@pytest.mark.parametrize("field, value, message", [
    ("prefetch", -1, "--prefetch must be a non-negative integer, got -1"),
    ("decode_cache", "paged", "--decode-cache 'paged' is not one of dynamic, static, compiled"),
    ("vision_attention", "flash", "--vision-attention 'flash' is not one of stock, packed"),
])
def test_a_bad_setting_is_one_line_before_any_work(field, value, message, small_bench, tmp_path) -> None:
    with pytest.raises(InputError) as err:
        RunJob(RunConfig.of(model="tiny:llava", bench=str(small_bench), out=str(tmp_path / "r"), **{field: value}))
    assert str(err.value) == message and not (tmp_path / "r").exists()
