"""Frames that make one video: how a caller asks a model with a video path to read a clip as a video.

A clip travels as its frames, in order, each a PIL image, so every model can read it as images. Frames
marked with `mark_video` (one key and one rate for the whole clip, in each frame's `info`) ask for
more: a model whose processor has a video path reads each run of frames with one key as ONE video
(`hooks.inputs`: one video placeholder, the processor's `videos=`), and a model without one refuses
them (it cannot take video), rather than reading them silently another way. Unmarked frames are
images, whatever the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

VIDEO_INFO = "evprobe_video"  # key in PIL's Image.info: (video key, frames per second)


def mark_video(frames: Sequence[Any], key: str, fps: float) -> list[Any]:
    """`frames` (PIL images, in order) marked as one video named `key`, played at `fps`; the images
    themselves are marked (their `info`), and returned as a list."""
    if not frames:
        raise ValueError("a video needs at least one frame")
    if not fps > 0:
        raise ValueError(f"a video's frame rate must be positive, got {fps!r}")
    for frame in frames:
        frame.info[VIDEO_INFO] = (str(key), float(fps))
    return list(frames)


def video_mark(image: Any) -> tuple[str, float] | None:
    """(key, fps) of a frame marked by `mark_video`, or None (an image, or a placeholder None)."""
    info = getattr(image, "info", None)
    mark = info.get(VIDEO_INFO) if isinstance(info, dict) else None
    return None if mark is None else (str(mark[0]), float(mark[1]))


@dataclass(frozen=True)
class Visual:
    """One visual input of a row: an image, or a video (its frames, in order, and its rate)."""

    kind: str  # "image" | "video"
    frames: tuple[Any, ...]  # one image for an image
    fps: float | None = None


def visuals(row: Sequence[Any]) -> list[Visual]:
    """A row's images grouped as they are read: each run of consecutive frames with one video key is a
    video, every other entry an image."""
    out: list[Visual] = []
    for image in row:
        mark = video_mark(image)
        last = out[-1] if out else None
        if mark is not None and last is not None and last.kind == "video" and video_mark(last.frames[0]) == mark:
            out[-1] = Visual("video", last.frames + (image,), mark[1])
        elif mark is not None:
            out.append(Visual("video", (image,), mark[1]))
        else:
            out.append(Visual("image", (image,)))
    return out


__all__ = ["VIDEO_INFO", "Visual", "mark_video", "video_mark", "visuals"]
