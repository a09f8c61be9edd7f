"""The request inventory: every model call of a direct run as one `Item` (seed 000, Table 10).

Per family (52 items): 4 selections and 4 initial answers (2 histories x 2 thresholds), 32 answers
after a test (4 decisions x 4 tests x 2 hidden worlds), 8 answers with both properties given
(4 worlds x 2 thresholds), 2 ruler readings and 2 property recoveries (one per history). Each
family of the diagnostic subset adds 24 selection variants (6 variants x 4 decisions). With 144
families and a 72-family subset this is the 9,216-call inventory.

Two opt-in blocks follow the main items when generated (`GenerateConfig.numeric`,
`GenerateConfig.injection_levels`); without them items.jsonl is byte for byte the main set's:

| block (main set)                      | request            | per family | items  |
|---------------------------------------|--------------------|-----------:|-------:|
| numeric estimates (`bench.numeric`)   | estimate_property  | 4          | 576    |
|                                       | estimate_outcome   | 4          | 576    |
| one injection level (`bench.injection`)| select            | 4          | 576    |
|                                       | answer_initial     | 4          | 576    |
|                                       | answer_after_test  | 32         | 4,608  |

so `--numeric` adds 1,152 items and each injection level 5,760 (levels 1-3: 17,280).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from evprobe.bench.calibration import readings, sheet_spec, sheet_value
from evprobe.bench.family import Family
from evprobe.bench.numbers import fmt
from evprobe.bench.prompts import PromptBuilder, readings_text
from evprobe.bench.reference import (
    TESTS,
    Prices,
    observation,
    reference_action,
    reference_answer,
    resolved,
)
from evprobe.bench.worlds import History, World, compatible, history_of, world_name
from evprobe.core.jobs import Unit
from evprobe.core.json_types import JsonObject

REQUESTS: tuple[str, ...] = (
    "select",
    "answer_initial",
    "answer_after_test",
    "both_given",
    "read_ruler",
    "recover_property",
)
VARIANTS: tuple[str, ...] = (
    "text_readings",
    "changed_rendering",
    "reworded",
    "given_equations",
    "check_possibilities",
    "no_initial_test",
)
LEVELS: tuple[str, ...] = ("low", "high")
# Numeric estimates (seed 003, eq. 6), an opt-in block (`GenerateConfig.numeric`, `bench.numeric`);
# not in REQUESTS, whose names the run's prompt-template hash and the main set's scores enumerate.
NUMERIC_REQUESTS: tuple[str, ...] = ("estimate_property", "estimate_outcome")
ALL_REQUESTS: tuple[str, ...] = REQUESTS + NUMERIC_REQUESTS


@dataclass(frozen=True)
class Item:
    """One request. Field meanings are documented in the README ("items.jsonl")."""

    item_id: str
    request: str
    variant: str | None
    family_id: str
    system: str
    initial_property: str
    decision_id: str | None  # links a decision's selection and its answers, e.g. sliding-004.h0.low
    history: int | None  # index of the initially measured value, 0 = lower
    threshold_level: str | None  # low | high
    threshold: float | None
    test: str | None  # the test whose result is shown (answer_after_test) or read (probes)
    hidden_world: str | None  # w00..w11 where one applies
    prompt: str
    options: dict[str, str] | None  # letter -> action, answer, or candidate value
    images: list[str]  # paths relative to the benchmark folder, in prompt order
    image_pair_id: str | None  # same question, other history
    threshold_pair_id: str | None  # same image, other threshold
    resolved: bool | None
    reference_action: str | None
    reference_answer: str | None  # yes | no | undetermined
    reference_option: str | None  # the letter of the correct option
    reference_value: float | None  # read_ruler: metres; recover_property: the property value
    style: str  # drawing style of the images: a, or b for changed_rendering
    # Information-injection level of the prompt (seed 003, section 4.6; `bench.injection`): 0 is the
    # standard prompt. Written to items.jsonl only when not 0 (`OMIT_WHEN_DEFAULT`), so the main
    # set's items.jsonl, and its sha256, are those of a benchmark written before the field existed.
    injection: int = 0
    # Void items (seed 002; `bench.voids`): the void type ("occluded", "unstated") and the item id of
    # the sufficient twin it is matched with; absent from items.jsonl on every other item.
    void: str | None = None
    twin_id: str | None = None

    def to_json(self) -> JsonObject:
        row = asdict(self)
        for name, default in OMIT_WHEN_DEFAULT.items():
            if row[name] == default:
                del row[name]
        return row

    @classmethod
    def from_json(cls, row: JsonObject) -> Item:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__ if name in row or name not in OMIT_WHEN_DEFAULT})


# Fields added after the format's first benchmarks: left out of a row when they hold this value,
# and read as this value when a row lacks them (`bench.schema` gives them the same default).
OMIT_WHEN_DEFAULT: JsonObject = {"injection": 0, "void": None, "twin_id": None}


def item_units(items: Sequence[Item]) -> list[Unit]:
    """Items as the job runner's units: keyed by item id, sharded by family, and batched only with
    items of the same number of images (some processors cannot mix counts in one call)."""
    return [Unit(it.item_id, it.family_id, len(it.images), it) for it in items]


def image_path(family_id: str, sheet: str, style: str = "a", *, clip: bool = False) -> str:
    """Where a sheet, or with `clip` its clip (`bench.clips`), lives inside the benchmark folder
    (style a has no style suffix)."""
    suffix = "" if style == "a" else f".{style}"
    return f"images/{family_id}/{sheet}{suffix}{'.clip' if clip else ''}.png"


def test_sheets(test: str, w: World) -> list[str]:
    """The sheets a test shows in world `w` (the combined report shows two)."""
    return {
        "test_mass": [f"mass_{w[0]}"],
        "test_other": [f"other_{w[1]}"],
        "free_fall": ["free_fall"],
        "combined_report": [f"mass_{w[0]}", f"other_{w[1]}"],
    }[test]


def _letter(options: dict[str, str], value: str) -> str:
    return next(letter for letter, v in options.items() if v == value)


def family_items(family: Family, prices: Prices = Prices(), clip_frames: int | None = None) -> list[Item]:
    """All items of one family, base requests first, then its variants if it is in the subset.
    `clip_frames`: the evidence is clips of that many frames (`bench.clips`), not sheets."""
    f, fid = family, family.family_id
    outcomes = f.outcomes()
    prompts = PromptBuilder(f, "a", prices, clip_frames)
    clip = clip_frames is not None
    initial_test = "test_mass" if f.initial == "mass" else "test_other"
    items: list[Item] = []

    def item(request: str, item_id: str, **fields: Any) -> None:
        base = dict(
            item_id=item_id,
            request=request,
            variant=None,
            family_id=fid,
            system=f.system,
            initial_property=f.initial_property,
            decision_id=None,
            history=None,
            threshold_level=None,
            threshold=None,
            test=None,
            hidden_world=None,
            options=None,
            images=[],
            image_pair_id=None,
            threshold_pair_id=None,
            resolved=None,
            reference_action=None,
            reference_answer=None,
            reference_option=None,
            reference_value=None,
            style="a",
        )
        base.update(fields)
        items.append(Item(**base))

    for h in (0, 1):
        hist = history_of(f.initial, h)
        first = image_path(fid, f"{f.initial}_{h}", clip=clip)
        for level in LEVELS:
            q = f.thresholds[level]
            decision = dict(
                decision_id=f"{fid}.h{h}.{level}", history=h, threshold_level=level, threshold=q
            )
            action = reference_action(hist, q, outcomes, prices)
            answer = reference_answer(hist, q, outcomes)
            known = resolved(hist, q, outcomes)
            item(
                "select",
                f"{fid}.select.h{h}.{level}",
                **decision,
                prompt=prompts.select(level),
                options=dict(f.options),
                images=[first],
                image_pair_id=f"{fid}.select.{level}",
                threshold_pair_id=f"{fid}.select.h{h}",
                resolved=known,
                reference_action=action,
                reference_answer=answer,
                reference_option=_letter(f.options, action),
            )
            item(
                "answer_initial",
                f"{fid}.answer_initial.h{h}.{level}",
                **decision,
                prompt=prompts.answer_initial(level),
                options=dict(f.answer_options),
                images=[first],
                image_pair_id=f"{fid}.answer_initial.{level}",
                threshold_pair_id=f"{fid}.answer_initial.h{h}",
                resolved=known,
                reference_action=action,
                reference_answer=answer,
                reference_option=_letter(f.answer_options, answer),
            )
            for test in TESTS:
                for w in compatible(hist):
                    after: History = hist | observation(test, w)
                    after_answer = reference_answer(after, q, outcomes)
                    unmeasured = w[1] if f.initial == "mass" else w[0]
                    item(
                        "answer_after_test",
                        f"{fid}.answer_after_test.h{h}.{level}.{test}.{world_name(w)}",
                        **decision,
                        test=test,
                        hidden_world=world_name(w),
                        prompt=prompts.answer_after(level, test),
                        options=dict(f.answer_options),
                        images=[first] + [image_path(fid, s, clip=clip) for s in test_sheets(test, w)],
                        image_pair_id=f"{fid}.answer_after_test.{level}.{test}.u{unmeasured}",
                        threshold_pair_id=(
                            f"{fid}.answer_after_test.h{h}.{test}.{world_name(w)}"
                        ),
                        resolved=resolved(after, q, outcomes),
                        reference_answer=after_answer,
                        reference_option=_letter(f.answer_options, after_answer),
                    )
    for w in compatible(frozenset()):
        for level in LEVELS:
            q = f.thresholds[level]
            known_all = frozenset({("mass", w[0]), ("other", w[1])})
            answer = reference_answer(known_all, q, outcomes)
            item(
                "both_given",
                f"{fid}.both_given.{world_name(w)}.{level}",
                threshold_level=level,
                threshold=q,
                hidden_world=world_name(w),
                prompt=prompts.both_given(level, f.value("mass", w[0]), f.value("other", w[1])),
                options=dict(f.answer_options),
                threshold_pair_id=f"{fid}.both_given.{world_name(w)}",
                resolved=True,
                reference_answer=answer,
                reference_option=_letter(f.answer_options, answer),
            )
    for h in (0, 1):
        sheet = f"{f.initial}_{h}"
        marks = readings(f.system, f.calibration, sheet, sheet_value(sheet, f.other, f.candidates))
        item(
            "read_ruler",
            f"{fid}.read_ruler.h{h}",
            history=h,
            test=initial_test,
            prompt=prompts.read_ruler(initial_test),
            images=[image_path(fid, sheet, clip=clip)],
            image_pair_id=f"{fid}.read_ruler",
            reference_value=marks[-1],
        )
        item(
            "recover_property",
            f"{fid}.recover_property.h{h}",
            history=h,
            test=initial_test,
            prompt=prompts.recover_property(initial_test),
            options={k: fmt(f.value(f.initial, idx)) for k, idx in f.recover_options.items()},
            images=[image_path(fid, sheet, clip=clip)],
            image_pair_id=f"{fid}.recover_property",
            reference_option=next(k for k, idx in f.recover_options.items() if idx == h),
            reference_value=f.value(f.initial, h),
        )
    if f.in_subset:
        items.extend(variant_items(f, prices, clip_frames))
    return items


def variant_items(family: Family, prices: Prices = Prices(), clip_frames: int | None = None) -> list[Item]:
    """The six selection variants of one subset family (seed 000, appendix H); `clip_frames` as in
    `family_items`."""
    f, fid = family, family.family_id
    outcomes = f.outcomes()
    out: list[Item] = []
    for variant in VARIANTS:
        style = "b" if variant == "changed_rendering" else "a"
        prompts = PromptBuilder(f, style, prices, clip_frames)
        options = f.reworded_options if variant == "reworded" else f.options
        for h in (0, 1):
            sheet = f"{f.initial}_{h}"
            if variant == "no_initial_test":
                hist: History = frozenset()  # labels recomputed: all four worlds remain
                images: list[str] = []
            else:
                hist = history_of(f.initial, h)
                images = [image_path(fid, sheet, style, clip=clip_frames is not None)]
            text = None
            if variant == "text_readings":
                spec = sheet_spec(f.system, f.candidates, f.calibration, sheet)
                text = readings_text(f.system, f.calibration, spec.readings, spec.kind, clip_frames)
            for level in LEVELS:
                q = f.thresholds[level]
                action = reference_action(hist, q, outcomes, prices)
                out.append(
                    Item(
                        item_id=f"{fid}.select.h{h}.{level}.{variant}",
                        request="select",
                        variant=variant,
                        family_id=fid,
                        system=f.system,
                        initial_property=f.initial_property,
                        decision_id=f"{fid}.h{h}.{level}",
                        history=h,
                        threshold_level=level,
                        threshold=q,
                        test=None,
                        hidden_world=None,
                        prompt=prompts.select(level, variant=variant, readings_text=text),
                        options=dict(options),
                        images=images,
                        image_pair_id=f"{fid}.select.{level}.{variant}",
                        threshold_pair_id=f"{fid}.select.h{h}.{variant}",
                        resolved=resolved(hist, q, outcomes),
                        reference_action=action,
                        reference_answer=reference_answer(hist, q, outcomes),
                        reference_option=_letter(options, action),
                        reference_value=None,
                        style=style,
                    )
                )
    return out
