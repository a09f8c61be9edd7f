"""Benchmark: score a full 9,216-record run with 2,000 family resamples.

Builds the main set in memory (`build(GenerateConfig())`, no images), synthesises two runs, a
reference-like one (every reply is the reference) and a random-like one (a seeded uniform letter
for every lettered request, a reading within +-20% for the ruler), and times `score()` and the
Markdown report on each.

    python benchmarks/score_full_run.py [--n-boot 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from evprobe.bench.generate import GenerateConfig, build
from evprobe.bench.items import Item
from evprobe.bench.records import Record
from evprobe.bench.score_report import scores_markdown
from evprobe.bench.scoring import score

ANSWERS = ("answer_initial", "answer_after_test", "both_given")


def _record(item: Item, **fields: object) -> Record:
    base: dict[str, object] = dict(
        item_id=item.item_id,
        model="policy:benchmark",
        protocol="direct",
        regime="standard",
        request=item.request,
        variant=item.variant,
        family_id=item.family_id,
        reply="",
        valid=True,
        route="letter",
        choice=None,
        action=None,
        answer=None,
        value=None,
        n_prompt_tokens=None,
        n_new_tokens=None,
        seconds=0.0,
    )
    base.update(fields)
    return Record(**base)


def reference_run(items: list[Item]) -> list[Record]:
    out = []
    for it in items:
        if it.request == "select":
            out.append(_record(it, choice=it.reference_option, action=it.reference_action))
        elif it.request in ANSWERS:
            out.append(_record(it, choice=it.reference_option, answer=it.reference_answer))
        elif it.request == "read_ruler":
            out.append(_record(it, value=it.reference_value))
        else:
            out.append(_record(it, choice=it.reference_option, value=it.reference_value))
    return out


def random_run(items: list[Item], seed: int = 0) -> list[Record]:
    rng = np.random.default_rng(seed)
    out = []
    for it in items:
        if it.request == "read_ruler":
            out.append(_record(it, value=float(it.reference_value * rng.uniform(0.8, 1.2))))
            continue
        letter = str(rng.choice(sorted(it.options)))
        if it.request == "select":
            out.append(_record(it, choice=letter, action=it.options[letter]))
        elif it.request in ANSWERS:
            out.append(_record(it, choice=letter, answer=it.options[letter]))
        else:
            out.append(_record(it, choice=letter, value=float(it.options[letter])))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-boot", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    t0 = time.perf_counter()
    _, items = build(GenerateConfig())
    print(f"built the main set in memory: {len(items)} items in {time.perf_counter() - t0:.2f} s")
    for name, records in (
        ("reference-like", reference_run(items)),
        ("random-like", random_run(items)),
    ):
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            scores = score(items, records, n_boot=args.n_boot)
            times.append(time.perf_counter() - t)
        t = time.perf_counter()
        text = scores_markdown(scores, name)
        report = time.perf_counter() - t
        print(
            f"{name}: score() on {len(records)} records x {args.n_boot} resamples: "
            f"best {min(times):.3f} s, mean {sum(times) / len(times):.3f} s over {args.repeats}; "
            f"min cost choice {scores['min_cost_choice']['value']:.3f}, "
            f"PECS {scores['pecs']['value']:.3f}; markdown {report * 1000:.0f} ms "
            f"({len(text.splitlines())} lines)"
        )


if __name__ == "__main__":
    main()
