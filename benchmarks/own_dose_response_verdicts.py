"""How often evprobe.steering_dose_response calls a direction "specific" when it is not, and when it is.

Data with a known answer: the model organism's held-out selections from the reduced quickstart
(experiments.mutations.SMALL_QUICKSTART, 8 families per system), steered at layer 3 toward stopping,
the goal read on the unresolved items (goal +1 on the stop letter's log-odds, doses -1 and -0.75).

- truth "specific": the planted direction (the quickstart's stored layer-3 direction, negated so
  that negative doses steer toward stopping); one run, its verdict and p_goal;
- truth "not specific": --probes random unit directions, each playing the probe against its own
  --null random directions (other seeds): the share called specific, with its Clopper-Pearson 95%
  interval, beside the rank test's bound floor(0.05 (K + 1)) / (K + 1).

    python benchmarks/own_dose_response_verdicts.py [--probes 100] [--null 20] [--quickstart DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _data(out: Path):
    from evprobe.bench.manifest import load_item_images, read_items
    from evprobe.bench.protocols import build_prompt

    rows = [json.loads(line) for line in (out / "dose_response" / "results.jsonl").read_text().splitlines()]
    items = {it.item_id: it for it in read_items(out / "bench")}
    chosen = [items[r["item_id"]] for r in rows if r["kind"] == "baseline"]
    return dict(prompts=[build_prompt(it, "direct", "standard") for it in chosen],
                images=[load_item_images(out / "bench", it.images) for it in chosen],
                target=[next(k for k in sorted(it.options) if it.options[k] == "stop") for it in chosen],
                families=[it.family_id for it in chosen],
                groups=["resolved" if it.resolved else "unresolved" for it in chosen])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--probes", type=int, default=100)
    p.add_argument("--null", type=int, default=20)
    p.add_argument("--quickstart", type=Path, default=None, help="a reduced quickstart folder to reuse")
    args = p.parse_args(argv)
    import numpy as np
    import torch

    import evprobe
    from evprobe.core.proportion import clopper_pearson
    from evprobe.experiments.mutations import SMALL_QUICKSTART
    from evprobe.experiments.quickstart import quickstart

    torch.set_num_threads(1)
    scratch = tempfile.TemporaryDirectory()
    out = args.quickstart or Path(scratch.name) / "qs"
    if args.quickstart is None:
        quickstart(out, **SMALL_QUICKSTART)
    data = _data(out)
    meta = json.loads((out / "dose_response" / "meta.json").read_text())
    planted = evprobe.read_directions(out / "directions")[meta["layer_directions"]["3"]["name"]]
    handle = evprobe.load("organism")
    kw = dict(candidates=list("ABCDE"), positions="last", alphas=(-1.0, -0.75), goal=+1, goal_group="unresolved",
              n_random=args.null, n_boot=200, **data)

    def verdict(vector, seed: int):
        result = evprobe.steering_dose_response(handle, direction={3: vector}, seed=seed, **kw)
        row = result.crossfit.set_index(["group", "measure"]).loc[("unresolved", "log_odds_change")]
        return bool(row["specific"]), float(row["p_goal"])

    t = time.perf_counter()
    yes, p_goal = verdict(-planted.vector, 20260905)
    print(f"{len(data['prompts'])} held-out selections of {len(set(data['families']))} families; "
          f"{args.null} null directions per run")
    print(f"planted direction (truth: specific): called specific {yes}, p_goal {p_goal:.3f}")
    rng = np.random.default_rng(1)
    calls = [verdict(rng.normal(size=handle.d_model), 1000 + k)[0] for k in range(args.probes)]
    k = sum(calls)
    lo, hi = clopper_pearson(k, len(calls))
    bound = int(0.05 * (args.null + 1)) / (args.null + 1)
    print(f"random directions (truth: not specific): called specific {k} of {len(calls)} = {k / len(calls):.3f} "
          f"[{lo:.3f}, {hi:.3f}] (Clopper-Pearson 95%); the rank test's bound {bound:.3f}")
    print(f"({time.perf_counter() - t:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
