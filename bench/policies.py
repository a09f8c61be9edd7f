"""Scripted policies: baselines and checks of the scoring, run through the same runner, parser and
scorer as models (model names `policy:<name>`).

- `reference`: the exact minimum-cost selector and exact answers, from the item's labels (like
  the seed's deterministic program, it uses metadata a model never sees).
- `exact-reader`: reads every sheet with the pixel detector, works out which worlds remain from the
  disclosed candidate values and calibration (all stated in the prompt), and answers exactly. Uses
  no label.
- `always-stop`, `repeat-known`, `test-missing`, `complete-report`: a fixed selection rule; every
  other request is answered by the exact reader, so their final success isolates the rule.
- Numeric estimates (`bench.numeric`): `reference` replies the reference value; the exact reader
  and every fixed rule read the sheets with the detector and invert appendix A.2's relations
  (`oracle.property_from_readings`), then apply eq. (1) for an outcome, replying four significant
  digits; `random` replies log-uniformly over the range Table 8 allows for the quantity (the
  extremes of eq. (1) over Table 8's ranges for an outcome).
- Voids (`bench.voids`): the exact reader finds no marker on an occluded sheet, so it learns nothing
  from it (every world remains), and an unstated threshold settles no answer: it replies
  "undetermined" to both, and to an occluded selection the cheapest action that settles the answer
  from nothing known. It reads the pixels and the prompt's threshold (`Item.threshold` is what the
  prompt states), never the void labels.
- Injection levels (`bench.injection`) change the prompt only: every policy replies to a level-L
  item as to its level-0 item (the images and labels are the same).
- `random`: a seeded uniform choice among the item's options (ruler: uniform on the ruler). The
  draw depends on the seed and the inputs (prompt and image bytes), not on the item id, so
  identical inputs get identical replies, as from a deterministic model.

Replies are plain text (an option letter or a number) and go through `bench.parse`.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from evprobe.bench import oracle
from evprobe.bench.calibration import readings, sheet_spec, sheet_value
from evprobe.bench.clips import sheet_view
from evprobe.bench.detect import detect_sheet, marker_pixel_count
from evprobe.bench.family import Family
from evprobe.bench.items import Item
from evprobe.bench.numbers import fmt
from evprobe.bench.reference import Prices, reference_action, reference_answer
from evprobe.bench.render import STYLES
from evprobe.bench.systems import MASS_MULTIPLIER, MASS_RANGE, get_system
from evprobe.bench.worlds import History, parse_world

POLICIES: tuple[str, ...] = (
    "reference",
    "exact-reader",
    "always-stop",
    "repeat-known",
    "test-missing",
    "complete-report",
    "random",
)


def _letter(options: dict[str, str], value: str) -> str:
    return next(k for k, v in options.items() if v == value)


_DETECTED: dict[tuple, tuple[float, ...]] = {}


def _detect_file(path: Path, orientation: str, ruler_length: float, style: str) -> tuple[float, ...]:
    """Detector readings of one file (a clip: of its panel frames, `clips.sheet_view`), cached per
    process; the key includes the file's size and modification time, so a changed file is read again."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, orientation, ruler_length, style)
    if key not in _DETECTED:
        _DETECTED[key] = detect_sheet(
            sheet_view(path), orientation=orientation, ruler_length=ruler_length, style=STYLES[style]
        )
    return _DETECTED[key]


