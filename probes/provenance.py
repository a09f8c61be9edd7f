"""Where a direction's capture is, and whether it is the capture the direction was fitted on.

A direction's provenance names the capture folders it was fitted on (`captures`). Those paths are
read from the file that names them, never from the working directory:

- an absolute path is used as it is;
- a relative path is relative to the folder of the file holding the provenance (directions.json,
  or a lone `.safetensors` file): `write_directions` stores every capture path that way and marks
  the entry with `"captures_relative_to": "folder"`;
- a relative path without that mark was written by an older evprobe relative to the working
  directory of the fit, which no file records: refused in one line saying how to refit;
- a Direction that was never written (`fit_directions` in this process) holds absolute paths.

A capture found there must be the one the direction was fitted on (`check_capture`): the same
model name, the same model fingerprint (config and weights digests, tiny arch and seed) where both
record it, the same width, and every item the direction was fitted on. Anything else is refused in
one line naming the capture's file, the direction's file and the field, so another project's
capture of the same width never supplies a control or a label-free null.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from evprobe.core.errors import shown
from evprobe.core.json_types import JsonObject
from evprobe.probes.captures import CaptureError, CaptureSet, load_captures

RELATIVE_KEY, RELATIVE_VALUE = "captures_relative_to", "folder"
# what identifies the model a capture was taken of, beyond its name (hooks.fingerprint writes them
# into a capture's meta.json); tokenizer and template digests are left out: they are not the weights
FINGERPRINT_KEYS = ("model_config_sha256", "model_weights_sha256", "tiny_arch", "tiny_seed", "model_revision")


def named_in(direction: Any) -> str:
    """Where `direction`'s provenance was read from, for messages: 'DIR/directions.json:LINE'."""
    source, line = getattr(direction, "source", None), getattr(direction, "line", None)
    if source is None:
        return f"direction {getattr(direction, 'name', '?')!r}"
    return f"{source}:{line}" if line else str(source)


def capture_paths(direction: Any) -> list[Path]:
    """The capture folders `direction` was fitted on, resolved from the file naming them (module
    docstring); [] when it names none."""
    prov = getattr(direction, "provenance", None) or {}
    raw = prov.get("captures") or []
    where = named_in(direction)
    if not isinstance(raw, list) or not all(isinstance(c, str) and c for c in raw):
        raise CaptureError(f"{where}: 'captures' must be a list of capture folder paths, got {shown(raw)}; refit with "
                           "`evprobe directions ACTS --layer L --out DIR`")
    source: Path | None = getattr(direction, "source", None)
    out = []
    for c in raw:
        path = Path(c)
        if path.is_absolute() or source is None:  # None: fitted in this process, from paths it was given
            out.append(path)
        elif prov.get(RELATIVE_KEY) == RELATIVE_VALUE:
            out.append(source.parent / path)
        else:
            raise CaptureError(
                f"{where}: capture path {c!r} is relative to the working directory of an older `evprobe directions` "
                f"run, which no file records; refit: `evprobe directions CAPTURE --layer {prov.get('layer', 'L')} "
                f"--out {source.parent}` (paths are now stored relative to the folder), or write the capture's "
                "absolute path into 'captures'")
    return out


def portable(direction: Any, folder: Path) -> JsonObject:
    """`direction`'s provenance as a file in `folder` stores it: capture paths relative to `folder`
    (absolute where no relative path exists), marked so; an old entry's unresolvable paths as they were."""
    prov = dict(direction.provenance)
    if not prov.get("captures"):
        return prov
    try:
        paths = capture_paths(direction)
    except CaptureError:
        return prov  # written by an older evprobe: kept as it was, refused where it is read
    base = folder.absolute()
    try:
        prov["captures"] = [os.path.relpath(p.absolute(), base) for p in paths]
    except ValueError:  # another drive (Windows): no relative path exists
        prov["captures"] = [str(p.absolute()) for p in paths]
    prov[RELATIVE_KEY] = RELATIVE_VALUE
    return prov


def fingerprint(captures: CaptureSet) -> JsonObject:
    """The model fingerprint the captures share (FINGERPRINT_KEYS that every one records alike): those
    fields of their meta.json, as the direction's provenance (JSON) stores them."""
    out: JsonObject = {}
    for key in FINGERPRINT_KEYS:
        values = {repr(c.meta.get(key)) for c in captures.captures}
        value = captures.captures[0].meta.get(key)
        if len(values) == 1 and value is not None:
            out[key] = value
    return out


def check_capture(direction: Any, captures: CaptureSet) -> None:
    """Refuse (one CaptureError line naming both files and the field) captures that are not the
    ones `direction` was fitted on: another model name or fingerprint, another width, or missing
    one of its fit items."""
    prov = getattr(direction, "provenance", None) or {}
    where = named_in(direction)
    fix = "give the capture the direction was fitted on, or refit it on this one (`evprobe directions ACTS --layer L`)"
    for cap in captures.captures:
        meta = cap.path / "meta.json"
        if "model" in prov and cap.model != str(prov["model"]):
            raise CaptureError(f"{meta}: field 'model' is {cap.model!r} but {where} says the direction was fitted on "
                               f"{prov['model']!r}; {fix}")
        recorded = prov.get("model_fingerprint") if isinstance(prov.get("model_fingerprint"), dict) else {}
        for key, value in recorded.items():
            if key in cap.meta and cap.meta[key] is not None and cap.meta[key] != value:
                raise CaptureError(f"{meta}: field {key!r} is {shown(cap.meta[key], 24)} but {where} records "
                                   f"{shown(value, 24)} (model_fingerprint): another model of the same name; {fix}")
    width = len(getattr(direction, "vector", ()))
    if width != captures.d_model:  # probes.directions.check_width's refusal (that module imports this one)
        raise CaptureError(f"direction {getattr(direction, 'name', '?')!r} has width {width} but its capture "
                           f"{captures.captures[0].path} has d_model {captures.d_model}; {fix}")
    items = prov.get("items") or []
    have = {r["item_id"] for r in captures.index}
    lost = [i for i in items if i not in have]
    if lost:
        raise CaptureError(f"{captures.captures[0].path / 'index.jsonl'}: item {lost[0]!r} of {where} ('items': "
                           f"{len(lost)} of {len(items)} missing) is not in the capture; {fix}")


def fit_captures(direction: Any) -> CaptureSet:
    """The captures `direction` was fitted on, found from its file (`capture_paths`) and checked
    (`check_capture`)."""
    paths = capture_paths(direction)
    if not paths:
        raise CaptureError(f"{named_in(direction)} names no captures, so the rows it was fitted on are unknown")
    captures = load_captures(paths)
    check_capture(direction, captures)
    return captures


__all__ = ["FINGERPRINT_KEYS", "RELATIVE_KEY", "capture_paths", "check_capture", "fingerprint", "fit_captures",
           "named_in", "portable"]
