"""Sheet renderer and marker detector: determinism, geometry, colour hygiene, round trips."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from evprobe.bench.detect import DetectionError, detect_sheet, detect_spec, marker_pixel_positions
from evprobe.bench.render import (
    MARKER_HALF_WIDTH,
    MARKER_RADIUS,
    PANEL,
    SIZE,
    STYLE_A,
    STYLE_B,
    STYLES,
    Style,
    layout_for,
    panel_origin,
    pixel_to_value,
    render_sheet,
    tick_plan,
    value_to_pixel,
)
from evprobe.bench.sheets import SheetSpec

TIMES = ("t = 0.200 s", "t = 0.400 s", "t = 0.600 s", "t = 0.800 s")
LOADS = ("load = 1.00 N", "load = 2.00 N", "load = 3.00 N", "load = 4.00 N")

# One realistic sheet per kind (the numbers come from the benchmark's worlds).
SPECS: dict[str, SheetSpec] = {
    "mass": SheetSpec("mass", "sliding", "Mass test", 1.0, (0.05, 0.2, 0.45, 0.8), TIMES),
    "coasting": SheetSpec("coasting", "sliding", "Coasting test", 2.0, (0.74375, 1.275, 1.59375, 1.7), TIMES),
    "rebound": SheetSpec("rebound", "bouncing", "Rebound test", 1.0, (0.288, 0.512, 0.672, 0.768), TIMES),
    "extension": SheetSpec("extension", "spring", "Spring extension test", 0.5, (0.1, 0.2, 0.3, 0.4), LOADS),
    "free_fall": SheetSpec("free_fall", "sliding", "Free-fall test", 1.5, (1.1375, 0.95, 0.6375, 0.2), TIMES),
}
MORE_SPECS: list[SheetSpec] = [
    SheetSpec("coasting", "sliding", "Coasting test", 2.0, (0.53125, 0.5667, 0.5667, 0.5667), TIMES),
    SheetSpec("rebound", "bouncing", "Rebound test", 1.0, (0.128, 0.192, 0.192, 0.128), TIMES),
    SheetSpec("extension", "spring", "Spring extension test", 0.5, (0.025, 0.05, 0.075, 0.1), LOADS),
    SheetSpec("coasting", "spring", "Coasting test", 2.0, (0.0, 0.5, 1.5, 2.0), TIMES),
    SheetSpec("mass", "bouncing", "Mass test", 1.0, (0.0, 0.001, 0.999, 1.0), TIMES),
    SheetSpec("free_fall", "bouncing", "Free-fall test", 1.5, (1.5, 0.75, 0.001, 0.0), TIMES),
    SheetSpec("extension", "spring", "Spring extension test", 0.5, (0.0, 0.0, 0.5, 0.5), LOADS),
]
ALL_SPECS = [*SPECS.values(), *MORE_SPECS]
BOTH_STYLES = [STYLE_A, STYLE_B]


def _pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def _marker_mask(pixels: np.ndarray, style: Style) -> np.ndarray:
    return np.all(pixels == np.array(style.marker, dtype=np.uint8), axis=-1)


# ---------------------------------------------------------------------------------------------
# Styles and geometry


def test_styles_are_registered_and_distinct() -> None:
    assert STYLES == {"a": STYLE_A, "b": STYLE_B}
    assert STYLE_A.marker == (255, 0, 255) and STYLE_A.marker_name == "magenta"
    assert STYLE_B.marker_name == "orange"
    assert STYLE_A.marker != STYLE_B.marker
    assert STYLE_A.background != STYLE_B.background and STYLE_A.ink != STYLE_B.ink
    # The changed rendering changes drawing style too, not only colours.
    assert STYLE_A.tick_style != STYLE_B.tick_style
    assert STYLE_A.rounded_objects != STYLE_B.rounded_objects


@pytest.mark.parametrize("style", BOTH_STYLES, ids=lambda s: s.name)
def test_marker_colour_is_unique_in_the_palette(style: Style) -> None:
    others = [style.background, style.ink, style.border, style.object_outline, style.track, style.spring]
    if style.object_fill is not None:
        others.append(style.object_fill)
    assert style.marker not in others
    # Text is anti-aliased: no blend of ink over background may equal the marker exactly.
    ink, bg, marker = (np.array(c, dtype=float) for c in (style.ink, style.background, style.marker))
    alphas = np.arange(256)[:, None] / 255.0
    blends = np.rint(ink * alphas + bg * (1 - alphas))
    assert not np.any(np.all(blends == marker, axis=1))


def test_panel_origins_are_row_major() -> None:
    assert [panel_origin(i) for i in range(4)] == [(0, 0), (PANEL, 0), (0, PANEL), (PANEL, PANEL)]
    with pytest.raises(ValueError):
        panel_origin(4)


def test_ruler_fills_the_panel_whatever_its_length() -> None:
    for orientation in ("horizontal", "vertical"):
        layout = layout_for(orientation)
        assert abs(layout.end_px - layout.zero_px) >= 200
        for length in (0.5, 1.0, 1.5, 2.0):
            assert value_to_pixel(0.0, length, layout) == layout.zero_px
            assert value_to_pixel(length, length, layout) == layout.end_px
    assert layout_for("vertical").end_px < layout_for("vertical").zero_px  # zero at the floor


@given(
    orientation=st.sampled_from(["horizontal", "vertical"]),
    length=st.sampled_from([0.5, 1.0, 1.5, 2.0]),
    fraction=st.floats(0.0, 1.0),
)
def test_pixel_conversions_are_inverse(orientation: str, length: float, fraction: float) -> None:
    layout = layout_for(orientation)  # type: ignore[arg-type]
    value = fraction * length
    assert pixel_to_value(value_to_pixel(value, length, layout), length, layout) == pytest.approx(value, abs=1e-12)


def test_tick_steps_divide_the_ruler() -> None:
    for length, step in ((0.5, 0.1), (1.0, 0.1), (1.5, 0.25), (2.0, 0.2)):
        plan = tick_plan(length)
        assert plan.label_step == pytest.approx(step)
        assert (length / plan.label_step) == pytest.approx(round(length / plan.label_step))
    assert 3 <= 3.0 / tick_plan(3.0).label_step <= 10


# ---------------------------------------------------------------------------------------------
# Rendering


@pytest.mark.parametrize("style", BOTH_STYLES, ids=lambda s: s.name)
@pytest.mark.parametrize("kind", list(SPECS))
def test_render_is_deterministic_rgb_672(kind: str, style: Style) -> None:
    png = render_sheet(SPECS[kind], style)
    assert png == render_sheet(SPECS[kind], style)
    img = Image.open(io.BytesIO(png))
    assert img.format == "PNG" and img.mode == "RGB" and img.size == (SIZE, SIZE)
    assert not img.info.keys() - {"dpi", "gamma"}  # no text chunks, timestamps or other metadata


def test_styles_render_differently() -> None:
    spec = SPECS["mass"]
    assert render_sheet(spec, STYLE_A) != render_sheet(spec, STYLE_B)


@pytest.mark.parametrize("style", BOTH_STYLES, ids=lambda s: s.name)
def test_readings_change_bytes_and_equal_specs_do_not(style: Style) -> None:
    spec = SPECS["coasting"]
    moved = SheetSpec(spec.kind, spec.system, spec.title, spec.ruler_length, (0.5, 1.0, 1.5, 1.9), spec.panel_labels)
    twin = SheetSpec(spec.kind, spec.system, spec.title, spec.ruler_length, spec.readings, spec.panel_labels)
    assert render_sheet(spec, style) != render_sheet(moved, style)
    assert render_sheet(spec, style) == render_sheet(twin, style)


def _assert_marker_only_at_markers(png: bytes, spec: SheetSpec, style: Style) -> None:
    """Every exact-marker pixel is on a panel's dot or on its line to the ruler; nothing else."""
    mask = _marker_mask(_pixels(png), style)
    layout = layout_for(spec.orientation)
    along = 1 if spec.orientation == "horizontal" else 0  # array axis: 1 = x, 0 = y
    seen = 0
    for i, reading in enumerate(spec.readings):
        x0, y0 = panel_origin(i)
        sub = mask[y0 : y0 + PANEL, x0 : x0 + PANEL]
        coords = np.argwhere(sub)  # (y, x) rows
        assert coords.size, f"panel {i} has no marker"
        seen += len(coords)
        p = value_to_pixel(reading, spec.ruler_length, layout)
        a = coords[:, along]
        perp = coords[:, 1 - along]
        # Nothing farther from the marked position than the dot's radius.
        assert np.all(np.abs(a - p) <= MARKER_RADIUS + 0.5)
        # Off the line's width, only the dot: a blob no bigger than its bounding box.
        off_line = perp[np.abs(a - math.floor(p + 0.5)) > MARKER_HALF_WIDTH]  # renderer rounds half up
        if off_line.size:
            assert off_line.max() - off_line.min() <= 2 * MARKER_RADIUS
        # The line reaches the ruler line.
        assert layout.line_px in set(perp.tolist())
    assert seen == int(mask.sum()), "marker-coloured pixels outside the panels' markers"


