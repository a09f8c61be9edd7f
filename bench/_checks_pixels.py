"""The pixel rows of `evprobe check` (bench.checks): every image read back with the pixel detector
against the oracle's readings, the property each sheet shows recovered into outcomes, informative
separations measured in pixels, hidden-world images compared by hash, and (--rerender) the images
rendered again byte for byte. On a clip benchmark each clip is read as the sheet its panel frames
make (bench.checks_clips adds the clip rows)."""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from evprobe.bench import oracle
from evprobe.bench.calibration import sheet_spec
from evprobe.bench.checks_clips import ClipRows
from evprobe.bench.clips import ClipSpec, panel_sheet, read_frames, render_clip
from evprobe.bench.decode import decode, read_bytes
from evprobe.bench.detect import DetectionError, detect_sheet, marker_pixel_positions
from evprobe.bench.family import Family
from evprobe.bench.items import Item
from evprobe.bench.render import STYLES, render_sheet
from evprobe.core.errors import InputError

if TYPE_CHECKING:
    from evprobe.bench.checks import CheckReport

REQUIRED_SEPARATION_PX = 8.0
MAX_DETECTOR_ERROR_PCT = 1.0  # of the ruler span
# Outcomes recovered from the pixels: the detector places a marker within 0.23% of the ruler
# span, and the largest deviation of a recovered outcome from the oracle's is 0.40% on the main
# set (and on the small test set). A 5% bound is far above that noise and far below the 17.2%
# margin, so a failure means a sheet shows a world the candidate values do not describe.
MAX_OUTCOME_DEVIATION_PCT = 5.0


def check_hidden_images(
    report: CheckReport, root: Path, oracles: dict[str, oracle.OracleFamily], items: list[Item]
) -> dict[str, str]:
    """Uninformative tests must show identical bytes in both hidden worlds (and informative ones
    must not). Returns the sha256 of every image file."""
    digests: dict[str, str] = {}

    def digest(rel: str) -> str:
        if rel not in digests:
            with (root / rel).open("rb") as f:  # streamed: a file of any size costs one buffer
                digests[rel] = hashlib.file_digest(f, "sha256").hexdigest()
        return digests[rel]

    groups: dict[tuple[str, str], list[Item]] = defaultdict(list)
    for it in items:
        if it.request == "answer_after_test" and not it.injection:  # levels: checks_blocks
            groups[(it.decision_id, it.test)].append(it)
    same, uninformative, informative_distinct, informative = 0, 0, 0, 0
    for (_, test), pair in groups.items():
        fam = oracles.get(pair[0].family_id)
        if fam is None:
            continue
        names = sorted(str(it.hidden_world) for it in pair)
        expected = sorted(oracle.world_name(w) for w in oracle.remaining({fam.initial_pos: pair[0].history}))
        if len(pair) != 2 or names != expected or test not in oracle.TESTS:
            report.failures.append(f"hidden worlds of {pair[0].decision_id} {test} are malformed")
            continue
        w1, w2 = ((int(it.hidden_world[1]), int(it.hidden_world[2])) for it in pair)
        hashes = [tuple(digest(rel) for rel in it.images) for it in pair]
        if not oracle.tells_apart(test, w1, w2):
            uninformative += 1
            same += hashes[0] == hashes[1]
        else:
            informative += 1
            informative_distinct += hashes[0] != hashes[1]
    report.add(
        "Checks for identical images across hidden worlds passed",
        f"{same:,}/{uninformative:,}",
        same == uninformative and uninformative > 0,
        "uninformative tests whose images differ between hidden worlds",
    )
    report.add(
        "Informative tests show different images",
        f"{informative_distinct:,}/{informative:,}",
        informative_distinct == informative,
        "informative tests whose images are identical across hidden worlds",
    )
    report.numbers["identical_hidden_images"] = [same, uninformative]
    for it in items:
        for rel in it.images:
            digest(rel)
    return digests


