"""Known-answer checks: does the toolkit find what a model is known to compute, where it is planted?

The model organism (`organism`) is built so that its answer and where it forms are known before the
toolkit looks (organism.model): below layer k (`attention_free_layers`, 1) its attention weights are
zero, so no position reads another there: the sheet value and the threshold cannot meet, every state
is a function of its own token, and the last position's state is the same for the four decisions
of a family. The organism replies `ANSWER: <letter>`; the readouts teacher-force `ANSWER:` (hooks'
answer prefix), so the last position is that token, the one that predicts the letter (in generation
a generated token's). A training-only head read the right option's meaning there after layer m
(`aux_layer`, 3, not the last), so sufficiency is linearly there, one direction for every system.
`known_answer_checks(OUT)` reads what `evprobe quickstart` wrote under OUT (and the plant from
the checkpoint's organism.json) and writes OUT/known_answer.json and OUT/known_answer.md. Every number
comes with its interval and n, and every check states the n it expects (its target) and fails when it
reads fewer or more: counted from OUT/bench and what each stage was asked to do, never from the file
checked (experiments.known_answer.counts), so a shard never merged fails instead of passing on half the
families. Each check below names the faults that it catches in
tests/experiments/test_known_answer_mutations.py (the README's fault x check table):

- behaviour: minimum-cost choice >= 0.95 and both-correct image pairs >= 0.90 (scores.json), on every
  select decision and every image pair of the bench. Catches: image-pair members swapped.
- voids, when the bench has them (`evprobe quickstart --voids`; experiments.known_answer.voids):
  AbsRec, twin accuracy and the occluded selections' minimum-cost choice >= 0.95 per void type, on
  every void item. Catches: voids labelled sufficient, half the void records missing.
- planted profile (sweep.json and the capture): before layer k every position is at chance (AUROC
  within 0.05 of 0.5 or its interval covering 0.5; far below 0.5 fails too) and the last position's
  state is identical within families (the same at every image pair and threshold pair); from layer k
  on, it differs within every pair but at most 10% (FLAT_SHARE: pairs within float16's step of each other
  read as identical in the capture); at (m, last) the grouped-CV AUROC is >= 0.90 with its interval's
  low end >= 0.80 and, where the sweep ran its test against chance (probes.chance), that row is
  decodable by it, on every labelled row of the capture. The nested estimate (layer and position
  chosen without test labels) is shown beside it, never the test-fold maximum. And each system x
  initial-test group at (m, last) agrees with the others (experiments.known_answer.capture): its
  class-mean difference at cosine >= 0.70 with the other groups' pooled one, and a probe trained on
  the other groups scores it at AUROC >= 0.90. Catches: the capture's layers off by one, families
  leaking across the folds, a wrong label (2 of 6 groups, or every mass-initial family: pooled, both
  still decode), half the families missing.
- one direction across systems: a probe trained on one system's rows at (m, last) scores every other
  system's (disjoint families, all of them) at AUROC >= 0.90 (probes.transfer, kind "system"): the
  planted head reads one "stop" class for all systems. Catches: both wrong labels, the capture off by
  one, half the families missing.
- stored directions point to their class (OUT/directions and the capture; known_answer.capture): at
  layer m each stored direction's projection ranks its label's positive class first on every family
  it was not fitted on (AUROC >= 0.90). Catches: a direction's sign flipped (before, steering alone
  did), a random direction, both wrong labels, half the families missing.
- no family leakage (sweep.json): the sweep's within-family shuffle check fires on no row with an
  effect that matters (|shuffled AUROC - 0.5| > 0.05; the sweep's own rule alone allows 5% false
  alarms per sweep), on every labelled row. Catches: families leaking across the folds, half the
  families missing.
- steering at the planted layer (dose_response.json), layer m only, on every held-out selection (the
  families the steered direction was not fitted on): on resolved items at +alpha and
  unresolved items at -alpha the stop rate moves >= 0.40 toward the predicted side at some dose before
  the model breaks, with random directions of the same raw norm moving it at most a quarter as far at
  that dose, monotonically up to that dose (slack 0.02); the model *breaks* at the first dose where
  more than 10% of the group choose a useless test (free fall, or the test already done) or where the
  stop rate falls back from an earlier dose's shift by more than 0.02 and more than its own 95% interval
  reaches. Catches: no-op steering, a random direction in place of the probe's, the steering layer off
  by one, a direction's sign flipped.
- generated replies follow the steering (dose_response.json, readout both), layer m: at alpha 0 and
  every dose before the break, both groups, the greedy reply's stop rate is within 0.05 (or two items'
  worth of a small group) of the log-prob readout's and at most 5% of the replies are invalid. The letter is generated at the step after
  `ANSWER:`, from that generated token's state; the log-probs read the same state teacher-forced in one
  forward. Catches: steering that edits the prompt pass and no generated token (prompt-only).
- interchange interventions (patching.json, on every pair the patching was asked for; decoded flip =
  interchange-intervention accuracy, IIA: the share of pairs whose top letter becomes the source
  member's when one state is patched): known
  by construction at both ends. Before layer k the two members differ only at the image position, and
  its state is a function of the sheet value alone, so patching it there is running the source:
  image IIA >= 0.95, text and last <= 0.05. At the last layer only the last position feeds the letter:
  last IIA >= 0.95, image and text <= 0.05. Exact too: before layer k patching the last or text
  positions moves the log-odds by nothing (<= 1e-4 nats; their states are identical in an image pair),
  and at layer k patching the last position moves them (it has read the sheet). The layers between are
  reported: the first layer where the last position carries IIA >= 0.5 is where the decision has
  reached it. Catches: patching the wrong layer (off by one: IIA alone is the same at layers 0 and 1,
  the exact no-change is not) and patching positions off by one (experiments/known_answer/mutations.py).
- partial image-span patching (patching results.jsonl; experiments.known_answer.span): each sheet is a
  span of two image tokens, its reading's block and its offset; before layer k, patching only the block
  or only the offset gives a hybrid reading whose answer the causal model (organism.causal) knows:
  >= 0.95 agreement, with both predicted flips and predicted stays present. Catches: image tokens
  listed out of order within the span, and patching positions off by one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evprobe.core.decimals import fixed
from evprobe.core.estimate_text import estimate_text, missing_text
from evprobe.core.files import atomic_write_bytes, atomic_write_json
from evprobe.core.json_types import JsonObject
from evprobe.experiments.known_answer.capture import (DECODE_FLOOR, GROUP_COSINE, GroupReading, direction_check,
                                                      group_problems, group_readings)
from evprobe.experiments.known_answer.counts import Expectations, Expected, n_problems
from evprobe.experiments.known_answer.rows import CheckRow, check_row
from evprobe.experiments.known_answer.span import image_span_check, span_outcomes
from evprobe.experiments.known_answer.steering import (SteeringLayer, generated_check, steering_checks,
                                                       steered_expected)
from evprobe.experiments.known_answer.voids import void_checks

MIN_COST_FLOOR = 0.95
PAIRS_FLOOR = 0.90
# DECODE_FLOOR (known_answer.capture): AUROC 0.90 at the planted row, each transfer cell, each group, each direction
DECODE_LOW_END = 0.80  # the planted row's interval must not reach below this
CHANCE = 0.55  # an AUROC at most this, or whose interval reaches 0.5, is at chance
IIA_HIGH, IIA_LOW = 0.95, 0.05
EXACT_NATS = 1e-4  # "no change at all", allowing float noise between batched forwards
LEAK_EFFECT = 0.05  # a shuffled-label AUROC this far from 0.5 is leakage that matters
# From layer k the last position reads the others, but the capture is float16: a pair whose states
# differ by less than float16's step reads as identical (answer requests of some sliding image pairs
# at L1, whose float32 states differ by at most 1.8e-5 to 4.6e-5 where float16's step is 0.002 to
# 0.008: 4 of 1,152 pairs on the main set, 2 of 192 on the mutation tests' 8-family set). A fault that
# moves the boundary (the layers off by one, a capture that ignores the layer) makes every pair of a
# layer identical; at most 10% identical separates the two by an order of magnitude either way.
FLAT_SHARE = 0.10


def _load(path: Path) -> JsonObject | None:
    """A summary the known-answer checks read, or None when absent; bad JSON or not an object: one line."""
    from evprobe.core.json_files import optional_json_object

    return optional_json_object(path, "rerun the quickstart into that folder (`evprobe quickstart --out OUT`)")


def behaviour_checks(scores: JsonObject | None, expected: dict[str, Expected | None]) -> list[CheckRow]:
    """expected: per measure, its denominator (every select decision, every image pair of the bench)."""
    if scores is None:
        return [check_row("behaviour", None, "no scores.json", "run and score the model")]
    out = []
    for key, floor, title in (("min_cost_choice", MIN_COST_FLOOR, "minimum-cost choice"),
                              ("both_correct_image_pairs", PAIRS_FLOOR, "both-correct image pairs")):
        e, exp = scores[key], expected.get(key)
        off = n_problems([("n", exp, e.get("n"), None)])
        measured = estimate_text(e) + (f"; FAILS: {off[0]}" if off else "")
        target = f">= {floor:.2f}" + (f", {exp.text}" if exp is not None else "")
        out.append(check_row(title, e["value"] is not None and e["value"] >= floor and not off, measured, target))
    return out


def _sweep_n(sweep: JsonObject, expected: Expected | None) -> list[str]:
    """The sweep's rows and families against the capture's expected labelled rows."""
    return n_problems([("sweep", expected, sweep.get("n"), sweep.get("n_families"))])


def _auroc_text(e: JsonObject) -> str:
    """A sweep row's or nested estimate's AUROC (keys auroc, ci, n, and n_families where the sweep
    gives it: the families its interval rests on) through core.estimate_text."""
    from evprobe.probes.sweep_row import auroc_json

    return estimate_text(auroc_json(e), 3)


def _at_chance(e: JsonObject) -> bool:
    """At chance: AUROC within CHANCE - 0.5 of 0.5, or its interval covers 0.5. Two-sided: far below
    0.5 is not "no information" but a fault's signature (folds that split families push it there)."""
    v, (lo, hi) = e.get("auroc", e.get("value")), e.get("ci") or [None, None]
    if v is None:
        return False
    return abs(v - 0.5) <= CHANCE - 0.5 or (lo is not None and lo <= 0.5 <= hi)