@pytest.mark.parametrize("style", BOTH_STYLES, ids=lambda s: s.name)
@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: f"{s.kind}-{s.system}-{s.readings[0]}")
def test_marker_colour_appears_only_at_markers(spec: SheetSpec, style: Style) -> None:
    _assert_marker_only_at_markers(render_sheet(spec, style), spec, style)


# ---------------------------------------------------------------------------------------------
# Detection


@pytest.mark.parametrize("style", BOTH_STYLES, ids=lambda s: s.name)
@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: f"{s.kind}-{s.system}-{s.readings[0]}")
def test_detector_reads_realistic_sheets(spec: SheetSpec, style: Style) -> None:
    detected = detect_spec(render_sheet(spec, style), spec, style)
    for got, want in zip(detected, spec.readings, strict=True):
        assert abs(got - want) <= 0.005 * spec.ruler_length


_fraction = st.one_of(
    st.floats(0.0, 1.0),
    st.floats(0.0, 0.01),
    st.floats(0.99, 1.0),
    st.sampled_from([0.0, 1.0]),
)


@settings(max_examples=30, deadline=None)
@given(
    kind=st.sampled_from(list(SPECS)),
    system=st.sampled_from(["sliding", "bouncing", "spring"]),
    length=st.sampled_from([0.5, 1.0, 1.5, 2.0]),
    fractions=st.tuples(_fraction, _fraction, _fraction, _fraction),
)
def test_detector_round_trip(kind: str, system: str, length: float, fractions: tuple[float, ...]) -> None:
    readings = tuple(f * length for f in fractions)
    spec = SheetSpec(kind, system, "Round trip", length, readings, TIMES)  # type: ignore[arg-type]
    layout = layout_for(spec.orientation)
    for style in BOTH_STYLES:
        png = render_sheet(spec, style)
        detected = detect_sheet(png, orientation=spec.orientation, ruler_length=length, style=style)
        for got, want in zip(detected, readings, strict=True):
            assert abs(got - want) <= 0.005 * length
            # Stronger: the centroid is the exact float pixel, up to rounding to the pixel grid.
            err_px = abs(value_to_pixel(got, length, layout) - value_to_pixel(want, length, layout))
            assert err_px <= 0.5 + 1e-9
        _assert_marker_only_at_markers(png, spec, style)


