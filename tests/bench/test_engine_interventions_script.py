"""benchmarks/engine_interventions.py (docs/reference/benchmarks.md quotes its table) runs in its --quick mode
in the vLLM environment: every row printed with its ratios, and the engine's null band equal to hf's
within 1e-4 (the parity line)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "engine_interventions.py"


def test_the_benchmark_runs_quick(vllm_python: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([str(vllm_python), str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=900,
                          env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    out = proc.stdout
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| group")]
    works = [r.split(" | ")[1] for r in rows]
    assert works == ["plain", "one steering", "plain", "one steering", "8 x 8 per-request, one call", "8 calls of 8",
                     "last token, one layer", "8 random directions x 4 doses"], works
    parity = float(re.search(r"difference engine vs hf on the null band: (\S+)", out).group(1))
    assert parity <= 1e-4
    print(out)
