"""The organism's eye: a sheet's pixels -> the value of the property it measures.

The eye is the benchmark's pixel detector (`bench.detect`: exact marker colour, centroid along
the ruler) followed by a least-squares fit of the disclosed forward model: the value whose
predicted four positions best match the four marked ones. The forward models are the relations
the prompt states (and `bench.calibration` draws):

    mass        x = F t^2 / (2 m)                         (value: mass, kg)
    coasting    x = v0 s - mu g s^2 / 2, s = min(t, v0 / (mu g))   (friction)
    rebound     y = max(0, e sqrt(2 g H) t - g t^2 / 2)   (restitution)
    extension   x = load / k                              (stiffness, N/m)
    free_fall   y = 1.2 - g t^2 / 2                       (value: g)

The fit is a grid over log10(value) in [-3, 3] (step 0.001) refined by a second grid of step
1e-6 around the best point, so no starting guess and no candidate value is used. Ruler lengths
are the ones printed on every sheet (`RULERS`); the eye knows them instead of reading the digits.
"""

from __future__ import annotations

import json
from collections import OrderedDict

import numpy as np

from evprobe.bench.calibration import (
    COAST_TRACK,
    FALL_RULER,
    FALL_START,
    MASS_TRACK,
    REBOUND_RULER,
    SPRING_RULER,
)
from evprobe.bench.detect import detect_sheet
from evprobe.bench.manifest import SOURCE_INFO
from evprobe.bench.render import Style
from evprobe.bench.sheets import ORIENTATION

RULERS = {"mass": MASS_TRACK, "coasting": COAST_TRACK, "rebound": REBOUND_RULER,
          "extension": SPRING_RULER, "free_fall": FALL_RULER}


def predicted(kind: str, values: np.ndarray, cal: dict[str, float | list[float]], g: float) -> np.ndarray:
    """Marked positions (values.size, 4) for each candidate value under `kind`'s forward model."""
    v = values[:, None]  # (n, 1)
    if kind == "extension":
        return np.asarray(cal["loads"])[None, :] / v
    t = np.asarray(cal["times"])[None, :]  # (1, 4)
    if kind == "mass":
        return cal["force"] * t * t / (2.0 * v)
    if kind == "coasting":
        decel = v * g
        s = np.minimum(t, cal["launch_speed"] / decel)
        return cal["launch_speed"] * s - 0.5 * decel * s * s
    if kind == "rebound":
        return np.maximum(0.0, v * np.sqrt(2.0 * g * cal["drop_height"]) * t - 0.5 * g * t * t)
    if kind == "free_fall":
        return FALL_START - 0.5 * v * t * t
    raise ValueError(f"unknown sheet kind {kind!r}")


def fit_value(kind: str, marks: tuple[float, ...], cal: dict, g: float) -> float:
    """The value whose predicted positions are closest (least squares) to `marks`."""
    got = np.asarray(marks)[None, :]  # (1, 4)
    grid = np.arange(-3.0, 3.0 + 1e-9, 1e-3)
    best = grid[np.argmin(((predicted(kind, 10**grid, cal, g) - got) ** 2).sum(1))]
    fine = best + np.arange(-1e-3, 1e-3 + 1e-12, 1e-6)
    return float(10 ** fine[np.argmin(((predicted(kind, 10**fine, cal, g) - got) ** 2).sum(1))])


def read_sheet(image, kind: str, cal: dict, g: float, style: Style) -> float:
    """The measured value a sheet shows (raises bench.detect.DetectionError if unreadable).

    A sheet loaded by bench.manifest.load_item_images carries its file's digest in `image.info`:
    its reading is cached on that and on (kind, cal, g, style), since the main set's 9,216 items
    show 864 sheets (detection and fit were about half of the organism's run). An image without
    the digest is read every time."""
    source = getattr(image, "info", {}).get(SOURCE_INFO)
    key = None if source is None else (source, kind, json.dumps(cal, sort_keys=True), g, style.name)
    if key is not None and key in _READINGS:
        _READINGS.move_to_end(key)
        return _READINGS[key]
    marks = detect_sheet(image, orientation=ORIENTATION[kind], ruler_length=RULERS[kind], style=style)
    value = fit_value(kind, marks, cal, g)
    if key is not None:
        _READINGS[key] = value
        if len(_READINGS) > _CACHE_SIZE:
            _READINGS.popitem(last=False)
    return value


_CACHE_SIZE = 16384
_READINGS: OrderedDict[tuple, float] = OrderedDict()  # least recently used first
