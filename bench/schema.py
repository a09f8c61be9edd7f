"""Typed schemas of a benchmark folder's files: families.jsonl rows, items.jsonl rows, bench.json.

One schema per on-disk format, checked by pydantic in strict mode: nothing is converted ("false"
stays a string and is refused where true or false is expected, "1.5" is no number, true is no
integer); the one widening is JSON's own, an integer where a number is expected.

The row schemas are generated from the dataclasses the generator writes (`Family`, `Item`): field
names, their order and their base types come from the dataclass; this module only narrows a
field's type where the type alone cannot say what is allowed (request names, systems, actions,
answers, option letters, ranges, non-empty strings). Each narrowed type is checked at import to
fit the dataclass's own annotation (`_fits`), so no field is written twice, a renamed field fails
at import, and a field added to a dataclass is read with its plain type without a change here.
Rules that tie fields of one row together (a system's candidate keys, the options a request
offers) are plain functions run after the type check (`item_problem`, `family_problem`).

bench.json's schema is `BenchMeta` (its prices come from the `Prices` dataclass). Its
`format_version` key (`bench.layout.FORMAT_VERSION`) was added after the first benchmarks were
written: a bench.json without it is read as version 1 when it is otherwise valid; a newer version
is refused with the fix (upgrade evprobe).

Error messages are one phrase without file or line (`describe`); `bench.manifest` adds those and
the fix.
"""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Iterable
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from evprobe.bench.family import LETTERS, Family
from evprobe.bench.injection import INJECTED_REQUESTS, INJECTION_LEVELS
from evprobe.bench.items import ALL_REQUESTS, LEVELS, NUMERIC_REQUESTS, VARIANTS, Item
from evprobe.bench.layout import FORMAT_KEY, FORMAT_VERSION
from evprobe.bench.reference import ACTIONS, ANSWERS, TESTS, Prices
from evprobe.bench.render import STYLES
from evprobe.bench.systems import SYSTEM_NAMES, SYSTEMS
from evprobe.bench.voids import VOID_REQUESTS, VOID_TYPES, VOID_UNSET
from evprobe.bench.clips import ClipSpec
from evprobe.bench.worlds import WORLDS, world_name
from evprobe.core.errors import shown

STRICT = ConfigDict(strict=True, extra="forbid")
T = TypeVar("T")


def _one_of(values: Iterable[Any]) -> Any:
    return Literal[tuple(values)]


# -- narrowed types --------------------------------------------------------------------------------

NonEmpty = Annotated[str, Field(min_length=1)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]
Index = Annotated[int, Field(ge=0, le=1)]  # candidate index: 0 = lower value, 1 = higher
Letter = _one_of(LETTERS)
Request = _one_of(ALL_REQUESTS)
Injection = _one_of(INJECTION_LEVELS)
Variant = _one_of(VARIANTS)
System = _one_of(SYSTEM_NAMES)
Property = _one_of(dict.fromkeys(["mass", *(s.other for s in SYSTEMS.values())]))
Level = _one_of(LEVELS)
Test = _one_of(TESTS)
Action = _one_of(ACTIONS)
Answer = _one_of(ANSWERS)
WorldName = _one_of(world_name(w) for w in WORLDS)
Style = _one_of(STYLES)
Void = _one_of(VOID_TYPES)
CALIBRATED = tuple(t for t in TESTS if t != "combined_report")  # the report shows the others' sheets
Calibrated = _one_of(CALIBRATED)
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]

# Narrowed types by field (a field not named here, such as `resolved`, keeps its dataclass type:
# `bool | None`, which strict mode already holds to true, false or null).
ITEM_TYPES: dict[str, Any] = {
    "item_id": NonEmpty,
    "request": Request,
    "variant": Variant | None,
    "family_id": NonEmpty,
    "system": System,
    "initial_property": Property,
    "decision_id": NonEmpty | None,
    "history": Index | None,
    "threshold_level": Level | None,
    "threshold": Positive | None,
    "test": Test | None,
    "hidden_world": WorldName | None,
    "prompt": NonEmpty,
    "options": dict[Letter, NonEmpty] | None,
    "images": list[NonEmpty],
    "image_pair_id": NonEmpty | None,
    "threshold_pair_id": NonEmpty | None,
    "reference_action": Action | None,
    "reference_answer": Answer | None,
    "reference_option": Letter | None,
    "reference_value": NonNegative | None,
    "style": Style,
    "injection": Injection,
    "void": Void | None,
    "twin_id": NonEmpty | None,
}

