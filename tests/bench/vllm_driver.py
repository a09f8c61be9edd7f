"""Run in the vLLM environment by tests/bench/test_backend_vllm.py: every vLLM check on ONE engine.

`python vllm_driver.py MODEL BENCH OUT [--throughput]` starts one engine (about a minute on a
loaded CPU) and shares it between the runs below: the registered vllm opener (bench.backends.registry) is
replaced by one that starts the engine on its first call and, later, wraps the same engine for each
run's settings (`VLLMBackend(engine, config)` checks they are the engine's); a run's close() leaves
the shared engine up, and the driver shuts it down at the end (the real `close()`), then writes
OUT/driver.json with what the test compares:

- greedy/: the `evprobe run` command line (experiments.cli.main, in this process) on the first 8
  both_given items, float32, greedy, --option-logprobs;
- token ids: the ids the backend gives vLLM for those prompts, the ids vLLM reports back and the
  greedy reply's token ids; then the replies when a token they meet early is the stop token;
- sampled_a/, sampled_b/, sampled_seed1/: temperature 0.8, top_p 0.95; a and b the same seed in
  batches of 8 and of 3 (a prompt's draw must not depend on its batch), seed1 another seed;
- resume/: a run in batches of 3 whose second call fails (a run killed after one batch), with a torn
  half line appended as a kill mid-write leaves one, then resumed;
- throughput/ (--throughput): all 48 both_given items in one batch of 48.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def _children(pid: int) -> list[int]:
    """Every live process descended from `pid` (from /proc; a zombie, dead but not yet reaped, is
    not one)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    state, parent = f.read().rsplit(")", 1)[1].split()[:2]
                if state != "Z":
                    parents[int(entry)] = int(parent)
            except (OSError, IndexError, ValueError):
                pass
    out, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        out.extend(kids)
        frontier.extend(kids)
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def _records(folder: Path) -> list[dict]:
    with open(folder / "records.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def main(argv: list[str]) -> None:
    shared: dict = {"starts": 0, "fail_on_call": None}
    try:
        _drive(argv, shared)
    finally:  # a failed check leaves no engine behind either
        if "engine" in shared:
            shared["engine"].close()


def _drive(argv: list[str], shared: dict) -> None:
    import evprobe.bench.backends.vllm as vb
    from evprobe.bench.runner import RunConfig, RunJob, run
    from evprobe.experiments.cli import main as cli

    model, bench, out = argv[0], argv[1], Path(argv[2])
    out.mkdir(parents=True, exist_ok=True)

    class SharedBackend(vb.VLLMBackend):
        def __call__(self, prompts, prepared=None):  # noqa: ANN001, ANN204
            shared["calls"] = shared.get("calls", 0) + 1
            if shared["fail_on_call"] is not None and shared["calls"] == shared["fail_on_call"]:
                raise RuntimeError("the driver's simulated kill")
            return super().__call__(prompts, prepared)

        def close(self) -> None:  # the engine outlives the run
            pass

    def open_shared(config, handle=None):  # noqa: ANN001, ANN202
        if "engine" not in shared:
            shared["starts"] += 1
            shared["engine"] = vb.start_engine(config, handle)
        return SharedBackend(shared["engine"], config)

    # the runner opens a backend through its registered spec (bench.backends.registry), so the shared
    # engine's opener replaces the registered one there
    import dataclasses

    from evprobe.bench.backends import registry

    registry._SPECS["vllm"] = dataclasses.replace(registry.backend_spec("vllm"), opener=open_shared)
    result: dict = {}
    from evprobe.bench.model_config import ModelConfig

    common = dict(model=ModelConfig.of(model, dtype="float32"), bench=bench, requests=("both_given",), limit=8,
                  option_logprobs=True, backend="vllm")

    t = time.perf_counter()
    status = cli(["run", "--model", model, "--bench", bench, "--out", str(out / "greedy"), "--backend", "vllm",
                  "--requests", "both_given", "--limit", "8", "--option-logprobs", "--dtype", "float32",
                  "--quiet"])
    result["cli_status"] = status
    result["cli_seconds"] = time.perf_counter() - t
    engine = shared["engine"]
    result["engine_start_s"] = engine.start_s
    with open(out / "greedy" / "run.json", encoding="utf-8") as f:
        result["greedy_run"] = json.load(f)

    # The token ids the backend hands vLLM, the ids vLLM says it got, the greedy replies' ids.
    config = RunConfig(**common, out=str(out / "ids"))
    job = RunJob(config)
    prompts = job.model_prompts(job.items)
    backend = SharedBackend(engine, config)
    inputs = backend.prepare(prompts)
    outs = engine.llm.generate(inputs, [backend.params(p) for p in prompts], use_tqdm=False)
    result["sent_ids"] = {p.key: x["prompt_token_ids"] for p, x in zip(prompts, inputs)}
    result["engine_ids"] = {p.key: list(o.prompt_token_ids) for p, o in zip(prompts, outs)}
    result["greedy_token_ids"] = {p.key: list(o.outputs[0].token_ids) for p, o in zip(prompts, outs)}

    # A stop token the greedy replies meet early (random weights never write </s>): where the
    # replies stop, and how they are counted, against hf's generate told the same stop token.
    first = result["greedy_token_ids"][prompts[0].key]
    stop = next((t for i, t in enumerate(first) if i >= 2 and t not in first[:i]), first[-1])
    engine.eos_ids, eos = {stop}, engine.eos_ids
    replies = backend(prompts)
    engine.eos_ids = eos
    result["stop_probe"] = {"token": stop,
                            "replies": {p.key: [r.text, r.n_new_tokens] for p, r in zip(prompts, replies)}}

    sampled = dict(common, temperature=0.8, top_p=0.95)
    for name, seed, batch in (("sampled_a", 0, 8), ("sampled_b", 0, 3), ("sampled_seed1", 1, 8)):
        t = time.perf_counter()
        run(RunConfig(**sampled, seed=seed, batch_size=batch, out=str(out / name)), progress=False)
        result[f"{name}_seconds"] = time.perf_counter() - t

    # A budget beyond the engine's context: one line before any request (VLLMBackend.check_context).
    from evprobe.core.errors import InputError

    try:
        run(RunConfig(**common, max_new_tokens=100_000_000, out=str(out / "budget")), progress=False)
        result["budget_refusal"] = "ran"
    except InputError as err:
        result["budget_refusal"] = str(err)
    budget_records = out / "budget" / "records.jsonl"
    result["budget_records"] = len(_records(out / "budget")) if budget_records.exists() else 0

    # A run killed after its first batch (of 3), a torn half line after it, then resumed.
    resume = RunConfig(**common, batch_size=3, out=str(out / "resume"))
    shared["calls"], shared["fail_on_call"] = 0, 2
    try:
        run(resume, progress=False)
        result["resume_first"] = "finished"
    except RuntimeError as err:
        result["resume_first"] = str(err)
    shared["fail_on_call"] = None
    result["resume_kept"] = len(_records(out / "resume"))
    with open(out / "resume" / "records.jsonl", "a", encoding="utf-8") as f:
        f.write('{"item_id": "torn')
    summary = run(resume, progress=False)
    result["resume_summary"] = {"n_selected": summary.n_selected, "n_records": summary.n_records}
    result["resume_session"] = summary.last_session.to_json()

    if "--throughput" in argv:
        for name, batch in (("throughput_8", 8), ("throughput_48", 48)):
            limit = 8 if batch == 8 else None
            summary = run(RunConfig(**{**common, "limit": limit}, batch_size=batch, out=str(out / name)),
                          progress=False)
            result[name] = summary.last_session.to_json()

    result["engine_starts"] = shared["starts"]
    result["children_before_close"] = {pid: _cmdline(pid) for pid in _children(os.getpid())}
    t = time.perf_counter()
    engine.close()
    result["close_seconds"] = time.perf_counter() - t
    time.sleep(0.5)
    from multiprocessing import resource_tracker

    # multiprocessing's resource tracker lives until this process exits; the engine's must be gone
    tracker_pid = getattr(getattr(resource_tracker, "_resource_tracker", None), "_pid", None)
    result["tracker_pid"] = tracker_pid
    result["children_after_close"] = {pid: _cmdline(pid) for pid in _children(os.getpid()) if pid != tracker_pid}
    with open(out / "driver.json", "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