def _pairs(row: JsonObject) -> tuple[int, int]:
    """(pairs whose two states are identical, pairs) over the row's image and threshold pairs."""
    counts = list((row.get("identical_pairs") or {}).values())
    return sum(int(c[0]) for c in counts), sum(int(c[1]) for c in counts)


def profile_check(sweep: JsonObject | None, plant: dict[str, int], expected: Expected | None,
                  groups: list[GroupReading] | None) -> CheckRow:
    """Chance before the planted layer k, identical last states there; varying from k; decodable at m,
    pooled (the sweep, on every labelled row of the capture: `expected`) and in each system x
    initial-test group with the sign of the others (`groups`: known_answer.capture.group_readings)."""
    title = "planted layer profile"
    k, m = plant["attention_free_layers"], plant["aux_layer"]
    target = (f"L0-L{k - 1}: every position at chance, the last position identical within every pair; "
              f"L{k}+: the last position differs within all but {FLAT_SHARE:.0%} of the pairs; L{m}/last AUROC >= {DECODE_FLOOR:.2f}, interval above "
              f"{DECODE_LOW_END:.2f} and decodable by the sweep's permutation test where it ran, on "
              f"{expected.text if expected else 'every labelled row'}; each system x "
              f"initial-test group at L{m}/last: cosine >= {GROUP_COSINE:.2f} between its class-mean difference and the "
              f"other groups' pooled one, and a probe trained on the other groups scores it at AUROC >= "
              f"{DECODE_FLOOR:.2f}, each group on every family of the bench it holds")
    if sweep is None:
        return check_row(title, None, "no sweep.json", target)
    if groups is None:
        return check_row(title, None, f"no capture of L{m}/last to read the groups from", target)
    rows = sweep["rows"]
    before, after = [r for r in rows if r["layer"] < k], [r for r in rows if r["layer"] >= k]
    planted = next((r for r in rows if r["layer"] == m and r["position"] == "last"), None)
    if not before or planted is None or not after:
        return check_row(title, None, f"the sweep lacks layers before L{k} or L{m}/last", target)
    problems, parts = [], []
    for r in before:
        name = f"L{r['layer']}/{r['position']}"
        if r["position"] == "last":
            same, total = _pairs(r)
            ok = total > 0 and same == total
            parts.append(f"{name} identical in {same} of {total} image and threshold pairs")
        else:
            ok = r.get("auroc") is not None and _at_chance(r)
            parts.append(f"{name} {_auroc_text(r)}")
        if not ok:
            problems.append(name)
    flat, faint = [], []
    for r in (r for r in after if r["position"] == "last"):
        same, total = _pairs(r)
        if total == 0 or same > FLAT_SHARE * total:
            flat.append(f"L{r['layer']}/last ({same} of {total} pairs identical)")
        elif same:
            faint.append(f"L{r['layer']} {same} of {total}")
    problems += flat
    if flat:
        parts.append(f"identical pairs at {', '.join(flat)}")
    else:
        parts.append(f"L{k}+/last differ in every pair" + (
            f" but {', '.join(faint)} (identical in the float16 capture)" if faint else ""))
    value, (lo, _) = planted.get("auroc"), planted.get("ci") or [None, None]
    decoded = value is not None and value >= DECODE_FLOOR and lo is not None and lo >= DECODE_LOW_END
    if not decoded:
        problems.append(f"L{m}/last below the decoding floor")
    # where the sweep ran its test against chance (probes.chance), the planted row must pass it as well:
    # "decodable" is that test's verdict, never the interval's
    if (planted.get("chance_test") or {}).get("decodable") is False:
        problems.append(f"L{m}/last not decodable by the sweep's permutation test")
    parts.append(f"L{m}/last {_auroc_text(planted)}")
    best = sweep.get("best") or {}
    if best.get("layer") is not None:
        parts.append(f"nested estimate (choice without test labels) L{best['layer']}/{best['position']} "
                     f"{_auroc_text(best)}")
    problems += _sweep_n(sweep, expected) + n_problems([(f"L{m}/last", expected, planted.get("n"), None)])
    parts.append(f"sweep n={sweep.get('n')} rows of {sweep.get('n_families')} families")
    off, text = group_problems(groups)
    problems += off
    parts.append(f"by group at L{m}/last: {text}")
    measured = "; ".join(parts) + (f"; FAILS at {', '.join(problems)}" if problems else "")
    return check_row(title, not problems, measured, target)


