"""`evprobe check` rows for the opt-in blocks (`bench.numeric`, `bench.injection`).

They appear only when bench.json declares a block, so the main set's table (seed 000, Table 9)
keeps its rows. Labels and inventory of the blocks are checked with the main items (the oracle
rebuilds them, `oracle_items.expected_items`); these rows check what makes the blocks' prompts sound,
each from the items and the oracle alone (nothing from the generator's prompt code):

Injection levels (for every level L >= 1; the target-exclusive level -1 has its own first row):
- "Target-exclusive prompts are level 0's less the reference objects" (level -1, seed 003 section 4.1):
  the level-0 item's prompt with its one clause naming the ruler and the marker dot replaced by "."
  is the level's prompt byte for byte, and that prompt names no ruler, dot, marker, last panel or
  frame, and has no "Where to look" paragraph. Its pairs are checked by the rows below.
- "Level prompts are level 0's plus the level's text": removing the "Where to look" paragraph and
  (level 3) the readings lines leaves the level-0 item's prompt byte for byte; levels 1-2 have no
  readings lines and level 3 has 4 per attached sheet.
- "Level 3 readings are the oracle's": every reading of every attached sheet (oracle readings from
  the stored calibration and the sheet's candidate value) is printed in the level-3 prompt.
- "Level image pairs share every prompt byte but the history": identical prompts at levels 1-2; at
  level 3 identical once the readings lines (the history written as numbers) are removed.
- "Level estimate groups share every prompt byte but the sheets" (with --numeric): the numeric
  estimates of one group (two sheets of a property, four worlds of an outcome) alike, as above.
- "Level threshold pairs differ only in the threshold": each prints its threshold once, and the
  prompts are identical once it is replaced.
- "Level hidden-world pairs of uninformative tests share every prompt byte" (appendix D).

Numeric estimates:
- "Numeric prompt groups share every byte": the two sheets of a property, the four worlds.
- "Numeric prompts do not state their answer": the reference value, as prompts print numbers,
  is not in the prompt (it would turn a measurement into a copy).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from evprobe.bench import oracle
from evprobe.bench.items import Item

# A readings line: a sheet's panel or a clip's panel frame (bench.prompts.readings_text).
_READING_LINE = re.compile(r"^(?:Readings from the .*:|- panel \d \(.*\): .* m|- frame \d+ \(.*\): .* m)$", re.M)
GUIDANCE = "Where to look:"
TARGET_EXCLUSIVE = -1  # bench.injection.TARGET_EXCLUSIVE (not imported: these rows read items, not prompt code)
_REFERENCE_CLAUSE = re.compile(r"; every (?:panel|frame) has a ruler in metres, and a \w+ dot with a line to the "
                               r"ruler marks the measured position\.")
_REFERENCE_WORDS = re.compile(r"\bruler\b|\bdot\b|\bmarker\b|\bmarked\b|last (?:panel|frame)|bottom right", re.I)


def _target_exclusive_ok(prompt: str, base: Item | None) -> bool:
    """A level -1 prompt is its level-0 prompt with the one reference clause made ".", and names none."""
    if base is None or base.injection or len(_REFERENCE_CLAUSE.findall(base.prompt)) != 1:
        return False
    return (prompt == _REFERENCE_CLAUSE.sub(".", base.prompt) and not _REFERENCE_WORDS.search(prompt)
            and GUIDANCE not in prompt)


def _without_readings(prompt: str) -> str:
    """The prompt less its readings lines (level 3's numbers)."""
    return "\n".join(line for line in prompt.split("\n") if not _READING_LINE.fullmatch(line))


def _without_guidance(prompt: str) -> str:
    return "\n\n".join(p for p in prompt.split("\n\n") if not p.startswith(GUIDANCE))


def _n(x: int) -> str:
    return f"{x:,}"


def check_levels(report: Any, items: list[Item], oracles: dict[str, oracle.OracleFamily], levels: list[int]) -> None:
    by_id = {it.item_id: it for it in items}
    extend_bad, readings_bad, n_extend, n3 = [], [], 0, 0
    te_bad, n_te = [], 0
    for it in items:
        if not it.injection:
            continue
        base = by_id.get(it.item_id.removesuffix(f".L{it.injection}"))
        if it.injection == TARGET_EXCLUSIVE:
            n_te += 1
            if not _target_exclusive_ok(it.prompt, base):
                te_bad.append(it.item_id)
            continue
        n_extend += 1
        stripped = _without_readings(_without_guidance(it.prompt))
        lines = sum(1 for line in it.prompt.split("\n") if line.startswith(("- panel ", "- frame ")))
        want_lines = 4 * len(it.images) if it.injection >= 3 else 0
        if base is None or base.injection or stripped != base.prompt or lines != want_lines or GUIDANCE not in it.prompt:
            extend_bad.append(it.item_id)
        fam = oracles.get(it.family_id)
        if it.injection >= 3 and fam is not None:
            n3 += 1
            cal = fam.row["calibration"]
            for rel in it.images:
                sheet, value = oracle.sheet_value(fam, rel)
                gone = [r for r in oracle.readings(fam.system, cal, sheet, value) if f" {oracle.fmt6(r)} m" not in it.prompt]
                if gone:
                    readings_bad.append(f"{it.item_id} lacks {sheet} reading {oracle.fmt6(gone[0])}")
                    break
    if TARGET_EXCLUSIVE in levels:
        report.add(
            "Target-exclusive prompts are level 0's less the reference objects",
            f"{_n(n_te - len(te_bad))}/{_n(n_te)}",
            not te_bad and n_te > 0,
            f"{len(te_bad)} differ or name a reference, first {te_bad[:3]}" if te_bad else "no level -1 items",
        )
    ladder = [level for level in levels if level != TARGET_EXCLUSIVE]
    if ladder:
        report.add(
            "Level prompts are level 0's plus the level's text",
            f"{_n(n_extend - len(extend_bad))}/{_n(n_extend)} (levels {', '.join(map(str, ladder))})",
            not extend_bad and n_extend > 0,
            f"{len(extend_bad)} differ, first {extend_bad[:3]}" if extend_bad else "no level items",
        )
    report.add(
        "Level 3 readings are the oracle's",
        f"{_n(n3 - len(readings_bad))}/{_n(n3)}",
        not readings_bad,
        "; ".join(readings_bad[:3]),
    )
    image: dict[str, list[Item]] = defaultdict(list)
    threshold: dict[str, list[Item]] = defaultdict(list)
    hidden: dict[tuple[str, str], list[Item]] = defaultdict(list)
    for it in items:
        if not it.injection:
            continue
        if it.image_pair_id and it.request in ("select", "answer_initial", "answer_after_test"):
            image[it.image_pair_id].append(it)
        if it.threshold_pair_id:
            threshold[it.threshold_pair_id].append(it)
        if it.request == "answer_after_test":
            hidden[(it.decision_id, it.test)].append(it)  # type: ignore[arg-type]
    bad_image = [k for k, v in image.items() if len(v) != 2 or _image_key(v[0]) != _image_key(v[1])]
    report.add(
        "Level image pairs share every prompt byte but the history",
        f"{_n(len(image) - len(bad_image))}/{_n(len(image))}",
        not bad_image,
        f"first {bad_image[:3]}",
    )
    bad_threshold = [k for k, v in threshold.items() if len(v) != 2 or not _only_threshold_differs(*v)]
    report.add(
        "Level threshold pairs differ only in the threshold",
        f"{_n(len(threshold) - len(bad_threshold))}/{_n(len(threshold))}",
        not bad_threshold,
        f"first {bad_threshold[:3]}",
    )
    estimates: dict[str, list[Item]] = defaultdict(list)  # numeric estimates at a level (--numeric)
    for it in items:
        if it.injection and it.request in ("estimate_property", "estimate_outcome") and it.image_pair_id:
            estimates[it.image_pair_id].append(it)
    if estimates:
        bad_estimates = [k for k, v in estimates.items() if len(v) < 2 or len({_image_key(x) for x in v}) != 1]
        report.add(
            "Level estimate groups share every prompt byte but the sheets",
            f"{_n(len(estimates) - len(bad_estimates))}/{_n(len(estimates))}",
            not bad_estimates,
            f"first {bad_estimates[:3]}",
        )
    uninformative = [v for v in hidden.values() if len(v) == 2 and v[0].images == v[1].images]
    bad_hidden = [v[0].item_id for v in uninformative if v[0].prompt != v[1].prompt]
    report.add(
        "Level hidden-world pairs of uninformative tests share every prompt byte",
        f"{_n(len(uninformative) - len(bad_hidden))}/{_n(len(uninformative))}",
        not bad_hidden and len(uninformative) > 0,
        f"first {bad_hidden[:3]}" if bad_hidden else "no uninformative pairs",
    )
    report.numbers["injection"] = {
        "levels": levels, "items": n_extend, "image_pairs": len(image), "threshold_pairs": len(threshold),
        "uninformative_hidden_pairs": len(uninformative),
    }


def _image_key(it: Item) -> str:
    """What must match across an image pair: the prompt, less the readings lines at level 3."""
    return _without_readings(it.prompt) if it.injection >= 3 else it.prompt


def _only_threshold_differs(a: Item, b: Item) -> bool:
    if a.threshold is None or b.threshold is None:
        return False
    qa, qb = oracle.fmt6(a.threshold), oracle.fmt6(b.threshold)
    if a.prompt.count(qa) != 1 or b.prompt.count(qb) != 1:
        return False
    return a.prompt.replace(qa, "{q}") == b.prompt.replace(qb, "{q}") and a.images == b.images and a.options == b.options


def check_numeric(report: Any, items: list[Item]) -> None:
    groups: dict[str, list[Item]] = defaultdict(list)
    leaks, n = [], 0
    for it in items:
        if it.request not in oracle.NUMERIC_REQUESTS:
            continue
        n += 1
        if not it.injection:  # a level's groups: check_levels (level 3's readings differ by design)
            groups[str(it.image_pair_id)].append(it)
        if it.reference_value is not None and re.search(
            rf"(?<![\d.]){re.escape(oracle.fmt6(it.reference_value))}(?![\d])", it.prompt
        ):
            leaks.append(it.item_id)
    bad = [k for k, v in groups.items() if len({it.prompt for it in v}) != 1 or len({tuple(it.images) for it in v}) != len(v)]
    report.add(
        "Numeric prompt groups share every byte",
        f"{_n(len(groups) - len(bad))}/{_n(len(groups))}",
        not bad and n > 0,
        f"groups whose prompts differ or images repeat: {bad[:3]}" if bad else "no numeric items",
    )
    report.add(
        "Numeric prompts do not state their answer",
        f"{_n(n - len(leaks))}/{_n(n)}",
        not leaks,
        f"prompts print their reference value: {leaks[:3]}",
    )
    report.numbers["numeric"] = {"items": n, "groups": len(groups)}