def _marked(path: Path, style: str) -> bool:
    """Whether the file shows any marker pixel, cached per process like `_detect_file`."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, style)
    if key not in _MARKED:
        _MARKED[key] = marker_pixel_count(sheet_view(path), STYLES[style]) > 0
    return _MARKED[key]


_MARKED: dict[tuple, bool] = {}


class ExactReader:
    """Reads sheets with the detector and reasons exactly over the disclosed candidate worlds."""

    def __init__(self, bench_dir: str | Path, families: dict[str, Family], prices: Prices) -> None:
        self.root = Path(bench_dir)
        self.families = families
        self.prices = prices

    def _read(self, rel: str, family: Family, sheet_kind_of: str, style: str) -> tuple[float, ...]:
        spec = sheet_spec(family.system, family.candidates, family.calibration, sheet_kind_of)
        return _detect_file(self.root / rel, spec.orientation, spec.ruler_length, style)

    def _index(self, rel: str, family: Family, prop: str, style: str) -> int:
        """Which candidate value of `prop` ("mass" | "other") the sheet at `rel` shows."""
        got = np.array(self._read(rel, family, f"{prop}_0", style))
        errors = []
        for index in (0, 1):
            sheet = f"{prop}_{index}"
            want = readings(family.system, family.calibration, sheet, sheet_value(sheet, family.other, family.candidates))
            errors.append(float(np.sum((got - np.array(want)) ** 2)))
        return int(np.argmin(errors))

    def _property(self, rel: str, family: Family, prop: str, style: str) -> float:
        """The value of `prop` ("mass" | "other") the sheet at `rel` shows, from its detected
        readings and the stated calibration (no candidate value is used)."""
        sheet = f"{prop}_0"  # only the sheet's kind matters here, not which candidate it shows
        marks = self._read(rel, family, sheet, style)
        return oracle.property_from_readings(family.system, family.calibration, sheet, marks)

    def history(self, item: Item) -> History:
        """The observations the item's images show (the initial sheet, then the test's sheets)."""
        f = self.families[item.family_id]
        if not item.images:
            return frozenset()
        observed = set()
        if _marked(self.root / item.images[0], item.style):  # else an occluded sheet: it shows nothing
            observed.add((f.initial, self._index(item.images[0], f, f.initial, item.style)))
        if item.request == "answer_after_test":
            shown = {"test_mass": ["mass"], "test_other": ["other"], "free_fall": [],
                     "combined_report": ["mass", "other"]}[item.test]  # type: ignore[index]
            for rel, prop in zip(item.images[1:], shown):
                observed.add((prop, self._index(rel, f, prop, item.style)))
        return frozenset(observed)

    def reply(self, item: Item) -> str:
        f = self.families[item.family_id]
        out = f.outcomes()
        if item.request == "read_ruler":
            got = self._read(item.images[0], f, f"{f.initial}_0", item.style)
            return fmt(got[-1], 4)
        if item.request == "recover_property":
            index = self._index(item.images[0], f, f.initial, item.style)
            return next(k for k, v in f.recover_options.items() if v == index)
        if item.request == "estimate_property":
            prop = "mass" if item.test == "test_mass" else "other"
            return fmt(self._property(item.images[0], f, prop, item.style), 4)
        if item.request == "estimate_outcome":
            mass = self._property(item.images[0], f, "mass", item.style)
            other = self._property(item.images[1], f, "other", item.style)
            return fmt(get_system(f.system).outcome(mass, other, f.constants), 4)
        if item.request == "both_given":
            w = parse_world(item.hidden_world)  # type: ignore[arg-type]
            hist: History = frozenset({("mass", w[0]), ("other", w[1])})
        else:
            hist = self.history(item)
        assert item.options is not None
        if item.threshold is None:  # the prompt states no threshold (an unstated void): nothing settles it
            assert item.request != "select", item.item_id
            return _letter(item.options, "undetermined")
        if item.request == "select":
            return _letter(item.options, reference_action(hist, item.threshold, out, self.prices))
        return _letter(item.options, reference_answer(hist, item.threshold, out))


def _fixed_rule(rule: Callable[[Item], str], reader: ExactReader) -> Callable[[Item], str]:
    def reply(item: Item) -> str:
        if item.request == "select":
            assert item.options is not None
            return _letter(item.options, rule(item))
        return reader.reply(item)

    return reply


def _repeat(item: Item) -> str:
    return "test_mass" if item.initial_property == "mass" else "test_other"


def _missing(item: Item) -> str:
    return "test_other" if item.initial_property == "mass" else "test_mass"


def _reference(item: Item) -> str:
    if item.request in ("read_ruler", "estimate_property", "estimate_outcome"):
        return fmt(item.reference_value, 6)  # type: ignore[arg-type]
    assert item.reference_option is not None
    return item.reference_option


def make_policy(
    name: str,
    bench_dir: str | Path,
    families: dict[str, Family],
    prices: Prices = Prices(),
    seed: int = 0,
) -> Callable[[Item], str]:
    """The reply function of policy `name`."""
    reader = ExactReader(bench_dir, families, prices)
    if name == "reference":
        return _reference
    if name == "exact-reader":
        return reader.reply
    if name == "always-stop":
        return _fixed_rule(lambda item: "stop", reader)
    if name == "repeat-known":
        return _fixed_rule(_repeat, reader)
    if name == "test-missing":
        return _fixed_rule(_missing, reader)
    if name == "complete-report":
        return _fixed_rule(lambda item: "combined_report", reader)
    if name == "random":
        return _random_policy(bench_dir, families, seed)
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")


def _random_policy(bench_dir: str | Path, families: dict[str, Family], seed: int) -> Callable[[Item], str]:
    root = Path(bench_dir)
    image_digest: dict[str, bytes] = {}

    def rng_for(item: Item) -> np.random.Generator:
        h = hashlib.sha256(f"{seed}\0{item.prompt}".encode())
        for rel in item.images:
            if rel not in image_digest:
                image_digest[rel] = hashlib.sha256((root / rel).read_bytes()).digest()
            h.update(image_digest[rel])
        return np.random.default_rng(int.from_bytes(h.digest()[:8], "little"))

    def reply(item: Item) -> str:
        rng = rng_for(item)
        if item.request == "read_ruler":
            f = families[item.family_id]
            ruler = f.calibration["test_mass" if f.initial == "mass" else "test_other"]["ruler"]
            return fmt(float(rng.uniform(0.0, ruler)), 4)
        if item.request in ("estimate_property", "estimate_outcome"):
            lo, hi = numeric_range(item)
            return fmt(math.exp(float(rng.uniform(math.log(lo), math.log(hi)))), 4)
        letters = sorted(item.options or {})
        return letters[int(rng.integers(len(letters)))]

    return reply


def numeric_range(item: Item) -> tuple[float, float]:
    """The values Table 8 allows for a numeric item's quantity: the sampling range of a property
    (lower values' range to the upper multiplier's reach), or the extremes of eq. (1) over those
    ranges for an outcome (eq. (1) is monotone in each argument, so the extremes are at corners)."""
    sysdef = get_system(item.system)
    masses = (MASS_RANGE[0], MASS_RANGE[1] * MASS_MULTIPLIER)
    others = (sysdef.other_range[0], sysdef.other_range[1] * sysdef.other_multiplier)
    if item.request == "estimate_property":
        return masses if item.test == "test_mass" else others
    constants = [{"g": 9.81}] if sysdef.constant_range is None else [
        {"g": 9.81, sysdef.constant: c} for c in sysdef.constant_range  # type: ignore[dict-item]
    ]
    ys = [sysdef.outcome(m, o, c) for m, o, c in itertools.product(masses, others, constants)]
    return min(ys), max(ys)