def transfer_check(acts: Path | None, plant: dict[str, int], expected: dict[str, Expected], *,
                   n_boot: int = 200) -> CheckRow:
    """A probe at (m, last) trained on one system scores each other system at >= DECODE_FLOOR, on
    every labelled row of that system the bench holds (`expected`, per system)."""
    title = "one direction across systems"
    m = plant["aux_layer"]
    target = (f"L{m}/last: a probe trained on one system scores every other at AUROC >= {DECODE_FLOOR:.2f}; each "
              f"test system on all its rows ({', '.join(f'{s} {e.text}' for s, e in sorted(expected.items())) or missing_text('no systems expected')})")
    if acts is None or not (acts / "meta.json").is_file():
        return check_row(title, None, "no capture", target)
    from evprobe.probes.runs import labelled
    from evprobe.probes.sweep import SweepConfig
    from evprobe.probes.transfer import transfer

    cs, labelset = labelled([acts], "resolved")
    if m not in cs.layers or "last" not in cs.positions:
        return check_row(title, None, f"L{m}/last was not captured", target)
    result = transfer(cs, labelset, "system", SweepConfig(layers=(m,), positions=("last",), nested=False,
                                                          n_boot=n_boot, refits=0))
    counts = {name: (n, n_families) for name, n, n_families in result.conditions}  # each system's rows
    cells, low = [], []
    for c in result.cells:
        if c.train == c.test:
            continue
        (_, _, e), = c.rows
        cells.append(f"{c.train}->{c.test} {e.text()}")
        if e.value is None or e.value < DECODE_FLOOR:
            low.append(f"{c.train}->{c.test}")
    off = n_problems([(s, e, *counts.get(s, (0, 0))) for s, e in sorted(expected.items())]
                     or [("systems", None, None, None)])
    measured = ("; ".join(cells) + (f"; BELOW at {', '.join(low)}" if low else "")
                + (f"; FAILS: {', '.join(off)}" if off else ""))
    return check_row(title, bool(cells) and not low and not off, measured, target)