FAMILY_TYPES: dict[str, Any] = {
    "family_id": NonEmpty,
    "system": System,
    "initial_property": Property,
    "candidates": dict[Property, Annotated[list[Positive], Field(min_length=2, max_length=2)]],
    "constants": dict[NonEmpty, Positive],
    "calibration": dict[Calibrated, dict[NonEmpty, Any]],
    "thresholds": dict[Level, Positive],
    "options": dict[Letter, Action],
    "answer_options": dict[Letter, Answer],
    "reworded_options": dict[Letter, Action],
    "recover_options": dict[Letter, Index],
}

# Fields an item of each request must fill (not null), as the generator always does; whether the
# values are right is `evprobe check`'s question (it recomputes every one).
_DECISION = ("decision_id", "history", "threshold_level", "threshold", "options", "resolved",
             "reference_answer", "reference_option")
REQUIRED: dict[str, tuple[str, ...]] = {
    "select": (*_DECISION, "reference_action"),
    "answer_initial": (*_DECISION, "reference_action"),
    "answer_after_test": (*_DECISION, "test", "hidden_world"),
    "both_given": ("threshold_level", "threshold", "hidden_world", "options", "resolved",
                   "reference_answer", "reference_option"),
    "read_ruler": ("history", "test", "reference_value"),
    "recover_property": ("history", "test", "options", "reference_option", "reference_value"),
    "estimate_property": ("history", "test", "reference_value"),
    "estimate_outcome": ("test", "hidden_world", "reference_value"),
}
# What an item's options map to, by request (recover_property offers candidate values as text).
OPTION_VALUES: dict[str, tuple[str, ...] | None] = {
    "select": ACTIONS,
    "answer_initial": ANSWERS,
    "answer_after_test": ANSWERS,
    "both_given": ANSWERS,
    "read_ruler": None,
    "recover_property": None,
    "estimate_property": None,
    "estimate_outcome": None,
}
if not set(REQUIRED) == set(OPTION_VALUES) == set(ALL_REQUESTS):
    raise TypeError(f"bench.schema has rules for {sorted(REQUIRED)}, not for the requests {ALL_REQUESTS}")


# -- models generated from the dataclasses ---------------------------------------------------------


def _plain(tp: Any) -> Any:
    """`tp` without constraints: Annotated[X, ...] -> X, Literal['a', 'b'] -> str."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _plain(get_args(tp)[0])
    if origin is Literal:
        kinds = {type(v) for v in get_args(tp)}
        return kinds.pop() if len(kinds) == 1 else tp
    return tp


def _fits(narrow: Any, wide: Any) -> bool:
    """Whether `narrow` is `wide` with constraints added (Any admits every narrowing)."""
    if wide is Any:
        return True
    narrow = _plain(narrow)
    n_origin, w_origin = get_origin(narrow), get_origin(wide)
    if n_origin in (Union, types.UnionType) or w_origin in (Union, types.UnionType):
        n_args = get_args(narrow) if n_origin in (Union, types.UnionType) else (narrow,)
        w_args = get_args(wide) if w_origin in (Union, types.UnionType) else (wide,)
        return len(n_args) == len(w_args) and all(
            any(_fits(n, w) for w in w_args) for n in n_args
        )
    if n_origin is None or w_origin is None:
        return narrow is wide
    n_args, w_args = get_args(narrow), get_args(wide)
    return n_origin is w_origin and len(n_args) == len(w_args) and all(map(_fits, n_args, w_args))


def row_model(cls: type, narrowed: dict[str, Any]) -> type[BaseModel]:
    """A strict pydantic model of `cls`'s JSON rows: `cls`'s fields, in order, each with its type
    from `narrowed` (which must fit the dataclass annotation) or else the annotation itself."""
    hints = get_type_hints(cls)
    names = list(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    unknown = sorted(set(narrowed) - set(names))
    if unknown:
        raise TypeError(f"schema of {cls.__name__} narrows fields it does not have: {unknown}")
    for name, tp in narrowed.items():
        if not _fits(tp, hints[name]):
            raise TypeError(f"schema of {cls.__name__}.{name} ({tp}) does not fit its type {hints[name]}")
    # A field with a dataclass default (one added after the format's first files, such as
    # `Item.injection`) may be absent from a row and then takes that default.
    defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    fields: dict[str, Any] = {name: (narrowed.get(name, hints[name]), defaults.get(name, ...)) for name in names}
    return create_model(f"{cls.__name__}Row", __config__=STRICT, **fields)


ItemRow = row_model(Item, ITEM_TYPES)
FamilyRow = row_model(Family, FAMILY_TYPES)
PricesRow = create_model(
    "PricesRow", __config__=STRICT, **{name: (NonNegative, ...) for name in Prices.__dataclass_fields__}
)


class EvidenceRow(BaseModel):
    """bench.json's `evidence` of a clip benchmark (`bench.clips.ClipSpec`)."""

    model_config = STRICT

    kind: Literal["clip"]
    frames: Annotated[int, Field(ge=4)]
    fps: Annotated[float, Field(gt=0, allow_inf_nan=False)]


