"""YAML config files read with limits: bounded in size, nesting and expansion, one line for each way they break.

A 500-byte YAML file can describe a billion values: an anchor (`&a [...]`) repeated through aliases
(`*a`) nine times over nine levels is 9**9 floats once expanded, and PyYAML's `safe_load` builds it
sharing nodes, so the blow-up came later (past 5.6 GB when a config's list was checked). Configs
have no need of aliases, so every alias (merge keys `<<: *base` included) is refused from the parse
events, before anything is composed or built; anchors alone are harmless and allowed. So is nesting
past `core.json_files.MAX_NESTING` (5,000 nested brackets were a RecursionError traceback in the
recursive composer), a file over `MAX_CONFIG_BYTES` (read no further than that) and a value the
constructor cannot make (an int of 5,000 digits, a date 2024-13-45: ValueErrors, not YAMLErrors).
Every fault is one `ConfigError` line, FILE:LINE: what is wrong; the fix.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from evprobe.core.errors import ConfigError
from evprobe.core.json_files import MAX_NESTING

# 128 KiB: the largest shipped config is under 3 KB; a 128 KiB list of numbers takes about 0.6 s to load
# with libyaml (5 times that without), a 1 MiB one took 4-5 s (25-45 s without)
MAX_CONFIG_BYTES = 128 << 10


class _Refused(Exception):
    """What the loader refuses, with the mark of the event that broke the limit."""

    def __init__(self, mark: Any, problem: str) -> None:
        super().__init__(problem)
        self.mark, self.problem = mark, problem


# libyaml's parser (C) where PyYAML was built with it: about 5 times faster than the pure-Python one
_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class BoundedLoader(_LOADER):  # type: ignore[misc, valid-type]
    """The safe loader (C where available), its constructor's ValueErrors refused with their line."""

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as err:  # a date 2024-13-45, an int of 5,000 digits: not YAMLErrors
            raise _Refused(node.start_mark, f"a value YAML cannot read ({str(err).split(';')[0]}); quote it as a string or fix "
                           "it") from None


def check_events(text: str) -> None:
    """Refuse an alias or nesting past MAX_NESTING in YAML `text`, from its parse events alone: the
    parser keeps a stack, not a recursion, and nothing is composed or built yet."""
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(event.start_mark, f"an alias (*{event.anchor}): evprobe configs take no aliases "
                           "or merge keys (<<); write the value out in full")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_NESTING:
                raise _Refused(event.start_mark, f"lists or mappings nested more than {MAX_NESTING} levels "
                               "deep; flatten it (a config needs two or three levels)")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _read_text(path: Path) -> str:
    """The file's text, read no further than MAX_CONFIG_BYTES (+1 to tell a longer file)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block the open
    except OSError as err:
        raise ConfigError(f"config file {path} cannot be read ({err.strerror}); give a readable YAML file") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"config file {path} is not a regular file; give a YAML file")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {path} is larger than {MAX_CONFIG_BYTES:,} bytes, the limit for a "
                          "config; shorten it (configs name files and settings, not data)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x}); "
                          "save the file as UTF-8") from None


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML file's top-level mapping (an empty file is {}); missing, too large, bad YAML, an
    alias or nesting too deep: one ConfigError line naming the file and line."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {path} not found")
    text = _read_text(path)
    try:
        check_events(text)
        data = yaml.load(text, Loader=BoundedLoader)  # noqa: S506 - a safe loader's subclass
    except _Refused as err:
        raise ConfigError(f"{path}:{err.mark.line + 1}: {err.problem}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise ConfigError(f"{path}: not valid YAML ({problem}{where})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of keys to values at the top, got {type(data).__name__}")
    return data


__all__ = ["MAX_CONFIG_BYTES", "BoundedLoader", "check_events", "read_yaml"]
