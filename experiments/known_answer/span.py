"""Known-answer check on part of an image span: patching a sheet's block or its offset alone.

The organism reads each sheet as two image tokens, the reading's 0.4-decade block and its offset in
the block (organism.vocab.reading_tokens); neither alone tells which candidate a sheet shows. Below
the planted layer k no position reads another, so patching only the first image token (image_first)
or only the rest (image_rest) of an image pair's source into its target gives the target a reading
made of the two members' tokens, and `organism.causal.hybrid_prediction` says which member's
reference option that reading leads to (or that it is undefined: untaught, or near a tie).

Check: at every patched layer below k, for image_first and image_rest, the patched top letter is the
predicted member's on >= 0.95 of the pairs with a prediction (family-bootstrap interval, n), and the
predictions include at least MIN_EACH "flips" (the source's option) and MIN_EACH "stays" (the
target's) over the two parts, so a patch that moves nothing, or everything, cannot pass. Catches: a
span whose tokens the toolkit lists out of order (the block patched as the offset) and patching
positions off by one (experiments/known_answer/mutations.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from evprobe.bench.manifest import load_item_images, read_items
from evprobe.bench.protocols import build_prompt
from evprobe.core.bootstrap import FamilyBootstrap
from evprobe.core.errors import InputError
from evprobe.core.jobs import read_meta
from evprobe.experiments.known_answer.counts import Expected, n_problems
from evprobe.core.estimate_text import estimate_text
from evprobe.experiments.known_answer.rows import CheckRow, check_row
from evprobe.experiments.patching.job import RESULTS_FILE, PatchingJob, read_results

if TYPE_CHECKING:
    from evprobe.organism.reader import Facts

PARTS = ("image_first", "image_rest")
SPAN_HIGH = 0.95
MIN_EACH = 5  # predicted flips and predicted stays, each at least this many (both parts together)


@dataclass(frozen=True)
class SpanOutcomes:
    """The patched layers below the planted one and, per part and layer, per pair with a prediction
    (family, predicted member, patched top == predicted top); the patched rows and their families."""

    layers: list[int]
    parts: dict[str, dict[int, list[tuple[str, str, bool]]]]
    n_rows: int
    n_families: int


def span_outcomes(patch_dir: Path, bench: Path, layers_below: int) -> SpanOutcomes | None:
    """Per part and layer below `layers_below`: per pair (family, predicted member, patched top ==
    predicted top). None when the patching lacks the parts or those layers."""
    from evprobe.organism.causal import hybrid_prediction
    from evprobe.organism.reader import read_facts

    meta = read_meta(patch_dir / PatchingJob.meta_file)
    if meta is None or not (patch_dir / RESULTS_FILE).is_file():
        return None
    from evprobe.experiments.report.summary_files import PatchingSummary, read_summary

    fix = f"rerun `evprobe patching` into {patch_dir}"
    config = meta.get("config")
    if not isinstance(config, dict) or not isinstance(config.get("positions"), list):
        raise InputError(f"{patch_dir / PatchingJob.meta_file}: field 'config.positions' must be a list of position "
                         f"sets; {fix}")
    positions = list(config["positions"])
    layers = read_summary(patch_dir / "patching.json", PatchingSummary, fix)["layers"]
    below = [layer for layer in layers if layer < layers_below]
    if not set(PARTS) <= set(positions) or not below:
        return None
    items = {it.item_id: it for it in read_items(bench)}
    facts: dict[str, Facts | None] = {}

    def facts_of(item_id: str) -> Facts | None:
        if item_id not in facts:
            it = items[item_id]
            prompt = build_prompt(it, config["protocol"], config["regime"])
            facts[item_id] = read_facts(prompt, load_item_images(bench, it.images))
        return facts[item_id]

    rows = read_results(patch_dir)
    parts: dict[str, dict[int, list[tuple[str, str, bool]]]] = {}
    for part in PARTS:
        p = positions.index(part)
        per_layer = {layer: [] for layer in below}
        for r in rows:
            if r["top_source"] == r["top_target"]:
                continue
            who = hybrid_prediction(facts_of(r["source"]), facts_of(r["target"]), part)
            if who is None:
                continue
            expected = r["top_source"] if who == "source" else r["top_target"]
            for layer in below:
                got = r["top_patched"][layers.index(layer)][p]
                per_layer[layer].append((r["family_id"], who, got == expected))
        parts[part] = per_layer
    return SpanOutcomes(below, parts, len(rows), len({r["family_id"] for r in rows}))


def image_span_check(outcomes: SpanOutcomes | None, plant: dict[str, int], expected: Expected | None, *,
                     n_boot: int = 1000, seed: int = 20260905) -> CheckRow:
    """expected: the pair directions the patching was asked for (results.jsonl must hold every one)."""
    title = "partial image-span patching"
    k = plant["attention_free_layers"]
    target = (f"L0-L{k - 1}: patching the sheet's block alone (image_first) or its offset alone (image_rest) "
              f"gives the causal model's answer on >= {SPAN_HIGH} of the pairs with a prediction, with >= "
              f"{MIN_EACH} predicted flips and >= {MIN_EACH} predicted stays; patched: "
              f"{expected.text if expected else 'every requested pair'}")
    if outcomes is None:
        return check_row(title, None, "no patching of image_first and image_rest below the planted layer", target)
    problems, parts_text, counts = [], [], []
    flips = stays = 0
    for part, per_layer in outcomes.parts.items():
        for layer, results in per_layer.items():
            if not results:
                problems.append(f"L{layer} {part}: no pair with a prediction")
                continue
            boot = FamilyBootstrap(sorted({f for f, _, _ in results}), n_boot, seed)
            fam = boot.family_index([f for f, _, _ in results])
            num = boot.per_family(fam, np.array([ok for _, _, ok in results], dtype=float))[:, None]  # (F, 1)
            den = boot.per_family(fam, np.ones(len(results)))[:, None]
            # the families holding a pair with a prediction at this part: the interval's effective n
            est = boot.rates(num, den, binary=True)[0].in_families(int((den > 0).sum())).to_json()
            parts_text.append(f"L{layer} {part} {estimate_text(est)}")
            if est["value"] < SPAN_HIGH:
                problems.append(f"L{layer} {part}")
        first = next(iter(per_layer.values()), [])  # predictions do not depend on the layer
        part_flips, part_stays = (sum(who == w for _, who, _ in first) for w in ("source", "target"))
        counts.append(f"{part} {part_flips}/{part_stays}")
        flips, stays = flips + part_flips, stays + part_stays
    if flips < MIN_EACH or stays < MIN_EACH:
        problems.append(f"only {flips} predicted flips and {stays} predicted stays")
    problems += n_problems([("patched", expected, outcomes.n_rows, outcomes.n_families)])
    measured = (f"agreement with the causal model: {'; '.join(parts_text)} ({flips} predicted flips, {stays} "
                f"predicted stays; flips/stays by part: {', '.join(counts)}; {outcomes.n_rows} pair directions "
                f"patched of {outcomes.n_families} families)"
                + (f"; FAILS at {', '.join(problems)}" if problems else ""))
    return check_row(title, not problems, measured, target)
