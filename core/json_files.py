"""JSON a command reads from files (summaries, metas, JSONL logs): one line naming the file for each way it breaks.

`parse_json` is the one parser of JSON text from a file a user or a server can hand us: text that
is not JSON, a number too long for Python's int(), and arrays or objects nested deeper than
`MAX_NESTING` levels are each one `InputError` line, FILE:LINE: what is wrong; the fix. The depth
is checked before parsing (Python's parser recurses once per level: 3,000 levels were a
RecursionError traceback); no file evprobe writes nests deeper than a handful of levels.

`read_json_object` reads a whole file with it (missing, not UTF-8, not JSON, not an object: one line
each); `read_json_lines` the complete lines of an append-only JSONL log. A typed schema (pydantic,
`bench.json_schema.read_model`) then checks the fields the reader uses. Readers never modify a file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evprobe.core.errors import InputError
from evprobe.core.files import read_complete_lines
from evprobe.core.json_types import JsonObject

MAX_NESTING = 100  # arrays/objects within each other; YAML configs share it (experiments.config)
_SKELETON = bytes(b for b in range(256) if b not in b'[]{}"')  # the bytes nesting() drops


def json_kind(value: Any) -> str:
    """What a JSON value is, in words: 'a list', 'a string', 'null', ..."""
    return {list: "a list", str: "a string", bool: "true or false", type(None): "null",
            int: "a number", float: "a number", dict: "an object"}.get(type(value), type(value).__name__)


def nesting(text: str) -> int:
    """How deep arrays and objects nest in JSON `text` (brackets inside strings do not count); when
    there are no more than MAX_NESTING brackets in all, their count (a bound, not scanned)."""
    brackets = text.count("[") + text.count("{")
    if brackets <= MAX_NESTING:  # nearly every line and file: 1 us for a 600-character line
        return brackets
    import numpy as np

    # Vectorised (a Python loop over the characters took as long as json.loads): drop escaped
    # backslashes and quotes, keep brackets and quotes, and count brackets outside strings (an even
    # number of quotes before them). 7 MB with 1M brackets: about 0.15 s, json.loads 1.3 s.
    if "\\" in text:
        text = text.replace("\\\\", "").replace('\\"', "")
    kept = np.frombuffer(text.encode("utf-8", "surrogatepass").translate(None, _SKELETON), np.uint8)
    outside = (np.cumsum(kept == ord('"'), dtype=np.int32) & 1) == 0
    opens = (kept == ord("[")) | (kept == ord("{"))
    closes = (kept == ord("]")) | (kept == ord("}"))
    steps = (opens.astype(np.int32) - closes) * outside
    return int(np.cumsum(steps, dtype=np.int32).max(initial=0))


def parse_json(text: str, path: str | Path, fix: str, *, line: int = 1,
               error: type[InputError] = InputError) -> Any:
    """The value of JSON `text`, read from `path` starting at `line`; anything wrong is one `error`
    line naming FILE:LINE and `fix` (nesting past MAX_NESTING is refused before parsing)."""
    if nesting(text) > MAX_NESTING:
        raise error(f"{path}:{line}: arrays or objects nested more than {MAX_NESTING} levels deep; {fix}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise error(f"{path}:{line + err.lineno - 1}: not valid JSON ({err.msg}); {fix}") from None
    except ValueError as err:  # a number of more than 4,300 digits (int()'s limit)
        raise error(f"{path}:{line}: not valid JSON ({err}); {fix}") from None


def read_json_text(path: Path, fix: str, error: type[InputError] = InputError) -> tuple[Any, str]:
    """A JSON file's value and its text. A byte that is not UTF-8, or text that is not JSON, is one
    line naming the file, the line and `fix` (raised as `error`, an InputError subclass)."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        number = data.count(b"\n", 0, err.start) + 1
        raise error(f"{path}:{number}: not UTF-8 text (byte 0x{data[err.start]:02x}); {fix}") from None
    return parse_json(text, path, fix, error=error), text


def read_json_object(path: str | Path, fix: str, *, missing: str | None = None,
                     error: type[InputError] = InputError) -> tuple[JsonObject, str]:
    """(the JSON object in `path`, its text); anything else is one line naming the file and `fix`.

    missing: the fix for a file that is not there (default: `fix`)."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{path}: file not found; {missing or fix}")
    try:
        value, text = read_json_text(path, fix, error)
    except OSError as err:
        raise error(f"{path}: cannot be read ({err.strerror or type(err).__name__}); {fix}") from None
    if not isinstance(value, dict):
        raise error(f"{path}:1: expected a JSON object, got {json_kind(value)}; {fix}")
    return value, text


def optional_json_object(path: str | Path, fix: str) -> JsonObject | None:
    """`read_json_object`, or None when there is no such file."""
    path = Path(path)
    return read_json_object(path, fix)[0] if path.is_file() else None


def read_json_lines(path: Path, fix: str, *, warn: bool = True, error: type[InputError] = InputError,
                    objects: bool = True) -> list[tuple[int, Any]]:
    """(line number, value) of every complete line of an append-only JSONL log (`read_complete_lines`:
    a torn last line is left out, with a warning when `warn`); a line that is not JSON, or with
    `objects` not a JSON object, is one `error` line naming FILE:LINE and `fix`."""
    out = []
    for number, text in read_complete_lines(path, warn=warn):
        value = parse_json(text, path, fix, line=number, error=error)
        if objects and not isinstance(value, dict):
            raise error(f"{path}:{number}: expected a JSON object, got {json_kind(value)}; {fix}")
        out.append((number, value))
    return out


__all__ = ["MAX_NESTING", "json_kind", "nesting", "optional_json_object", "parse_json", "read_json_lines",
           "read_json_object", "read_json_text"]
