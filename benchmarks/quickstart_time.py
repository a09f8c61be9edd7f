"""Benchmark: wall time of the README's main job, `evprobe quickstart`, as a new researcher runs it.

Runs, one after the other in fresh scratch folders (nothing cached, nothing shared), the default
`evprobe quickstart` (the model organism on the main set) and `evprobe quickstart --model
tiny:llava`, each as its own process (start-up and imports included), and prints per command the
wall time, the quickstart's own step timings and the budget (issue 17: 4 minutes and 1 minute on
2 idle cores). Run it on an idle machine: other work on the cores lengthens every step.

    python benchmarks/quickstart_time.py [--only organism|tiny:llava] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUDGET_S = {"organism": 240.0, "tiny:llava": 60.0}


def time_quickstart(model: str, folder: Path) -> dict[str, object]:
    cmd = ["evprobe", "quickstart", "--no-progress", "--out", str(folder / "out")]
    if model != "organism":
        cmd += ["--model", model]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=folder)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-2000:]}")
    m = re.search(r"quickstart done in (\d+) s \(([^)]*)\)", done.stdout)
    steps = dict((k, float(v)) for k, v in re.findall(r"([\w+]+) (\d+) s", m.group(2))) if m else {}
    return {"model": model, "wall_s": round(wall, 1), "steps_s": steps, "budget_s": BUDGET_S[model],
            "within_budget": wall <= BUDGET_S[model], "cores": os.cpu_count(),
            "load_1min": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=sorted(BUDGET_S), default=None)
    ap.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = ap.parse_args(argv)
    models = [args.only] if args.only else ["organism", "tiny:llava"]
    results = []
    for model in models:
        with tempfile.TemporaryDirectory(prefix="evprobe-quickstart-") as tmp:
            results.append(time_quickstart(model, Path(tmp)))
        r = results[-1]
        steps = ", ".join(f"{k} {v:.0f} s" for k, v in r["steps_s"].items())
        print(f"evprobe quickstart{'' if model == 'organism' else ' --model ' + model}: {r['wall_s']:.0f} s wall "
              f"(budget {r['budget_s']:.0f} s: {'within' if r['within_budget'] else 'OVER'}); steps: {steps}; "
              f"{r['cores']} cores, load after {r['load_1min']}", flush=True)
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