def leakage_check(sweep: JsonObject | None, expected: Expected | None) -> CheckRow:
    """Fails where the sweep's within-family shuffle check fires AND the shuffled AUROC is more than
    LEAK_EFFECT from 0.5: the sweep's own test allows 5% false alarms per sweep (its Bonferroni
    rule), too many for a pass/fail gate, so a gate also asks for an effect that matters. And where
    the sweep ran on fewer rows or families than the capture should hold (`expected`)."""
    title = "no family leakage"
    target = (f"the within-family shuffle check fires on no row with |AUROC - 0.5| > {LEAK_EFFECT}, on "
              f"{expected.text if expected else 'every labelled row'}")
    if sweep is None:
        return check_row(title, None, "no sweep.json", target)
    scored = [r for r in sweep["rows"] if r.get("leakage_auroc") is not None]
    if not scored:
        return check_row(title, None, "the sweep ran no leakage check", target)
    fired = [r for r in scored if r.get("leakage_fires")]
    leaking = [f"L{r['layer']}/{r['position']} {r['leakage_auroc']:.3f}" for r in fired
               if abs(r["leakage_auroc"] - 0.5) > LEAK_EFFECT]
    worst = max(scored, key=lambda r: abs(r["leakage_auroc"] - 0.5))
    check = sweep.get("leakage_check") or {}
    off = _sweep_n(sweep, expected)
    measured = (f"{len(fired)} of {len(scored)} rows fire"
                + (f" ({', '.join(leaking)} beyond {LEAK_EFFECT})" if leaking else "")
                + f"; farthest from 0.5: L{worst['layer']}/{worst['position']} {worst['leakage_auroc']:.3f} "
                f"(z {fixed(worst.get('leakage_z') or 0.0, 2, sign=True)}; {check.get('shuffles', '?')} shuffles; n={sweep.get('n')} "
                f"rows of {sweep.get('n_families')} families)" + (f"; FAILS: {', '.join(off)}" if off else ""))
    return check_row(title, not leaking and not off, measured, target)


