"""`evprobe check` rows for the void block (`bench.voids`), present only when bench.json declares it.

Labels and inventory of the void items are checked with the main items (the oracle rebuilds them
from the families alone: `oracle_items.expected_items(..., voids=...)`). These rows check what makes a
void a void and a matched pair a matched pair, from the items, the oracle and the pixels:

- "Voids name a sufficient twin of the main set": every void item's `twin_id` is a main item (no
  variant, level 0, no void) of the same family and request whose evidence settles the question.
- "Visual voids differ from their twin only in the image": the prompt and menu byte for byte the
  twin's, the image another.
- "Occluded sheets show no marker": not one pixel of the marker colour on any occluded sheet (of a
  clip benchmark: on any frame of any occluded clip).
- "Occluded sheets are identical across histories": a family's two occluded initial sheets decode
  to the same pixels, so the sheet cannot tell the worlds apart (the void carries no information).
- "Textual voids differ from their twin only in the threshold": the twin's prompt prints its
  threshold once, and writing it as the symbol gives the void's prompt; the image and menu are the
  twin's.
- "False-premise voids differ from their twin only in the question's subject, an entity the prompt
  never introduces" (present with `false_premise` voids): the twin's question paragraph opens with
  "The <object> ", writing the object as the triangle gives the void's prompt, and the twin's prompt
  never names a triangle (the premise is false from the text alone); the image and menu are the twin's.
- "Unobservable-detail voids differ from their twin only in what the question asks, a detail no
  sentence states" (present with `unobservable` voids): replacing the last sentence of the twin's
  question with the asked detail gives the void's prompt, the twin's prompt never mentions paint,
  and the void's question prints no number; the image and menu are the twin's.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from evprobe.bench import oracle
from evprobe.bench.clips import as_sheet, read_frames
from evprobe.bench.detect import marker_pixel_count
from evprobe.bench.items import Item
from evprobe.bench.render import STYLES
from evprobe.bench.voids import FALSE_ENTITY, UNOBSERVED_PART, UNOBSERVED_QUESTION, UNSTATED_SYMBOL

# The rows of the question-side voids: type -> title (a row is added only where the bench has that type).
QUESTION_ROWS = {
    "false_premise": "False-premise voids differ from their twin only in the question's subject, an entity the "
                     "prompt never introduces",
    "unobservable": "Unobservable-detail voids differ from their twin only in what the question asks, a detail "
                    "no sentence states",
}


def _n(x: int) -> str:
    return f"{x:,}"


def _sheets(path: Path) -> list[Any]:
    """The sheet at `path` as RGB images, read once: a still sheet as itself, a clip (`bench.clips`) as
    its frames four at a time laid out as sheets, so both rows see every frame."""
    frames = read_frames(path)  # within the pixel budget; a file it cannot read is one line naming it
    if len(frames) == 1:
        return frames
    return [as_sheet(frames[i:i + 4]) for i in range(0, len(frames), 4)]


def _unstated(twin: Item) -> str | None:
    """The twin's prompt with the threshold in its question paragraph written as the symbol, or
    None when that paragraph does not print the threshold exactly once."""
    if twin.threshold is None:
        return None
    q = oracle.fmt6(twin.threshold)
    parts = twin.prompt.split("\n\n")
    asked = [i for i, p in enumerate(parts) if p.startswith("Question: ")]
    if len(asked) != 1 or parts[asked[0]].count(q) != 1:
        return None
    parts[asked[0]] = parts[asked[0]].replace(q, UNSTATED_SYMBOL)
    return "\n\n".join(parts)


def _question_part(prompt: str) -> tuple[list[str], int] | None:
    """The prompt's paragraphs and the index of its one question paragraph, or None."""
    parts = prompt.split("\n\n")
    asked = [i for i, p in enumerate(parts) if p.startswith("Question: ")]
    return (parts, asked[0]) if len(asked) == 1 else None


def _false_premise(twin: Item) -> str | None:
    """The twin's prompt with its question's subject ("The <object> ") written as the false entity, or
    None when the question does not open so or the twin's prompt names the entity (no false premise)."""
    found = _question_part(twin.prompt)
    if found is None or FALSE_ENTITY in twin.prompt.lower():
        return None
    parts, i = found
    words = parts[i].split(" ", 3)  # "Question:", "The", object, rest
    if len(words) < 4 or words[1] != "The":
        return None
    parts[i] = " ".join(["Question:", "The", FALSE_ENTITY, words[3]])
    return "\n\n".join(parts)


