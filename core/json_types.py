"""The type of JSON wire data: what a file, a JSONL line or a server hands us, and what we write.

`JsonObject` is for data that *is* JSON (a parsed record line, meta.json, a request body, a
`to_json()` payload), never for results passed between functions: those are frozen dataclasses
with a `to_json()`. The alias is recursive, so a value typed with it is known to serialize.
"""

from __future__ import annotations

from typing import TypeAlias

JsonScalar: TypeAlias = str | int | float | bool | None
JsonValue: TypeAlias = JsonScalar | list["JsonValue"] | dict[str, "JsonValue"]
JsonObject: TypeAlias = dict[str, JsonValue]

__all__ = ["JsonObject", "JsonScalar", "JsonValue"]
