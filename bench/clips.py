"""Evidence in motion (seed 002, sections 3-4.1): each measurement rendered as a short clip.

`evprobe generate --evidence clip [--frames 32 --fps 2]` writes, in place of every sheet, a clip of the
same measurement in the same world: the block pushed along the track or coasting to rest, the ball's
rise after the bounce, the load growing on the spring, the free fall. Every matched pair, reference
action and metric carries over unchanged, because a clip is a function of the same disclosed values and
the same world as the sheet it replaces (`items.image_path(..., clip=True)`), and its prompts differ
from the sheet's only in the words that name the evidence (`bench.prompts`).

Choices the seed leaves open (it renders MuJoCo scenes; these worlds have closed-form motion):

- A frame is one panel of the sheet's drawing (`render.render_panel`, PANEL x PANEL pixels): the title,
  the frame's time (or load) label, the ruler, the object at its position at that instant and the
  marker dot. Frames are numbered 1..N.
- Instants: the four panels of the sheet are frames N/4, N/2, 3N/4 and N, exactly (same instant, same
  reading, same pixels: `evprobe check` reads them as the sheet, `bench.checks_clips`), so N must be a
  multiple of 4; the frames between them are evenly spaced in time (or load) from 0, linearly between
  the sheet's instants. The clip is the motion slowed down: `fps` is the rate a viewer plays it at, not
  the physical rate, and the label on each frame gives the physical time.
- Format: one animated PNG per clip (`images/<family>/<sheet>[.b].clip.png`), lossless (the marker's
  colour stays exact) and readable with Pillow alone, each frame shown for 1000 / fps ms. Consecutive
  frames always differ (their labels do), so no encoder merges two. `read_frames` decodes one and
  refuses a file whose frame count or rate is not the benchmark's.

Which items: every item of the main set (base requests and variants) with its sheets replaced by clips,
the voids (`bench.voids`: the occluded void shows the initial clip with every frame occluded), and the
opt-in blocks: the numeric estimates (`bench.numeric`) and the injection levels (`bench.injection`),
whose prompts name clips and their frames where the sheet's name sheets and panels. The guidance of
levels 1-2 points at the clip's last frame (the sheet's last panel, same instant and reading), and
level 3 prints the four panel frames' readings, as the text_readings variant does on clips.

How models read a clip: as its frames, one image each (`manifest.load_item_images`), or, asked for
(`evprobe run --video-input native`), as one video through the model's video processor
(`core.video.mark_video`, `hooks.inputs`).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from evprobe.bench.calibration import reading_at, sheet_instants, sheet_spec, sheet_value
from evprobe.bench.decode import decode, read_bytes, read_header
from evprobe.bench.numbers import fmt, round_sig
from evprobe.bench.render import PANEL, SIZE, STYLES, panel_origin, render_panel
from evprobe.bench.systems import get_system
from evprobe.core.errors import InputError
from evprobe.core.json_types import JsonObject

EVIDENCE_KINDS: tuple[str, ...] = ("sheet", "clip")
SEED_FRAMES = 32  # seed 002, appendix A: the replication models read 32 frames at 2 FPS
SEED_FPS = 2.0
MAX_FRAMES = 256
FIX = "regenerate the benchmark (evprobe generate --evidence clip) or replace the file"


@dataclass(frozen=True)
class ClipSpec:
    """How a benchmark's clips are cut: `frames` frames (a multiple of 4), played at `fps`."""

    frames: int = SEED_FRAMES
    fps: float = SEED_FPS

    def __post_init__(self) -> None:
        if isinstance(self.frames, bool) or not isinstance(self.frames, int) or not 4 <= self.frames <= MAX_FRAMES \
                or self.frames % 4:
            raise ValueError(f"--frames must be a multiple of 4 from 4 to {MAX_FRAMES} (the sheet's four panels are "
                             f"frames N/4, N/2, 3N/4 and N), got {self.frames!r}")
        if not 0.1 <= float(self.fps) <= 60.0:
            raise ValueError(f"--fps must lie in [0.1, 60] frames per second, got {self.fps!r}")

    @property
    def duration_ms(self) -> float:
        """How long each frame is shown."""
        return 1000.0 / float(self.fps)

    @property
    def panel_frames(self) -> tuple[int, int, int, int]:
        """The frame numbers (1-based) that show the sheet's four panels."""
        q = self.frames // 4
        return (q, 2 * q, 3 * q, 4 * q)

    def to_json(self) -> JsonObject:
        return {"frames": self.frames, "fps": float(self.fps)}


def benchmark_clip(meta: JsonObject) -> ClipSpec | None:
    """The clips of a benchmark from its bench.json (`manifest.read_meta`), or None for sheets."""
    evidence = meta.get("evidence")
    return None if evidence is None else ClipSpec(int(evidence["frames"]), float(evidence["fps"]))


def check_clips_as_video(bench: str | Path, meta: JsonObject) -> None:
    """`--video-input native` on benchmark `bench` (its bench.json `meta`): refused in one line on a
    benchmark of sheets, before a model loads (`evprobe run` and `evprobe capture`)."""
    if benchmark_clip(meta) is None:
        raise InputError(f"--video-input native: {bench} shows sheets, not clips; generate a clip benchmark "
                         "(evprobe generate --evidence clip) or drop the flag")


def check_video_path(processor: Any, source: str) -> None:
    """`--video-input native` with a loaded model: refused in one line when its processor has no
    video path (hooks.inputs.takes_videos), before any forward."""
    from evprobe.hooks.inputs import takes_videos

    if not takes_videos(processor):
        raise InputError(f"--video-input native: --model {source} has no video path (an image-only model, or a "
                         "video processor that needs torchvision, which is not installed); use --video-input frames")


