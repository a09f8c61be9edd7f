"""benchmarks/backends.py --small: hf and (where `transformers serve` runs) an OpenAI-compatible server on
the same 8 items, each measured from its run.json and compared with hf's run by `experiments.parity`;
the engines that take tens of seconds to start (vllm, vllm serve) are skipped and say so. Under 30 s."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "backends.py"


def test_small_run_measures_hf_and_compares_the_server_with_it(tmp_path: Path) -> None:
    out, keep = tmp_path / "backends.json", tmp_path / "runs"
    done = subprocess.run([sys.executable, str(SCRIPT), "--small", "--out", str(out), "--keep", str(keep)],
                          capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(out.read_text())
    rows = {r["setup"]: r for r in report["setups"]}
    assert list(rows) == ["hf", "vllm", "openai: transformers serve", "openai: vllm serve"]
    hf = rows["hf"]
    assert hf["status"] == "ok" and hf["items"] == report["items"] == 8
    assert hf["items_per_s"] > 0 and hf["generated_tokens_per_s"] > 0 and hf["resources"]["calls"] == 1
    assert "parity" not in hf  # the reference
    for name in ("vllm", "openai: vllm serve"):
        assert rows[name]["status"].startswith("skipped: --small")
    served = rows["openai: transformers serve"]
    if served["status"] == "ok":
        assert served["items"] == 8 and served["start_s"] > 0 and served["items_per_s_vs_hf"] > 0
        p = served["parity"]
        assert p["n_common"] == 8 and p["agree"]["decision"] == 8 and p["agree"]["reply"] == 8, p
        assert p["ok"], p  # transformers serve returns no log-probs: noted, not compared
        with pytest.raises(OSError):  # the server the script started is stopped: nothing listens on its port
            socket.create_connection(("127.0.0.1", served["port"]), timeout=2).close()
    else:
        assert served["status"].startswith("not available: "), served["status"]
    assert "hf " in done.stdout and f"wrote {out}" in done.stdout
