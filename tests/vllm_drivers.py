"""Run a driver script in the vLLM environment: the tests' one way to start an engine in its own venv.

vLLM lives in its own environment (tests/conftest.py's `vllm_python`), so a test writes its inputs
as JSON, runs ONE driver subprocess (which starts one engine and does everything the module needs)
and reads the driver's JSON back.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any


def run_driver(python: Path, driver: Path, spec: dict[str, Any], folder: Path, *, timeout: float = 600) -> dict:
    """`python driver IN.json OUT.json` with `spec` as IN; returns OUT plus `wall_s` (the subprocess's wall time)."""
    with open(folder / "in.json", "w", encoding="utf-8") as f:
        json.dump(spec, f)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_LOGGING_LEVEL="WARNING")
    t = time.perf_counter()
    proc = subprocess.run([str(python), str(driver), str(folder / "in.json"), str(folder / "out.json")],
                          capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
    with open(folder / "out.json", encoding="utf-8") as f:
        out = json.load(f)
    out["wall_s"] = time.perf_counter() - t
    return out