class BenchMeta(BaseModel):
    """bench.json (see `bench.generate.generate`)."""

    model_config = STRICT

    format_version: Literal[FORMAT_VERSION] = Field(default=None)  # type: ignore[valid-type]
    split: Literal["main", "pilot"]
    seed: Count
    families_per_system: Annotated[int, Field(ge=1)]
    systems: Annotated[list[System], Field(min_length=1)]
    subset_seed: Count
    subset_per_cell: Count
    prices: PricesRow  # type: ignore[valid-type]
    n_families: Annotated[int, Field(ge=1)]
    n_items: Annotated[int, Field(ge=1)]
    n_images: Count
    families_sha256: Sha256
    items_sha256: Sha256
    seconds: NonNegative
    # The opt-in blocks (`bench.generate.GenerateConfig`): present only when generated, so the main
    # set's bench.json has the keys it always had.
    numeric: Literal[True] = Field(default=None)  # type: ignore[assignment]
    injection_levels: Annotated[list[_one_of(INJECTION_LEVELS[1:])], Field(min_length=1)] = Field(default=None)  # type: ignore
    voids: Annotated[list[Void], Field(min_length=1)] = Field(default=None)  # type: ignore[valid-type]
    evidence: EvidenceRow = Field(default=None)  # type: ignore[assignment]


def _stores_only(cls: type) -> bool:
    """Whether `cls`'s generated __init__ does nothing but store its fields (no __post_init__,
    no init=False fields, no slots), so an instance can be made by filling its __dict__."""
    return (not hasattr(cls, "__post_init__") and not hasattr(cls, "__slots__")
            and all(f.init for f in dataclasses.fields(cls)))


def instance(cls: type[T], row: BaseModel) -> T:
    """The `cls` dataclass object with a validated row's values. For a dataclass whose __init__
    only stores its fields, the fields are set directly (as pydantic makes dataclasses), three
    times faster than a frozen dataclass's per-field setattr; otherwise `cls(**values)`."""
    if cls not in _STORES_ONLY:
        _STORES_ONLY[cls] = _stores_only(cls)
    if not _STORES_ONLY[cls]:
        return cls(**row.__dict__)
    obj = object.__new__(cls)
    obj.__dict__.update(row.__dict__)
    return obj


_STORES_ONLY: dict[type, bool] = {}


# -- rules across fields of one row ----------------------------------------------------------------


def _menu_problem(name: str, menu: dict[str, Any] | None, values: tuple[Any, ...]) -> str | None:
    """A menu must map the first len(values) letters to each of `values` once."""
    if menu is None:
        return None
    letters, wanted = _MENUS.get(values) or _MENUS.setdefault(values, (set(LETTERS[: len(values)]), set(values)))
    if len(menu) != len(values) or menu.keys() != letters or set(menu.values()) != wanted:
        return (f"field {name!r} must map the letters {', '.join(LETTERS[: len(values)])} to "
                f"{', '.join(map(str, values))}, each once, got {shown(menu)}")
    return None


_MENUS: dict[tuple[Any, ...], tuple[set[str], set[Any]]] = {}


