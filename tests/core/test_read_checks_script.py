"""benchmarks/read_checks.py (the README quotes its numbers) runs and prints every case, with the
parser's 10 KB -> 100 KB ratio in the linear range."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "read_checks.py"


def test_the_benchmark_prints_each_check_and_a_linear_ratio() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--repeat", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for case in ("finite check, quickstart shape", "load_capture with it, 7B width", "folder_lock take + release",
                 "parse 'A' + 5,000 newlines + 'B'", "finite check's share of load_capture"):
        assert case in out
    ratio = float(re.search(r"100 KB / 10 KB: ([0-9.]+)x", out).group(1))
    assert ratio < 40  # linear ~10; quadratic ~100