def test_detector_accepts_images_and_reports_sheet_positions() -> None:
    spec = SPECS["rebound"]
    png = render_sheet(spec, STYLE_B)
    image = Image.open(io.BytesIO(png))
    assert detect_spec(image, spec, STYLE_B) == detect_spec(png, spec, STYLE_B)
    positions = marker_pixel_positions(png, orientation=spec.orientation, style=STYLE_B)
    layout = layout_for(spec.orientation)
    for i, ((x, y), reading) in enumerate(zip(positions, spec.readings, strict=True)):
        x0, y0 = panel_origin(i)
        assert x0 <= x < x0 + PANEL and y0 <= y < y0 + PANEL
        assert abs((y - y0) - value_to_pixel(reading, spec.ruler_length, layout)) <= 0.5


def test_detector_uses_the_style_marker_colour() -> None:
    spec = SPECS["mass"]
    with pytest.raises(DetectionError):
        detect_spec(render_sheet(spec, STYLE_A), spec, STYLE_B)


@pytest.mark.parametrize("style", BOTH_STYLES, ids=lambda s: s.name)
def test_missing_marker_raises_naming_the_panel(style: Style) -> None:
    spec = SPECS["extension"]
    pixels = _pixels(render_sheet(spec, style)).copy()
    x0, y0 = panel_origin(2)
    region = pixels[y0 : y0 + PANEL, x0 : x0 + PANEL]
    region[_marker_mask(region, style)] = style.background  # paint the marker over
    with pytest.raises(DetectionError, match="panel 2"):
        detect_spec(Image.fromarray(pixels), spec, style)


def test_detector_rejects_images_that_are_not_sheets() -> None:
    with pytest.raises(DetectionError):
        detect_spec(Image.new("RGB", (100, 100)), SPECS["mass"], STYLE_A)
