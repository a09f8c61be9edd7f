"""Whole JSON files a command reads (summaries, metas): one line naming the file for each way they break.

`read_json_object` is the first step of every such read: a missing file, bytes that are not UTF-8,
text that is not JSON and a value that is not an object are each one `InputError` line naming
FILE:LINE and the fix. A typed schema (pydantic, `bench.json_schema.read_model`) then checks the
fields the reader uses. Readers never modify the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evprobe.core.errors import InputError
from evprobe.core.files import read_json_text


def json_kind(value: Any) -> str:
    """What a JSON value is, in words: 'a list', 'a string', 'null', ..."""
    return {list: "a list", str: "a string", bool: "true or false", type(None): "null",
            int: "a number", float: "a number", dict: "an object"}.get(type(value), type(value).__name__)


def read_json_object(path: str | Path, fix: str, *, missing: str | None = None,
                     error: type[InputError] = InputError) -> tuple[dict[str, Any], str]:
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


def optional_json_object(path: str | Path, fix: str) -> dict[str, Any] | None:
    """`read_json_object`, or None when there is no such file."""
    path = Path(path)
    return read_json_object(path, fix)[0] if path.is_file() else None


__all__ = ["json_kind", "optional_json_object", "read_json_object"]
