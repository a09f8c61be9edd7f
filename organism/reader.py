"""The organism's front end: a benchmark prompt and its sheets -> `Facts`.

It reads only what the model is shown: numbers and menu rows from the prompt text (the
benchmark's own wording, both phrasings), and each attached sheet through `organism.eye` with
the calibration the prompt states. Anything it cannot find is left out of the facts (a prompt
with no setup, such as the ruler-reading probe, gives a nearly empty sequence), never guessed.

Clips (`bench.clips`, read as frames): a prompt that says its evidence is clips of N frames
("Each gives a clip of N frames") shows N images per clip, in order; the reader takes each run
of N frames as one clip and reads the sheet its panel frames make (N/4, N/2, 3N/4, N: the frames
the prompt's test lines name, `clips.panel_sheet`), so a clip gives the facts its sheet gives. When
the frames are not a whole number of clips, which clip is short cannot be known, so every clip is
read as unread evidence, never guessed. Clips read as videos (`evprobe run --video-input native`: the
processor's video path, organism.processor) are one clip each, read the same way (`clip_sheets`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from evprobe.bench.detect import DetectionError
from evprobe.bench.render import STYLES
from evprobe.organism.eye import read_sheet
from evprobe.organism.facts import OTHER_WORDS, Facts

_NUM = r"(\d+(?:\.\d+)?)"
_SYSTEM_OPENINGS = {"A block rests": "sliding", "A ball is dropped": "bouncing", "A cart is attached": "spring"}
_EITHER = re.compile(rf"either {_NUM}(?: kg| N/m)? or {_NUM}")
_G = re.compile(rf"Take g = {_NUM} m/s\^2")
_CONSTANT = {
    "sliding": re.compile(rf"impulse of {_NUM} N s"),
    "bouncing": re.compile(rf"(?:height of|ball from) {_NUM} m"),
}
_Q = re.compile(rf"(?:more|longer) than {_NUM} (?:m|J|s)\b")
_MARKER = re.compile(r"a (\w+) dot with a line")
_ROW = re.compile(rf"^([A-E])\. (.*?)(?: \(cost {_NUM}\))?$")
_LIST = re.compile(rf"{_NUM}")
# Which sheet kind a test name shows, per system.
_TEST_KIND = {"mass": "mass", "friction": "coasting", "restitution": "rebound", "stiffness": "extension",
              "free-fall": "free_fall"}
_TEST_NAME = re.compile(r"\b(mass|friction|restitution|stiffness|free-fall) test\b")
_CLIP_FRAMES = re.compile(r"Each gives a clip of (\d+) frames")


def _numbers(text: str) -> list[float]:
    return [float(x) for x in _LIST.findall(text)]


def _paragraph(prompt: str, start: str) -> str | None:
    for para in prompt.split("\n\n"):
        if para.startswith(start):
            return para
    return None


def calibration(prompt: str) -> dict[str, dict]:
    """Per sheet kind, the constants the tests paragraph states (empty if there is none)."""
    tests = _paragraph(prompt, "Measurements that can be made") or ""
    cal: dict[str, dict] = {}
    for line in tests.splitlines():
        times = re.search(r"t = ([\d., and]+) s", line)
        ts = _numbers(times.group(1)) if times else []
        if line.startswith("- Mass test"):
            force = re.search(rf"force of {_NUM} N", line)
            cal["mass"] = {"force": float(force.group(1)), "times": ts}
        elif line.startswith("- Friction test"):
            cal["coasting"] = {"launch_speed": float(re.search(rf"at {_NUM} m/s", line).group(1)), "times": ts}
        elif line.startswith("- Restitution test"):
            cal["rebound"] = {"drop_height": float(re.search(rf"dropped from {_NUM} m", line).group(1)),
                              "times": ts}
        elif line.startswith("- Stiffness test"):
            loads = re.search(r"static loads of ([\d., and]+) N", line)
            cal["extension"] = {"loads": _numbers(loads.group(1))}
        elif line.startswith("- Free-fall test"):
            cal["free_fall"] = {"times": ts}
    return cal


def _option_word(label: str, system: str) -> str | float:
    low = label.lower()
    if low.startswith(("stop", "answer now")):
        return "stop"
    if "combined report" in low:
        return "report"
    if "free-fall" in low:
        return "fall_test"
    if "mass test" in low:
        return "mass_test"
    if f"{OTHER_WORDS[system]} test" in low:
        return "other_test"
    for word in ("yes", "no", "undetermined"):
        if low == word or low.startswith(word + ":"):
            return word
    value = re.match(rf"^{_NUM}(?: kg| N/m)?$", label)
    return float(value.group(1)) if value else "value"


def _task(prompt: str) -> str:
    if "\nOptions:\n" in prompt or prompt.startswith("Options:"):
        return "select"
    if "What is the answer to the question" in prompt:
        return "answer"
    if re.search(r"Which value of the \w+ does this measurement show", prompt):
        return "recover"
    if "ruler reading" in prompt:
        return "read"
    return "task"


def _clip_length(prompt: str) -> int | None:
    """N of a prompt whose evidence is clips of N frames (its tests paragraph says so), else None."""
    clip = _CLIP_FRAMES.search(_paragraph(prompt, "Measurements that can be made") or "")
    return None if clip is None else int(clip.group(1))


def _sheets(prompt: str, images: Sequence) -> list:
    """The evidence the images show, one entry per sheet: the images themselves, or for clips of N
    frames (the tests paragraph says so) the sheet each run of N frames makes (module docstring);
    None for every clip when the frames are not a whole number of clips."""
    n = _clip_length(prompt)
    if n is None:
        return list(images)
    if n < 4 or n % 4 or len(images) % n:
        return [None] * -(-len(images) // max(n, 1))  # which clip is short cannot be known: every one unread
    return [_panel_sheet(list(images[i:i + n])) for i in range(0, len(images), n)]


def clip_sheets(prompt: str, videos: Sequence[Sequence]) -> list:
    """The evidence of clips read as videos (hooks.inputs: one video per clip, frames in order): the
    sheet each video's panel frames make, or None (unread) for a video whose frame count is not the N
    the prompt states (each video is one clip, so a short one is known, unlike frames read as images),
    and for every video when the prompt states no clip length."""
    n = _clip_length(prompt)
    return [_panel_sheet(list(v)) if n is not None and n >= 4 and n % 4 == 0 and len(v) == n else None
            for v in videos]


def _panel_sheet(frames: list) -> Any:
    """clips.panel_sheet of one clip's frames, keyed for the eye's cache (organism.eye.read_sheet) as
    the clip file's panels when the frames are that file's 1..N in order (SOURCE_INFO "<digest>:<k>",
    bench.manifest.load_images); frames of anything else get no key, so they are read afresh."""
    from evprobe.bench.clips import panel_sheet
    from evprobe.bench.manifest import SOURCE_INFO

    sheet = panel_sheet(frames)
    sources = [str(getattr(f, "info", {}).get(SOURCE_INFO, "")) for f in frames]
    digest = sources[0].rpartition(":")[0]
    if digest and sources == [f"{digest}:{k}" for k in range(1, len(frames) + 1)]:
        sheet.info[SOURCE_INFO] = f"{digest}:panels"
    return sheet


def read_facts(prompt: str, images: Sequence, *, videos: Sequence[Sequence] = ()) -> Facts | None:
    """The facts of one request; None when the prompt states no system (nothing to reason on).
    videos: the clips read as videos (`clip_sheets`); a request shows its evidence one way, so a row
    with videos has no images."""
    if videos and images:
        raise ValueError("the organism reads a row's evidence as images or as videos, not both")
    system = next((s for opening, s in _SYSTEM_OPENINGS.items() if prompt.startswith(opening)), None)
    if system is None:
        return None
    setup = prompt.split("\n\n", 1)[0]
    pairs = _EITHER.findall(setup)
    g_match = _G.search(setup)
    if len(pairs) < 2 or g_match is None:
        return None
    (m0, m1), (p0, p1) = pairs[:2]
    g = float(g_match.group(1))
    question = _paragraph(prompt, "Question: ") or ""
    pattern = _CONSTANT.get(system)
    constant = pattern.search(question) if pattern else None
    q = _Q.search(question)
    marker = _MARKER.search(prompt)
    style = next((s for s in STYLES.values() if marker and s.marker_name == marker.group(1)), None)
    cal = calibration(prompt)
    evidence = _paragraph(prompt, "Evidence") or _paragraph(prompt, "The attached sheet") \
        or _paragraph(prompt, "The attached clip") or ""
    names = _TEST_NAME.findall(evidence)
    seen = []
    for k, image in enumerate(clip_sheets(prompt, videos) if videos else _sheets(prompt, images)):
        name = names[k] if k < len(names) else None
        kind = _TEST_KIND.get(name or "")
        prop = {"mass": "mass", "free-fall": "g"}.get(name or "", OTHER_WORDS[system])
        value = None
        if kind in cal and style is not None and image is not None:
            try:
                value = read_sheet(image, kind, cal[kind], g, style)
            except DetectionError:
                value = None
        seen.append((prop if name else "unread", value))
    options = []
    menu = _paragraph(prompt, "Options:") or _paragraph(prompt, "What is the answer to the question") \
        or _paragraph(prompt, "Which value of the") or ""
    for line in menu.splitlines():
        row = _ROW.match(line)
        if row:
            letter, label, cost = row.groups()
            options.append((letter, _option_word(label, system), float(cost) if cost is not None else None))
    return Facts(
        system=system,
        mass=(float(m0), float(m1)),
        other=(float(p0), float(p1)),
        g=g,
        constant=float(constant.group(1)) if constant else None,
        q=float(q.group(1)) if q else None,
        seen=tuple(seen),
        options=tuple(options),
        task=_task(prompt),
    )
