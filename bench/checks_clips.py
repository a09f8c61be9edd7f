"""`evprobe check` on a clip benchmark (`evprobe generate --evidence clip`, `bench.clips`).

A clip's four panel frames (N/4, N/2, 3N/4, N) are laid out as a sheet (`clips.as_sheet`), so every pixel
row of `bench.checks` (marker positions, outcomes recovered, separations) reads clips exactly as it
reads sheets. Two rows of their own:

- Clips: frames, size and rate: each clip file holds the benchmark's frame count, every frame PANEL x
  PANEL pixels, each shown 1000 / fps ms (bench.json's `evidence`).
- Clip frames follow the motion: every frame of every clip read by the pixel detector (four frames
  at a time, laid out as a sheet) against the oracle's position at that frame's instant
  (`oracle.clip_instants`, `oracle.position`); fails when any frame is further than the detector's
  bound from it (a frame out of order, a clip of another sheet, a motion the calibration does not give).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from evprobe.bench import oracle
from evprobe.bench.clips import ClipSpec, as_sheet, read_frames
from evprobe.bench.detect import DetectionError, detect_sheet
from evprobe.bench.render import PANEL, STYLES

if TYPE_CHECKING:
    from PIL import Image

    from evprobe.bench.checks import CheckReport


def clip_sheet(path: Path, clip: ClipSpec) -> Image.Image:
    """The sheet a clip's panel frames make (ValueError naming the file when it is not the clip's)."""
    frames = read_frames(path, clip)
    return as_sheet([frames[k - 1] for k in clip.panel_frames])


def check_clips(report: CheckReport, root: Path, oracles: dict[str, oracle.OracleFamily], clip: ClipSpec,
                max_error_pct: float) -> None:
    bad_files: list[str] = []
    worst, worst_where, n_clips, n_frames = 0.0, "", 0, 0
    for fam in oracles.values():
        cal = fam.row["calibration"]
        for sheet, style, value in oracle.sheets(fam):
            rel = oracle.image_of(fam, sheet, style, clip=True)
            n_clips += 1
            try:
                frames = read_frames(root / rel, clip)
            except (OSError, ValueError) as err:
                bad_files.append(str(err))
                continue
            kind = oracle.sheet_kind(fam.system, sheet)
            ruler = oracle.ruler_length(fam.system, cal, sheet)
            want = [oracle.position(fam.system, cal, sheet, value, x)
                    for x in oracle.clip_instants(fam.system, cal, sheet, clip.frames)]
            for start in range(0, clip.frames, 4):
                where = f"{rel} frames {start + 1}-{start + 4}"
                try:
                    got = detect_sheet(as_sheet(frames[start:start + 4]), orientation=oracle.ORIENTATION[kind],
                                       ruler_length=ruler, style=STYLES[style])
                except DetectionError as err:
                    report.failures.append(f"{where}: {err}")
                    worst, worst_where = math.inf, where
                    continue
                n_frames += 4
                for g, w in zip(got, want[start:start + 4]):
                    err_pct = 100 * abs(g - w) / ruler
                    if err_pct > worst:
                        worst, worst_where = err_pct, where
    report.add(
        "Clips: frames, size and rate",
        f"{n_clips - len(bad_files)}/{n_clips} ({clip.frames} frames of {PANEL}x{PANEL} at {clip.fps:g} fps)",
        not bad_files and n_clips > 0,
        "; ".join(bad_files[:3]),
    )
    report.add(
        "Clip frames follow the motion",
        f"largest error {worst:.3f}% of panel span over {n_frames} frames",
        worst <= max_error_pct and n_frames > 0,
        f"{worst:.3f}% at {worst_where} exceeds {max_error_pct}%",
    )
    report.numbers.update(clips_checked=n_clips, clip_frames_read=n_frames, max_clip_frame_error_pct=worst)


__all__ = ["check_clips", "clip_sheet"]
