"""How often evprobe.steering_dose_response calls a direction "specific" when it is not, and when it is,
on a real model (the model organism), with both nulls: random directions and label-free directions.

Data with a known answer: the model organism's held-out selections from the reduced quickstart
(experiments.known_answer.mutations.SMALL_QUICKSTART, 8 families per system), steered at layer 3 toward stopping,
the goal read on the unresolved items (goal +1 on the stop letter's log-odds, doses -1 and -0.75).

- truth "specific": the planted direction (the quickstart's stored layer-3 direction, negated so
  that negative doses steer toward stopping), its label-free null fitted from the rows it was
  fitted on (evprobe.direction_rows); one run: the verdict, each null's p_goal and margin;
- truth "not specific" (the rows carry nothing of the label): --probes directions fitted the same
  way on the same rows with the planted label's line removed, on a label whose families are each
  kept or flipped at random; each with its own label-free null from those rows and that label, and
  its own random null. The share called specific (joint verdict, and each null alone) with its
  Clopper-Pearson 95% interval, beside the rank test's bound floor(0.05 (K + 1)) / (K + 1);
- what the verdict is about (printed, not a false-verdict rate): the same flipped labels on the rows
  as they are. With 12 families a random flip pattern rarely balances, so such a label still
  correlates with the planted one and its direction lies along the line the organism reads (the
  mean |cos| with the planted direction is printed): steering along it really moves the model more
  than directions the data give without it, and the verdict says so. "Specific" speaks of the
  direction, not of whether the label it was fitted on is the variable the model uses.

    python benchmarks/own_dose_response_verdicts.py [--probes 60] [--null 20] [--correlated N] [--quickstart DIR]
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
    p.add_argument("--probes", type=int, default=60)
    p.add_argument("--null", type=int, default=20)
    p.add_argument("--correlated", type=int, default=None, help="runs on correlated labels (default: --probes)")
    p.add_argument("--quickstart", type=Path, default=None, help="a reduced quickstart folder to reuse")
    args = p.parse_args(argv)
    import numpy as np
    import torch

    import evprobe
    from evprobe.core.proportion import clopper_pearson
    from evprobe.experiments.known_answer.mutations import SMALL_QUICKSTART
    from evprobe.experiments.quickstart import quickstart

    torch.set_num_threads(1)
    scratch = tempfile.TemporaryDirectory()
    out = args.quickstart or Path(scratch.name) / "qs"
    if args.quickstart is None:
        quickstart(out, **SMALL_QUICKSTART)
    data = _data(out)
    meta = json.loads((out / "dose_response" / "meta.json").read_text())
    planted = evprobe.read_directions(out / "directions")[meta["layer_directions"]["3"]["name"]]
    rows = evprobe.direction_rows(planted)
    handle = evprobe.load("organism")
    kw = dict(candidates=list("ABCDE"), positions="last", alphas=(-1.0, -0.75), goal=+1, goal_group="unresolved",
              n_random=args.null, n_relabel=args.null, n_boot=200, **data)

    def verdict(vector, fit_rows, seed: int):
        result = evprobe.steering_dose_response(handle, direction={3: vector}, fit_rows={3: fit_rows}, seed=seed,
                                                random_seed=seed, **kw)
        cf = result.crossfit
        head = cf[(cf["group"] == "unresolved") & (cf["measure"] == "log_odds_change")].set_index("null")
        return result.verdict.specific, {k: (bool(r["specific"]), float(r["p_goal"]), float(r["margin"]))
                                            for k, r in head.iterrows()}

    t = time.perf_counter()
    yes, nulls = verdict(-planted.vector, rows, 20260905)
    print(f"{len(data['prompts'])} held-out selections of {len(set(data['families']))} families; the planted "
          f"direction fitted on {len(rows.labels)} rows of {len(set(rows.families))} families; {args.null} random and "
          f"{args.null} label-free directions per run")
    print(f"planted direction (truth: specific): called specific {yes}; "
          + "; ".join(f"{k}: p_goal {p_:.3f}, margin {m:+.2f} nats" for k, (_, p_, m) in nulls.items()))
    rng = np.random.default_rng(1)
    names, inverse = np.unique(rows.families, return_inverse=True)
    planted_unit = planted.vector / np.linalg.norm(planted.vector)
    bare = rows.acts - np.outer(rows.acts @ planted_unit, planted_unit)  # the rows without the planted line
    bound = int(0.05 * (args.null + 1)) / (args.null + 1)
    for truth, acts, runs in (("not specific: the rows carry nothing of the label", bare, args.probes),
                              ("a label correlated with the planted one, on the rows as they are", rows.acts,
                               args.probes if args.correlated is None else args.correlated)):
        if not runs:
            continue
        calls: dict[str, list[bool]] = {"joint": [], "random": [], "label-free": []}
        cosines = []
        for k in range(runs):
            flip = rng.integers(0, 2, len(names))[inverse] == 1  # each family's labels kept or flipped
            label = np.where(flip, 1 - rows.labels, rows.labels)
            fitted = evprobe.MassMeanProbe().fit(acts, label).direction_
            cosines.append(abs(float(fitted @ planted_unit)))
            joint, by = verdict(fitted, evprobe.FitRows(acts, label, rows.families), 1000 + k)
            calls["joint"].append(bool(joint))
            for kind in ("random", "label-free"):
                calls[kind].append(by[kind][0])
        print(f"{truth} (mean |cos| with the planted direction {np.mean(cosines):.2f}):")
        for rule, got in calls.items():
            n_yes = sum(got)
            lo, hi = clopper_pearson(n_yes, len(got))
            print(f"  {rule}: called specific {n_yes} of {len(got)} = {n_yes / len(got):.3f} [{lo:.3f}, {hi:.3f}] "
                  f"(Clopper-Pearson 95%); the rank test's bound {bound:.3f}")
    print(f"({time.perf_counter() - t:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
