"""The oracle's expected items: every labelled field of every item of the README's inventory,
rebuilt from a family's raw parameters by `bench.oracle` (the selections, answers, ruler and
recovery probes, the variants, injection levels, voids and numeric estimates). Like the oracle it
imports nothing from the generator: only the oracle (a test reads its imports).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from evprobe.bench.oracle import (
    DEFAULT_PRICES,
    INJECTED,
    LEVELS,
    TESTS,
    VARIANTS,
    VOIDED,
    WORLDS,
    OracleFamily,
    after,
    answer_of,
    decide,
    fmt6,
    image_path,
    readings,
    remaining,
    world_name,
)


def _letter(menu: Mapping[str, Any], value: Any) -> str | None:
    letters = [k for k, v in menu.items() if v == value]
    return letters[0] if len(letters) == 1 else None


def _test_sheets(test: str, w: tuple[int, int]) -> list[str]:
    return {
        "test_mass": [f"mass_{w[0]}"],
        "test_other": [f"other_{w[1]}"],
        "free_fall": ["free_fall"],
        "combined_report": [f"mass_{w[0]}", f"other_{w[1]}"],
    }[test]


def expected_items(
    fam: OracleFamily,
    prices: Mapping[str, float] = DEFAULT_PRICES,
    *,
    numeric: bool = False,
    levels: Iterable[int] = (),
    voids: Iterable[str] = (),
    clip: bool = False,
) -> dict[str, dict[str, Any]]:
    """Item id -> the expected value of every field but the prompt and the pair ids. With `clip`
    (a clip benchmark), every sheet is shown as its clip, images/<family>/<sheet>[.b].clip.png.

    `threshold` is the oracle's unrounded q (compare with `agree`), `reference_value` of the ruler
    probe is the oracle's reading (compare with `agree`); every other field is exact. A reference
    action that is not unique at these prices is None (the generator refuses such prices).
    """
    row, fid, pos = fam.row, fam.family_id, fam.initial_pos
    levels = tuple(levels)  # read twice: the decisions' levels, then the estimates'
    menus = row["options"], row["answer_options"], row["reworded_options"], row["recover_options"]
    options, answer_options, reworded, recover = (dict(m) for m in menus)
    common = dict(family_id=fid, system=fam.system, initial_property=row["initial_property"], style="a")
    blank = dict(
        variant=None, decision_id=None, history=None, threshold_level=None, threshold=None, test=None,
        hidden_world=None, options=None, images=[], resolved=None, reference_action=None,
        reference_answer=None, reference_option=None, reference_value=None, injection=0, void=None, twin_id=None,
    )
    out: dict[str, dict[str, Any]] = {}

    def put(item_id: str, request: str, **fields: Any) -> None:
        out[item_id] = {**blank, **common, "request": request, **fields}

    for h in (0, 1):
        known = {pos: h}
        first = image_path(fid, f"{fam.initial}_{h}")
        for level in LEVELS:
            q = fam.thresholds[level]
            d = decide(fam.outcomes, known, q, prices)
            decision = dict(decision_id=f"{fid}.h{h}.{level}", history=h, threshold_level=level, threshold=q)
            labels = dict(resolved=d.resolved, reference_action=d.action, reference_answer=d.answer)
            put(f"{fid}.select.h{h}.{level}", "select", **decision, **labels, options=options,
                images=[first], reference_option=_letter(options, d.action))
            put(f"{fid}.answer_initial.h{h}.{level}", "answer_initial", **decision, **labels,
                options=answer_options, images=[first], reference_option=_letter(answer_options, d.answer))
            for test in TESTS:
                for w in remaining(known):
                    ans = answer_of(fam.outcomes, after(known, test, w), q)
                    put(f"{fid}.answer_after_test.h{h}.{level}.{test}.{world_name(w)}", "answer_after_test",
                        **decision, test=test, hidden_world=world_name(w), options=answer_options,
                        images=[first] + [image_path(fid, s) for s in _test_sheets(test, w)],
                        resolved=ans != "undetermined", reference_answer=ans,
                        reference_option=_letter(answer_options, ans))
    for w in WORLDS:
        for level in LEVELS:
            ans = answer_of(fam.outcomes, {0: w[0], 1: w[1]}, fam.thresholds[level])
            put(f"{fid}.both_given.{world_name(w)}.{level}", "both_given", threshold_level=level,
                threshold=fam.thresholds[level], hidden_world=world_name(w), options=answer_options,
                resolved=True, reference_answer=ans, reference_option=_letter(answer_options, ans))
    cal = row["calibration"]
    initial_test = "test_mass" if pos == 0 else "test_other"
    for h in (0, 1):
        sheet = f"{fam.initial}_{h}"
        value = fam.value(pos, h)
        put(f"{fid}.read_ruler.h{h}", "read_ruler", history=h, test=initial_test, images=[image_path(fid, sheet)],
            reference_value=readings(fam.system, cal, sheet, value)[-1])
        put(f"{fid}.recover_property.h{h}", "recover_property", history=h, test=initial_test,
            images=[image_path(fid, sheet)],
            options={k: fmt6(fam.value(pos, idx)) for k, idx in recover.items()},
            reference_option=_letter(recover, h), reference_value=value)
    if row.get("in_subset"):
        for variant in VARIANTS:
            style = "b" if variant == "changed_rendering" else "a"
            menu = reworded if variant == "reworded" else options
            for h in (0, 1):
                known = {} if variant == "no_initial_test" else {pos: h}
                images = [] if variant == "no_initial_test" else [image_path(fid, f"{fam.initial}_{h}", style)]
                for level in LEVELS:
                    q = fam.thresholds[level]
                    d = decide(fam.outcomes, known, q, prices)
                    put(f"{fid}.select.h{h}.{level}.{variant}", "select", variant=variant,
                        decision_id=f"{fid}.h{h}.{level}", history=h, threshold_level=level, threshold=q,
                        options=menu, images=images, style=style, resolved=d.resolved,
                        reference_action=d.action, reference_answer=d.answer,
                        reference_option=_letter(menu, d.action))
    base = {k: v for k, v in out.items() if v["variant"] is None and v["request"] in INJECTED}
    voided: dict[str, dict[str, Any]] = {}
    for void in voids:  # an occluded sheet shows nothing: every world remains; an unstated q settles nothing
        for item_id, row in base.items():
            if row["request"] not in VOIDED[void] or not row["resolved"]:
                continue
            menu = row["options"]
            fields = dict(decision_id=f"{row['decision_id']}.void-{void}", void=void, twin_id=item_id)
            if void == "occluded":
                d = decide(fam.outcomes, {}, row["threshold"], prices)
                value = d.action if row["request"] == "select" else d.answer
                fields.update(images=[f"images/{fid}/{fam.initial}_{row['history']}.occluded.png"],
                              resolved=d.resolved, reference_action=d.action, reference_answer=d.answer,
                              reference_option=_letter(menu, value))
            else:  # a false premise still prints its threshold; the other question-side voids state none
                fields.update(threshold=row["threshold"] if void == "false_premise" else None, resolved=False,
                              reference_action=None,
                              reference_answer="undetermined", reference_option=_letter(menu, "undetermined"))
            voided[f"{item_id}.void-{void}"] = {**row, **fields}
    for level in levels:
        for item_id, row in base.items():
            out[f"{item_id}.L{level}"] = {**row, "decision_id": f"{row['decision_id']}.L{level}", "injection": level}
    out.update(voided)
    if numeric:
        estimates = {}
        for prop, pos in (("mass", 0), ("other", 1)):
            for idx in (0, 1):
                item_id = f"{fid}.estimate_property.{prop}_{idx}"
                put(item_id, "estimate_property", history=idx,
                    test="test_mass" if pos == 0 else "test_other", images=[image_path(fid, f"{prop}_{idx}")],
                    reference_value=fam.value(pos, idx))
                estimates[item_id] = out[item_id]
        for w in WORLDS:
            item_id = f"{fid}.estimate_outcome.{world_name(w)}"
            put(item_id, "estimate_outcome", test="combined_report",
                hidden_world=world_name(w), images=[image_path(fid, s) for s in _test_sheets("combined_report", w)],
                reference_value=fam.outcomes[w])
            estimates[item_id] = out[item_id]
        for level in levels:  # the estimates climb the ladder too (same values; no decision ids)
            for item_id, row in estimates.items():
                out[f"{item_id}.L{level}"] = {**row, "injection": level}
    if clip:
        for row in out.values():
            row["images"] = [rel.removesuffix(".png") + ".clip.png" for rel in row["images"]]
    return out
