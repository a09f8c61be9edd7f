"""Run in the vLLM environment by tests/hooks/test_vllm_engine_capture.py: every engine capture on ONE engine.

`python vllm_capture_driver.py IN.json OUT_DIR`. IN holds the model folder, the library prompts, their
text markers, layers and position specs, the same prompts' token ids (hf's encoding), and the
`evprobe capture` arguments. One engine (hooks.vllm_engine.steering.start_engine) serves:

- library.npy: capture_prompts on the prompts (positions resolved by hooks.positions), and
  library_again.npy the same call once more (nothing left behind between calls);
- facade.npy: evprobe.capture(handle, ..., backend="vllm", engine=llm, batch_size=2);
- ids.npy: the low-level capture(llm, ids, positions=["last", "all", -2]);
- cli/: `evprobe capture --backend vllm ...` (experiments.cli.main, in this process), first: it starts
  the engine (experiments.capture.engine.EngineCapture), and its close keeps it for the calls below;
- refusals: the line each input gets (a marker with no handle, a vLLM version not checked).

Then a second engine with prefix caching on and chunked prefill (128 tokens a step): `capture` refuses
it in one line; and what the refusal prevents, shown with the check bypassed: a 700-token prompt
captured twice. The first time it runs in chunks (chunked.npy: its rows gathered over 6 forwards),
the second time its prefix is served from the cache and leaves positions no hook saw (the error the
counts raise).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def _error(call) -> str:
    try:
        call()
    except Exception as err:  # noqa: BLE001 - the line is what the test reads
        return f"{type(err).__name__}: {err}"
    return "no error"


def main(argv: list[str]) -> None:
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    out = Path(argv[1])
    import evprobe.experiments.capture.engine as job_engine
    import numpy as np
    import vllm
    from evprobe.hooks.positions import Marker, parse_position
    from evprobe.hooks.vllm_engine import steering
    from evprobe.hooks.vllm_engine.capture import (
        capture,
        capture_prompts,
        weightless_handle,
    )

    import evprobe

    model, layers = spec["model"], spec["layers"]
    positions = [parse_position(p) for p in spec["positions"]]
    result: dict = {}
    # The command line first, with its own engine start (experiments.capture.engine.EngineCapture);
    # its close keeps the engine for the library calls below instead of shutting it down.
    kept: dict = {}
    job_engine.EngineCapture.close = lambda self: kept.setdefault("llm", self.llm)
    from evprobe.experiments.cli import main as cli

    t = time.perf_counter()
    result["cli_rc"] = cli([*spec["cli"], "--out", str(out / "cli"), "--quiet"])
    result["cli_s"] = time.perf_counter() - t  # the engine's start included
    llm = kept["llm"]
    try:
        handle = weightless_handle(model)
        for name in ("library", "library_again"):
            t = time.perf_counter()
            cap = capture_prompts(llm, handle, spec["prompts"], layers=layers, positions=positions,
                                  text_markers=spec["markers"])
            result[f"{name}_s"] = time.perf_counter() - t
            np.save(out / f"{name}.npy", cap.acts)
        result["n_tokens"] = cap.n_tokens
        np.save(out / "facade.npy", evprobe.capture(handle, spec["prompts"], layers=layers, positions=positions,
                                                    text_markers=spec["markers"], batch_size=2, backend="vllm",
                                                    engine=llm))
        np.save(out / "ids.npy", capture(llm, spec["prompt_ids"], layers=layers, positions=["last", "all", -2]))
        refusals = {"marker_without_handle": _error(lambda: capture(llm, spec["prompt_ids"], layers=layers,
                                                                    positions=[Marker("Pick")]))}
        real = vllm.__version__
        vllm.__version__ = "0.31.0"  # an engine of a version the token map was not read on
        refusals["version"] = _error(lambda: capture(llm, spec["prompt_ids"], layers=layers, positions=["last"]))
        refusals["version_job"] = _error(job_engine.check_vllm_version)
        vllm.__version__ = real
        result["refusals"] = refusals
    finally:
        steering.close_engine(llm)
    _prefix_cached(spec, out, result)
    (out / "driver.json").write_text(json.dumps(result), encoding="utf-8")


def _prefix_cached(spec: dict, out: Path, result: dict) -> None:
    """A prefix-caching engine: refused; and with the check bypassed, a cached prompt's tokens never run."""
    import numpy as np
    import vllm
    from evprobe.hooks.vllm_engine import capture as vc
    from evprobe.hooks.vllm_engine import steering
    from evprobe.hooks.vllm_engine.extension import EXTENSION

    # chunked prefill too: at most 128 tokens a step, so the 700-token prompt runs in 6 forwards
    llm = vllm.LLM(model=spec["model"], tokenizer=spec["model"], dtype="float32", max_model_len=2048,
                   gpu_memory_utilization=0.1, enforce_eager=True, enable_prefix_caching=True,
                   enable_chunked_prefill=True, max_num_batched_tokens=128, worker_extension_cls=EXTENSION)
    try:
        ids, layers, positions = [spec["long_ids"]], [0, 2], ["all", "last", 5]
        result["prefix_refusal"] = _error(lambda: vc.capture(llm, ids, layers=layers, positions=positions))
        check, steering.check_engine = steering.check_engine, lambda llm: None  # what the refusal prevents
        try:
            first = _error(lambda: np.save(out / "chunked.npy", vc.capture(llm, ids, layers=layers,
                                                                           positions=positions)))
            again = _error(lambda: vc.capture(llm, ids, layers=layers, positions=positions))
            result["prefix_bypassed"] = [first, again]
        finally:
            steering.check_engine = check
    finally:
        steering.close_engine(llm)


if __name__ == "__main__":
    main(sys.argv[1:])
