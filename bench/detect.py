"""Read the marked positions back from a rendered sheet, using only its pixels.

The detector knows what the renderer publishes (panel origins, the ruler's `PanelLayout` for an
orientation, the style's marker colour) and the ruler's length in metres; it never sees the
readings. Each panel's marker pixels are found by exact colour match; their centroid along the
ruler axis is the measured pixel (the dot and the perpendicular line share that coordinate), which
`pixel_to_value` turns into metres.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from evprobe.bench.decode import decode
from evprobe.bench.render import PANEL, SIZE, Style, layout_for, panel_origin, pixel_to_value
from evprobe.bench.sheets import Orientation, SheetSpec


class DetectionError(ValueError):
    """A panel shows no marker pixels (or the image is not a sheet)."""


def _pixels(image: bytes | Image.Image) -> np.ndarray:
    """The sheet as an (H, W, 3) uint8 array."""
    img = decode(bytes(image), "sheet")[0] if isinstance(image, (bytes, bytearray)) else image
    if img.mode != "RGB":
        img = img.convert("RGB")
    if img.size != (SIZE, SIZE):
        raise DetectionError(f"a sheet is {SIZE}x{SIZE} pixels, this image is {img.size[0]}x{img.size[1]}")
    return np.asarray(img)


def _marker_mask(pixels: np.ndarray, style: Style) -> np.ndarray:
    r, g, b = style.marker
    return (pixels[..., 0] == r) & (pixels[..., 1] == g) & (pixels[..., 2] == b)


def marker_pixel_count(image: bytes | Image.Image, style: Style) -> int:
    """How many pixels of the sheet have the style's marker colour (0: the sheet shows no marker,
    as an occluded sheet of `bench.voids`)."""
    return int(_marker_mask(_pixels(image), style).sum())


def _panel_centroids(pixels: np.ndarray, style: Style) -> list[tuple[float, float]]:
    """Per panel, the (x, y) centroid of the marker pixels in panel coordinates."""
    mask = _marker_mask(pixels, style)
    centroids = []
    for i in range(4):
        x0, y0 = panel_origin(i)
        ys, xs = np.nonzero(mask[y0 : y0 + PANEL, x0 : x0 + PANEL])
        if xs.size == 0:
            raise DetectionError(f"panel {i} has no {style.marker_name} marker pixels")
        centroids.append((float(xs.mean()), float(ys.mean())))
    return centroids


def detect_sheet(
    image: bytes | Image.Image, *, orientation: Orientation, ruler_length: float, style: Style
) -> tuple[float, float, float, float]:
    """The four marked readings in metres along the ruler, panel order 0..3."""
    layout = layout_for(orientation)
    axis = 0 if orientation == "horizontal" else 1
    centroids = _panel_centroids(_pixels(image), style)
    a, b, c, d = (pixel_to_value(cent[axis], ruler_length, layout) for cent in centroids)
    return a, b, c, d


def detect_spec(image: bytes | Image.Image, spec: SheetSpec, style: Style) -> tuple[float, float, float, float]:
    """`detect_sheet` with the geometry taken from a spec (its readings are not used)."""
    return detect_sheet(image, orientation=spec.orientation, ruler_length=spec.ruler_length, style=style)


def marker_pixel_positions(
    image: bytes | Image.Image, *, orientation: Orientation, style: Style
) -> list[tuple[float, float]]:
    """Per panel, the (x, y) centroid of the marker pixels in sheet pixels.

    The along-ruler coordinate is the marked position; the other one is pulled towards the ruler by
    the marker line, so compare sheets along the ruler axis (x if horizontal, y if vertical).
    `orientation` is checked only so callers state which coordinate they mean to use.
    """
    layout_for(orientation)  # rejects unknown orientations
    out = []
    for i, (cx, cy) in enumerate(_panel_centroids(_pixels(image), style)):
        x0, y0 = panel_origin(i)
        out.append((x0 + cx, y0 + cy))
    return out