def frame_instants(instants: tuple[float, ...], frames: int) -> list[float]:
    """The instant of frames 1..`frames`: the sheet's four `instants` at frames N/4 .. N, and evenly
    spaced from 0 between them (unrounded, except the panel frames, which are the instants as stored)."""
    q = frames // 4
    out: list[float] = []
    previous = 0.0
    for x in instants:
        out += [previous + (x - previous) * k / q for k in range(1, q)] + [x]
        previous = x
    return out


def frame_label(kind: str, instant: float) -> str:
    """A frame's label, as the sheet's panels print their time or load (four significant digits)."""
    return f"load = {fmt(instant, 4)} N" if kind == "extension" else f"t = {fmt(instant, 4)} s"


def clip_frames(system: str, candidates: dict[str, list[float]], calibration: dict[str, dict[str, Any]],
                sheet: str, clip: ClipSpec, style: str = "a") -> list[Image.Image]:
    """The frames of one sheet's clip (PANEL x PANEL RGB images)."""
    spec = sheet_spec(system, candidates, calibration, sheet)
    value = sheet_value(sheet, get_system(system).other, candidates)
    frames = []
    for instant in frame_instants(sheet_instants(system, calibration, sheet), clip.frames):
        # Rounded as the sheet's readings are (six significant digits), so panel frames match exactly.
        reading = round_sig(reading_at(system, calibration, sheet, value, instant))
        frames.append(render_panel(spec, reading, frame_label(spec.kind, instant), STYLES[style]))
    return frames


def encode_clip(frames: list[Image.Image], clip: ClipSpec) -> bytes:
    """Frames as one animated PNG; identical inputs give identical bytes."""
    buf = io.BytesIO()
    frames[0].save(buf, "PNG", save_all=True, append_images=frames[1:], duration=clip.duration_ms, loop=0,
                   optimize=False, compress_level=6)
    return buf.getvalue()


def render_clip(system: str, candidates: dict[str, list[float]], calibration: dict[str, dict[str, Any]],
                sheet: str, clip: ClipSpec, style: str = "a") -> bytes:
    """One sheet's clip as animated-PNG bytes."""
    return encode_clip(clip_frames(system, candidates, calibration, sheet, clip, style), clip)


def read_frames(source: str | Path | bytes, clip: ClipSpec | None = None, *, name: str | None = None) -> list[Image.Image]:
    """The frames of an animated PNG as RGB images (a still PNG is one frame), decoded within the pixel
    budget (`bench.decode`), each frame's display time (ms) in its `info`. With `clip`, a file whose frame
    count (from its header, before decoding), size or frame duration is not the clip's is refused,
    naming the file (`name`, else the path)."""
    data = source if isinstance(source, bytes) else read_bytes(Path(source))
    name = name or ("clip" if isinstance(source, bytes) else str(source))
    frames = decode(data, name, frames=None if clip is None else clip.frames)
    if clip is not None:
        if any(f.size != (PANEL, PANEL) for f in frames):
            raise InputError(f"{name}: a frame is not {PANEL}x{PANEL} pixels; {FIX}")
        if any(d is None or abs(float(d) - clip.duration_ms) > 0.5 for d in (f.info.get("duration") for f in frames)):
            raise InputError(f"{name}: frames are not shown {clip.duration_ms:g} ms each ({clip.fps:g} fps); {FIX}")
    return frames


def frame_pngs(data: bytes, name: str = "clip") -> list[bytes] | None:
    """A clip's frames, each as still-PNG bytes (for a server that takes images, not animations), or
    None for a still image (its header read within the pixel budget, nothing decoded); `name` names the
    file in a refusal (`read_frames`)."""
    if read_header(data, name).frames == 1:
        return None
    out = []
    for frame in read_frames(data, name=name):
        buf = io.BytesIO()
        frame.save(buf, "PNG", optimize=False, compress_level=6)
        out.append(buf.getvalue())
    return out


def as_sheet(frames: list[Image.Image]) -> Image.Image:
    """Four frames laid out as a sheet's panels (row-major), SIZE x SIZE."""
    if len(frames) != 4:
        raise ValueError(f"a sheet has four panels, got {len(frames)} frames")
    sheet = Image.new("RGB", (SIZE, SIZE))
    for i, frame in enumerate(frames):
        sheet.paste(frame, panel_origin(i))
    return sheet


def panel_sheet(frames: list[Image.Image]) -> Image.Image:
    """The sheet a clip's panel frames (N/4, N/2, 3N/4, N) make: what the sheet it replaces shows."""
    n = len(frames)
    if n < 4 or n % 4:
        raise ValueError(f"a clip has a multiple of 4 frames, this one {n}")
    return as_sheet([frames[n // 4 * k - 1] for k in (1, 2, 3, 4)])


def sheet_view(source: str | Path | bytes, name: str | None = None) -> Image.Image:
    """What a reader of sheets reads in an evidence file (decoded within the pixel budget, as
    `read_frames`): a still sheet as it is, a clip as the sheet its panel frames make (`panel_sheet`)."""
    frames = read_frames(source, name=name)
    return frames[0] if len(frames) == 1 else panel_sheet(frames)


__all__ = [
    "check_clips_as_video",
    "check_video_path",
    "EVIDENCE_KINDS",
    "MAX_FRAMES",
    "SEED_FPS",
    "SEED_FRAMES",
    "ClipSpec",
    "as_sheet",
    "panel_sheet",
    "sheet_view",
    "benchmark_clip",
    "clip_frames",
    "encode_clip",
    "frame_pngs",
    "frame_instants",
    "frame_label",
    "read_frames",
    "render_clip",
]
