"""`evprobe check` on a clip benchmark (`evprobe generate --evidence clip`, `bench.clips`).

A clip's four panel frames (N/4, N/2, 3N/4, N) are laid out as a sheet (`clips.panel_sheet`), so every
pixel row of `bench.checks` (marker positions, outcomes recovered, separations) reads clips exactly as
it reads sheets. Each clip is decoded once, by those rows' loop, which hands its frames to `ClipRows`
for two rows of their own:

- Clips: frames, size and rate: each clip file holds the benchmark's frame count, every frame PANEL x
  PANEL pixels, each shown 1000 / fps ms (bench.json's `evidence`).
- Clip frames follow the motion: every frame of every clip read by the pixel detector (four frames
  at a time, laid out as a sheet) against the oracle's position at that frame's instant
  (`oracle.clip_instants`, `oracle.position`); fails when any frame is further than the detector's
  bound from it (a frame out of order, a clip of another sheet, a motion the calibration does not give).

and one row on the prompts (`check_clip_words`):

- Clip prompts name no sheet or panel: every prompt of a clip benchmark (main items, variants, voids,
  numeric estimates, injection levels) speaks of clips and frames; a prompt left in the sheet's words
  would describe evidence the model is not shown.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from evprobe.bench import oracle
from evprobe.bench.clips import ClipSpec, as_sheet
from evprobe.bench.detect import DetectionError, detect_sheet
from evprobe.bench.render import PANEL, STYLES

if TYPE_CHECKING:
    from PIL import Image

    from evprobe.bench.checks import CheckReport
    from evprobe.bench.items import Item

SHEET_WORDS = re.compile(r"\b(?:sheet|panel)s?\b", re.I)


class ClipRows:
    """The two clip rows, filled one clip at a time (`bad` for a file that is not the benchmark's clip,
    `read` for one that is), then written to the report (`add_to`)."""

    def __init__(self, clip: ClipSpec, max_error_pct: float) -> None:
        self.clip, self.max_error_pct = clip, max_error_pct
        self.bad_files: list[str] = []
        self.failures: list[str] = []
        self.worst, self.worst_where, self.n_clips, self.n_frames = 0.0, "", 0, 0

    def bad(self, why: str) -> None:
        self.n_clips += 1
        self.bad_files.append(why)

    def read(self, fam: oracle.OracleFamily, sheet: str, style: str, value: float | None, rel: str,
             frames: list[Image.Image]) -> None:
        """Every frame of one clip (its `frames`, decoded) against the oracle's positions."""
        self.n_clips += 1
        cal = fam.row["calibration"]
        kind = oracle.sheet_kind(fam.system, sheet)
        ruler = oracle.ruler_length(fam.system, cal, sheet)
        want = [oracle.position(fam.system, cal, sheet, value, x)
                for x in oracle.clip_instants(fam.system, cal, sheet, self.clip.frames)]
        for start in range(0, self.clip.frames, 4):
            where = f"{rel} frames {start + 1}-{start + 4}"
            try:
                got = detect_sheet(as_sheet(frames[start:start + 4]), orientation=oracle.ORIENTATION[kind],
                                   ruler_length=ruler, style=STYLES[style])
            except DetectionError as err:
                self.failures.append(f"{where}: {err}")
                self.worst, self.worst_where = math.inf, where
                continue
            self.n_frames += 4
            for g, w in zip(got, want[start:start + 4]):
                err_pct = 100 * abs(g - w) / ruler
                if err_pct > self.worst:
                    self.worst, self.worst_where = err_pct, where

    def add_to(self, report: CheckReport) -> None:
        clip, worst = self.clip, self.worst
        report.failures.extend(self.failures)
        report.add(
            "Clips: frames, size and rate",
            f"{self.n_clips - len(self.bad_files)}/{self.n_clips} ({clip.frames} frames of {PANEL}x{PANEL} at "
            f"{clip.fps:g} fps)",
            not self.bad_files and self.n_clips > 0,
            "; ".join(self.bad_files[:3]),
        )
        report.add(
            "Clip frames follow the motion",
            f"largest error {worst:.3f}% of panel span over {self.n_frames} frames",
            worst <= self.max_error_pct and self.n_frames > 0,
            f"{worst:.3f}% at {self.worst_where} exceeds {self.max_error_pct}%",
        )
        report.numbers.update(clips_checked=self.n_clips, clip_frames_read=self.n_frames,
                              max_clip_frame_error_pct=worst)


def check_clip_words(report: CheckReport, items: list[Item]) -> None:
    """The prompt row of a clip benchmark (module docstring)."""
    bad = [it.item_id for it in items if SHEET_WORDS.search(it.prompt)]
    report.add(
        "Clip prompts name no sheet or panel",
        f"{len(items) - len(bad):,}/{len(items):,}",
        not bad and len(items) > 0,
        f"{len(bad)} prompts say sheet or panel, first {bad[:3]}" if bad else "no items",
    )


__all__ = ["SHEET_WORDS", "ClipRows", "check_clip_words"]
