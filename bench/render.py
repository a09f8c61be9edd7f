"""Deterministic drawing of measurement sheets (672 x 672 PNG, 2 x 2 panels).

Every panel shows a title, a panel label (time or load), a ruler with numbered ticks, the object at
its measured position, and a marker: a dot at the measured position plus a straight line from the
dot to the ruler, perpendicular to it. The marker is drawn in a colour that appears nowhere else in
the image and without anti-aliasing, so `bench.detect` can find it by exact colour match.

Coordinates follow the pixel-index convention: the pixel in column i has x coordinate i (its
centre), so a centroid of pixel indices is directly comparable with `value_to_pixel`.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Literal

from PIL import Image, ImageDraw, ImageFont

from evprobe.bench.sheets import ORIENTATION, Orientation, SheetSpec

RGB = tuple[int, int, int]

SIZE = 672
PANEL = SIZE // 2  # each of the four panels is PANEL x PANEL pixels

MARKER_RADIUS = 5  # dot radius in pixels
MARKER_HALF_WIDTH = 1  # the marker line is 2 * 1 + 1 = 3 px wide, symmetric about its centre


# --------------------------------------------------------------------------------------------
# Styles


@dataclass(frozen=True)
class Style:
    """Colours and drawing switches for one rendering of a sheet."""

    name: str
    marker_name: str  # how prompts name the marker colour, e.g. "magenta"
    background: RGB
    ink: RGB  # ruler, ticks, text
    border: RGB  # thin panel frame
    object_fill: RGB | None  # None draws objects as outlines only
    object_outline: RGB
    outline_width: int
    track: RGB  # track, floor and wall
    spring: RGB
    marker: RGB
    tick_style: Literal["below", "through"]  # ticks hang off the ruler line, or straddle it
    rounded_objects: bool  # rounded block corners instead of square ones
    ground_hatch: bool  # hatch marks under the floor / behind the wall


STYLE_A = Style(
    name="a",
    marker_name="magenta",
    background=(255, 255, 255),
    ink=(30, 30, 38),
    border=(160, 160, 168),
    object_fill=(92, 138, 200),
    object_outline=(26, 46, 92),
    outline_width=2,
    track=(100, 100, 104),
    spring=(40, 40, 48),
    marker=(255, 0, 255),
    tick_style="below",
    rounded_objects=False,
    ground_hatch=True,
)

# The "changed rendering": colours and drawing style change together.
STYLE_B = Style(
    name="b",
    marker_name="orange",
    background=(18, 26, 56),
    ink=(226, 230, 238),
    border=(84, 96, 130),
    object_fill=None,
    object_outline=(120, 212, 236),
    outline_width=3,
    track=(150, 160, 186),
    spring=(200, 206, 222),
    marker=(255, 140, 0),
    tick_style="through",
    rounded_objects=True,
    ground_hatch=False,
)

STYLES: dict[str, Style] = {"a": STYLE_A, "b": STYLE_B}


# --------------------------------------------------------------------------------------------
# Geometry


@dataclass(frozen=True)
class PanelLayout:
    """Ruler geometry inside one panel, in panel pixel coordinates.

    Along-axis coordinates are x for horizontal rulers and y for vertical ones; `line_px` is the
    perpendicular coordinate of the ruler line. Vertical rulers have their zero mark at the bottom
    (floor level) and their end mark at the top, so `end_px < zero_px` there.
    """

    orientation: Orientation
    zero_px: int  # along-axis pixel of the 0 mark
    end_px: int  # along-axis pixel of the end mark
    line_px: int  # perpendicular pixel of the ruler line (y if horizontal, x if vertical)

    @property
    def span_px(self) -> int:
        """Signed pixel distance from the zero mark to the end mark."""
        return self.end_px - self.zero_px


# The ruler spans the same number of pixels whatever its length in metres, so every ruler fills
# the panel. The zero mark of horizontal rulers leaves room on the left for the spring's wall.
HORIZONTAL_LAYOUT = PanelLayout("horizontal", zero_px=66, end_px=302, line_px=240)
VERTICAL_LAYOUT = PanelLayout("vertical", zero_px=310, end_px=90, line_px=78)

TRACK_Y = 202  # top row of the horizontal track; objects sit on it
OBJECT_X = 200  # centre column of objects above a floor (vertical rulers)
WALL_X = (8, 15)  # columns of the wall the spring is fixed to


def layout_for(orientation: Orientation) -> PanelLayout:
    if orientation == "horizontal":
        return HORIZONTAL_LAYOUT
    if orientation == "vertical":
        return VERTICAL_LAYOUT
    raise ValueError(f"unknown orientation {orientation!r}")


def value_to_pixel(value: float, ruler_length: float, layout: PanelLayout) -> float:
    """Along-axis panel pixel (float) of a reading in metres."""
    return layout.zero_px + layout.span_px * (value / ruler_length)


def pixel_to_value(pixel: float, ruler_length: float, layout: PanelLayout) -> float:
    """Reading in metres of an along-axis panel pixel; the inverse of `value_to_pixel`."""
    return (pixel - layout.zero_px) / layout.span_px * ruler_length


def panel_origin(panel_index: int) -> tuple[int, int]:
    """Top-left sheet pixel of a panel; panels are row-major (0 top-left ... 3 bottom-right)."""
    if not 0 <= panel_index < 4:
        raise ValueError(f"panel index {panel_index} is not in 0..3")
    row, col = divmod(panel_index, 2)
    return col * PANEL, row * PANEL


def _round(x: float) -> int:
    # Round half up (not Python's banker's rounding) so equal floats always land on the same pixel.
    return math.floor(x + 0.5)


# --------------------------------------------------------------------------------------------
# Fonts and ticks

TITLE_SIZE = 15
LABEL_SIZE = 16
TICK_SIZE = 13


@cache
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    # Pillow's bundled FreeType font (Aileron); identical on every machine with this Pillow.
    return ImageFont.load_default(size=size)


@dataclass(frozen=True)
class TickPlan:
    label_step: float  # metres between numbered (major) ticks
    minor_step: float  # metres between minor ticks


# Numbered steps divide the ruler (so the end mark is numbered), give at most 10 intervals, and
# keep labels apart: 0.05 m steps on a 0.5 m ruler would make "0.05"-wide labels touch.
_TICK_PLANS: tuple[tuple[float, TickPlan], ...] = (
    (0.5, TickPlan(0.1, 0.02)),
    (1.0, TickPlan(0.1, 0.02)),
    (1.5, TickPlan(0.25, 0.05)),
    (2.0, TickPlan(0.2, 0.05)),
)


def tick_plan(ruler_length: float) -> TickPlan:
    """Tick spacing for a ruler; lengths not listed get the smallest 1-2-5 step with <= 10 intervals."""
    for length, plan in _TICK_PLANS:
        if math.isclose(length, ruler_length):
            return plan
    exponent = math.floor(math.log10(ruler_length)) - 1
    for e in (exponent, exponent + 1):
        for mantissa in (1, 2, 5):
            step = mantissa * 10.0**e
            if ruler_length / step <= 10 + 1e-9:
                return TickPlan(step, step / 5)
    raise AssertionError("unreachable: a step of 10**(exponent + 1) always fits")


def _tick_label(value: float) -> str:
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return text or "0"


def _tick_values(ruler_length: float, step: float) -> list[float]:
    count = math.floor(ruler_length / step + 1e-6)
    return [i * step for i in range(count + 1)]


# --------------------------------------------------------------------------------------------
# Static parts of a panel (cached: the four panels of a sheet, and most sheets, share them)


def _draw_ruler(draw: ImageDraw.ImageDraw, layout: PanelLayout, ruler_length: float, style: Style) -> None:
    plan = tick_plan(ruler_length)
    ink = style.ink
    font = _font(TICK_SIZE)
    horizontal = layout.orientation == "horizontal"
    line = layout.line_px
    lo, hi = sorted((layout.zero_px, layout.end_px))
    # The ruler line is two pixels thick, on the tick side of line_px.
    if horizontal:
        draw.rectangle([lo, line, hi, line + 1], fill=ink)
    else:
        draw.rectangle([line - 1, lo, line, hi], fill=ink)

    def tick(value: float, length: int) -> None:
        p = _round(value_to_pixel(value, ruler_length, layout))
        if style.tick_style == "below":
            a, b = (line, line + length) if horizontal else (line - length, line)
        else:
            a, b = line - length // 2 - 1, line + length // 2 + 1
        if horizontal:
            draw.rectangle([p, a, p, b], fill=ink)
        else:
            draw.rectangle([a, p, b, p], fill=ink)

    for v in _tick_values(ruler_length, plan.minor_step):
        tick(v, 5)
    labels = _tick_values(ruler_length, plan.label_step)
    for v in labels:
        tick(v, 11)
    gap = 15 if style.tick_style == "below" else 10
    for v in labels:
        p = value_to_pixel(v, ruler_length, layout)
        if horizontal:
            draw.text((p, line + gap), _tick_label(v), fill=ink, font=font, anchor="mt")
        else:
            draw.text((line - gap, p), _tick_label(v), fill=ink, font=font, anchor="rm")
    # The unit, once, just past the end of the ruler.
    if horizontal:
        draw.text((layout.end_px + 12, line), "m", fill=ink, font=font, anchor="lm")
    else:
        draw.text((line, layout.end_px - 12), "m", fill=ink, font=font, anchor="mb")


def _draw_track(draw: ImageDraw.ImageDraw, style: Style) -> None:
    draw.rectangle([WALL_X[0], TRACK_Y, PANEL - 6, TRACK_Y + 3], fill=style.track)
    if style.ground_hatch:
        for x in range(WALL_X[0] + 6, PANEL - 6, 10):
            draw.line([(x, TRACK_Y + 4), (x - 6, TRACK_Y + 10)], fill=style.track, width=1)


def _draw_wall(draw: ImageDraw.ImageDraw, style: Style) -> None:
    top = TRACK_Y - 72
    draw.rectangle([WALL_X[0], top, WALL_X[1], TRACK_Y + 3], fill=style.track)
    if style.ground_hatch:
        for y in range(top + 4, TRACK_Y, 10):
            draw.line([(WALL_X[0] - 1, y), (WALL_X[0] - 6, y + 6)], fill=style.track, width=1)


def _draw_floor(draw: ImageDraw.ImageDraw, layout: PanelLayout, style: Style) -> None:
    top = layout.zero_px + 1  # objects at reading 0 have their bottom row on zero_px
    draw.rectangle([layout.line_px - 1, top, PANEL - 12, top + 3], fill=style.track)
    if style.ground_hatch:
        for x in range(layout.line_px + 6, PANEL - 12, 10):
            draw.line([(x, top + 4), (x - 7, top + 11)], fill=style.track, width=1)


@lru_cache(maxsize=64)
def _panel_base(kind: str, ruler_length: float, title: str, style: Style) -> Image.Image:
    """Everything in a panel that does not depend on the reading or the panel label."""
    layout = layout_for(ORIENTATION[kind])
    img = Image.new("RGB", (PANEL, PANEL), style.background)
    draw = ImageDraw.Draw(img)
    draw.rectangle([0, 0, PANEL - 1, PANEL - 1], outline=style.border, width=1)
    draw.text((PANEL / 2, 7), title, fill=style.ink, font=_font(TITLE_SIZE), anchor="mt")
    if layout.orientation == "horizontal":
        _draw_track(draw, style)
        if kind == "extension":
            _draw_wall(draw, style)
    else:
        _draw_floor(draw, layout, style)
    _draw_ruler(draw, layout, ruler_length, style)
    return img


# --------------------------------------------------------------------------------------------
# Objects


@dataclass(frozen=True)
class _Box:
    left: int
    top: int
    right: int
    bottom: int  # all inclusive pixel bounds

    @property
    def mid_y(self) -> float:
        return (self.top + self.bottom) / 2


def _block(draw: ImageDraw.ImageDraw, box: _Box, style: Style) -> None:
    xy = [box.left, box.top, box.right, box.bottom]
    if style.rounded_objects:
        draw.rounded_rectangle(xy, radius=7, fill=style.object_fill, outline=style.object_outline, width=style.outline_width)
    else:
        draw.rectangle(xy, fill=style.object_fill, outline=style.object_outline, width=style.outline_width)


def _ball(draw: ImageDraw.ImageDraw, box: _Box, style: Style) -> None:
    xy = [box.left, box.top, box.right, box.bottom]
    draw.ellipse(xy, fill=style.object_fill, outline=style.object_outline, width=style.outline_width)
    if style.object_fill is None:
        # An outlined ball needs some body to read as a ball rather than a ring.
        cx, cy = (box.left + box.right) / 2, box.mid_y
        r = (box.right - box.left) / 2
        draw.arc([cx - r * 0.6, cy - r * 0.6, cx + r * 0.6, cy + r * 0.6], 200, 260, fill=style.object_outline, width=2)


def _cart(draw: ImageDraw.ImageDraw, box: _Box, style: Style) -> None:
    wheel_r = 6
    body = _Box(box.left, box.top, box.right, box.bottom - wheel_r - 2)
    _block(draw, body, style)
    for wx in (box.left + 10, box.right - 10):
        draw.ellipse(
            [wx - wheel_r, box.bottom - 2 * wheel_r, wx + wheel_r, box.bottom],
            fill=style.object_fill if style.object_fill is not None else style.background,
            outline=style.object_outline,
            width=2,
        )


def _draw_object(draw: ImageDraw.ImageDraw, system: str, box: _Box, style: Style) -> None:
    if system == "bouncing":
        _ball(draw, box, style)
    elif system == "spring":
        _cart(draw, box, style)
    else:
        _block(draw, box, style)


def _draw_spring(draw: ImageDraw.ImageDraw, x0: int, x1: int, y: float, style: Style) -> None:
    """Zig-zag from x0 to x1 at height y; a fixed number of coils, so it stretches visibly."""
    coils, lead, amp = 7, 4, 8
    pts = [(x0, y), (x0 + lead, y)]
    inner = (x1 - lead) - (x0 + lead)
    for i in range(1, 2 * coils):
        pts.append((x0 + lead + inner * i / (2 * coils), y + (amp if i % 2 else -amp)))
    pts += [(x1 - lead, y), (x1, y)]
    draw.line(pts, fill=style.spring, width=2)


# Object sizes (pixels).
BLOCK_W, BLOCK_H = 48, 38
BALL_D = 41  # odd, so the ball is symmetric about its centre pixel
CART_W, CART_H = 52, 40
HANGING_W = 28  # block pulled by the spring: its left edge is the reading


def _draw_panel_dynamic(
    draw: ImageDraw.ImageDraw, spec: SheetSpec, reading: float, style: Style
) -> tuple[int, int]:
    """Draw the object for one reading; return the marker dot centre (panel pixels)."""
    layout = layout_for(spec.orientation)
    p = _round(value_to_pixel(reading, spec.ruler_length, layout))
    if spec.kind == "extension":
        box = _Box(p, TRACK_Y - BLOCK_H, p + HANGING_W, TRACK_Y - 1)
        _draw_spring(draw, WALL_X[1] + 1, p, _round(box.mid_y), style)
        _block(draw, box, style)
        return p, _round(box.mid_y)
    if layout.orientation == "horizontal":
        w, h = {"bouncing": (BALL_D, BALL_D), "spring": (CART_W, CART_H)}.get(spec.system, (BLOCK_W, BLOCK_H))
        box = _Box(p - w // 2, TRACK_Y - h, p - w // 2 + w - 1, TRACK_Y - 1)
        _draw_object(draw, spec.system, box, style)
        # On a cart the dot goes on the body, not between the wheels.
        dot_y = box.top + 12 if spec.system == "spring" else _round(box.mid_y)
        return p, dot_y
    # Vertical: the object's bottom row is the reading; the dot marks its bottom centre.
    w, h = (BALL_D, BALL_D) if spec.system == "bouncing" else (BLOCK_W, BLOCK_H)
    box = _Box(OBJECT_X - w // 2, p - h + 1, OBJECT_X - w // 2 + w - 1, p)
    if spec.system == "bouncing":
        _ball(draw, box, style)
    else:
        _block(draw, box, style)
    return OBJECT_X, p


@lru_cache(maxsize=4)
def _dot_mask(radius: int) -> Image.Image:
    """Binary disc mask, exactly symmetric about its centre pixel (no anti-aliasing)."""
    size = 2 * radius + 1
    mask = Image.new("1", (size, size), 0)
    limit = radius * radius + radius  # slightly plumper than r^2: a rounder small disc
    mask.putdata([255 if (x - radius) ** 2 + (y - radius) ** 2 <= limit else 0 for y in range(size) for x in range(size)])
    return mask


def _draw_marker(img: Image.Image, draw: ImageDraw.ImageDraw, dot: tuple[int, int], layout: PanelLayout, style: Style) -> None:
    """Dot plus a line to the ruler; both symmetric about the same along-axis pixel."""
    x, y = dot
    hw = MARKER_HALF_WIDTH
    if layout.orientation == "horizontal":
        draw.rectangle([x - hw, y, x + hw, layout.line_px], fill=style.marker)
    else:
        draw.rectangle([layout.line_px, y - hw, x, y + hw], fill=style.marker)
    r = MARKER_RADIUS
    img.paste(style.marker, (x - r, y - r, x + r + 1, y + r + 1), _dot_mask(r))


# --------------------------------------------------------------------------------------------
# Sheets


def render_image(spec: SheetSpec, style: Style = STYLE_A) -> Image.Image:
    """The sheet as a 672 x 672 RGB image."""
    sheet = Image.new("RGB", (SIZE, SIZE), style.background)
    for i, (reading, label) in enumerate(zip(spec.readings, spec.panel_labels, strict=True)):
        sheet.paste(render_panel(spec, reading, label, style), panel_origin(i))
    return sheet


def render_panel(spec: SheetSpec, reading: float, label: str, style: Style = STYLE_A) -> Image.Image:
    """One PANEL x PANEL panel of `spec`'s drawing (its kind, object, title and ruler) with the object
    at `reading` metres and `label` (a time or load) under the title: a sheet's panel, or a clip's frame."""
    if not 0.0 <= reading <= spec.ruler_length:
        raise ValueError(f"reading {reading} m lies outside the {spec.ruler_length} m ruler")
    panel = _panel_base(spec.kind, spec.ruler_length, spec.title, style).copy()
    draw = ImageDraw.Draw(panel)
    draw.text((PANEL / 2, 27), label, fill=style.ink, font=_font(LABEL_SIZE), anchor="mt")
    dot = _draw_panel_dynamic(draw, spec, reading, style)
    _draw_marker(panel, draw, dot, layout_for(spec.orientation), style)
    return panel


def render_sheet(spec: SheetSpec, style: Style = STYLE_A) -> bytes:
    """The sheet as PNG bytes; identical inputs give identical bytes (no metadata is written)."""
    buf = io.BytesIO()
    render_image(spec, style).save(buf, "PNG", optimize=False, compress_level=6)
    return buf.getvalue()
