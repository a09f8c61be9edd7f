"""Run in the vLLM environment by tests/experiments/test_dose_response_vllm.py: every engine check on ONE engine.

`python dose_vllm_driver.py SPEC.json` reads {model, bench, directions, out, argv, own} and starts one
engine (analysis.engine_model.open_engine, about a minute on a loaded CPU), shared by every job below
(the job's open_engine is replaced by one that hands out the same engine and leaves it up; the driver
shuts it down at the end). It writes OUT/driver.json:

- full/: `evprobe dose-response ARGV --backend vllm` (experiments.cli.main, in this process);
  `engine_calls` counts EngineForward's calls (one per batch of items);
- resume/: full's results.jsonl cut mid-line after 60% of it, then the same command: rows reused / computed;
- shard0/, shard1/ then merged/: `--shard 0/2`, `--shard 1/2`, `evprobe merge`;
- refusals: the CLI's exit status and stderr's last line for inputs the engine cannot honour;
- own: steering_dose_response(engine, ..., backend="vllm") on the spec's prompts, its frames as records;
- gen_<readout>/ for each of the spec's generated readouts (generate, both): the same command with
  `--readout <readout>`, its engine calls counted (one per batch and readout);
- own_gen: the own-data function with a GeneratedReadout read by `reply_reader`, its frames (replies too).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
import time
from pathlib import Path


GEN_MEASURES = ("has_e", "long")
GEN_TOKENS = 8  # the own-data GeneratedReadout's max_new_tokens


def reply_reader(i: int, reply: str) -> tuple[float, float]:
    """The test's own reading of a reply (the test imports it for the hf side): whether it holds the
    letter e, and whether it is longer than 12 characters; both 0/1 rates."""
    return float("e" in reply.lower()), float(len(reply) > 12)


def _cli(argv: list[str]) -> tuple[int, str]:
    from evprobe.experiments.cli import main as cli

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            status = cli(argv)
        except SystemExit as e:
            status = int(e.code or 0)
    lines = [x for x in err.getvalue().splitlines() if x.strip()]
    return status, lines[-1] if lines else ""


def main(spec_path: str) -> None:
    import evprobe.analysis.engine_model as em
    import evprobe.experiments.dose_response.forward as fw

    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec["out"])
    shared: dict = {"starts": 0, "calls": 0}
    real_open = em.open_engine

    class Shared(em.EngineModel):
        def close(self) -> None:  # the jobs' close(): the shared engine stays up
            pass

    def opener(model: str, **kw):
        if "engine" not in shared:
            t = time.perf_counter()
            shared["real"] = real_open(model, **kw)
            shared["start_s"] = time.perf_counter() - t
            shared["starts"] += 1
            r = shared["real"]
            shared["engine"] = Shared(r.llm, r.handle, r.dtype, r.version, r.start_s)
        return shared["engine"]

    em.open_engine = opener
    real_read = fw.EngineForward._read_batch

    def counted(self, *a, **kw):
        shared["calls"] += 1
        return real_read(self, *a, **kw)

    fw.EngineForward._read_batch = counted
    try:
        result = _drive(spec, out, shared)
    finally:
        if "real" in shared:
            shared["real"].close()
    result.update(engine_starts=shared["starts"], engine_start_s=shared.get("start_s"))
    (out / "driver.json").write_text(json.dumps(result))


def _drive(spec: dict, out: Path, shared: dict) -> dict:
    argv = ["dose-response", *spec["argv"], "--backend", "vllm"]
    result: dict = {}
    t = time.perf_counter()
    result["full_status"] = _cli([*argv, "--out", str(out / "full")])
    result["full_s"] = time.perf_counter() - t
    result["engine_calls"] = shared["calls"]
    # resume: a run killed mid-append (its last line torn), then the same command
    data = (out / "full" / "results.jsonl").read_bytes()
    cut = int(len(data) * 0.6)
    (out / "resume").mkdir()
    (out / "resume" / "results.jsonl").write_bytes(data[:cut])
    shutil.copy(out / "full" / "meta.json", out / "resume" / "meta.json")
    meta = json.loads((out / "resume" / "meta.json").read_text())
    meta["config"]["out"] = str(out / "resume")
    (out / "resume" / "meta.json").write_text(json.dumps(meta))
    result["resume_kept"] = data[:cut].count(b"\n")
    calls = shared["calls"]
    result["resume_status"] = _cli([*argv, "--out", str(out / "resume")])
    result["resume_calls"] = shared["calls"] - calls
    for k in (0, 1):
        result[f"shard{k}_status"] = _cli([*argv, "--out", str(out / f"shard{k}"), "--shard", f"{k}/2"])
    result["merge_status"] = _cli(["merge", str(out / "merged"), str(out / "shard0"), str(out / "shard1")])
    refusals = {}
    for name, extra in spec["refusals"].items():
        refusals[name] = _cli([*argv, *extra, "--out", str(out / f"refused_{name}")])
    result["refusals"] = refusals
    result["own"] = _own(spec["own"], shared["engine"])
    for readout in spec["generated"]:
        calls = shared["calls"]
        t = time.perf_counter()
        result[f"gen_{readout}_status"] = _cli([*argv, "--readout", readout, "--out", str(out / f"gen_{readout}")])
        result[f"gen_{readout}_s"] = time.perf_counter() - t
        result[f"gen_{readout}_calls"] = shared["calls"] - calls
    result["own_gen"] = _own(spec["own"], shared["engine"], generated=True)
    return result


def own_readout(own: dict, generated: bool) -> dict:
    """The own-data function's readout arguments: the letters, or a GeneratedReadout of `reply_reader`."""
    from evprobe.analysis.generated_readout import GeneratedReadout

    if not generated:
        return {"candidates": own["candidates"], "target": own["target"]}
    return {"readout": GeneratedReadout(GEN_MEASURES, read=reply_reader, max_new_tokens=GEN_TOKENS, rates=GEN_MEASURES)}


def _own(own: dict, engine, generated: bool = False) -> dict:
    """steering_dose_response through the engine on the spec's prompts (the test runs the same on hf)."""
    import numpy as np

    from evprobe.analysis.dose_response import steering_dose_response

    t = time.perf_counter()
    res = steering_dose_response(engine, own["prompts"], None, direction=np.asarray(own["direction"]),
                                 layer=own["layer"], **own_readout(own, generated),
                                 families=own["families"], groups=own["groups"], alphas=own["alphas"],
                                 units=own["units"], n_random=own["n_random"], n_relabel=0, n_boot=own["n_boot"],
                                 backend="vllm")
    frames = {name: json.loads(res.to_dataframe(name).to_json(orient="records")) for name in
              ("effects", "null", "crossfit", "items", *(("replies",) if generated else ()))}
    return {"frames": frames, "seconds": time.perf_counter() - t,
            "units": {str(k): u.norm for k, u in res.units.items()},
            "verdict": None if res.verdict is None else res.verdict.specific}


if __name__ == "__main__":
    main(sys.argv[1])