def interchange_check(summary: JsonObject | None, plant: dict[str, int], expected: Expected | None) -> CheckRow:
    """IIA known by construction before layer k (image) and at the last layer (last), on every pair
    direction the patching was asked for (`expected`)."""
    title = "interchange interventions"
    k = plant["attention_free_layers"]
    target = (f"L0-L{k - 1}: image IIA >= {IIA_HIGH}, text and last <= {IIA_LOW} and their patches move the "
              f"log-odds by <= {EXACT_NATS:g} nats; L{k}: patching last moves them; last layer: last IIA >= "
              f"{IIA_HIGH}, image and text <= {IIA_LOW}; patched: {expected.text if expected else 'every requested pair'}")
    if summary is None:
        return check_row(title, None, "no patching.json", target)
    layers, positions = summary["layers"], summary["positions"]
    if not {"image", "last", "text"} <= set(positions):
        return check_row(title, None, "image, text and last not all patched", target)
    if layers[-1] != plant["n_layers"] - 1 or not any(layer < k for layer in layers):
        return check_row(title, None, f"patched layers {layers} lack L0-L{k - 1} or the last layer", target)
    iia = summary["decoded_flip"]  # (layers, positions) of estimates

    def at(layer: int, name: str) -> float | None:
        return iia[layers.index(layer)][positions.index(name)]["value"]

    if any(at(layer, p) is None for layer in layers for p in ("image", "text", "last")):
        return check_row(title, None, "IIA undefined (no pair whose top letters differ)", target)
    problems = []
    for layer in (x for x in layers if x < k):
        if at(layer, "image") < IIA_HIGH or at(layer, "text") > IIA_LOW or at(layer, "last") > IIA_LOW:
            problems.append(f"L{layer}")
    # Exact by construction, not only in IIA: before layer k no position reads another, so an image
    # pair's last and text states there are identical and patching them changes nothing at all; at
    # layer k the last position has read the sheet, so patching it moves the log-odds. A patch of
    # the wrong layer (off by one) breaks one of the two.
    change = summary.get("mean_change")

    def moved(layer: int, name: str) -> float:
        est = change[layers.index(layer)][positions.index(name)]
        return abs(est["value"]) if est.get("value") is not None else float("nan")

    if change is not None:
        for layer in (x for x in layers if x < k):
            if not (moved(layer, "last") <= EXACT_NATS and moved(layer, "text") <= EXACT_NATS):
                problems.append(f"L{layer} (patching last/text moved the log-odds by "
                                f"{max(moved(layer, 'last'), moved(layer, 'text')):.2g} nats)")
        if k in layers and not moved(k, "last") > EXACT_NATS:
            problems.append(f"L{k} (patching last moved nothing)")
    last = layers[-1]
    if at(last, "last") < IIA_HIGH or at(last, "image") > IIA_LOW or at(last, "text") > IIA_LOW:
        problems.append(f"L{last}")
    problems += n_problems([("patched", expected, summary.get("n_rows"), summary.get("n_families"))])
    reached = next((layer for layer in layers if at(layer, "last") >= 0.5), None)
    rows = ", ".join(f"L{x} {at(x, 'image'):.2f}/{at(x, 'text'):.2f}/{at(x, 'last'):.2f}" for x in layers)
    n = iia[0][positions.index("image")].get("n")
    measured = (f"IIA image/text/last: {rows}; the decision reaches the last position at "
                f"{'L' + str(reached) if reached is not None else 'no layer'} (n={n} pairs whose top letters "
                f"differ, {summary['n_rows']} patched of {summary.get('n_families')} families)"
                + (f"; FAILS at {', '.join(problems)}" if problems else ""))
    return check_row(title, not problems, measured, target)