def item_problem(row: Any) -> str | None:
    """What is wrong across the fields of a type-checked item row, or None."""
    if (row.void is None) != (row.twin_id is None):
        return "fields 'void' and 'twin_id' are set together (a void item names its sufficient twin) or not at all"
    if row.void is not None and (row.variant is not None or row.injection or row.request not in VOID_REQUESTS[row.void]):
        return (f"field 'void' {row.void!r} applies to base {', '.join(VOID_REQUESTS[row.void])} items only, got a "
                f"{row.variant or row.request} item" + (f" at injection level {row.injection}" if row.injection else ""))
    # a textual void (bench.voids) leaves the settling action, and an unstated threshold the threshold, undefined
    unset = VOID_UNSET[row.void] if row.void is not None else ()
    for name in REQUIRED[row.request]:
        if name in unset:
            if getattr(row, name) is not None:
                kind = "an unstated-threshold" if row.void == "unstated" else f"a {row.void}"
                return f"field {name!r} must be null for {kind} void item, got {getattr(row, name)!r}"
            continue
        if getattr(row, name) is None:
            return f"field {name!r} must be set for a {row.request} item, got null"
    if row.variant is not None and row.request != "select":
        return f"field 'variant' must be null for a {row.request} item (variants are selections), got {row.variant!r}"
    if row.injection and (row.variant is not None or row.request not in INJECTED_REQUESTS):
        return (f"field 'injection' must be 0 for a {row.variant or row.request} item (levels apply to the base "
                f"{', '.join(INJECTED_REQUESTS)} items), got {row.injection}")
    if row.request in NUMERIC_REQUESTS and row.options is not None:
        return f"field 'options' must be null for a {row.request} item (it asks for a number), got {shown(row.options)}"
    other = SYSTEMS[row.system].other
    if row.initial_property not in ("mass", other):
        return (f"field 'initial_property' must be 'mass' or {other!r} for a {row.system} item, "
                f"got {row.initial_property!r}")
    values = OPTION_VALUES[row.request]
    if row.options is not None:
        if values is not None:
            problem = _menu_problem("options", row.options, values)
            if problem:
                return problem
        elif sorted(row.options) != list(LETTERS[: len(row.options)]) or len(row.options) < 2:
            return f"field 'options' must use the letters A, B, ... in order, got {shown(row.options)}"
        if row.reference_option is not None and row.reference_option not in row.options:
            return (f"field 'reference_option' must be one of the item's option letters "
                    f"{', '.join(row.options)}, got {row.reference_option!r}")
    return None


def _positive_number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value > 0


def family_problem(row: Any) -> str | None:
    """What is wrong across the fields of a type-checked family row, or None."""
    sysdef = SYSTEMS[row.system]
    if row.initial_property not in ("mass", sysdef.other):
        return (f"field 'initial_property' must be 'mass' or {sysdef.other!r} for a {row.system} "
                f"family, got {row.initial_property!r}")
    if set(row.candidates) != {"mass", sysdef.other}:
        return (f"field 'candidates' of a {row.system} family must have the keys 'mass' and "
                f"{sysdef.other!r}, got {shown(sorted(row.candidates))}")
    for prop, (lo, hi) in row.candidates.items():
        if not lo < hi:
            return f"field 'candidates.{prop}' must be [lower, higher] with lower < higher, got {shown([lo, hi])}"
    want = {"g"} | ({sysdef.constant} if sysdef.constant else set())
    if set(row.constants) != want:
        return (f"field 'constants' of a {row.system} family must have the keys "
                f"{', '.join(map(repr, sorted(want)))}, got {shown(sorted(row.constants))}")
    if set(row.calibration) != set(CALIBRATED):
        return (f"field 'calibration' must have the keys {', '.join(map(repr, CALIBRATED))}, "
                f"got {shown(sorted(row.calibration))}")
    for test, consts in row.calibration.items():
        for key, value in consts.items():
            ok = _positive_number(value) or (
                isinstance(value, list) and value and all(_positive_number(v) for v in value))
            if not ok:
                return (f"field 'calibration.{test}.{key}' must be a positive number or a list of "
                        f"them, got {shown(value)}")
    if set(row.thresholds) != set(LEVELS):
        return f"field 'thresholds' must have the keys 'low' and 'high', got {shown(sorted(row.thresholds))}"
    if not row.thresholds["low"] < row.thresholds["high"]:
        return f"field 'thresholds' must have low < high, got {shown(row.thresholds)}"
    return (_menu_problem("options", row.options, ACTIONS)
            or _menu_problem("answer_options", row.answer_options, ANSWERS)
            or _menu_problem("reworded_options", row.reworded_options, ACTIONS)
            or _menu_problem("recover_options", row.recover_options, (0, 1)))