def _unobservable(twin: Item, system: str) -> str | None:
    """The twin's prompt with its question's last sentence asking the unobserved detail, or None when
    the twin's prompt already mentions paint (the detail would be stated)."""
    found = _question_part(twin.prompt)
    if found is None or "paint" in twin.prompt.lower() or system not in UNOBSERVED_PART:
        return None
    parts, i = found
    setup, sep, _ = parts[i].rpartition(". ")
    if not sep:
        return None
    parts[i] = setup + sep + UNOBSERVED_QUESTION.format(part=UNOBSERVED_PART[system])
    return "\n\n".join(parts)


def _question_void_ok(it: Item, twin: Item) -> bool:
    expected = _false_premise(twin) if it.void == "false_premise" else _unobservable(twin, twin.system)
    if expected is None or it.prompt != expected or it.images != twin.images or it.options != twin.options:
        return False
    if it.void == "unobservable":  # what it asks prints no number: no threshold to judge against
        found = _question_part(it.prompt)
        return found is not None and not any(c.isdigit() for c in found[0][found[1]].rpartition(". ")[2])
    return True


def check_voids(report: Any, root: Path, items: list[Item], oracles: dict[str, oracle.OracleFamily]) -> None:
    by_id = {it.item_id: it for it in items}
    voids = [it for it in items if it.void is not None]
    twin_bad, visual_bad, textual_bad = [], [], []
    n_visual = n_textual = 0
    question_seen: dict[str, int] = {}
    question_bad: dict[str, list[str]] = {}
    sheets: dict[str, set[str]] = defaultdict(set)  # family -> occluded sheet paths
    for it in voids:
        twin = by_id.get(it.twin_id or "")
        if (twin is None or twin.void is not None or twin.variant is not None or twin.injection
                or twin.family_id != it.family_id or twin.request != it.request or twin.resolved is not True):
            twin_bad.append(f"{it.item_id}: twin {it.twin_id!r} is not a sufficient main item of its request")
            continue
        if it.void == "occluded":
            n_visual += 1
            sheets[it.family_id].update(it.images)
            if it.prompt != twin.prompt or it.options != twin.options or it.images == twin.images:
                visual_bad.append(it.item_id)
        elif it.void in QUESTION_ROWS:
            question_seen[it.void] = question_seen.get(it.void, 0) + 1
            if not _question_void_ok(it, twin):
                question_bad.setdefault(it.void, []).append(it.item_id)
        else:
            n_textual += 1
            expected = _unstated(twin)
            if (expected is None or it.prompt != expected or it.images != twin.images or it.options != twin.options):
                textual_bad.append(it.item_id)
    report.add("Voids name a sufficient twin of the main set", f"{_n(len(voids) - len(twin_bad))}/{_n(len(voids))}",
               bool(voids) and not twin_bad, "; ".join(twin_bad[:3]) or "no void items")
    report.add("Visual voids differ from their twin only in the image", f"{_n(n_visual - len(visual_bad))}/{_n(n_visual)}",
               not visual_bad, f"{len(visual_bad)} differ otherwise (first {visual_bad[0]})" if visual_bad else "")
    report.add("Textual voids differ from their twin only in the threshold",
               f"{_n(n_textual - len(textual_bad))}/{_n(n_textual)}", not textual_bad,
               f"{len(textual_bad)} differ otherwise (first {textual_bad[0]})" if textual_bad else "")
    for void, title in QUESTION_ROWS.items():
        if void in question_seen:  # only where the bench has the type: older benches' reports are unchanged
            bad = question_bad.get(void, [])
            report.add(title, f"{_n(question_seen[void] - len(bad))}/{_n(question_seen[void])}", not bad,
                       f"{len(bad)} differ otherwise (first {bad[0]})" if bad else "")
    if not sheets:
        return
    marked, n_sheets, identical, n_families = [], 0, 0, 0
    for fid, paths in sorted(sheets.items()):
        decoded = {}
        for rel in sorted(paths):
            shown = _sheets(root / rel)
            n_sheets += 1
            if any(marker_pixel_count(sheet, STYLES["a"]) for sheet in shown):  # the detector's own colour match
                marked.append(rel)
            decoded[rel] = np.stack([np.asarray(sheet) for sheet in shown])
        n_families += 1
        first = next(iter(decoded.values()))
        identical += len(decoded) == 2 and all(np.array_equal(first, p) for p in decoded.values())
    report.add("Occluded sheets show no marker", f"{_n(n_sheets - len(marked))}/{_n(n_sheets)}", not marked,
               f"marker pixels on {len(marked)} (first {marked[0]})" if marked else "")
    report.add("Occluded sheets are identical across histories", f"{_n(identical)}/{_n(n_families)}",
               identical == n_families, "families whose two occluded sheets differ (the void would carry information)")
    report.numbers.update(void_items=len(voids), occluded_sheets=n_sheets,
                          identical_occluded=[identical, n_families])


__all__ = ["check_voids"]
