"""Steered replies judged by the LLM panel, read back into the own-data dose-response (issue 55 item 3).

    result = steering_dose_response(handle, prompts, images, direction=d, families=fam, readout=my_readout, ...)
    write_replies("out/steer", result, item_ids=ids, questions=questions, truths=truths,
                  max_new_tokens=my_readout.max_new_tokens)
    # evprobe judge out/steer --judge a@URL --judge b@URL --judge c@URL   (writes out/steer/judged/)
    judged = JudgedReplies.read("out/steer")
    again = steering_dose_response(handle, prompts, images, direction=d, families=fam,
                                   readout=judged.readout(ids, my_readout.max_new_tokens), ...)

`write_replies` writes every generated reply of a result (`DoseResponseResult.replies`: the unsteered,
the probe's at each layer x dose, every null direction's) to FOLDER/replies.jsonl, one row per reply
keyed (item_id, direction, index, layer, alpha), and FOLDER/replies.json: what `evprobe judge` needs
of each item (its question as the model read it, the ground truth on a control, its family) and the
prompts' order (core.judged_replies). Both are written atomically; a folder that holds them already is
refused (a judgment would no longer match).

`JudgedReplies.read(FOLDER)` reads the panel's decisions, checked against the replies before any work
(core.judged_replies.read_decisions: another run's decisions, missing rows, a reply that is not the one
judged, each one line), as a table (item, reply) -> decision; a judge sees only the question, the ground
truth and the reply, so a reply repeated verbatim has one decision. `.readout(item_ids, max_new_tokens)`
is a GeneratedReadout (measures abstained and invalid, both rates) whose `read` looks each reply up:
abstained = the panel's answer is undetermined, invalid = the panel gave none (kept in every
denominator). Passed to the same `steering_dose_response` call, the greedy replies come again and
only their 0/1 reading changes: the same nulls, rank tests, cross-fit and family-bootstrap intervals.
A regenerated reply the panel never judged (the replies differ from the judged ones) is refused in one
line naming the item; an empty reply not judged reads invalid (the dose-response asks every reader
about an empty reply before any forward, and an empty reply answers nothing).
`evprobe void-transfer --judged` re-scores with this readout.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evprobe.analysis.generated_readout import GeneratedReadout
from evprobe.core.errors import InputError, shown
from evprobe.core.files import atomic_write_json, atomic_write_jsonl
from evprobe.core.judged_replies import (REPLIES_FORMAT, Decision, panel_name, read_decisions, replies_rows,
                                         steering_kind)

MEASURES = ("abstained", "invalid")


def write_replies(folder: str | Path, result: Any, *, item_ids: Sequence[str], questions: Sequence[str],
                  truths: Sequence[str | None] | None = None, max_new_tokens: int | None = None) -> Path:
    """Write `result`'s replies for `evprobe judge` (module docstring). item_ids, questions, truths: one
    per prompt, in the prompts' order (truths: the ground truth of a control, None elsewhere; none: no
    item is a control). Returns the folder."""
    folder = Path(folder)
    frame = getattr(result, "replies", None)
    if frame is None:
        raise InputError("the result holds no generated replies: run steering_dose_response with readout="
                         "GeneratedReadout(...)")
    n = 1 + int(frame["item"].max()) if len(frame) else 0
    truths = [None] * n if truths is None else list(truths)
    for name, given in (("item_ids", item_ids), ("questions", questions), ("truths", truths)):
        if isinstance(given, str) or len(given) != n:
            raise InputError(f"{name} must hold one entry per prompt ({n}), got {shown(given, 40)}")
    if len(set(item_ids)) != n or not all(isinstance(x, str) and x for x in item_ids):
        raise InputError(f"item_ids must be {n} distinct non-empty strings, got {shown(list(item_ids), 60)}")
    if any(not isinstance(q, str) for q in questions) or any(t is not None and not isinstance(t, str) for t in truths):
        raise InputError("questions must be strings, truths strings or None (the ground truth of a control)")
    for name in ("replies.json", "replies.jsonl"):
        if (folder / name).exists():
            raise InputError(f"{folder / name} exists; write the replies into a new folder (a judgment of the old "
                             "ones would no longer match)")
    families: dict[int, str] = {}
    rows = []
    for r in frame.itertuples(index=False):
        families[int(r.item)] = str(r.family)
        rows.append({"item_id": item_ids[int(r.item)], "family_id": str(r.family), "group": str(r.group),
                     "direction": str(r.direction), "index": int(r.index), "layer": _number(r.layer, int),
                     "alpha": _number(r.alpha, float), "reply": str(r.reply)})
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_jsonl(folder / "replies.jsonl", rows)
    atomic_write_json(folder / "replies.json", {
        "format": REPLIES_FORMAT, "item_ids": list(item_ids), "max_new_tokens": max_new_tokens, "n_rows": len(rows),
        "items": {i: {"question": q, "truth": t, "family_id": families.get(k, i)}
                  for k, (i, q, t) in enumerate(zip(item_ids, questions, truths))}})
    return folder


def _number(x: Any, kind: type) -> Any:
    """A frame's cell as JSON: None and NaN (the unsteered layer, the ablation's alpha) as null."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else kind(x)


@dataclass(frozen=True)
class JudgedReplies:
    """The panel's decisions on a steering output's replies, by (item id, reply) (module docstring);
    `reader` names the panel and its judges."""

    decisions: Mapping[tuple[str, str], Decision]
    reader: str

    @classmethod
    def read(cls, out: str | Path, judged: str | Path | None = None) -> JudgedReplies:
        """OUT's replies and the decisions in `judged` (default OUT/judged), checked before any work."""
        out = Path(out)
        decided = read_decisions(out, judged)
        kind = steering_kind(out)
        assert kind is not None  # read_decisions refused otherwise
        table: dict[tuple[str, str], Decision] = {}
        for line, row, key in replies_rows(out, kind):
            d = decided[key]
            if table.setdefault((str(row["item_id"]), row["reply"]), d) != d:
                raise InputError(f"{out / kind.replies_file}:{line}: item {row['item_id']!r}'s reply was judged twice "
                                 "with two decisions (asked under two prompts); read each prompt's rows apart")
        return cls(table, panel_name(out, judged))

    def readout(self, item_ids: Sequence[str], max_new_tokens: int) -> GeneratedReadout:
        """A GeneratedReadout reading prompt i's reply as the panel decided it (item_ids[i]'s decisions)."""
        ids = [str(x) for x in item_ids]

        def read(i: int, reply: str) -> tuple[float, float]:
            d = self.decisions.get((ids[i], reply))
            if d is None:
                if reply == "":
                    return 0.0, 1.0  # an empty reply answers nothing (module docstring)
                raise InputError(f"the steered reply {shown(reply, 60)} of item {ids[i]!r} was never judged: the replies "
                                 "generated now differ from the judged ones (another model, prompt, dose or budget); "
                                 "judge these replies (write_replies, evprobe judge) or steer as judged")
            return float(d.abstain), float(not d.valid)

        return GeneratedReadout(MEASURES, read=read, max_new_tokens=max_new_tokens, rates=MEASURES)

    @staticmethod
    def prompts_of(out: str | Path) -> tuple[list[str], int | None]:
        """The library's replies.json: (its prompts' item ids in order, the replies' max_new_tokens)."""
        from evprobe.core.json_files import read_json_object

        doc = read_json_object(Path(out) / "replies.json", "write the replies again (write_replies)")[0]
        return [str(x) for x in doc.get("item_ids", [])], doc.get("max_new_tokens")


__all__ = ["MEASURES", "JudgedReplies", "write_replies"]
