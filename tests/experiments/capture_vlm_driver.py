"""Run in the vLLM environment by tests/experiments/test_capture_vllm_vlm.py: `evprobe capture` on a LLaVA, both backends.

`python capture_vlm_driver.py IN.json OUT.json`. IN holds the command's arguments (without --backend and
--out) and the folder to write under. In this one process (experiments.cli.main): the hf capture
(`--backend hf`, the image processor transformers loads in this environment), then the engine capture
(`--backend vllm`: ONE engine start). OUT: their exit codes and times, and the image processor's class.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> None:
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    from evprobe.experiments.cli import main as cli
    from evprobe.hooks.vllm_engine.capture import weightless_handle

    out, result = Path(spec["out"]), {}
    for backend in ("hf", "vllm"):
        t = time.perf_counter()
        result[f"{backend}_rc"] = cli(["capture", *spec["args"], "--backend", backend, "--out", str(out / backend),
                                       "--quiet"])
        result[f"{backend}_s"] = time.perf_counter() - t  # the engine's start included
    processor = weightless_handle(spec["model"]).processor.image_processor
    result["image_processor"] = type(processor).__name__
    Path(argv[1]).write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":  # vLLM spawns its workers: the engine starts under this guard
    main(sys.argv[1:])