def meta_problem(meta: BenchMeta) -> tuple[str, str] | None:
    """(field, what is wrong) across the fields of a type-checked bench.json, or None."""
    if len(set(meta.systems)) != len(meta.systems):
        return "systems", f"field 'systems' must name each system once, got {shown(meta.systems)}"
    if meta.injection_levels is not None and len(set(meta.injection_levels)) != len(meta.injection_levels):
        return "injection_levels", f"field 'injection_levels' must name each level once, got {shown(meta.injection_levels)}"
    if meta.voids is not None and len(set(meta.voids)) != len(meta.voids):
        return "voids", f"field 'voids' must name each void type once, got {shown(meta.voids)}"
    if meta.evidence is not None:
        try:
            ClipSpec(meta.evidence.frames, meta.evidence.fps)
        except ValueError as err:
            return "evidence", f"field 'evidence': {err}".replace("--frames", "frames").replace("--fps", "fps")
    if meta.n_families != meta.families_per_system * len(meta.systems):
        return "n_families", (f"field 'n_families' must be families_per_system x number of systems "
                              f"({meta.families_per_system} x {len(meta.systems)}), got {meta.n_families}")
    return None


# -- one-phrase errors -----------------------------------------------------------------------------

_EXPECTED = {
    "bool_type": "must be true or false",
    "int_type": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "finite_number": "must be a finite number",
    "string_type": "must be a string",
    "string_too_short": "must be a non-empty string",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "list_type": "must be a list",
}


def _field_name(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def describe(err: ValidationError) -> str:
    """The first error of a validation as one phrase: "field 'resolved' must be true or false,
    got 'false'", "missing field 'family_id'", "not valid JSON (...)", ..."""
    e = err.errors(include_url=False)[0]
    kind, loc, ctx, value = e["type"], tuple(e["loc"]), e.get("ctx") or {}, e.get("input")
    if kind == "json_invalid":
        return f"not valid JSON ({ctx.get('error', e['msg'])})"
    if not loc and kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected a JSON object, got {_json_kind(value)}"
    if kind == "missing":
        return f"missing field {_field_name(loc)!r}"
    if kind == "extra_forbidden":
        return f"unknown field {_field_name(loc)!r} (not in format version {FORMAT_VERSION})"
    if loc[:1] == (FORMAT_KEY,) and kind == "literal_error":
        return f"field {FORMAT_KEY!r} is {shown(value)}, but this evprobe reads format version {FORMAT_VERSION} only"
    if loc and loc[-1] == "[key]":
        where = f"a key of field {_field_name(loc[:-2])!r}"
    else:
        where = f"field {_field_name(loc)!r}"
    if kind in _EXPECTED:
        expected = _EXPECTED[kind]
    elif kind == "literal_error":
        expected = f"must be one of {ctx['expected']}"
    elif kind == "greater_than":
        expected = f"must be greater than {ctx['gt']:g}"
    elif kind == "greater_than_equal":
        expected = f"must be at least {ctx['ge']:g}"
    elif kind == "less_than_equal":
        expected = f"must be at most {ctx['le']:g}"
    elif kind == "too_short":
        expected = f"must have at least {ctx['min_length']} entries"
    elif kind == "too_long":
        expected = f"must have at most {ctx['max_length']} entries"
    elif kind == "string_pattern_mismatch":
        expected = "must be a sha256 digest (64 lowercase hex digits)" if "sha256" in _field_name(loc) \
            else f"must match {ctx['pattern']}"
    else:
        expected = f"is invalid ({e['msg']})"
    return f"{where} {expected}, got {shown(value)}"


def _json_kind(value: Any) -> str:
    return {list: "a list", str: "a string", bool: "true or false", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


__all__ = [
    "BenchMeta",
    "FamilyRow",
    "ItemRow",
    "PricesRow",
    "describe",
    "family_problem",
    "instance",
    "item_problem",
    "meta_problem",
    "row_model",
]