@dataclass(frozen=True)
class KnownAnswerResult:
    """Every known-answer check of a quickstart folder, the plant they read, and each steered layer's
    steering numbers; `to_json()` is known_answer.json."""

    plant: dict[str, int]
    checks: list[CheckRow]
    steering_by_layer: list[SteeringLayer]
    passed: bool

    def to_json(self) -> JsonObject:
        return {"plant": self.plant, "checks": [c.to_json() for c in self.checks],
                "steering_by_layer": [s.to_json() for s in self.steering_by_layer], "passed": self.passed}

    def failed(self) -> list[str]:
        """The names of the checks not passed (not run counts as not passed)."""
        return [c.check for c in self.checks if c.passed is not True]


def known_answer_checks(out: Path, plant: dict[str, int] | None = None) -> KnownAnswerResult:
    """Check every target against the quickstart folder `out`; writes known_answer.json/.md.
    plant: the organism's planted location (default: the committed checkpoint's organism.json)."""
    from evprobe.organism.checkpoint import planted_location

    out = Path(out)
    plant = plant or planted_location()
    expect = Expectations(out)
    scores = _load(out / "run" / "scores.json")
    sweep = _load(out / "acts" / "probes" / "resolved" / "sweep.json")
    dose = _load(out / "dose_response" / "dose_response.json")
    patch = _load(out / "patching" / "patching.json")
    patch_meta = _load(out / "patching" / "meta.json") or {}
    patched = expect.patched((patch_meta.get("config") or {}).get("limit_pairs")) if patch_meta else None
    captured = expect.captured()
    steered = steered_expected(dose, plant, out / "directions", expect)
    steer, per_layer = steering_checks(dose, plant, steered)
    behaviour = {"min_cost_choice": expect.selections(), "both_correct_image_pairs": expect.image_pairs()}
    checks = (behaviour_checks(scores, behaviour) + void_checks(scores, expect.voids())
              + [profile_check(sweep, plant, captured, group_readings(out / "acts", plant, expect)),
                 transfer_check(out / "acts", plant, expect.captured_by(lambda it: it.system)),
                 direction_check(out / "acts", out / "directions", plant, expect), leakage_check(sweep, captured)]
              + steer + [generated_check(dose, plant, per_layer, steered), interchange_check(patch, plant, patched),
                         image_span_check(span_outcomes(out / "patching", out / "bench", plant["attention_free_layers"]),
                                          plant, patched)])
    result = KnownAnswerResult(plant, checks, per_layer, all(c.passed for c in checks))
    atomic_write_json(out / "known_answer.json", result.to_json())
    atomic_write_bytes(out / "known_answer.md", markdown(result).encode("utf-8"))
    return result


def markdown(result: KnownAnswerResult) -> str:
    mark = {True: "pass", False: "**FAIL**", None: "not run"}
    lines = ["# Known-answer checks", "",
             "Targets for a model whose answer and its place are known (experiments/known_answer/checks.py says how each "
             "is read and which fault each catches). Planted: no position reads another before layer "
             f"{result.plant['attention_free_layers']}; sufficiency is read out at the answer position (ANSWER:) "
             f"after layer {result.plant['aux_layer']} of {result.plant['n_layers']}.", "",
             "| check | result | measured | target |", "|---|---|---|---|"]
    for c in result.checks:
        lines.append(f"| {c.check} | {mark[c.passed]} | {c.measured} | {c.target} |")
    lines.append("")
    return "\n".join(lines)