def check_pixels(
    report: CheckReport, root: Path, oracles: dict[str, oracle.OracleFamily], digests: dict[str, str],
    clip: ClipSpec | None = None,
) -> None:
    """The pixel rows; on a clip benchmark each clip is read as the sheet its panel frames make, and its
    frames, decoded once, go to the clip rows (`bench.checks_clips`), added after these."""
    clip_rows = None if clip is None else ClipRows(clip, MAX_DETECTOR_ERROR_PCT)
    worst, worst_where = 0.0, ""
    separation, sep_where = math.inf, ""
    along, along_where = math.inf, ""
    deviation, dev_where = 0.0, ""
    n_images = 0
    for fam in oracles.values():
        cal = fam.row["calibration"]
        centres: dict[tuple[str, str], list[tuple[float, float]]] = {}
        read: dict[str, list[float]] = {}
        for sheet, style, value in oracle.sheets(fam):
            rel = oracle.image_of(fam, sheet, style, clip=clip is not None)
            path = root / rel
            if not path.is_file():
                raise InputError(f"{path}: image of family {fam.family_id} not found; regenerate")
            try:
                kind = oracle.sheet_kind(fam.system, sheet)
                ruler = oracle.ruler_length(fam.system, cal, sheet)
                want = oracle.readings(fam.system, cal, sheet, value)
            except (KeyError, TypeError, ValueError, ZeroDivisionError) as err:
                raise InputError(
                    f"families.jsonl: family {fam.family_id}: field 'calibration' unusable for {sheet} ({err!r})"
                ) from None
            orientation = oracle.ORIENTATION[kind]
            try:  # within the pixel budget, its frame count from the header first (bench.decode)
                frames = read_frames(path, clip) if clip is not None else decode(read_bytes(path), str(path), frames=1)
            except ValueError as err:  # a failure of the file's rows (the clip rows say which: bench.checks_clips)
                report.failures.append(str(err))
                if clip_rows is not None:
                    clip_rows.bad(str(err))
                worst, worst_where = math.inf, rel
                continue
            if clip_rows is None:
                image = frames[0]
            else:
                image = panel_sheet(frames)
                clip_rows.read(fam, sheet, style, value, rel, frames)
            n_images += 1
            try:
                got = detect_sheet(image, orientation=orientation, ruler_length=ruler, style=STYLES[style])
                centres[(sheet, style)] = marker_pixel_positions(image, orientation=orientation, style=STYLES[style])
            except DetectionError as err:
                report.failures.append(f"{rel}: {err}")
                worst, worst_where = math.inf, rel
                continue
            if style == "a":
                read[sheet] = list(got)
            for g, w in zip(got, want):
                err_pct = 100 * abs(g - w) / ruler
                if err_pct > worst:
                    worst, worst_where = err_pct, rel
        axis = {"horizontal": 0, "vertical": 1}
        for style in ("a", "b"):
            for prop in ("mass", "other"):
                a, b = centres.get((f"{prop}_0", style)), centres.get((f"{prop}_1", style))
                if a is None or b is None:
                    continue
                gap = max(math.dist(p, q) for p, q in zip(a, b))  # the most telling panel
                if gap < separation:
                    separation, sep_where = gap, f"{fam.family_id} {prop} style {style}"
                k = axis[oracle.ORIENTATION[oracle.sheet_kind(fam.system, f'{prop}_0')]]
                gap_axis = max(abs(p[k] - q[k]) for p, q in zip(a, b))
                if gap_axis < along:
                    along, along_where = gap_axis, f"{fam.family_id} {prop} style {style}"
        if all(s in read for s in ("mass_0", "mass_1", "other_0", "other_1")):
            m = [oracle.property_from_readings(fam.system, cal, f"mass_{i}", read[f"mass_{i}"]) for i in (0, 1)]
            p = [oracle.property_from_readings(fam.system, cal, f"other_{j}", read[f"other_{j}"]) for j in (0, 1)]
            for w, y in fam.outcomes.items():
                shown = oracle.outcome(fam.system, m[w[0]], p[w[1]], fam.constants)
                dev = 100 * abs(shown - y) / y
                if dev > deviation:
                    deviation, dev_where = dev, f"{fam.family_id} {oracle.world_name(w)}"
    report.add(
        "Largest error in extracting the marked position",
        f"{worst:.3f}% of panel span",
        worst <= MAX_DETECTOR_ERROR_PCT,
        f"{worst:.3f}% at {worst_where} exceeds {MAX_DETECTOR_ERROR_PCT}%",
    )
    report.add(
        "Outcomes recovered from the sheets",
        f"largest deviation {deviation:.2f}% (fails above {MAX_OUTCOME_DEVIATION_PCT:.0f}%)",
        deviation <= MAX_OUTCOME_DEVIATION_PCT,
        f"{deviation:.2f}% at {dev_where}: the sheets show another world than the candidate values",
    )
    report.add(
        "Smallest informative feature separation",
        f"{separation:.0f} pixels",
        separation >= REQUIRED_SEPARATION_PX,
        f"{separation:.1f} px at {sep_where} is under {REQUIRED_SEPARATION_PX:.0f} px",
    )
    report.add(
        "Required separation in implementation",
        f"{REQUIRED_SEPARATION_PX:.0f} pixels (measured along the ruler: {along:.0f})",
        along >= REQUIRED_SEPARATION_PX,
        f"{along:.1f} px along the ruler at {along_where} is under {REQUIRED_SEPARATION_PX:.0f} px",
    )
    report.numbers.update(
        images_checked=n_images,
        max_detector_error_pct=worst,
        max_outcome_deviation_pct=deviation,
        min_separation_px=separation,
        min_separation_along_ruler_px=along,
        required_separation_px=REQUIRED_SEPARATION_PX,
        distinct_images=len(set(digests.values())),
    )
    if clip_rows is not None:
        clip_rows.add_to(report)


def check_rerender(report: CheckReport, root: Path, families: list[Family], clip: ClipSpec | None = None) -> None:
    """Reproducibility only: the renderer, run again here, writes the same bytes (it says nothing
    about the labels, which the oracle rows check); on a clip benchmark, the clips."""
    bad, n = [], 0
    for f in families:
        sheets = [(s, "a") for s in ("mass_0", "mass_1", "other_0", "other_1", "free_fall")]
        if f.in_subset:
            sheets += [(f"{f.initial}_{h}", "b") for h in (0, 1)]
        for sheet, style in sheets:
            rel = f"images/{f.family_id}/{sheet}{'' if style == 'a' else '.' + style}{'' if clip is None else '.clip'}.png"
            n += 1
            if clip is not None:
                fresh = render_clip(f.system, f.candidates, f.calibration, sheet, clip, style)
            else:
                fresh = render_sheet(sheet_spec(f.system, f.candidates, f.calibration, sheet), STYLES[style])
            if fresh != (root / rel).read_bytes():
                bad.append(rel)
    report.add(
        "Images re-rendered byte for byte",
        f"{n - len(bad):,}/{n:,}",
        not bad,
        f"images differ from a fresh rendering: {bad[:3]}",
    )
