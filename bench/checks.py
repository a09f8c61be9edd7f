"""`evprobe check`: recompute a benchmark folder from families.jsonl and its images (Table 9).

Nothing is trusted from items.jsonl: every item is rebuilt from its family and compared field by
field, every image is read back with the pixel detector and compared with the generating values,
and the hidden-world images are compared by hash.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evprobe.bench.calibration import SHEETS, calibrate, sheet_spec
from evprobe.bench.detect import detect_sheet, marker_pixel_positions
from evprobe.bench.family import Family
from evprobe.bench.items import Item, family_items, image_path
from evprobe.bench.manifest import META_FILE, read_families, read_items
from evprobe.core.errors import InputError
from evprobe.core.files import atomic_write_json
from evprobe.bench.numbers import round_sig
from evprobe.bench.reference import Prices, observation
from evprobe.bench.render import STYLES, render_sheet
from evprobe.bench.worlds import compatible, history_of, parse_world, threshold_pair

REQUIRED_SEPARATION_PX = 8.0
MAX_DETECTOR_ERROR_PCT = 1.0  # of the ruler span


@dataclass
class CheckReport:
    rows: list[tuple[str, str, bool]] = field(default_factory=list)  # (check, result, passed)
    failures: list[str] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, result: str, passed: bool, why: str = "") -> None:
        self.rows.append((name, result, passed))
        if not passed:
            self.failures.append(f"{name}: {why or result}")

    def table(self) -> str:
        width = max(len(r[0]) for r in self.rows)
        lines = [f"{'Check'.ljust(width)}  Result", f"{'-' * width}  {'-' * 24}"]
        lines += [f"{n.ljust(width)}  {r}{'' if ok else '   FAILED'}" for n, r, ok in self.rows]
        lines.append(f"{'Reported check failures'.ljust(width)}  {len(self.failures)}")
        lines += [f"  failure: {f}" for f in self.failures]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "checks": [{"check": n, "result": r, "passed": ok} for n, r, ok in self.rows],
            "failures": self.failures,
            "n_failures": len(self.failures),
            **self.numbers,
        }


def _n(x: int) -> str:
    return f"{x:,}"


def run_checks(bench_dir: str | Path, *, rerender: bool = False) -> CheckReport:
    root = Path(bench_dir)
    if not root.is_dir():
        raise InputError(f"{root}: no such benchmark folder; run `evprobe generate --out {root}`")
    families = read_families(root)
    items = read_items(root, validate_images=True)
    prices = _prices(root)
    report = CheckReport()
    by_family = {f.family_id: f for f in families}

    _check_families(report, families)
    _check_items(report, families, items, prices)
    base_select = [it for it in items if it.request == "select" and it.variant is None]
    histories = {(it.family_id, it.history) for it in base_select}
    report.add(
        "Initial histories / decisions",
        f"{_n(len(histories))} / {_n(len(base_select))}",
        len(base_select) == 2 * len(histories) == 4 * len(families),
        "expected 2 histories and 4 decisions per family",
    )
    report.numbers.update(histories=len(histories), decisions=len(base_select))
    _check_pairs(report, base_select)
    digests = _check_hidden_images(report, root, by_family, items)
    _check_pixels(report, root, families, digests, rerender)
    return report


def _prices(root: Path) -> Prices:
    meta = root / META_FILE
    if not meta.is_file():
        return Prices()
    try:
        return Prices(**json.loads(meta.read_text())["prices"])
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise InputError(f"{meta}: unreadable prices ({err}); regenerate the benchmark") from None


def _check_families(report: CheckReport, families: list[Family]) -> None:
    ids = [f.family_id for f in families]
    params = {json.dumps([f.system, f.candidates, f.constants], sort_keys=True) for f in families}
    report.add(
        "Independent parameter families",
        _n(len(families)),
        len(set(ids)) == len(ids) == len(params) and len(families) > 0,
        "duplicate family ids or parameter sets",
    )
    worlds, bad_worlds, bad_cal, bad_q, margin = 0, [], [], [], math.inf
    for f in families:
        outcomes = f.outcomes()
        if len({round_sig(y) for y in outcomes.values()}) == 4:
            worlds += 4
        else:
            bad_worlds.append(f.family_id)
        if calibrate(f.system, f.candidates) != f.calibration:
            bad_cal.append(f.family_id)
        lo, hi = threshold_pair(outcomes, f.initial)
        if (round_sig(lo), round_sig(hi)) != (f.thresholds["low"], f.thresholds["high"]):
            bad_q.append(f.family_id)
        for level in ("low", "high"):
            q = f.thresholds[level]
            margin = min(margin, min(abs(y - q) / q for y in outcomes.values()))
    report.add(
        "Candidate worlds",
        _n(worlds),
        not bad_worlds,
        f"families with coinciding outcomes: {bad_worlds[:5]}",
    )
    report.add(
        "Calibration recomputed from candidates",
        f"{_n(len(families) - len(bad_cal))}/{_n(len(families))}",
        not bad_cal,
        f"calibration differs from recomputation in {bad_cal[:5]}",
    )
    report.add(
        "Thresholds at eq. (2) midpoints",
        f"{_n(len(families) - len(bad_q))}/{_n(len(families))}",
        not bad_q,
        f"thresholds differ from recomputation in {bad_q[:5]}",
    )
    report.add(
        "Smallest relative threshold margin",
        f"{100 * margin:.1f}%",
        margin > 0,
        "a threshold coincides with an outcome",
    )
    report.numbers.update(families=len(families), worlds=worlds, min_threshold_margin_pct=100 * margin)


def _check_items(report: CheckReport, families: list[Family], items: list[Item], prices: Prices) -> None:
    expected = {it.item_id: it for f in families for it in family_items(f, prices)}
    actual = {}
    duplicates = []
    for it in items:
        if it.item_id in actual:
            duplicates.append(it.item_id)
        actual[it.item_id] = it
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    differing = []
    for item_id in sorted(set(expected) & set(actual)):
        a, e = actual[item_id].to_json(), expected[item_id].to_json()
        diff = [k for k in e if a[k] != e[k]]
        if diff:
            differing.append(f"{item_id} ({', '.join(diff)})")
    ok = not (missing or extra or differing or duplicates)
    why = "; ".join(
        part
        for part in (
            f"{len(missing)} missing (first {missing[0]})" if missing else "",
            f"{len(extra)} unexpected (first {extra[0]})" if extra else "",
            f"{len(duplicates)} duplicated (first {duplicates[0]})" if duplicates else "",
            f"{len(differing)} differ from recomputation (first {differing[0]})" if differing else "",
        )
        if part
    )
    report.add("Items recomputed from families", f"{_n(len(expected) - len(missing) - len(differing))}/{_n(len(expected))}", ok, why)
    counts: dict[str, int] = defaultdict(int)
    for it in items:
        counts[it.variant or it.request] += 1
    report.numbers["items"] = len(items)
    report.numbers["items_by_request"] = dict(counts)


def _check_pairs(report: CheckReport, base_select: list[Item]) -> None:
    image_pairs: dict[str, list[Item]] = defaultdict(list)
    threshold_pairs: dict[str, list[Item]] = defaultdict(list)
    for it in base_select:
        image_pairs[it.image_pair_id].append(it)
        threshold_pairs[it.threshold_pair_id].append(it)
    bad_shape = [k for k, v in {**image_pairs, **threshold_pairs}.items() if len(v) != 2]
    image_switch = sum(1 for a, b in image_pairs.values() if a.reference_action != b.reference_action)
    threshold_switch = sum(1 for a, b in threshold_pairs.values() if a.reference_action != b.reference_action)
    report.add(
        "Required switches after image / threshold change",
        f"{_n(image_switch)} / {_n(threshold_switch)}",
        not bad_shape and image_switch == len(image_pairs) and threshold_switch == len(threshold_pairs),
        f"of {len(image_pairs)} image and {len(threshold_pairs)} threshold pairs"
        + (f"; malformed pairs {bad_shape[:3]}" if bad_shape else ""),
    )
    same_text = sum(1 for a, b in image_pairs.values() if a.prompt == b.prompt)
    same_image = sum(
        1 for a, b in threshold_pairs.values() if a.images == b.images and a.options == b.options
    )
    report.add(
        "Checks for identical text passed",
        f"{_n(same_text)}/{_n(len(image_pairs))}",
        same_text == len(image_pairs),
        "image pairs whose prompts differ",
    )
    report.add(
        "Threshold pairs keep image and option order",
        f"{_n(same_image)}/{_n(len(threshold_pairs))}",
        same_image == len(threshold_pairs),
        "threshold pairs whose images or options differ",
    )
    report.numbers.update(
        image_pairs=len(image_pairs),
        threshold_pairs=len(threshold_pairs),
        image_switches=image_switch,
        threshold_switches=threshold_switch,
        identical_text=[same_text, len(image_pairs)],
    )


def _check_hidden_images(
    report: CheckReport, root: Path, by_family: dict[str, Family], items: list[Item]
) -> dict[str, str]:
    """Uninformative tests must show identical bytes in both hidden worlds (and informative ones
    must not). Returns the sha256 of every image file."""
    digests: dict[str, str] = {}

    def digest(rel: str) -> str:
        if rel not in digests:
            digests[rel] = hashlib.sha256((root / rel).read_bytes()).hexdigest()
        return digests[rel]

    groups: dict[tuple[str, str], list[Item]] = defaultdict(list)
    for it in items:
        if it.request == "answer_after_test":
            groups[(it.decision_id, it.test)].append(it)
    same, uninformative, informative_distinct, informative = 0, 0, 0, 0
    for (_, test), pair in groups.items():
        f = by_family[pair[0].family_id]
        worlds = [parse_world(it.hidden_world) for it in pair]
        hist = history_of(f.initial, pair[0].history)
        if len(pair) != 2 or sorted(worlds) != sorted(compatible(hist)):
            report.failures.append(f"hidden worlds of {pair[0].decision_id} {test} are malformed")
            continue
        hashes = [tuple(digest(rel) for rel in it.images) for it in pair]
        if observation(test, worlds[0]) == observation(test, worlds[1]):
            uninformative += 1
            same += hashes[0] == hashes[1]
        else:
            informative += 1
            informative_distinct += hashes[0] != hashes[1]
    report.add(
        "Checks for identical images across hidden worlds passed",
        f"{_n(same)}/{_n(uninformative)}",
        same == uninformative and uninformative > 0,
        "uninformative tests whose images differ between hidden worlds",
    )
    report.add(
        "Informative tests show different images",
        f"{_n(informative_distinct)}/{_n(informative)}",
        informative_distinct == informative,
        "informative tests whose images are identical across hidden worlds",
    )
    report.numbers["identical_hidden_images"] = [same, uninformative]
    for it in items:
        for rel in it.images:
            digest(rel)
    return digests


def _check_pixels(
    report: CheckReport, root: Path, families: list[Family], digests: dict[str, str], rerender: bool
) -> None:
    from PIL import Image

    worst, worst_where = 0.0, ""
    separation, sep_where = math.inf, ""
    rerender_bad: list[str] = []
    n_images = 0
    for f in families:
        styles = ["a"] + (["b"] if f.in_subset else [])
        for style in styles:
            sheets = SHEETS if style == "a" else (f"{f.initial}_0", f"{f.initial}_1")
            centres: dict[str, list[tuple[float, float]]] = {}
            for sheet in sheets:
                rel = image_path(f.family_id, sheet, style)
                path = root / rel
                if not path.is_file():
                    raise InputError(f"{path}: image of family {f.family_id} not found; regenerate")
                spec = sheet_spec(f.system, f.candidates, f.calibration, sheet)
                with Image.open(path) as im:
                    image = im.convert("RGB")
                n_images += 1
                read = detect_sheet(
                    image, orientation=spec.orientation, ruler_length=spec.ruler_length, style=STYLES[style]
                )
                for got, want in zip(read, spec.readings):
                    err = 100 * abs(got - want) / spec.ruler_length
                    if err > worst:
                        worst, worst_where = err, rel
                centres[sheet] = marker_pixel_positions(image, orientation=spec.orientation, style=STYLES[style])
                if rerender and render_sheet(spec, STYLES[style]) != path.read_bytes():
                    rerender_bad.append(rel)
            for prop in ("mass", "other"):
                a, b = centres.get(f"{prop}_0"), centres.get(f"{prop}_1")
                if a is None or b is None:
                    continue
                gap = max(math.dist(p, q) for p, q in zip(a, b))  # the most telling panel
                if gap < separation:
                    separation, sep_where = gap, f"{f.family_id} {prop} style {style}"
    report.add(
        "Largest error in extracting the marked position",
        f"{worst:.3f}% of panel span",
        worst <= MAX_DETECTOR_ERROR_PCT,
        f"{worst:.3f}% at {worst_where} exceeds {MAX_DETECTOR_ERROR_PCT}%",
    )
    report.add(
        "Smallest informative feature separation",
        f"{separation:.0f} pixels",
        separation >= REQUIRED_SEPARATION_PX,
        f"{separation:.1f} px at {sep_where} is under {REQUIRED_SEPARATION_PX:.0f} px",
    )
    report.rows.append(("Required separation in implementation", f"{REQUIRED_SEPARATION_PX:.0f} pixels", True))
    if rerender:
        report.add(
            "Images re-rendered byte for byte",
            f"{_n(n_images - len(rerender_bad))}/{_n(n_images)}",
            not rerender_bad,
            f"images differ from a fresh rendering: {rerender_bad[:3]}",
        )
    report.numbers.update(
        images_checked=n_images,
        max_detector_error_pct=worst,
        min_separation_px=separation,
        required_separation_px=REQUIRED_SEPARATION_PX,
        distinct_images=len(set(digests.values())),
    )


def write_report(bench_dir: str | Path, report: CheckReport) -> Path:
    path = Path(bench_dir) / "checks.json"
    atomic_write_json(path, report.to_json())
    return path
